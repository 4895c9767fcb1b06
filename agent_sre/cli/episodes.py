"""`agent-sre episodes run`: a batch of simulated incidents through Temporal, with a summary per fault type."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from agent_sre.cli.common import POLICY_HELP, fail, policy_ref, run_with_client
from agent_sre.cli.output import make_console

if TYPE_CHECKING:
    from temporalio.client import Client

    from agent_sre.config import Settings
    from agent_sre.models.episode import EpisodeResult, OutcomeStats

app = typer.Typer(help="Simulated incidents: stage-1 data and evaluation.", no_args_is_help=True)
console = make_console(min_width=110)  # tables stay readable in logs and CI, not only in terminals
UNRESOLVED_LISTED = 10
OUTCOME_HEADERS = ("success", "TTM s", "steps", "wrote", "false pos.", "escalated", "harmful", "invalid", "reward")


def outcome_cells(r: OutcomeStats, ttm_format: str = ".1f") -> list[str]:
    """One row of figures under OUTCOME_HEADERS, as every outcome table prints them."""
    ttm = "-" if r.mean_time_to_mitigate_s is None else format(r.mean_time_to_mitigate_s, ttm_format)
    wrote = "-" if r.write_rate is None else f"{r.write_rate:.0%}"
    return [f"{r.success_rate:.0%}", ttm, f"{r.mean_steps:.1f}", wrote, f"{r.false_positive_rate:.0%}",
            f"{r.escalation_rate:.0%}", f"{r.harmful_rate:.0%}", f"{r.invalid_action_rate:.0%}",
            f"{r.mean_reward:+.2f}"]


def outcome_table(rows: Sequence[OutcomeStats], title: str) -> Table:
    table = Table(title=title)
    for col in ("fault", "n", *OUTCOME_HEADERS):
        table.add_column(col, justify="left" if col == "fault" else "right", no_wrap=True)
    for r in rows:
        table.add_row(r.group, str(r.episodes), *outcome_cells(r), end_section=r.group == "all")
    return table


@app.command("run")
def run(
    scenarios: Path = typer.Option(None, "--scenarios", help="scenario file or directory (default: the catalog)"),
    n: int = typer.Option(20, "--n", min=1, help="number of episodes"),
    policy: str = typer.Option("runbook", "--policy", help=POLICY_HELP),
    concurrency: int = typer.Option(8, "--concurrency", min=1),
) -> None:
    """Run N simulated incidents (scenarios cycled) and print success, time-to-mitigate, false positives."""
    from agent_sre.episodes import run_episodes, summarize
    from agent_sre.scenarios import default_catalog, load_scenarios

    try:
        loaded = load_scenarios(scenarios or default_catalog())
    except (ValueError, OSError) as exc:  # a scenario file that does not parse or validate
        fail(str(exc))
    ref = policy_ref(policy)

    async def go(client: Client, settings: Settings) -> None:
        with Progress(TextColumn("[bold]episodes"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console) as progress:
            task = progress.add_task("episodes", total=n)
            results = await run_episodes(client, settings, loaded, n, ref, concurrency,
                                         on_done=lambda _: progress.advance(task))
        console.print(outcome_table(summarize(results), f"{n} simulated incidents · policy {policy}"))
        print_unresolved(results)

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
