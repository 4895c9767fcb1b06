"""Serving benchmark: how long the LLM policy takes to decide, with and without keeping conversations' KV caches.

Serving asks the model for one turn per policy call; each turn's prompt is the whole conversation so far, and all
conversations open with the same system prompt (the tools and their schemas). Without a kept cache every turn
re-reads all of it; with one (`Settings.llm_kv_cache_tokens`, `ConversationCaches`) a turn reads only its new
tokens, and a new incident copies the shared opening of an earlier one.

Each scenario is served twice back to back, cache off then on, by the same local model with greedy decoding (so
both runs should take the same actions; the table says how many did), in direct episodes on the embedded stack
(simulator over HTTP, SeaweedFS), settle windows 0. Latency is the policy's own (`PolicyDecision.latency_ms`).

    .venv/bin/python bench/serving.py [--model DIR|base] [--episodes 6] [--max-steps 10] [--no-docs]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchdocs import provenance, write_section
from orchestration import direct_trajectory

from agent_sre import stack
from agent_sre.config import get_settings
from agent_sre.episodes import interleave_by_fault
from agent_sre.models.incident import RemediationLimits
from agent_sre.models.llm import SamplingConfig
from agent_sre.models.policy import PolicyDecision
from agent_sre.models.remediation import PolicyRef, PolicyRequest
from agent_sre.models.trajectory import Trajectory
from agent_sre.policy.llm import LLMPolicy
from agent_sre.policy.llm.policy import LocalModels, local_version_dir
from agent_sre.scenarios import load_scenarios
from agent_sre.stack.isolated import isolated_env

HEADING = "## Serving (bench/serving.py)"
GREEDY = SamplingConfig(temperature=0.0, max_new_tokens=256)


def actions(t: Trajectory) -> list[str]:
    return [s.decision.action.model_dump_json() if s.decision.action else "invalid" for s in t.steps]


def decide(policy: LLMPolicy, request: PolicyRequest) -> PolicyDecision:
    """One decision as the policy activity makes it."""
    return policy.decide(request.policy, request.trajectory)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--model", default="base", help="a model directory, or base (SmolLM2-135M, converted)")
    parser.add_argument("--episodes", type=int, default=6)
    parser.add_argument("--max-steps", type=int, default=10)
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args()
    console = Console(width=140)
    scenarios = interleave_by_fault(load_scenarios())
    picked = [scenarios[i % len(scenarios)] for i in range(args.episodes)]
    limits = RemediationLimits(settle_s=0.0, max_steps=args.max_steps)
    modes = {"re-read every turn": 0, "KV cache kept": get_settings().llm_kv_cache_tokens}
    latencies: dict[str, list[float]] = {m: [] for m in modes}
    walls = dict.fromkeys(modes, 0.0)
    same = 0
    models_dir = get_settings().models_dir  # the converted base model is shared with the developer's data dir
    with tempfile.TemporaryDirectory() as data_dir:
        os.environ.update(isolated_env(Path(data_dir)))
        get_settings.cache_clear()
        settings = get_settings()
        policies = {m: LLMPolicy(LocalModels(lambda v: local_version_dir(v, models_dir), max_loaded=1,
                                             device="cpu", kv_cache_tokens=tokens), GREEDY)
                    for m, tokens in modes.items()}
        ref = PolicyRef(name="llm", version=str(Path(args.model).resolve()) if args.model != "base" else "base")
        for p in policies.values():  # load (and convert) before timing
            p.backends(ref.version)
        asyncio.run(stack.up(settings))
        try:
            for n, scenario in enumerate(picked, start=1):
                runs = {}
                for mode, p in policies.items():
                    began = time.perf_counter()
                    runs[mode] = direct_trajectory(scenario, ref, partial(decide, p), limits)
                    walls[mode] += time.perf_counter() - began
                    latencies[mode] += [s.decision.latency_ms for s in runs[mode].steps]
                same += len({tuple(actions(t)) for t in runs.values()}) == 1
                console.print(f"{n}/{len(picked)} {scenario.name}: "
                              + ", ".join(f"{m} {len(t.steps)} steps" for m, t in runs.items()))
        finally:
            asyncio.run(stack.down(settings))

    rows = [(m, len(latencies[m]), statistics.median(latencies[m]), statistics.quantiles(latencies[m], n=10)[-1],
             walls[m]) for m in modes]
    base_median = rows[0][2]
    table = Table("mode", "decisions", "median ms", "p90 ms", "episode wall s", "speed-up (median)",
                  title=f"Serving {args.model}")
    for m, n, med, p90, wall in rows:
        table.add_row(m, str(n), f"{med:.0f}", f"{p90:.0f}", f"{wall:.1f}", f"{base_median / med:.2f}x")
    console.print(table)
    console.print(f"episodes with the same actions in both modes: {same} of {len(picked)}")
    body = provenance() + (
        f"\nModel `{args.model}`, greedy decoding (up to {GREEDY.max_new_tokens} new tokens), CPU, "
        f"{len(picked)} catalog scenarios (interleaved by fault type), at most {args.max_steps} actions each, each "
        f"served in both modes back to back. Per decision: the policy's own latency.\n\n"
        "| mode | decisions | median ms | p90 ms | wall s of the episodes | speed-up (median) |\n"
        "|---|---:|---:|---:|---:|---:|\n"
        + "".join(f"| {m} | {n} | {med:.0f} | {p90:.0f} | {wall:.1f} | {base_median / med:.2f}x |\n"
                  for m, n, med, p90, wall in rows)
        + f"\nEpisodes whose actions were the same in both modes: {same} of {len(picked)} (a kept cache gives the "
          "same tokens up to float rounding; greedy decoding can still flip on a near tie).\n")
    if not args.no_docs:
        write_section(HEADING, body)


if __name__ == "__main__":
    main()
