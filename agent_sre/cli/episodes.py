"""`agent-sre episodes run`: a batch of simulated incidents through Temporal, with a summary per fault type."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from agent_sre.cli.common import POLICY_HELP, fail, policy_ref, run_with_client
from agent_sre.cli.output import Format, OutputOption, emit, fit, make_console

if TYPE_CHECKING:
    from rich.console import Console
    from temporalio.client import Client

    from agent_sre.config import Settings
    from agent_sre.models.episode import EpisodeResult, OutcomeStats

app = typer.Typer(help="Simulated incidents: stage-1 data and evaluation.", no_args_is_help=True)
console = make_console()
UNRESOLVED_LISTED = 10
# Time to mitigate is measured on one of two clocks, and each table says which: an episode through Temporal (`episodes
# run`, the demo's batch, production) on the wall clock; an evaluation, played in-process, on the simulator's own
# clock, where each action costs simulated seconds (docs/evaluation.md). The two do not compare.
Clock = Literal["wall", "simulated"]
TTM_HEADER: dict[Clock, str] = {"wall": "TTM wall s", "simulated": "TTM sim s"}
CLOCK_NOTE: dict[Clock, str] = {
    "wall": "TTM wall s: mean time to mitigate in wall-clock seconds, through Temporal and the simulator",
    "simulated": "TTM sim s: mean time to mitigate in simulated seconds (an in-process evaluation, actions priced "
                 "in the simulator's clock); not comparable with wall-clock seconds"}


# Left out in this order where a terminal is too narrow for every figure (80 columns keep five of them).
OPTIONAL_FIGURES = ("invalid", "wrote", "steps", "harmful", "escalated")


def outcome_headers(clock: Clock) -> tuple[str, ...]:
    """The figures' headers, time to mitigate labelled with its clock."""
    return ("success", TTM_HEADER[clock], "steps", "wrote", "false pos.", "escalated", "harmful", "invalid", "reward")


def outcome_cells(r: OutcomeStats, ttm_format: str = ".1f") -> list[str]:
    """One row of figures under `outcome_headers`, as every outcome table prints them."""
    ttm = "-" if r.mean_time_to_mitigate_s is None else format(r.mean_time_to_mitigate_s, ttm_format)
    wrote = "-" if r.write_rate is None else f"{r.write_rate:.0%}"
    return [f"{r.success_rate:.0%}", ttm, f"{r.mean_steps:.1f}", wrote, f"{r.false_positive_rate:.0%}",
            f"{r.escalation_rate:.0%}", f"{r.harmful_rate:.0%}", f"{r.invalid_action_rate:.0%}",
            f"{r.mean_reward:+.2f}"]


def outcome_table(rows: Sequence[OutcomeStats], title: str, clock: Clock) -> Table:
    table = Table(title=title, caption=CLOCK_NOTE[clock])
    for col in ("fault", "n", *outcome_headers(clock)):
        table.add_column(col, justify="left" if col == "fault" else "right", no_wrap=col != "fault",
                         overflow="fold")
    for r in rows:
        table.add_row(r.group, str(r.episodes), *outcome_cells(r), end_section=r.group == "all")
    return table


def print_outcomes(console: Console, table: Table) -> None:
    """An outcome table in the terminal's width: figures whole, the least read ones left out where they do not fit."""
    fit(console, table, optional=OPTIONAL_FIGURES, elsewhere="a wider terminal shows them")


@app.command("run")
def run(
    scenarios: Path = typer.Option(None, "--scenarios", help="scenario file or directory (default: the catalog)"),
    n: int = typer.Option(20, "--n", min=1, help="number of episodes"),
    policy: str = typer.Option("runbook", "--policy", help=POLICY_HELP),
    concurrency: int = typer.Option(8, "--concurrency", min=1),
    output: OutputOption = Format.table,
) -> None:
    """Run N simulated incidents (scenarios cycled) and print success, time-to-mitigate, false positives
    (`-o json|yaml`: every episode's result)."""
    from agent_sre.episodes import run_episodes, summarize
    from agent_sre.scenarios import default_catalog, load_scenarios

    try:
        loaded = load_scenarios(scenarios or default_catalog())
    except (ValueError, OSError) as exc:  # a scenario file that does not parse or validate
        fail(str(exc))
    ref = policy_ref(policy)

    async def go(client: Client, settings: Settings) -> None:
        progress_to = console if output is Format.table else make_console(stderr=True)  # stdout is the data's
        with Progress(TextColumn("[bold]episodes"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=progress_to) as progress:
            task = progress.add_task("episodes", total=n)
            results = await run_episodes(client, settings, loaded, n, ref, concurrency,
                                         on_done=lambda _: progress.advance(task))

        def table() -> None:
            print_outcomes(console, outcome_table(summarize(results), f"{n} simulated incidents · policy {policy}",
                                                  "wall"))
            print_unresolved(results)

        emit(output, results, table)

    run_with_client(go)


def print_unresolved(results: Sequence[EpisodeResult], most: int = UNRESOLVED_LISTED) -> None:
    """Name the episodes that failed, so the next command is reading what the agent did in one of them."""
    failed = [r for r in results if r.outcome.outcome != "resolved"]
    if not failed:
        return
    console.print(f"not resolved ({len(failed)}); what the agent did: agent-sre incident steps ID")
    for r in failed[:most]:
        console.print(f"  {r.outcome.workflow_id}  {r.outcome.outcome}, {r.outcome.termination}", highlight=False)
    if len(failed) > most:
        console.print(f"  … and {len(failed) - most} more")
