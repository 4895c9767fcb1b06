"""CLI start-up: how long `agent-sre --help`, each subcommand's `--help` and `--version` take, end to end.

An SRE types these first, and every command pays the same start-up before it does anything: the CLI imports its
heavy dependencies (torch, transformers, temporalio, kubernetes, scipy) only inside the commands that use them.
Each figure is the median wall time of N runs of the installed `agent-sre` script, in a fresh process each.

    .venv/bin/python bench/cli_startup.py [--runs 7] [--no-docs]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table
from typer.main import get_command

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchdocs import provenance, write_section

from agent_sre.cli import app

HEADING = "## CLI start-up (bench/cli_startup.py)"
SCRIPT = Path(sys.executable).parent / "agent-sre"
BUDGET_S = 0.5  # issue #38: any --help under half a second


def invocations() -> list[list[str]]:
    """`--version`, `--help`, and `--help` of every subcommand (the first thing typed in each area)."""
    root = get_command(app)
    names = root.list_commands(root.context_class(root))  # type: ignore[attr-defined]
    return [["--version"], ["--help"], *([name, "--help"] for name in names)]


def seconds(args: list[str], runs: int) -> list[float]:
    """Wall time of `runs` fresh `agent-sre ARGS` processes."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([str(SCRIPT), *args], check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args()

    rows = []
    for invocation in invocations():
        times = seconds(invocation, args.runs)
        rows.append((f"agent-sre {' '.join(invocation)}", statistics.median(times), max(times)))
    table = Table("command", "median s", "max s", title=f"CLI start-up, {args.runs} runs each")
    for command, median, worst in rows:
        table.add_row(command, f"{median:.2f}", f"{worst:.2f}")
    Console(width=120).print(table)
    slowest = max(median for _, median, _ in rows)
    print(f"slowest median {slowest:.2f} s: {'within' if slowest < BUDGET_S else 'OVER'} the {BUDGET_S} s budget")
    if not args.no_docs:
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())  # a shared machine's other work slows every start
        body = (provenance() + f"\nMedian and maximum wall time of {args.runs} fresh processes of the installed "
                f"`agent-sre` script each (output to /dev/null), load average {load} at the end. Budget: "
                f"{BUDGET_S} s for any `--help`.\n\n"
                "| command | median s | max s |\n|---|---:|---:|\n"
                + "".join(f"| `{command}` | {median:.2f} | {worst:.2f} |\n" for command, median, worst in rows))
        write_section(HEADING, body)


if __name__ == "__main__":
    main()
