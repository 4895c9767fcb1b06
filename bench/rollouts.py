"""GRPO rollout benchmark: where the time of a step's rollouts goes, per attention kernel.

A GRPO step's rollouts are most of its time (on an H100, 9.3 of 12.4 min in the 16-step run of
docs/benchmarks.md). A one-off profile there (32 rollouts, random weights) found 96 % of the rollouts' time in
`generate` and two thirds of that in `scaled_dot_product_attention`. The batch is left-padded, so attention
gets a mask, which the flash kernel does not take; which kernel serves these shapes best is what this measures
(on an H100 PyTorch's choice, cuDNN on Hopper, was 2.5x slower than the memory-efficient kernel: hence
`GENERATION_KERNELS`, the kernels generation may use, without cuDNN).
It plays a step's rollouts (`run_rollouts`: G rollouts of each scenario, turn by turn, as training does)
once per variant and reports the wall time, the time inside `generate` and the tokens generated:

    ours            transformers' SDPA attention, the kernels of `GENERATION_KERNELS` (what training uses)
    sdpa            the same, PyTorch's kernel choice
    sdpa:BACKEND    the same, the kernel forced (flash, efficient, cudnn, math); "not available" when the kernel
                    cannot serve the shape (flash takes no padding mask)
    eager           transformers' matmul-softmax-matmul attention

`--random` re-initialises the model's weights: every answer then runs to `--max-new-tokens` (the worst case, the
same in every variant) and every action is invalid, so episodes last `--max-turns`. Sampling at temperature 0.9.

    .venv/bin/python bench/rollouts.py [--model DIR|base] [--random] [--rollouts 32] [--max-turns 6]
                                       [--variants ours,sdpa,sdpa:efficient,sdpa:math,eager] [--no-docs]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast, get_args

import torch
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchdocs import provenance, write_section

from agent_sre.config import get_settings
from agent_sre.episodes import interleave_by_fault
from agent_sre.models.training import GRPOTrainingConfig
from agent_sre.policy.llm.checkpoint import (
    GENERATION_KERNELS,
    LoadedModel,
    SdpaKernel,
    device_name,
    load_policy_model,
)
from agent_sre.policy.llm.policy import local_version_dir
from agent_sre.scenarios import default_catalog, load_scenarios
from agent_sre.simulator.simulator import Simulator
from agent_sre.training.grpo import run_rollouts

HEADING = "## GRPO rollouts (bench/rollouts.py)"


@contextlib.contextmanager
def attention(loaded: LoadedModel, variant: str) -> Iterator[None]:
    """The model generating with `variant`'s attention; the model's own implementation and kernels restored after."""
    implementation, _, kernel = variant.partition(":")
    before = loaded.model.config._attn_implementation, loaded.generation_kernels
    loaded.model.set_attn_implementation("sdpa" if implementation == "ours" else implementation)
    loaded.generation_kernels = (GENERATION_KERNELS if implementation == "ours" else
                                 (cast(SdpaKernel, kernel),) if kernel else None)
    try:
        yield
    finally:
        loaded.model.set_attn_implementation(before[0])
        loaded.generation_kernels = before[1]


class GenerateTimer:
    """Wall time spent inside the model's `generate`, the device synchronised around each call."""

    def __init__(self, loaded: LoadedModel) -> None:
        self.seconds = 0.0
        self.synchronize: Callable[[], None] = (torch.cuda.synchronize if loaded.device.type == "cuda"
                                                else (lambda: None))
        generate: Any = loaded.model.generate  # GenerationMixin's (transformers' hints leave it out)

        def timed(*args: object, **kwargs: object) -> object:
            self.synchronize()
            began = time.perf_counter()
            try:
                return generate(*args, **kwargs)
            finally:
                self.synchronize()
                self.seconds += time.perf_counter() - began

        setattr(loaded.model, "generate", timed)  # noqa: B010 - an instance attribute: only this model is timed


