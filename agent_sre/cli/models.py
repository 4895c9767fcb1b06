"""`agent-sre models`: the model registry — list versions, show one, promote one, roll production back.

Traffic follows the registry's production version whenever no rollout splits it, so `promote` and `rollback`
change what serves new incidents at once. While a rollout runs they are refused: use `agent-sre rollout`.
"""

from __future__ import annotations

import getpass
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn, TypeVar

import typer
from rich.table import Table

from agent_sre.cli.common import get_settings
from agent_sre.cli.output import Format, OutputOption, emit, fit, make_console

if TYPE_CHECKING:
    from agent_sre.cli.views import ModelDetails
    from agent_sre.models.registry import RegistryIndex
    from agent_sre.registry import Registry

app = typer.Typer(help="The model registry: versions, stages and their history.", no_args_is_help=True)
console = make_console()
T = TypeVar("T")
STORE_TIMEOUT_S = 5.0
BY_HELP = "who asks (recorded in the stage history); default: your login name"


def _fail(message: str) -> NoReturn:
    console.print(f"[red]error:[/] {message}")
    raise typer.Exit(1)


def registry_call(action: Callable[[Registry], T]) -> T:
    """Run `action` on the configured registry; refusals and an unreachable store become one-line errors."""
    import urllib3
    from minio.error import S3Error

    from agent_sre.registry import Registry, RegistryError

    settings = get_settings()
    try:
        return action(Registry.from_settings(settings, timeout_s=STORE_TIMEOUT_S))
    except RegistryError as exc:
        _fail(str(exc))
    except S3Error as exc:
        _fail(f"the object store refused: {exc.code}: {exc.message}")
    except (OSError, urllib3.exceptions.HTTPError) as exc:
        _fail(f"cannot reach the object store at {settings.s3_endpoint} ({exc}); is `agent-sre dev up` running?")


@app.command("list")
def list_versions(output: OutputOption = Format.table) -> None:
    """Every registered version with its stage and its last stage change."""
    index = registry_call(lambda r: r.index())
    emit(output, index, lambda: _print_index(index))


def _print_index(index: RegistryIndex) -> None:
    rows = []
    for version, entry in sorted(index.versions.items(), key=lambda kv: kv[1].history[-1].at, reverse=True):
        last = entry.history[-1]
        rows.append((version, entry.policy, entry.stage, f"{last.at:%Y-%m-%d %H:%M}", last.by, last.reason))
    table = Table(title="model versions")
    for col in ("version", "policy", "stage", "since", "by"):  # whole, so a version can be copied
        table.add_column(col, no_wrap=True)
    table.add_column("why", overflow="fold")  # the reason wraps in what the others leave
    for *head, stage, since, by, why in rows:
        style = {"production": "bold green", "canary": "yellow", "rolled_back": "red"}.get(stage, "")
        table.add_row(*head, f"[{style}]{stage}[/]" if style else stage, since, by, why)
    fit(console, table)


@app.command("show")
def show(version: str = typer.Argument(..., metavar="VERSION"), output: OutputOption = Format.table) -> None:
    """A version's card (parent, training request, data, files, evaluation) and its stage history."""
    from agent_sre.cli.views import ModelDetails

    v = registry_call(lambda r: r.get(version))
    details = ModelDetails(**dict(v), evaluation=registry_call(lambda r: r.eval_results(version)))
    emit(output, details, lambda: _print_details(details))


def _print_details(v: ModelDetails) -> None:
    from agent_sre.cli.episodes import outcome_table, print_outcomes

    card = v.card
    table = Table(show_header=False, title=f"model {card.version}")
    table.add_row("stage", v.stage)
    table.add_row("policy", card.policy)
    table.add_row("parent", card.parent or "-")
    table.add_row("created", f"{card.created_at:%Y-%m-%d %H:%M:%S %Z} by {card.created_by}")
    size = sum(f.bytes for f in card.files)
    table.add_row("files", f"{len(card.files)} ({size / 1e6:.1f} MB)" if card.files else "none (rule-based)")
    for f in card.files:
        table.add_row("", f"{f.path}  {f.bytes} B  sha256 {f.sha256[:16]}…")
    table.add_row("training data", f"{len(card.data_manifest)} item(s)" if card.data_manifest else "-")
    for item in card.data_manifest:
        rows = f"  {item.rows} rows" if item.rows is not None else ""
        table.add_row("", f"{item.uri}{rows}  sha256 {item.sha256[:16]}…")
    table.add_row("training request", json.dumps(card.training_request) if card.training_request else "-")
    console.print(table)
    for suite, results in v.evaluation.items():
        print_outcomes(console, outcome_table(results, f"evaluation · {suite}", "simulated"))
    history = Table(title="stage history")
    for col in ("when", "from", "to", "by", "why"):
        history.add_column(col)
    for c in v.history:
        history.add_row(f"{c.at:%Y-%m-%d %H:%M:%S}", c.from_stage or "-", c.to_stage, c.by, c.reason)
    console.print(history)


@app.command("promote")
def promote(version: str = typer.Argument(..., metavar="VERSION"),
            reason: str = typer.Option(..., "--reason", help="why (recorded in the stage history)"),
            by: str = typer.Option(None, "--by", help=BY_HELP)) -> None:
    """Make VERSION production now (no rollout); the current production is archived."""
    before = registry_call(lambda r: r.production())
    if before.version == version:
        console.print(f"{version} is already production")
        return
    registry_call(lambda r: r.promote(version, by=by or getpass.getuser(), reason=reason))
    console.print(f"{version} is production; {before.version} archived. New incidents go to {version}.")


@app.command("rollback")
def rollback(reason: str = typer.Option(..., "--reason", help="why (recorded in the stage history)"),
             by: str = typer.Option(None, "--by", help=BY_HELP)) -> None:
    """Production → rolled_back, and the version it replaced back to production."""
    old, restored = registry_call(lambda r: r.rollback(by=by or getpass.getuser(), reason=reason))
    console.print(f"{old} rolled back; {restored} is production again. New incidents go to {restored}.")
