"""Writing a benchmark's figures into docs/benchmarks.md: each script owns one `## ...` section."""

from __future__ import annotations

import os
import platform
import re
import shlex
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table

DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


def cpu_model() -> str:
    """The processor's name as Linux reports it (machines with the same core count can differ threefold)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def provenance() -> str:
    """The command that produced the figures, when, and on what machine."""
    command = " ".join([".venv/bin/python", *map(shlex.quote, [os.path.relpath(sys.argv[0]), *sys.argv[1:]])])
    return (f"Command: `{command}`  \nDate: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; machine: {os.cpu_count()} CPUs "
            f"(nproc), {cpu_model()}, {platform.machine()}, Python {platform.python_version()}.\n")


def write_section(heading: str, body: str) -> None:
    """Replace the section under `heading` (or append it), leaving the other sections alone."""
    section = f"{heading}\n\n{body.rstrip()}\n"
    text = DOCS.read_text() if DOCS.exists() else "# Benchmarks\n\nFigures measured by the scripts in bench/.\n"
    pattern = re.compile(rf"^{re.escape(heading)}\n.*?(?=^## |\Z)", re.S | re.M)
    text = pattern.sub(lambda _: section + "\n", text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section
    DOCS.write_text(text)


Row = tuple[str, ...]


def markdown(header: Row, rows: Sequence[Row]) -> str:
    """A Markdown table: the first column left-aligned, the others right-aligned (they hold figures)."""
    cells = [header, tuple("---" if i == 0 else "---:" for i in range(len(header))), *rows]
    return "".join("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |\n" for row in cells)


def show(title: str, header: Row, rows: Sequence[Row], width: int = 140) -> None:
    """The same table on the terminal."""
    table = Table(*header, title=title)
    for row in rows:
        table.add_row(*row)
    Console(width=width).print(table)