def load(args: argparse.Namespace) -> LoadedModel:
    loaded = load_policy_model(local_version_dir(args.model, get_settings().models_dir), device=args.device)
    if args.random:
        torch.manual_seed(0)
        with torch.no_grad():
            for weight in (p for p in loaded.model.parameters() if p.dim() > 1):
                weight.normal_(std=0.02)
    return loaded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="base", help="a model directory, or base (SmolLM2-135M, converted)")
    parser.add_argument("--random", action="store_true", help="re-initialise the weights (answers run to the limit)")
    parser.add_argument("--rollouts", type=int, default=32, help="rollouts per step (groups of --group-size)")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-turns", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--variants", default="ours,sdpa,sdpa:efficient,sdpa:math,eager",
                        help="comma-separated: ours, sdpa, sdpa:flash|efficient|cudnn|math, eager")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args()
    for variant in args.variants.split(","):
        implementation, _, kernel = variant.partition(":")
        if implementation not in ("ours", "sdpa", "eager") or kernel and (
                implementation != "sdpa" or kernel not in get_args(SdpaKernel)):
            parser.error(f"unknown variant {variant!r}: ours, sdpa, sdpa:{'|'.join(get_args(SdpaKernel))} or eager")
    console = Console()

    loaded = load(args)
    timer = GenerateTimer(loaded)
    catalog = interleave_by_fault(load_scenarios(default_catalog()))
    groups = max(args.rollouts // args.group_size, 1)
    scenarios = [s for s in catalog[:groups] for _ in range(args.group_size)]
    config = GRPOTrainingConfig(max_turns=args.max_turns, max_new_tokens=args.max_new_tokens, temperature=0.9)
    simulator = Simulator(speed=0)
    run_rollouts(loaded, scenarios[:2], config.model_copy(update={"max_turns": 1}), simulator)  # warm-up

    headers = ["attention", "rollouts", "turns", "generated tokens", "wall s", "in generate s", "tokens/s"]
    table, lines = Table(title="GRPO rollouts"), ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for h in headers:
        table.add_column(h)
    for variant in args.variants.split(","):
        timer.seconds = 0.0
        began = time.perf_counter()
        try:
            with attention(loaded, variant):
                rollouts = run_rollouts(loaded, scenarios, config, simulator)
        except RuntimeError as e:  # the kernel cannot serve these shapes
            cells = [variant, "–", "–", "–", "–", "–", f"not available: {str(e).splitlines()[0][:60]}"]
        else:
            wall = time.perf_counter() - began
            tokens = sum(sum(r.env_mask) for r in rollouts)
            cells = [variant, str(len(rollouts)), str(sum(len(r.turns) for r in rollouts)), f"{tokens:,}",
                     f"{wall:.1f}", f"{timer.seconds:.1f}", f"{tokens / wall:.0f}"]
        table.add_row(*cells)
        lines.append("| " + " | ".join(cells) + " |")
    console.print(table)

    device = device_name(loaded.device)
    if not args.no_docs:
        heading = HEADING if loaded.device.type == "cpu" else f"## GRPO rollouts on {device} (bench/rollouts.py)"
        weights = "random weights (every answer runs to the token limit)" if args.random else "its trained weights"
        path = "one conversation at a time, each continuing its KV cache" if loaded.device.type == "cpu" else \
            "one batch of every active conversation per turn, each re-read"
        write_section(heading, f"""{provenance()}
{args.rollouts} rollouts ({groups} training scenarios × {args.group_size}) played as a GRPO step plays them
(`run_rollouts`, {path}), by `{args.model}` with {weights}, on {device}, in {loaded.model.dtype}; at most
{args.max_turns} actions and {args.max_new_tokens} new tokens an action, temperature 0.9. Each variant once,
after a warm-up; "in generate" is the time inside the model's `generate`, the device synchronised around it.

{chr(10).join(lines)}
""")


if __name__ == "__main__":
    main()
