"""`agent-sre demo` (what `make demo` runs): the whole loop that exists so far, on the embedded stack."""

from __future__ import annotations

import asyncio
import time
from contextlib import AsyncExitStack
from urllib.parse import quote

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from agent_sre.cli import dev
from agent_sre.cli.episodes import console, outcome_table


def demo(
    n: int = typer.Option(50, "--n", min=1, help="simulated incidents to run"),
    concurrency: int = typer.Option(10, "--concurrency", min=1),
) -> None:
    """Bring up the stack, run a batch of simulated incidents with the runbook policy through Temporal,
    print the outcome table and where to look in the Temporal UI. The stack is left running."""
    from agent_sre.config import get_settings
    from agent_sre.episodes import run_episodes, summarize
    from agent_sre.models.remediation import PolicyRef
    from agent_sre.scenarios import default_catalog, load_scenarios
    from agent_sre.temporal import connect
    from agent_sre.workers.main import build_workers

    settings = get_settings()
    dev.up(only=None)
    scenarios = load_scenarios(default_catalog())
    console.print(f"\n[bold]1. Incident remediation[/] — {n} simulated incidents from {len(scenarios)} scenarios "
                  f"({len({s.fault for s in scenarios})} fault types), runbook policy, {concurrency} at a time")

    async def run() -> list:
        client = await connect(settings)
        async with AsyncExitStack() as workers:
            for worker in build_workers(client, settings):
                await workers.enter_async_context(worker)
            with Progress(TextColumn("[bold]episodes"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                          console=console) as progress:
                task = progress.add_task("episodes", total=n)
                return await run_episodes(client, settings, scenarios, n, PolicyRef(name="runbook"), concurrency,
                                          on_done=lambda _: progress.advance(task))

    began = time.monotonic()
    results = asyncio.run(run())
    wall = time.monotonic() - began
    console.print(outcome_table(summarize(results), f"{n} incidents in {wall:.0f}s · policy runbook-v1"))
    query = quote('WorkflowType="SimulatedIncidentWorkflow"')
    console.print(f"\nTrajectories: s3://{settings.s3_bucket}/trajectories/ at {settings.s3_endpoint}")
    console.print(f"Temporal UI:  {settings.temporal_ui_url}/namespaces/{settings.temporal_namespace}/workflows"
                  f"?query={query}", soft_wrap=True)
    console.print("The stack is still running; stop it with `agent-sre dev down`.")
