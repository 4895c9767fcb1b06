"""What the CLI prints is printable: ids, labels and messages that came from alerts or workflow inputs cannot drive
the terminal; and the worker's /metrics listens on the loopback unless a setting says otherwise."""

from __future__ import annotations

import io

from rich.table import Table

from agent_sre import telemetry
from agent_sre.cli import common, dev, episodes, incident, models
from agent_sre.cli.common import SafeConsole, printable
from agent_sre.config import Settings, get_settings

HOSTILE = "incident-shop-\x1b]0;owned\x07\x1b[2J\r\u202egnp.exe"


def test_control_characters_are_written_out() -> None:
    assert printable(HOSTILE) == "incident-shop-\\x1b]0;owned\\x07\\x1b[2J\\x0d\\u202egnp.exe"
    assert printable("two\nlines\tand a tab") == "two\nlines\tand a tab"


def test_tables_titles_and_messages_print_no_control_character() -> None:
    out = io.StringIO()
    console = SafeConsole(file=out, width=200, force_terminal=True, highlight=False)  # rich's own escapes still work
    table = Table(title=f"incident {HOSTILE}")
    table.add_column("ID")
    table.add_row(HOSTILE)
    console.print(table)
    console.print(f"[bold]{HOSTILE}[/]")
    console.print(HOSTILE, markup=False)
    text = out.getvalue()
    assert "\x07" not in text and "\x1b[2J" not in text and "\x1b]" not in text and "\u202e" not in text
    assert text.count("incident-shop-\\x1b]0;owned\\x07\\x1b[2J\\x0d\\u202egnp.exe") == 4, text
    assert "\x1b[1m" in text  # the bold of our own markup


def test_every_cli_console_is_safe() -> None:
    for console in (common.errors, incident.console, episodes.console, models.console, dev.console, dev.errors):
        assert isinstance(console, SafeConsole)


def test_the_worker_s_metrics_listen_on_the_loopback_by_default(settings: Settings) -> None:
    assert get_settings().metrics_host == "127.0.0.1"
    server = telemetry.start_metrics_server(0)
    try:
        assert server.server_address[0] == "127.0.0.1"
    finally:
        server.shutdown()
