"""GRPO's scoring passes on a CPU: every completion token (TRL's fused LM head) versus the model's own tokens only.

A multi-turn rollout's completion is mostly the tools' answers, which the loss masks out; TRL's fused head skips
unlabelled positions only on a GPU (Triton), so on a CPU it projects every completion position onto the whole
vocabulary. `UnpaddedGRPOTrainer` projects only the model's tokens. This plays a few rollouts of the training
catalog with the policy model at the training temperature, then times, for each rollout and each way of scoring,
the training pass (forward, backward) and the reference pass (forward without gradients), in the arithmetic of
--precision (training's `precision`: auto is fp32 on a CPU). Median of --repeats after a warm-up.

    .venv/bin/python bench/grpo_scoring.py [--model DIR] [--rollouts 2] [--repeats 2] [--precision bf16] [--no-docs]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import get_args

import torch
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchdocs import provenance, write_section
from precision import timed

from agent_sre.config import get_settings
from agent_sre.models.training import GRPOTrainingConfig, Precision
from agent_sre.policy.llm.checkpoint import load_policy_model, train_in_bf16
from agent_sre.policy.llm.policy import BASE_VERSION, local_version_dir
from agent_sre.scenarios import default_catalog, load_scenarios
from agent_sre.simulator.simulator import Simulator
from agent_sre.training.grpo import Rollout, returned_reward, run_rollouts

HEADING = "## GRPO scoring passes (bench/grpo_scoring.py)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="default: the SFT model of bench/training.py, else the base")
    parser.add_argument("--rollouts", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--precision", choices=get_args(Precision), default="auto")
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args()
    sft = get_settings().data_dir / "bench-training" / "sft-model"
    model_dir = args.model or (sft if sft.is_dir() else local_version_dir(BASE_VERSION, get_settings().models_dir))

    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from agent_sre.training.unpadded import UnpaddedGRPOTrainer

    config = GRPOTrainingConfig(max_turns=10, max_new_tokens=64, temperature=0.9, precision=args.precision)
    first_of_family = {s.fault: s for s in reversed(load_scenarios(default_catalog()))}
    scenarios = [first_of_family[f] for f in sorted(first_of_family)][:args.rollouts]
    rollouts = run_rollouts(load_policy_model(model_dir, "cpu"), scenarios, config, Simulator(speed=0))
    bf16 = train_in_bf16(torch.device("cpu"), config.precision)
    trainer = UnpaddedGRPOTrainer(
        model=str(model_dir), reward_funcs=[returned_reward], train_dataset=Dataset.from_dict({"prompt": ["-"]}),
        args=GRPOConfig(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=1, gradient_accumulation_steps=2,
                        num_generations=2, use_cpu=True, report_to=[], bf16=bf16, temperature=config.temperature))
    assert trainer.model is not None  # the trainer loaded it from model_dir
    model = trainer.model.train()

    def scoring(rollout: Rollout, own_only: bool, grad: bool) -> Callable[[], torch.Tensor]:
        ids = torch.tensor([rollout.prompt_ids + rollout.completion_ids])
        mask, keep = torch.ones_like(ids), len(rollout.completion_ids)
        own = torch.tensor([rollout.env_mask], dtype=torch.bool)

        def run() -> torch.Tensor:
            trainer._own_tokens = [rollout.env_mask] if own_only else None
            score = trainer._get_per_token_logps_and_entropies if own_only else (
                lambda *a, **k: GRPOTrainer._get_per_token_logps_and_entropies(trainer, *a, **k))
            with torch.set_grad_enabled(grad):
                logps, _, _ = score(model, ids, mask, keep, batch_size=1, compute_entropy=grad)
                if grad:
                    model.zero_grad()
                    logps[own].sum().backward()
            return logps[own].detach()
        return run

    arithmetic = "bf16 autocast" if bf16 else "fp32"
    table = Table(title=f"GRPO scoring passes ({arithmetic})")
    headers = ["rollout", "tokens", "model's tokens", "scored", "training pass s", "reference pass s"]
    for h in headers:
        table.add_column(h)
    lines = ["| " + " | ".join(headers) + " |", "|---|---:|---:|---|---:|---:|"]
    totals: dict[bool, list[float]] = {False: [0.0, 0.0], True: [0.0, 0.0]}
    largest_gap = 0.0
    for scenario, rollout in zip(scenarios, rollouts, strict=True):
        tokens, own = len(rollout.prompt_ids) + len(rollout.completion_ids), sum(rollout.env_mask)
        largest_gap = max(largest_gap, float((scoring(rollout, True, False)()
                                              - scoring(rollout, False, False)()).abs().max()))
        for own_only in (False, True):
            train_s = timed(scoring(rollout, own_only, True), args.repeats)
            ref_s = timed(scoring(rollout, own_only, False), args.repeats)
            totals[own_only][0] += train_s
            totals[own_only][1] += ref_s
            cells = [scenario.name, f"{tokens:,}", f"{own:,}",
                     "the model's tokens" if own_only else "every completion token", f"{train_s:.2f}", f"{ref_s:.2f}"]
            table.add_row(*cells)
            lines.append("| " + " | ".join(cells) + " |")
    Console().print(table)
    speedup = [totals[False][k] / totals[True][k] for k in (0, 1)]
    summary = (f"Over the {len(rollouts)} rollouts, scoring only the model's tokens makes the training pass "
               f"{speedup[0]:.2f}x and the reference pass {speedup[1]:.2f}x as fast; the two ways' log-probabilities "
               f"of the model's tokens differ by at most {largest_gap:.1e}.")
    Console().print(summary)
    if not args.no_docs:
        write_section(HEADING, f"""{provenance()}
Model `{model_dir.name}`, torch {torch.__version__}, {torch.get_num_threads()} threads, {arithmetic}. Rollouts:
catalog scenarios played by the model at temperature {config.temperature} (at most {config.max_turns} actions of
{config.max_new_tokens} tokens); each pass reads one whole rollout alone, as GRPO's CPU layout does; the training
pass is forward and backward of the summed log-probabilities of the model's tokens;
median of {args.repeats} after a warm-up.

{chr(10).join(lines)}

{summary}
""")


if __name__ == "__main__":
    main()
