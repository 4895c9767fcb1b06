"""Redaction cost: the CPU time `redact_trajectory` takes on real runbook episodes before they are stored.

Every stored episode is redacted once in `store_trajectory`, on the worker that ran it, so its cost is part of the
CPU time per episode that bench/orchestration.py reports (and that caps episodes/s on 2 cores). The episodes are the
runbook policy's on the training catalog, played in-process (interleaved by fault type, as the orchestration bench
picks them); the figure is the median over repeats of the CPU time per trajectory.

    .venv/bin/python bench/redaction.py [--episodes 40] [--repeats 5] [--no-docs]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchdocs import provenance, write_section

from agent_sre import redaction
from agent_sre.episodes import interleave_by_fault
from agent_sre.models.remediation import PolicyRef
from agent_sre.models.trajectory import Trajectory
from agent_sre.policy.runbook import RunbookPolicy
from agent_sre.scenarios import load_scenarios
from agent_sre.simulator.simulator import Simulator
from agent_sre.training.evaluate import play

HEADING = "## Redaction (bench/redaction.py)"
T = TypeVar("T")


def texts_redacted(trajectories: list[Trajectory]) -> Counter[str]:
    """How often each text reaches the text rules when the trajectories are redacted (the walk's own view)."""
    seen: Counter[str] = Counter()
    original = redaction._redact_text

    def counting(text: str, found: set[str] | None = None) -> str:
        seen[text] += 1
        return original(text, found)

    redaction._redact_text = counting
    try:
        for t in trajectories:
            redaction.redact_trajectory(t)
    finally:
        redaction._redact_text = original
    return seen


def cpu_ms_per_item(items: Sequence[T], fn: Callable[[T], object], repeats: int) -> float:
    """Median over `repeats` of the CPU milliseconds per item of `fn` over all items."""
    runs = []
    for _ in range(repeats):
        began = time.process_time()
        for item in items:
            fn(item)
        runs.append((time.process_time() - began) * 1000 / len(items))
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--episodes", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args()

    scenarios = interleave_by_fault(load_scenarios())
    picked = [scenarios[i % len(scenarios)] for i in range(args.episodes)]
    simulator, ref = Simulator(speed=0), PolicyRef(name="runbook", version="runbook")
    trajectories = [play(RunbookPolicy(), ref, s, simulator) for s in picked]

    texts = texts_redacted(trajectories)
    n = len(trajectories)
    json_kb = statistics.mean(len(t.model_dump_json()) for t in trajectories) / 1000
    per_trajectory = cpu_ms_per_item(trajectories, redaction.redact_trajectory, args.repeats)
    distinct = list(texts)
    rules_only = cpu_ms_per_item(distinct, redaction.redact, args.repeats) * len(distinct) / n

    rows = [("episodes", f"{n}"),
            ("trajectory JSON, KB (mean)", f"{json_kb:.1f}"),
            ("texts passed to `redact` per trajectory", f"{sum(texts.values()) / n:.1f}"),
            ("distinct texts (all episodes together) per trajectory", f"{len(distinct) / n:.1f}"),
            ("characters passed to `redact` per trajectory", f"{sum(len(x) * c for x, c in texts.items()) / n:,.0f}"),
            ("`redact_trajectory`, CPU ms per trajectory", f"{per_trajectory:.2f}"),
            ("of which the text rules (each distinct text once), ms", f"{rules_only:.2f}")]
    table = Table("measure", "value", title="Redaction of runbook episodes")
    for row in rows:
        table.add_row(*row)
    Console(width=120).print(table)
    if not args.no_docs:
        body = (provenance() + f"\nEpisodes: the runbook policy on the training catalog, played in-process; median "
                f"of {args.repeats} repeats.\n\n| measure | value |\n|---|---:|\n"
                + "".join(f"| {name} | {value} |\n" for name, value in rows))
        write_section(HEADING, body)


if __name__ == "__main__":
    main()
