"""`agent-sre dev up | down | status`: the embedded stack (Temporal, SeaweedFS S3, cluster simulator) on this machine.

Ports and the data dir come from the AGENT_SRE_* settings; processes outlive the command and are stopped by pid.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from agent_sre.cli.common import SafeConsole
from agent_sre.cli.output import Format, OutputOption, emit

if TYPE_CHECKING:
    from agent_sre.cli.views import ComponentView
    from agent_sre.config import Settings

app = typer.Typer(
    help="The embedded dev stack: Temporal dev server, SeaweedFS S3 and the cluster simulator.",
    no_args_is_help=True,
)
console = SafeConsole()
errors = SafeConsole(stderr=True)
# The names of agent_sre.stack.COMPONENTS, written out so that --help need not import the stack (a test checks them).
COMPONENTS = ("temporal", "s3", "sim")

Only = Annotated[
    list[str] | None,
    typer.Option(
        "--only",
        help=f"Act on this component only (repeatable): {', '.join(COMPONENTS)}. Default: all.",
        show_default=False,
    ),
]


@contextmanager
def _reported_errors() -> Iterator[None]:
    """Turn stack and settings errors into a red message and exit code 1 instead of a traceback."""
    from pydantic import ValidationError

    from agent_sre import stack

    try:
        yield
    except (stack.StackError, ValidationError) as exc:
        errors.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None


def _settings() -> Settings:
    from agent_sre.config import Settings

    with _reported_errors():
        return Settings()


def _where_to_look(settings: Settings, components: list[str]) -> None:
    if "temporal" in components:
        console.print(f"Temporal UI: {settings.temporal_ui_url}", soft_wrap=True)
    if "sim" in components:
        console.print(f"kubectl:     export KUBECONFIG={settings.sim_kubeconfig.resolve()}", soft_wrap=True)


@app.command()
def up(only: Only = None) -> None:
    """Start the stack and wait until every endpoint answers; components already running are left as they are."""
    from agent_sre import stack

    settings = _settings()
    began = time.monotonic()
    with _reported_errors(), console.status("Starting the embedded stack…") as spinner:
        pending = [c.name for c in stack.select(only)]

        def ready(outcome: stack.Outcome) -> None:
            pending.remove(outcome.component)
            took = f"in {outcome.seconds:.1f}s" if outcome.state == "started" else f"(pid {outcome.pid})"
            console.print(f"[green]✓[/] {outcome.component:<9} {outcome.endpoint:<28} {outcome.state} {took}")
            if pending:
                spinner.update(f"Waiting for {', '.join(pending)}…")

        outcomes = asyncio.run(stack.up(settings, only, on_ready=ready))
    console.print(f"Stack up in {time.monotonic() - began:.1f}s (data in {settings.data_dir.resolve()}).")
    _where_to_look(settings, [o.component for o in outcomes])


@app.command()
def down(only: Only = None) -> None:
    """Stop the stack's processes by pid (SIGTERM, then SIGKILL after AGENT_SRE_STACK_STOP_TIMEOUT_S)."""
    from agent_sre import stack

    settings = _settings()
    with _reported_errors(), console.status("Stopping the embedded stack…"):
        outcomes = asyncio.run(stack.down(settings, only))
    for outcome in outcomes:
        if outcome.pid is None:
            console.print(f"[dim]-[/] {outcome.component:<9} was not running")
        else:
            took = f"in {outcome.seconds:.1f}s"
            console.print(f"[green]✓[/] {outcome.component:<9} {outcome.state} (pid {outcome.pid}) {took}")


@app.command()
def clean(yes: bool = typer.Option(False, "--yes", "-y", help="remove without asking")) -> None:
    """Remove the data dir's bulk: the S3 data (episodes, model weights), the local model copies, logs and training
    scratch (a demo leaves a few GB). The Temporal database, kubeconfig and drill reports stay. Refused while the
    stack runs: its processes hold those files open."""
    import shutil

    from agent_sre import stack

    settings = _settings()
    if alive := stack.running(settings):
        errors.print(f"[bold red]error:[/] the stack is running ({', '.join(alive)}): stop it first with "
                     "`agent-sre dev down`", highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    paths = stack.bulk(settings)
    if not paths:
        console.print(f"nothing to remove in {settings.data_dir.resolve()}")
        return
    sizes = {p: stack.disk_usage(p) for p in paths}
    for path, size in sizes.items():
        console.print(f"  {human_bytes(size):>9}  {path}", highlight=False, soft_wrap=True)
    if not yes and not typer.confirm(f"remove these ({human_bytes(sum(sizes.values()))})?"):
        raise typer.Exit(1)
    for path in paths:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    console.print(f"removed {human_bytes(sum(sizes.values()))}")


def human_bytes(size: int) -> str:
    """Decimal units, as `du --si` prints them."""
    value, unit = float(size), "B"
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            break
        value /= 1000
    return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"


@app.command()
def status(only: Only = None, output: OutputOption = Format.table) -> None:
    """Print each endpoint and whether it answers; exit code 1 when any does not."""
    from agent_sre import stack
    from agent_sre.cli.views import ComponentView

    settings = _settings()
    with _reported_errors(), console.status("Probing endpoints…"):
        rows = asyncio.run(stack.status(settings, only))
    views = [ComponentView(component=r.component, endpoint=r.endpoint, answers=r.health.answers, pid=r.pid,
                           detail=r.health.detail) for r in rows]
    emit(output, views, lambda: _print_status(settings, views))
    if not all(v.answers for v in views):
        raise typer.Exit(1)


def _print_status(settings: Settings, views: list[ComponentView]) -> None:
    table = Table("component", "endpoint", "answers", "pid", "detail", title="agent-sre dev stack")
    for v in views:
        table.add_row(v.component, v.endpoint, "[green]yes[/]" if v.answers else "[red]no[/]", str(v.pid or "-"),
                      v.detail)
    console.print(table)
    _where_to_look(settings, [v.component for v in views])
