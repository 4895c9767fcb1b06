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
import re
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchdocs import provenance, write_section

from agent_sre.config import get_settings
from agent_sre.episodes import interleave_by_fault, summarize
from agent_sre.models.episode import EpisodeResult
from agent_sre.models.llm import SamplingConfig
from agent_sre.models.scenario import Scenario
from agent_sre.models.training import MAX_ACTION_TOKENS, GRPOTrainingConfig
from agent_sre.models.trajectory import Trajectory
from agent_sre.outcome import incident_outcome
from agent_sre.policy.llm.backends import TransformersBackend
from agent_sre.policy.llm.checkpoint import LoadedModel, load_policy_model
from agent_sre.policy.llm.constraint import ActionConstraint
from agent_sre.policy.llm.policy import local_version_dir
from agent_sre.scenarios import heldout_suite, load_scenarios
from agent_sre.simulator.simulator import Simulator
from agent_sre.training.environment import IncidentEnvironment
from agent_sre.training.evaluate import run_model
from agent_sre.training.grpo import run_rollouts

HEADING = "## Constrained decoding (bench/constrained.py)"
MODES = {"constrained": True, "unconstrained": False}


class Actions(BaseModel):
    """What one run's episodes did, action by action."""

    label: str
    episodes: int
    actions: int
    invalid: int
    cut_off: int  # of the invalid: the answer ran into the token limit
    cut_in: dict[str, int]  # the key whose value each cut-off answer was writing ("–": not inside one)
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
                   cut_off=len(cut), cut_in=Counter(writing(s.decision.completion) for s in cut),
                   success_rate=overall.success_rate, seconds=seconds)


def writing(completion: str) -> str:
    """The key of the JSON value a cut-off answer ends inside (a string it kept writing, as a rule)."""
    keys = re.findall(r'"([A-Za-z_]+)": "?', completion)
    return keys[-1] if keys and completion.startswith("{") else "–"


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
    """One layout and mode, the median of its repeats."""

    layout: str
    mode: str
    tokens: int  # the answers' tokens
    steps: int  # forward passes that produced a token (a batch's: as many as its longest answer), over the calls
    calls: int
    seconds: float
    prompt_seconds: float  # the same calls generating one token each: reading the prompts
    grammar_seconds: float  # inside the logits processor

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds

    @property
    def step_ms(self) -> float:
        """A decode step: the time beyond reading the prompts, per forward pass after each call's first."""
        return 1000 * (self.seconds - self.prompt_seconds) / max(self.steps - self.calls, 1)

    @property
    def grammar_ms(self) -> float:
        return 1000 * self.grammar_seconds / max(self.steps, 1)


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
        setattr(ActionConstraint, "__call__", self._call)  # noqa: B010 (the original method put back)


