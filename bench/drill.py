"""The production drill's per-cycle table in docs/benchmarks.md: runs `agent-sre drill` with the same options and
replaces the `## Production drill (bench/drill.py)` section with its report (success on the shifted family, false
positives, time-to-mitigate, the data each cycle used, its evaluations and its rollout decision).

    .venv/bin/python bench/drill.py --model base --cycles 3 --every 20m --incidents-per-cycle 30 --steps 20

With the real model on a CPU this takes hours (SmolLM2-135M trains at ~260 tokens/s in bf16 and generates ~20
tokens/s on 2 cores, bench/precision.py): see docs/continuous-learning.md for a budget.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from agent_sre.cli.drill import drill
from agent_sre.learning.drill import markdown
from agent_sre.models.learning import DrillReport

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchdocs import provenance, write_section

HEADING = "## Production drill (bench/drill.py)"


def main() -> None:
    runner = typer.Typer(add_completion=False)
    runner.command()(drill)
    report = typer.main.get_command(runner)(sys.argv[1:], standalone_mode=False)
    if isinstance(report, DrillReport):  # not `--help`
        write_section(HEADING, provenance() + "\n" + markdown(report))
        print(f"wrote {HEADING!r} in docs/benchmarks.md")


if __name__ == "__main__":
    main()
