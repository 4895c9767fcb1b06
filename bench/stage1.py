"""Stage 1, the expert recipe, measured: verified expert demonstrations → SFT → both evaluation suites, with intervals.

    1. data        the expert on training scenarios (`training/demonstrations.py`: every catalog fault × app ×
                   target × value × fresh seed, none in an evaluation suite), --per-family of each fault drawn
                   at random, kept only when the ground truth agrees (privileged verification)
    2. SFT         TRL SFTTrainer from the converted SmolLM2-135M-Instruct, one model per --seeds value
    3. DAgger      optional (--dagger-per-family): each SFT student plays other training scenarios, the expert labels
                   every state it reached, and the student trains on the labels (`training/dagger.py`)
    4. evaluation  the held-out and variants suites (incidents of several faults among them) for the runbook, the
                   expert and every model: greedy decoding, the same turn and token limits; Wilson 95 % intervals and
                   McNemar's exact test against the runbook and every SFT seed (`training/comparison.py`)

Every stage's result is cached under --out (a rerun reuses finished stages). The table and the command go to the
`## Stage-1 expert recipe (bench/stage1.py)` section of docs/benchmarks.md and the machine-readable results
(evaluation.v1 plus the recipe) to docs/benchmarks/stage1.json; a GPU run's section is its own.

    .venv/bin/python bench/stage1.py [--per-family 6] [--epochs 2] [--seeds 0 1] [--device auto] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar, get_args

from pydantic import BaseModel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchdocs import provenance, write_section

from agent_sre.config import get_settings
from agent_sre.models.episode import EpisodeResult
from agent_sre.models.evaluation import EvaluationComparison
from agent_sre.models.remediation import PolicyRef
from agent_sre.models.scenario import Scenario
from agent_sre.models.training import MAX_ACTION_TOKENS, SIMULATED_MAX_ACTIONS, Precision, SFTConfig, SFTResult
from agent_sre.policy.expert import ExpertPolicy
from agent_sre.policy.llm.policy import BASE_VERSION, local_version_dir
from agent_sre.policy.runbook import RunbookPolicy
from agent_sre.scenarios import heldout_suite, load_scenarios, variants_suite
from agent_sre.training.comparison import compare, markdown_table
from agent_sre.training.dagger import labelled_states, student_states, train_on_labels
from agent_sre.training.demonstrations import (
    TRAINING_SEEDS,
    Demonstrations,
    demonstrations,
    sample_per_family,
    training_scenarios,
)
from agent_sre.training.evaluate import run_model, run_policy
from agent_sre.training.sft import train_sft

HEADING = "## Stage-1 expert recipe (bench/stage1.py)"
RESULTS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks"
M = TypeVar("M", bound=BaseModel)


class Played(BaseModel):
    """One policy's episodes on one suite and how long they took."""

    results: list[EpisodeResult]
    seconds: float


class Stage1(BaseModel):
    """docs/benchmarks/stage1.json: the recipe, its data, each SFT run and the comparison of every policy."""

    command: str
    device: str
    per_family: int
    demonstrations: int
    played: int
    rejected: list[str]
    data_seconds: float
    sft: dict[str, SFTResult]  # every trained model: SFT per seed, and its DAgger round when there is one
    evaluation_seconds: dict[str, float]
    comparison: EvaluationComparison


COMPUTED: list[str] = []  # the stages this process ran (the rest came from an earlier run's files)


def cached(path: Path, model: type[M], compute: Callable[[], M]) -> M:
    """A stage's result from an earlier run, or computed now and saved (a long benchmark survives a restart, and a
    run on a lent GPU is reported here from its files)."""
    if path.is_file():
        return model.model_validate_json(path.read_text())
    COMPUTED.append(path.name)
    began = time.perf_counter()
    result = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(result.model_dump_json(indent=1))
    print(f"  {path.name}: {time.perf_counter() - began:.0f} s", flush=True)
    return result


