"""How the list, status and show commands print: a table for people, or the pydantic models' own dump as JSON or
YAML for scripts (`-o json`, as kubectl and temporal users expect); and a console that never wraps a line on its
way into a pipe. Kept free of heavy imports: every CLI module imports it, and `--help` must stay quick."""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer

from agent_sre.cli.common import SafeConsole

if TYPE_CHECKING:
    from pydantic import BaseModel
    from rich.console import Console
    from rich.table import Column, Table

UNWRAPPED_WIDTH = 100_000  # no line of ours is longer: in a pipe every line stays whole


class Format(StrEnum):
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


WRAPPED_MIN = 16  # the least width a column that wraps (a reason, a root cause) is counted at when fitting


def fit(console: Console, table: Table, optional: Sequence[str] = (),
        elsewhere: str = "-o yaml shows every field") -> None:
    """Print `table` in the console's width without cutting a value. A `no_wrap` column (an identifier, a figure)
    keeps every value whole; where that does not fit, long headers wrap at their spaces, and then the `optional`
    columns are left out, in order, with the caption naming them and where to see them. The other columns
    wrap. A table that is still too wide is printed at its own width, for the terminal to wrap, rather than cut."""
    from rich.text import Text

    whole = [c for c in table.columns if c.no_wrap]
    for column in table.columns:
        if not column.no_wrap:
            column.overflow = "fold"  # a word longer than its column (a version name) breaks, never ends in "…"
    widest = {id(c): max([_width(v) for v in c.cells] or [1]) for c in table.columns}
    for column in whole:
        column.min_width = max(widest[id(column)], len(str(column.header)))
    if _least_width(table, widest) > console.width:
        for column in whole:
            header = str(column.header)
            column.min_width = max([widest[id(column)], *map(len, header.split())])
            column.header = Text("\n".join(textwrap.wrap(header, column.min_width)))
    left_out = []
    for name in optional:
        if _least_width(table, widest) <= console.width:
            break
        table.columns[:] = [c for c in table.columns if str(c.header).replace("\n", " ") != name]
        for i, column in enumerate(table.columns):
            column._index = i  # rich pads the first and last columns by their index
        left_out.append(name)
    if left_out:
        note = f"{', '.join(left_out)} left out to fit {console.width} columns: {elsewhere}"
        table.caption = f"{table.caption}\n{note}" if table.caption else note
    terminal = console.width
    console.width = max(terminal, _least_width(table, widest))  # print's own width= cannot exceed the console's
    _share_out(table, widest, console.width)
    try:
        console.print(table, crop=False)
    finally:
        console.width = terminal


def _width(cell: object) -> int:
    """The widest line of a cell as it prints (markup excluded)."""
    from rich.text import Text

    text = Text.from_markup(cell) if isinstance(cell, str) else cell
    return max((line.cell_len for line in text.split()), default=0) if isinstance(text, Text) else 1


def _least_width(table: Table, widest: dict[int, int]) -> int:
    """How narrow `table` can be drawn: whole columns at their minimum, wrapping ones at `_floor`."""
    padding = sum(table._get_padding_width(i) for i in range(len(table.columns)))  # rich's own accounting
    return sum(_floor(c, widest) for c in table.columns) + padding + table._extra_width


def _floor(column: Column, widest: dict[int, int]) -> int:
    """The narrowest a column gets: a whole one its min_width; one that wraps WRAPPED_MIN at most, unless its table
    asked for more (min_width)."""
    if column.no_wrap:
        return column.min_width or 1
    return max(column.min_width or 0, min(widest[id(column)], WRAPPED_MIN))


def _share_out(table: Table, widest: dict[int, int], width: int) -> None:
    """Give the wrapping columns what the whole ones leave of `width`, in proportion to what each lacks of its
    widest value. Rich would shrink the widest first and then grow it back to its min_width, past `width`."""
    wrapping = [c for c in table.columns if not c.no_wrap]
    lacking = [widest[id(c)] - _floor(c, widest) for c in wrapping]
    spare = width - _least_width(table, widest)
    if spare >= sum(lacking):
        return  # every column at its widest
    for column, lacks in zip(wrapping, lacking, strict=True):
        column.width = _floor(column, widest) + spare * lacks // sum(lacking)
