"""Every command's --help: it renders, it says what the command does, and a docstring wrapped for the source reads
as whole paragraphs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import typer.rich_utils
from typer.main import get_command
from typer.testing import CliRunner

from agent_sre.cli import app


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, command
    if hasattr(command, "list_commands"):
        ctx = type(command).context_class(command)
        for name in command.list_commands(ctx):
            yield from _commands(command.get_command(ctx, name), (*path, name))


def test_every_command_says_what_it_does_and_its_help_reads_in_whole_paragraphs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(typer.rich_utils, "MAX_WIDTH", 1000)  # every paragraph fits one line
    runner = CliRunner()
    checked = 0
    for path, command in _commands(get_command(app)):
        result = runner.invoke(app, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert command.help, f"`agent-sre {' '.join(path)}` has no help text"
        lines = {line.strip() for line in result.output.splitlines()}
        for paragraph in (command.help or "").split("\n\n"):
            text = " ".join(paragraph.split()).replace("`", "")
            assert any(text in line for line in lines), (path, text, result.output)
            checked += 1
    assert checked > 40  # every area's commands were reached