class Data(BaseModel):
    demonstrations: Demonstrations
    seconds: float


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-family", type=int, default=6, help="expert demonstrations per fault family")
    parser.add_argument("--training-seeds", type=int, default=len(TRAINING_SEEDS),
                        help="seeds of each training scenario to draw from: more give the small families (cordoned "
                             "nodes, false alarms) more distinct scenarios")
    parser.add_argument("--epochs", type=float, default=2.0, help="passes over the demonstrations")
    parser.add_argument("--batch", type=int, default=1, help="conversations per optimizer step")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="one SFT model per seed (data order)")
    parser.add_argument("--lora-r", type=int, help="train LoRA adapters of this rank instead of every weight (the "
                                                  "adapter is kept beside the merged model: a few MB that can ship)")
    parser.add_argument("--lora-alpha", type=int, default=32)
    parser.add_argument("--dagger-per-family", type=int, default=0,
                        help="a DAgger round after each SFT model: the student plays this many other training "
                             "scenarios per family, the expert labels every state it reached, and it trains on them")
    parser.add_argument("--dagger-seeds", type=int, nargs="+",
                        help="the SFT seeds that get the DAgger round (default: every --seeds value)")
    parser.add_argument("--dagger-epochs", type=float, default=1.0, help="passes over the labelled states")
    parser.add_argument("--precision", choices=get_args(Precision), default="auto",
                        help="SFT arithmetic (auto: fp32 on a CPU, bf16 on a GPU that has it)")
    parser.add_argument("--device", default="auto", help="where SFT and the evaluations run: auto, cpu, cuda, ...")
    parser.add_argument("--suites", nargs="+", default=["heldout", "variants"], choices=["heldout", "variants"])
    parser.add_argument("--limit", type=int, help="only the first N scenarios of each suite (a smoke run)")
    parser.add_argument("--families", type=int, help="only the first N fault families, by name, for the data and "
                                                     "DAgger (a smoke run: SFT and DAgger take a few steps)")
    parser.add_argument("--max-steps", type=int, help="at most this many optimizer steps in each SFT and DAgger run "
                                                      "(a smoke run)")
    parser.add_argument("--max-turns", type=int, default=SIMULATED_MAX_ACTIONS)
    parser.add_argument("--max-new-tokens", type=int, default=MAX_ACTION_TOKENS)
    parser.add_argument("--eval-batch", type=int, default=64, help="episodes advanced together by one forward pass")
    parser.add_argument("--out", type=Path, default=get_settings().data_dir / "bench-stage1")
    parser.add_argument("--no-docs", action="store_true", help="print, but write nothing into docs/")
    args = parser.parse_args()
    out: Path = args.out
    base = local_version_dir(BASE_VERSION, get_settings().models_dir)

    print(f"data: {args.per_family} expert demonstrations per family (load {os.getloadavg()[0]:.1f})", flush=True)

    def play_expert() -> Data:
        began = time.perf_counter()
        pool = training_scenarios(seeds=range(TRAINING_SEEDS[0], TRAINING_SEEDS[0] + args.training_seeds))
        chosen = sample_per_family(first_families(pool, args.families), args.per_family, seed=0)
        return Data(demonstrations=demonstrations(chosen), seconds=time.perf_counter() - began)

    more = "" if args.training_seeds == len(TRAINING_SEEDS) else f"-t{args.training_seeds}"
    more += f"-f{args.families}" if args.families else ""
    data = cached(out / f"data-{args.per_family}{more}.json", Data, play_expert)
    demos = data.demonstrations
    print(f"  {len(demos.trajectories)} of {demos.played} verified; rejected: {demos.rejected or 'none'}", flush=True)

    sft: dict[str, SFTResult] = {}
    steps = min(max(1, round(args.epochs * len(demos.trajectories) / args.batch)), args.max_steps or sys.maxsize)
    for seed in args.seeds:
        name = f"sft-s{seed}"
        print(f"{name}: {steps} steps of {args.batch} (load {os.getloadavg()[0]:.1f})", flush=True)
        sft[name] = cached(out / f"{name}.json", SFTResult, lambda seed=seed, name=name: train_sft(  # type: ignore[misc]
            base, demos.trajectories, out / f"{name}-model",
            SFTConfig(expert_policies=["expert"], max_steps=steps, learning_rate=args.lr, lr_scheduler="cosine",
                      warmup_steps=max(1, steps // 20), batch_size=args.batch, max_length=4096,
                      device=args.device, precision=args.precision, seed=seed, logging_steps=10,
                      lora_r=args.lora_r, lora_alpha=args.lora_alpha)))
        if (sft[name].adapter_dir is None) != (args.lora_r is None):  # the stage files are named by seed alone
            raise SystemExit(f"{out / name}.json was trained {'without' if args.lora_r else 'with'} LoRA: give a run "
                             "with other --lora-r its own --out")

    trained = dict(sft)
    if args.dagger_per_family:
        for name, result in sft.items():
            seed = int(name.removeprefix("sft-s"))
            if args.dagger_seeds is not None and seed not in args.dagger_seeds:
                continue
            trained[f"dagger-s{seed}"] = cached(out / f"dagger-s{seed}.json", SFTResult,
                                                lambda r=result, seed=seed: dagger_round(args, r, seed, out))  # type: ignore[misc]

    suites = {"heldout": heldout_suite(), "variants": variants_suite()}
    runbook, expert = PolicyRef(name="runbook", version="runbook"), PolicyRef(name="expert", version="expert")
    players: dict[str, Callable[[list[Scenario]], list[EpisodeResult]]] = {
        "runbook": lambda suite: run_policy(RunbookPolicy(), runbook, suite),
        "expert": lambda suite: run_policy(ExpertPolicy(), expert, suite)}
    for name, result in trained.items():
        players[name] = lambda suite, d=Path(result.output_dir), v=name: run_model(  # type: ignore[misc]
            d, suite, version=v, max_turns=args.max_turns, max_new_tokens=args.max_new_tokens,
            batch=args.eval_batch, device=args.device)
    results: dict[str, dict[str, list[EpisodeResult]]] = defaultdict(dict)
    seconds: dict[str, float] = {}
    for suite_name in args.suites:
        suite = load_scenarios(suites[suite_name])[:args.limit]
        for policy, play in players.items():
            print(f"evaluate {policy} on {suite_name} ({len(suite)}; load {os.getloadavg()[0]:.1f})", flush=True)
            tag = f"-limit{args.limit}" if args.limit else ""
            played = cached(out / f"eval-{policy}-{suite_name}{tag}.json", Played,
                            lambda play=play, suite=suite: _timed(play, suite))  # type: ignore[misc]
            results[policy][suite_name] = played.results
            seconds[f"{policy}/{suite_name}"] = played.seconds
    references = ["runbook", *sft]  # a DAgger model is tested against its own SFT model, among the others
    comparison = compare(results, references=references)
    table = markdown_table(comparison)
    print(table)
    devices = sorted({r.device or "not recorded" for r in trained.values()})
    stage1 = Stage1(command=provenance().splitlines()[0], device=", ".join(devices), per_family=args.per_family,
                    demonstrations=len(demos.trajectories), played=demos.played, rejected=demos.rejected,
                    data_seconds=data.seconds, sft=trained, evaluation_seconds=seconds, comparison=comparison)
    if args.no_docs:
        return
    gpu = [d for d in devices if d != "cpu"]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "stage1.json").write_text(stage1.model_dump_json(indent=1) + "\n")
    heading = HEADING if not gpu else f"## Stage-1 expert recipe on {gpu[0]} (bench/stage1.py)"
    origin = ("" if COMPUTED else f"Every stage was computed by an earlier run of this command with the same options "
              f"(on {', '.join(devices)}; the stage files under --out); this run reported them.\n")
    sft_rows = "\n".join(f"| {name} | {r.device} | {'bf16' if r.bf16 else 'fp32'} | {r.examples} | {r.steps} | "
                         f"{r.train_tokens:,} | {r.train_runtime_s / 60:.1f} min | "
                         f"{r.train_tokens / r.train_runtime_s:.0f} | {r.losses[0]:.3f} → {r.losses[-1]:.3f} |"
                         for name, r in trained.items())
    eval_times = ", ".join(f"{k} {v / 60:.1f} min" for k, v in seconds.items())
    write_section(heading, f"""{provenance()}{origin}
Data: the expert on {demos.played} training scenarios ({args.per_family} per fault family, drawn from
`training_scenarios()`, none in an evaluation suite), {len(demos.trajectories)} kept by privileged verification, in
{data.seconds:.0f} s. SFT from SmolLM2-135M-Instruct: {args.epochs:g} passes, batch {args.batch}, lr {args.lr} cosine,
loss on the assistant turns. Evaluation: greedy, at most {args.max_turns} actions of {args.max_new_tokens} tokens;
success = resolved by the observer (a false alarm: finished with no write); 95 % Wilson intervals; p = McNemar's exact
test on the same scenarios against the named policy. Results file: `docs/benchmarks/stage1.json` (the last run's).

{table}

| SFT run | device | arithmetic | conversations | steps | tokens | wall time | tokens/s | loss first → last |
|---|---|---|---|---|---|---|---|---|
{sft_rows}

Evaluation wall time: {eval_times}.
""")


