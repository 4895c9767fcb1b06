"""How the list, status and show commands print: a table for people, or the pydantic models' own dump as JSON or
YAML for scripts (`-o json`, as kubectl and temporal users expect); and a console that never wraps a line on its
way into a pipe. Kept free of heavy imports: every CLI module imports it, and `--help` must stay quick."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from enum import Enum
from typing import TYPE_CHECKING, Annotated

import typer

from agent_sre.cli.common import SafeConsole

if TYPE_CHECKING:
    from pydantic import BaseModel

UNWRAPPED_WIDTH = 100_000  # no line of ours is longer: in a pipe every line stays whole


class Format(str, Enum):
    table = "table"
    json = "json"
    yaml = "yaml"


OutputOption = Annotated[Format, typer.Option(
    "--output", "-o", help="table, or the same as json or yaml (field names as in docs/cli.md)")]


def make_console(min_width: int = 0, stderr: bool = False) -> SafeConsole:
    """A terminal's console wraps at its width (at least `min_width`, so wide tables stay readable there); one
    writing to a pipe, a file or a CI log does not wrap at all, so that grep and scripts see whole lines. COLUMNS,
    when set, wins over both."""
    console = SafeConsole(stderr=stderr)
    if console.is_terminal or "COLUMNS" in os.environ:
        return SafeConsole(stderr=stderr, width=max(console.width, min_width)) if min_width else console
    return SafeConsole(stderr=stderr, width=UNWRAPPED_WIDTH)


def emit(fmt: Format, data: BaseModel | Sequence[BaseModel], table: Callable[[], None]) -> None:
    """Print `data` as `fmt` asks: `table` prints it for people; JSON and YAML are its `dump`."""
    if fmt is Format.table:
        table()
    else:
        dump(fmt, data)


def dump(fmt: Format, data: BaseModel | Sequence[BaseModel]) -> None:
    """`data` as JSON, or else YAML: the models' dump, with their field names (the interface scripts rely on)."""
    dumped = (data.model_dump(mode="json") if not isinstance(data, Sequence)
              else [item.model_dump(mode="json") for item in data])
    if fmt is Format.json:
        typer.echo(json.dumps(dumped, indent=2, ensure_ascii=False))
    else:
        import yaml

        typer.echo(yaml.safe_dump(dumped, sort_keys=False, allow_unicode=True), nl=False)
