"""Training arithmetic: fp32 versus bf16 autocast for the policy model, on this machine.

What a training step costs is a forward and backward pass over whole episodes (3,000-4,600 tokens for a
runbook-like one). This times exactly that, for each precision, with the model a training run starts from, and a
greedy multi-turn rollout (what GRPO's generation and evaluation do) under each, to show why only training is
autocast (`train_in_bf16`). Median of --repeats passes after one warm-up.

    .venv/bin/python bench/precision.py [--model DIR] [--tokens 3000] [--repeats 3] [--no-docs]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchdocs import provenance, write_section

from agent_sre.config import get_settings
from agent_sre.models.llm import SamplingConfig
from agent_sre.models.training import GRPOTrainingConfig
from agent_sre.policy.llm.checkpoint import load_policy_model
from agent_sre.policy.llm.policy import BASE_VERSION, local_version_dir
from agent_sre.scenarios import default_catalog, load_scenarios
from agent_sre.simulator.simulator import Simulator
from agent_sre.training.grpo import run_rollouts

HEADING = "## Training arithmetic (bench/precision.py)"


def timed(run: object, repeats: int) -> float:
    assert callable(run)
    run()  # warm-up: oneDNN picks its kernels on first use
    samples = []
    for _ in range(repeats):
        began = time.perf_counter()
        run()
        samples.append(time.perf_counter() - began)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="model directory (default: the converted base model)")
    parser.add_argument("--tokens", type=int, default=3000, help="sequence length of the training pass")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rollouts", type=int, default=2, help="catalog scenarios played greedily per precision")
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args()
    model_dir = args.model or local_version_dir(BASE_VERSION, get_settings().models_dir)
    loaded = load_policy_model(model_dir, "cpu")
    model = loaded.model
    ids = torch.randint(0, model.config.vocab_size, (1, args.tokens), generator=torch.Generator().manual_seed(0))
    load_before = os.getloadavg()[0]

    def train_pass(bf16: bool) -> None:
        model.train()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        model.zero_grad(set_to_none=True)

    def two_sequences(padded: bool) -> None:
        """Two episodes of 2,500 and 2,000 tokens in bf16: one left-padded batch, or one pass each (the CPU layout)."""
        model.train()
        pair = ids[:, :2500].repeat(2, 1)
        mask = torch.ones_like(pair)
        mask[1, :500] = 0
        with torch.autocast("cpu", dtype=torch.bfloat16):
            if padded:
                model(input_ids=pair, attention_mask=mask, labels=pair).loss.backward()
            else:
                model(input_ids=pair[:1], labels=pair[:1]).loss.backward()
                model(input_ids=pair[1:, 500:], labels=pair[1:, 500:]).loss.backward()
        model.zero_grad(set_to_none=True)

    padded_s, unpadded_s = (timed(functools.partial(two_sequences, padded), args.repeats) for padded in (True, False))
    scenarios = load_scenarios(default_catalog())[:args.rollouts]
    config = GRPOTrainingConfig(max_turns=10, max_new_tokens=64, device="cpu")
    generated: dict[bool, int] = {}

    def rollouts(bf16: bool) -> None:
        model.eval()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            played = run_rollouts(loaded, scenarios, config, Simulator(speed=0),
                                  sampling=SamplingConfig(temperature=0, max_new_tokens=64))
        generated[bf16] = sum(sum(r.env_mask) for r in played)

    rows = []
    for bf16 in (False, True):
        train_s = timed(functools.partial(train_pass, bf16), args.repeats)
        rollout_s = timed(functools.partial(rollouts, bf16), 1)
        rows.append((bf16, train_s, rollout_s))
    load_after = os.getloadavg()[0]

    table = Table(title=f"{model_dir.name}: forward+backward of {args.tokens} tokens; greedy rollouts")
    headers = ["arithmetic", "train pass s", "train tokens/s", f"{args.rollouts} rollouts s", "generated tokens/s"]
    for h in headers:
        table.add_column(h)
    lines = ["| " + " | ".join(headers) + " |", "|---|---:|---:|---:|---:|"]
    for bf16, train_s, rollout_s in rows:
        cells = ["bf16 autocast" if bf16 else "fp32", f"{train_s:.2f}", f"{args.tokens / train_s:.0f}",
                 f"{rollout_s:.1f}", f"{generated[bf16] / rollout_s:.1f}"]
        table.add_row(*cells)
        lines.append("| " + " | ".join(cells) + " |")
    Console().print(table)
    (_, fp32_train, fp32_roll), (_, bf16_train, bf16_roll) = rows
    summary = (f"bf16 autocast trains {fp32_train / bf16_train:.1f}x as fast as fp32 here and generates "
               f"{fp32_roll / bf16_roll:.2f}x as fast, so generation is never autocast on a CPU.")
    summary += (f" Two episodes (2,500 and 2,000 tokens, bf16) as one padded batch: {padded_s:.1f} s; one pass "
                f"each: {unpadded_s:.1f} s ({padded_s / unpadded_s:.1f}x), so a CPU trains one sequence per pass.")
    Console().print(summary)
    if not args.no_docs:
        native = torch.ops.mkldnn._is_mkldnn_bf16_supported()
        write_section(HEADING, f"""{provenance()}1-minute load average {load_before:.2f} before and
{load_after:.2f} after.

Model `{model_dir.name}` ({sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters), torch
{torch.__version__}, {torch.get_num_threads()} threads, CPU capability {torch.backends.cpu.get_cpu_capability()},
native bf16 (oneDNN) {native}. Training pass: one sequence of {args.tokens} tokens, loss over all of them,
median of {args.repeats}. Rollouts: {args.rollouts} catalog scenarios played greedily (at most 10 actions of
64 tokens), the KV cache kept across turns as in GRPO and evaluation.

{chr(10).join(lines)}

{summary}
""")


if __name__ == "__main__":
    main()