def dagger_round(args: argparse.Namespace, sft: SFTResult, seed: int, out: Path) -> SFTResult:
    """The SFT student's own episodes on training scenarios it was not trained on (another draw), every state it
    reached labelled by the expert, and the student fine-tuned on those labels (training/dagger.py)."""
    visits = sample_per_family(first_families(training_scenarios(), args.families), args.dagger_per_family,
                               seed=100 + seed)
    played, resolved = student_states(Path(sft.output_dir), visits, device=args.device, batch=args.eval_batch,
                                      max_turns=args.max_turns, max_new_tokens=args.max_new_tokens)
    examples = labelled_states(played)
    steps = min(max(1, round(args.dagger_epochs * len(examples) / args.batch)), args.max_steps or sys.maxsize)
    print(f"  dagger-s{seed}: the student resolved {resolved:.0%} of {len(visits)} training scenarios; "
          f"{len(examples)} labelled states, {steps} steps", flush=True)
    return train_on_labels(Path(sft.output_dir), examples, out / f"dagger-s{seed}-model",
                           SFTConfig(max_steps=steps, learning_rate=args.lr / 2, lr_scheduler="cosine",
                                     warmup_steps=max(1, steps // 20), batch_size=args.batch, max_length=4096,
                                     device=args.device, precision=args.precision, seed=seed, logging_steps=10))


def first_families(scenarios: list[Scenario], families: int | None) -> list[Scenario]:
    """The scenarios of the first `families` fault families by name (all of them with None)."""
    kept = sorted({s.fault for s in scenarios})[:families]
    return [s for s in scenarios if s.fault in kept]


def _timed(play: Callable[[list[Scenario]], list[EpisodeResult]], suite: list[Scenario]) -> Played:
    began = time.perf_counter()
    return Played(results=play(suite), seconds=time.perf_counter() - began)


if __name__ == "__main__":
    main()
