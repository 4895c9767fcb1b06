"""Constrained decoding, measured: invalid actions on the held-out suite with and without the action grammar, and
what the grammar costs per generated token.

    1. held-out   `run_model` (the evaluation the gate reads: greedy, turn by turn in the simulator) on the held-out
                  suite, constrained and not; invalid actions per action taken, and how many of those were cut off
                  at the token limit (the one way an answer can still be invalid under the grammar)
    2. sampled    (--sampled) the same episodes sampled at temperature 1 (`run_rollouts`, as GRPO plays them)
    3. speed      generation tokens/s on the suite's first-turn prompts, constrained and not, one prompt per call
                  (serving, CPU rollouts) and all in one batch (rollouts on an accelerator); decode-only tokens/s
                  leaves out reading the prompt, measured by a one-token generation of the same prompts; and the
                  grammar's own time per token (the logits processor, timed inside `generate`)

The figures go to the `## Constrained decoding (bench/constrained.py)` section of docs/benchmarks.md.

    .venv/bin/python bench/constrained.py [--model base|DIR] [--max-turns 4] [--limit N] [--sampled] [--no-docs]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchdocs import provenance, write_section  # noqa: E402

from agent_sre.config import get_settings  # noqa: E402
from agent_sre.episodes import interleave_by_fault, summarize  # noqa: E402
from agent_sre.models.episode import EpisodeResult  # noqa: E402
from agent_sre.models.llm import SamplingConfig  # noqa: E402
from agent_sre.models.scenario import Scenario  # noqa: E402
from agent_sre.models.training import MAX_ACTION_TOKENS, GRPOTrainingConfig  # noqa: E402
from agent_sre.models.trajectory import Trajectory  # noqa: E402
from agent_sre.outcome import incident_outcome  # noqa: E402
from agent_sre.policy.llm.backends import TransformersBackend  # noqa: E402
from agent_sre.policy.llm.checkpoint import LoadedModel, load_policy_model  # noqa: E402
from agent_sre.policy.llm.constraint import ActionConstraint  # noqa: E402
from agent_sre.policy.llm.policy import local_version_dir  # noqa: E402
from agent_sre.scenarios import heldout_suite, load_scenarios  # noqa: E402
from agent_sre.simulator.simulator import Simulator  # noqa: E402
from agent_sre.training.environment import IncidentEnvironment  # noqa: E402
from agent_sre.training.evaluate import run_model  # noqa: E402
from agent_sre.training.grpo import run_rollouts  # noqa: E402

HEADING = "## Constrained decoding (bench/constrained.py)"
MODES = {"constrained": True, "unconstrained": False}


class Actions(BaseModel):
    """What one run's episodes did, action by action."""

    label: str
    episodes: int
    actions: int
    invalid: int
    cut_off: int  # of the invalid: the answer ran into the token limit
    success_rate: float
    seconds: float

    @property
    def rate(self) -> float:
        return self.invalid / max(self.actions, 1)


def count(label: str, trajectories: Sequence[Trajectory], results: Sequence[EpisodeResult], max_new_tokens: int,
          seconds: float) -> Actions:
    steps = [s for t in trajectories for s in t.steps]
    invalid = [s for s in steps if s.decision.action is None]
    cut = [s for s in invalid if len(s.decision.completion_token_ids or []) >= max_new_tokens]
    overall = summarize(list(results))[-1]  # the `all` row
    return Actions(label=label, episodes=len(trajectories), actions=len(steps), invalid=len(invalid),
                   cut_off=len(cut), success_rate=overall.success_rate, seconds=seconds)


def greedy_heldout(model_dir: Path, suite: list[Scenario], args: argparse.Namespace, constrained: bool) -> Actions:
    played: list[Trajectory] = []
    began = time.perf_counter()
    results = run_model(model_dir, suite, max_turns=args.max_turns, max_new_tokens=args.max_new_tokens,
                        batch=len(suite), device="cpu", constrained=constrained, on_trajectory=played.append)
    return count("greedy", played, results, args.max_new_tokens, time.perf_counter() - began)


def sampled_heldout(loaded: LoadedModel, suite: list[Scenario], args: argparse.Namespace,
                    constrained: bool) -> Actions:
    torch.manual_seed(args.seed)
    config = GRPOTrainingConfig(max_turns=args.max_turns, max_new_tokens=args.max_new_tokens)
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=args.max_new_tokens, constrained=constrained)
    began = time.perf_counter()
    rollouts = run_rollouts(loaded, suite, config, Simulator(speed=0), sampling)
    trajectories = [r.trajectory for r in rollouts if r.trajectory is not None]
    results = [EpisodeResult(scenario=s.name, fault=s.fault, environment=t.run_id, outcome=incident_outcome(t))
               for s, t in zip(suite, trajectories, strict=True)]
    return count("sampled, T=1", trajectories, results, args.max_new_tokens, time.perf_counter() - began)


class Speed(BaseModel):
    layout: str
    mode: str
    tokens: int
    seconds: float
    prompt_seconds: float  # the same prompts generating one token each
    rows: int
    grammar_seconds: float  # inside the logits processor

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds

    @property
    def decode_tokens_per_s(self) -> float:
        return (self.tokens - self.rows) / max(self.seconds - self.prompt_seconds, 1e-9)

    @property
    def grammar_ms_per_token(self) -> float:
        return 1000 * self.grammar_seconds / max(self.tokens, 1)


