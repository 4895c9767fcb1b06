"""The training job, one process (or one per GPU) started by the `train_policy` activity:

    accelerate launch --config_file infra/accelerate/<compute>.yaml -m agent_sre.training.run \\
        --request REQUEST.json --base MODEL_DIR --out DIR [--data EPISODES.jsonl] [--rehearsal EXPERTS.jsonl]
        [--resume-from CHECKPOINT]

It runs the request's stages in order (SFT or off-policy RL on the episodes in `--data`, then GRPO from that
model) and reports as JSON lines (`training.TrainingProgress`: losses, rewards, KL, each saved checkpoint, each
finished stage) to `DIR/progress.jsonl` and stdout. Layout of DIR, which also makes a rerun continue rather than
start over:

    DIR/<stage>/checkpoints/checkpoint-N   a checkpoint every `checkpoint_steps` (the last two kept)
    DIR/<stage>/model, DIR/<stage>/result.json   a finished stage: it is not run again

`--resume-from` continues the first unfinished stage from a checkpoint. Exit status 2 means the request or its
inputs are unusable (retrying cannot help); SIGTERM stops the job at once (exit 143).
"""

from __future__ import annotations

import json
import shutil
import signal
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from agent_sre.models.training import (
    GRPOResult,
    OffPolicyResult,
    SFTResult,
    TrainingMetrics,
    TrainingProgress,
    TrainingRequest,
    TrainingStage,
)
from agent_sre.models.trajectory import Trajectory

BAD_INPUT = 2


class ProgressLog:
    """Appends progress lines to the file the activity tails, and echoes them to stdout (the job's log)."""

    def __init__(self, path: Path) -> None:
        from accelerate import PartialState

        self.path = path
        self.enabled = PartialState().is_main_process  # one report per job, not one per GPU

    def write(self, progress: TrainingProgress) -> None:
        if not self.enabled:
            return
        line = progress.model_dump_json(exclude_none=True)
        with self.path.open("a") as f:
            f.write(line + "\n")
        print(line, flush=True)


def progress_callback(stage: TrainingStage, log: ProgressLog) -> Any:
    """A transformers TrainerCallback reporting each logged step and each saved checkpoint."""
    from transformers import TrainerCallback

    class Progress(TrainerCallback):
        latest: TrainingMetrics | None = None

        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None,
                   **_: Any) -> None:
            logs = logs or {}
            if "loss" not in logs and "reward" not in logs:
                return  # the end-of-training summary, not a step
            self.latest = TrainingMetrics(stage=stage, step=state.global_step, max_steps=state.max_steps,
                                          loss=logs.get("loss"), reward=logs.get("reward"), kl=logs.get("kl"),
                                          at=datetime.now(UTC))
            log.write(TrainingProgress(event="log", metrics=self.latest))

        def on_save(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            log.write(TrainingProgress(event="checkpoint", metrics=self.latest or TrainingMetrics(
                stage=stage, step=state.global_step, max_steps=state.max_steps, at=datetime.now(UTC)),
                path=str(Path(args.output_dir) / f"checkpoint-{state.global_step}")))

    return Progress()


def read_episodes(path: Path) -> list[Trajectory]:
    return [Trajectory.model_validate_json(line) for line in path.read_text().splitlines() if line.strip()]


def run_stage(stage: TrainingStage, request: TrainingRequest, model_dir: Path, out: Path, data: Path | None,
              rehearsal: Path | None, resume_from: Path | None, log: ProgressLog) -> tuple[Path, bool]:
    """Train one stage from `model_dir`; returns (its model directory, whether it ran now)."""
    from agent_sre.scenarios import default_catalog, load_scenarios
    from agent_sre.training.grpo import train_grpo
    from agent_sre.training.offpolicy import train_offpolicy
    from agent_sre.training.sft import train_sft

    stage_dir = out / stage
    model, result_file = stage_dir / "model", stage_dir / "result.json"
    if result_file.is_file() and (model / "config.json").is_file():
        result = json.loads(result_file.read_text())
        log.write(TrainingProgress.model_validate({"event": "stage_done", "path": str(model), stage: result}))
        return model, False
    shutil.rmtree(model, ignore_errors=True)  # saved just before a crash, without its result: train it again
    work = stage_dir / "checkpoints"
    callbacks = [progress_callback(stage, log)]
    finished: SFTResult | GRPOResult | OffPolicyResult
    if stage == "sft":
        assert request.sft is not None and data is not None
        finished = train_sft(model_dir, read_episodes(data), model, request.sft, work_dir=work,
                             save_steps=request.checkpoint_steps, resume_from=resume_from, callbacks=callbacks)
    elif stage == "offpolicy":
        assert request.offpolicy is not None and data is not None
        finished = train_offpolicy(model_dir, read_episodes(data), model, request.offpolicy, work,
                                   rehearsal=read_episodes(rehearsal) if rehearsal else [],
                                   save_steps=request.checkpoint_steps, resume_from=resume_from, callbacks=callbacks)
    else:
        assert request.grpo is not None
        scenarios = load_scenarios(Path(request.data.simulated.scenarios or default_catalog()))
        finished = train_grpo(model_dir, scenarios, model, request.grpo, work, save_steps=request.checkpoint_steps,
                              resume_from=resume_from, callbacks=callbacks)
    result_file.write_text(finished.model_dump_json())
    log.write(TrainingProgress.model_validate({"event": "stage_done", "path": str(model), stage: finished}))
    return model, True


def main(
    request: Annotated[Path, typer.Option(help="training.request.v1 JSON file")],
    base: Annotated[Path, typer.Option(help="the model directory training starts from")],
    out: Annotated[Path, typer.Option(help="output directory (checkpoints, stage models, progress.jsonl)")],
    data: Annotated[Path | None, typer.Option(help="validated episodes, one trajectory.v1 per line (SFT, "
                                                   "off-policy RL)")] = None,
    rehearsal: Annotated[Path | None, typer.Option(help="expert episodes off-policy RL rehearses (data.rehearsal), "
                                                        "one trajectory.v1 per line")] = None,
    resume_from: Annotated[Path | None, typer.Option(help="a checkpoint of the first unfinished stage")] = None,
) -> None:
    from agent_sre.policy.llm.checkpoint import ModelDirError, check_model_dir

    signal.signal(signal.SIGTERM, lambda signum, _: sys.exit(128 + signum))
    try:
        req = TrainingRequest.model_validate_json(request.read_text())
        check_model_dir(base)
        if req.needs_episodes and (data is None or not data.is_file()):
            raise ValueError(f"{req.algorithm} needs --data (a file of episodes); got {data}")
        if (req.data.rehearsal is not None) != (rehearsal is not None and rehearsal.is_file()):
            raise ValueError(f"--rehearsal ({rehearsal}) goes with, and only with, the request's data.rehearsal")
        if resume_from is not None and not (resume_from / "trainer_state.json").is_file():
            raise ValueError(f"{resume_from} is not a trainer checkpoint (no trainer_state.json)")
    except (OSError, ValidationError, ModelDirError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(BAD_INPUT) from exc
    out.mkdir(parents=True, exist_ok=True)
    log = ProgressLog(out / "progress.jsonl")
    model = base
    for stage in req.stages:
        model, ran = run_stage(stage, req, model, out, data, rehearsal, resume_from, log)
        if ran:
            resume_from = None  # a checkpoint belongs to the first stage that runs
    log.write(TrainingProgress(event="done", path=str(model)))


if __name__ == "__main__":
    typer.run(main)