def speed(loaded: LoadedModel, suite: list[Scenario], args: argparse.Namespace) -> list[Speed]:
    """Each layout's modes measured in turn, `--repeats` rounds (the order alternating), medians kept: on a shared
    machine the load drifts, and alternating keeps the drift out of the comparison."""
    simulator = Simulator(speed=0)
    prompts = [IncidentEnvironment(simulator, s).reset() for s in suite[:args.speed_prompts]]
    backend = TransformersBackend(loaded)
    rows = []
    for layout, batches in (("one prompt per call", [[p] for p in prompts]), (f"batch of {len(prompts)}", [prompts])):
        measured: dict[str, list[Speed]] = {mode: [] for mode in MODES}
        for round_ in range(args.repeats):
            for mode in (list(MODES) if round_ % 2 == 0 else list(MODES)[::-1]):
                greedy = SamplingConfig(temperature=0.0, max_new_tokens=args.max_new_tokens,
                                        constrained=MODES[mode])
                backend.generate(batches[0][:1], greedy.model_copy(update={"max_new_tokens": 2}))  # compiled, warm
                began = time.perf_counter()
                for batch in batches:
                    backend.generate(batch, greedy.model_copy(update={"max_new_tokens": 1}))
                prompt_s = time.perf_counter() - began
                with GrammarClock() as clock:
                    began = time.perf_counter()
                    answers = [backend.generate(batch, greedy) for batch in batches]
                    seconds = time.perf_counter() - began
                lengths = [[len(g.token_ids or []) for g in batch] for batch in answers]
                measured[mode].append(Speed(
                    layout=layout, mode=mode, tokens=sum(map(sum, lengths)), steps=sum(map(max, lengths)),
                    calls=len(batches), seconds=seconds, prompt_seconds=prompt_s, grammar_seconds=clock.seconds))
        for runs in measured.values():
            median = {key: statistics.median(getattr(r, key) for r in runs)
                      for key in ("seconds", "prompt_seconds", "grammar_seconds")}
            rows.append(runs[0].model_copy(update=median))  # greedy: the same answers every round
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--model", default="base", help="a model directory, or base (SmolLM2-135M, converted)")
    parser.add_argument("--max-turns", type=int, default=4, help="actions per episode (the suite's own limit is 12)")
    parser.add_argument("--max-new-tokens", type=int, default=MAX_ACTION_TOKENS)
    parser.add_argument("--limit", type=int, default=0, help="only the first N scenarios (interleaved by fault)")
    parser.add_argument("--speed-prompts", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3, help="rounds of the speed measurement")
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
    lines = ["| decoding | grammar | episodes | actions | invalid | of which cut off | invalid rate | success "
             "| wall s |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for mode, a in runs:
        inside = ", ".join(f"{key} {n}" for key, n in sorted(a.cut_in.items(), key=lambda kv: -kv[1]))
        cells = [a.label, mode, str(a.episodes), str(a.actions), str(a.invalid),
                 f"{a.cut_off} ({inside})" if a.cut_off and mode == "constrained" else str(a.cut_off),
                 f"{a.rate:.1%}", f"{a.success_rate:.0%}", f"{a.seconds:.0f}"]
        table.add_row(*cells)
        lines.append("| " + " | ".join(cells) + " |")
    console.print(table)
    speed_table = Table("layout", "grammar", "answers' tokens", "tokens/s", "ms per decode step",
                        "grammar ms per step", title="generation speed (greedy, first-turn prompts)")
    speed_lines = ["| layout | grammar | answers' tokens | tokens/s | ms per decode step | grammar ms per step |",
                   "|---|---|---:|---:|---:|---:|"]
    for s in speeds:
        share = f"{s.grammar_ms:.2f} ({s.grammar_ms / s.step_ms:.0%})" if s.mode == "constrained" else "–"
        cells = [s.layout, s.mode, str(s.tokens), f"{s.tokens_per_s:.1f}", f"{s.step_ms:.0f}", share]
        speed_table.add_row(*cells)
        speed_lines.append("| " + " | ".join(cells) + " |")
    console.print(speed_table)
    body = provenance() + (
        f"\nModel `{args.model}` (untrained unless a directory is given), CPU, the held-out suite "
        f"({len(suite)} scenarios), each episode cut at {args.max_turns} actions to bound the CPU time (the suite's "
        f"own limit is 12), at most {args.max_new_tokens} new tokens per answer (training's and evaluation's "
        "limit). Greedy: `run_model`, the evaluation the gate reads; sampled: `run_rollouts` at temperature 1 as "
        f"GRPO plays (seed {args.seed}). Invalid rate: invalid actions per action taken; \"cut off\": invalid "
        "because the answer reached the token limit, which the grammar cannot prevent (constrained: in brackets, the "
        "argument whose value each was still writing).\n\n"
        + "\n".join(lines)
        + f"\n\nGeneration speed on the first-turn prompts of {args.speed_prompts} of those scenarios, greedy, the "
          f"same model, the median of {args.repeats} rounds with the modes alternating: tokens/s counts reading the "
          "prompts; a decode step is one forward pass after a call's first, the time of one-token generations of "
          "the same prompts taken off; grammar ms per step is the time inside the logits processor (llguidance's "
          "masks, the bias added to the logits), in brackets its share of a decode step. Constrained answers stop "
          "when the object closes, so there are fewer tokens; this machine is shared, so compare within a row's "
          "layout and read the share more than the absolute times.\n\n"
        + "\n".join(speed_lines) + "\n")
    if not args.no_docs:
        write_section(HEADING, body)


if __name__ == "__main__":
    main()