class GrammarClock:
    """Times `ActionConstraint.__call__` (mask, log of the allowed mass, masking) while installed."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._call: Callable[..., Any] = ActionConstraint.__call__

    def __enter__(self) -> GrammarClock:
        call, clock = self._call, self

        def timed(constraint: ActionConstraint, *a: Any) -> Any:
            began = time.perf_counter()
            try:
                return call(constraint, *a)
            finally:
                clock.seconds += time.perf_counter() - began

        setattr(ActionConstraint, "__call__", timed)  # noqa: B010 (a method swapped for a timed one)
        return self

    def __exit__(self, *_: object) -> None:
        setattr(ActionConstraint, "__call__", self._call)  # noqa: B010


def speed(loaded: LoadedModel, suite: list[Scenario], args: argparse.Namespace) -> list[Speed]:
    simulator = Simulator(speed=0)
    prompts = [IncidentEnvironment(simulator, s).reset() for s in suite[:args.speed_prompts]]
    backend = TransformersBackend(loaded)
    rows = []
    for layout, batches in (("one prompt per call", [[p] for p in prompts]), (f"batch of {len(prompts)}", [prompts])):
        for mode, constrained in MODES.items():
            greedy = SamplingConfig(temperature=0.0, max_new_tokens=args.max_new_tokens, constrained=constrained)
            first = greedy.model_copy(update={"max_new_tokens": 1})
            backend.generate(batches[0][:1], greedy)  # warm: the grammar compiles once per tokenizer
            began = time.perf_counter()
            for batch in batches:
                backend.generate(batch, first)
            prompt_s = time.perf_counter() - began
            with GrammarClock() as clock:
                began = time.perf_counter()
                tokens = sum(len(g.token_ids or []) for batch in batches for g in backend.generate(batch, greedy))
                seconds = time.perf_counter() - began
            rows.append(Speed(layout=layout, mode=mode, tokens=tokens, seconds=seconds, prompt_seconds=prompt_s,
                              rows=len(prompts), grammar_seconds=clock.seconds))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--model", default="base", help="a model directory, or base (SmolLM2-135M, converted)")
    parser.add_argument("--max-turns", type=int, default=4, help="actions per episode (the suite's own limit is 12)")
    parser.add_argument("--max-new-tokens", type=int, default=MAX_ACTION_TOKENS)
    parser.add_argument("--limit", type=int, default=0, help="only the first N scenarios (interleaved by fault)")
    parser.add_argument("--speed-prompts", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sampled", action="store_true", help="also the episodes sampled at temperature 1")
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args()
    console = Console(width=150)
    model_dir = local_version_dir(args.model, get_settings().models_dir)
    suite = interleave_by_fault(load_scenarios(heldout_suite()))
    suite = suite[:args.limit] if args.limit else suite

    runs: list[tuple[str, Actions]] = []
    for mode, constrained in MODES.items():
        runs.append((mode, greedy_heldout(model_dir, suite, args, constrained)))
        console.print(f"greedy {mode}: {runs[-1][1]}")
    loaded = load_policy_model(model_dir, device="cpu")
    if args.sampled:
        for mode, constrained in MODES.items():
            runs.append((mode, sampled_heldout(loaded, suite, args, constrained)))
            console.print(f"sampled {mode}: {runs[-1][1]}")
    speeds = speed(loaded, suite, args)

    table = Table("decoding", "grammar", "episodes", "actions", "invalid", "of which cut off", "invalid rate",
                  "success", "wall s", title=f"held-out suite, {args.model}, at most {args.max_turns} actions")
    lines = ["| decoding | grammar | episodes | actions | invalid | of which cut off | invalid rate | success | wall s |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for mode, a in runs:
        cells = [a.label, mode, str(a.episodes), str(a.actions), str(a.invalid), str(a.cut_off), f"{a.rate:.1%}",
                 f"{a.success_rate:.0%}", f"{a.seconds:.0f}"]
        table.add_row(*cells)
        lines.append("| " + " | ".join(cells) + " |")
    console.print(table)
    speed_table = Table("layout", "grammar", "tokens", "s", "tokens/s", "decode tokens/s", "grammar ms/token",
                        title="generation speed (greedy, first-turn prompts)")
    speed_lines = ["| layout | grammar | tokens | s | tokens/s | decode tokens/s | grammar ms/token |",
                   "|---|---|---:|---:|---:|---:|---:|"]
    for s in speeds:
        cells = [s.layout, s.mode, str(s.tokens), f"{s.seconds:.1f}", f"{s.tokens_per_s:.1f}",
                 f"{s.decode_tokens_per_s:.1f}", f"{s.grammar_ms_per_token:.2f}" if s.mode == "constrained" else "–"]
        speed_table.add_row(*cells)
        speed_lines.append("| " + " | ".join(cells) + " |")
    console.print(speed_table)
    body = provenance() + (
        f"\nModel `{args.model}` (untrained unless a directory is given), CPU, the held-out suite "
        f"({len(suite)} scenarios), each episode cut at {args.max_turns} actions to bound the CPU time (the suite's "
        f"own limit is 12), at most {args.max_new_tokens} new tokens per answer (training's and evaluation's "
        "limit). Greedy: `run_model`, the evaluation the gate reads; sampled: `run_rollouts` at temperature 1 as "
        f"GRPO plays (seed {args.seed}). Invalid rate: invalid actions per action taken; \"cut off\": invalid "
        "because the answer reached the token limit, which the grammar cannot prevent.\n\n"
        + "\n".join(lines)
        + f"\n\nGeneration speed on the first-turn prompts of {args.speed_prompts} of those scenarios, greedy, the "
          "same model: tokens/s counts the prompt's reading; decode tokens/s leaves it out (the time of a one-token "
          "generation of the same prompts is subtracted); grammar ms/token is the time inside the logits processor "
          "(llguidance's mask, the allowed mass, masking the logits). Constrained answers stop when the object "
          "closes, so they generate fewer tokens.\n\n"
        + "\n".join(speed_lines) + "\n")
    if not args.no_docs:
        write_section(HEADING, body)


if __name__ == "__main__":
    main()
