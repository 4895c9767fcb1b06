"""`agent-sre demo` (what `make demo` runs): the whole loop that exists so far, on the embedded stack."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING
from urllib.parse import quote

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from agent_sre.cli import dev
from agent_sre.cli.common import log_to_file
from agent_sre.cli.episodes import (
    CLOCK_NOTE,
    console,
    outcome_cells,
    outcome_headers,
    outcome_table,
    print_outcomes,
    print_unresolved,
)
from agent_sre.cli.output import fit

DEMO_SFT_STEPS = 4
DEMO_GRPO_STEPS = 1
DEMO_EVAL_SCENARIOS = 4

if TYPE_CHECKING:
    from temporalio.client import Client

    from agent_sre.config import Settings
    from agent_sre.models.episode import OutcomeStats
    from agent_sre.models.learning import DrillReport
    from agent_sre.models.rollout import Decision
    from agent_sre.models.scenario import Scenario
    from agent_sre.models.training import TrainingStatus
    from agent_sre.registry import Registry
    from agent_sre.rollout.demo import DemoRollout


def demo(
    n: int = typer.Option(50, "--n", min=1, help="simulated incidents to run"),
    concurrency: int = typer.Option(10, "--concurrency", min=1),
    training: bool = typer.Option(True, "--training/--no-training",
                                  help="a short training cycle of SmolLM2 on those incidents (10-20 minutes "
                                       "on 2 CPU cores)"),
    rollouts: bool = typer.Option(True, "--rollouts/--no-rollouts",
                                  help="a compressed rollout and a rollback (a few minutes)"),
    drill: bool = typer.Option(True, "--drill/--no-drill",
                               help="end with a production drill: the mix shifts, the learning schedule runs a cycle "
                                    "on what production served (about 5 minutes on 2 CPU cores)"),
) -> None:
    """The whole loop on the embedded stack, in minutes: incidents, training, a rollout, a production drill.

    Bring up the stack, run a batch of simulated incidents with the runbook policy through Temporal, print the
    outcome table; train SmolLM2 on those episodes (a small SFT, a GRPO step) and compare it with the untrained
    model; roll a new version out in minutes and roll a degraded one back, with incidents routed by the rollout;
    then a production drill, in which a scheduled learning cycle trains on what production served after its mix
    shifted. The stack is left running."""
    from agent_sre import stack
    from agent_sre.config import get_settings
    from agent_sre.episodes import run_episodes, summarize
    from agent_sre.models.remediation import PolicyRef
    from agent_sre.registry import Registry, RegistryError
    from agent_sre.rollout.client import ROLLOUT_WORKFLOW_ID, RolloutRunningError
    from agent_sre.rollout.demo import reliably_resolved
    from agent_sre.scenarios import default_catalog, load_scenarios
    from agent_sre.temporal import connect
    from agent_sre.workers.main import build_workers

    settings = get_settings()
    log = log_to_file(settings, "demo")
    before = stack.disk_usage(settings.data_dir)
    dev.up(only=None)
    console.print(f"Logs and library warnings: {log}")
    scenarios = load_scenarios(default_catalog())
    console.print(f"\n[bold]1. Incident remediation[/] — {n} simulated incidents from {len(scenarios)} scenarios "
                  f"({len({s.fault for s in scenarios})} fault types), runbook policy, {concurrency} at a time")

    async def run() -> None:
        client = await connect(settings)
        async with AsyncExitStack() as workers:
            for worker in build_workers(client, settings):
                await workers.enter_async_context(worker)
            began = time.monotonic()
            with Progress(TextColumn("[bold]episodes"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                          console=console) as progress:
                task = progress.add_task("episodes", total=n)
                results = await run_episodes(client, settings, scenarios, n, PolicyRef(name="runbook"), concurrency,
                                             on_done=lambda _: progress.advance(task))
            stats = summarize(results)
            print_outcomes(console, outcome_table(stats, f"{n} incidents in {time.monotonic() - began:.0f}s · "
                                                         "policy runbook-v1", "wall"))
            print_unresolved(results, most=3)
            trained = await _training(client, settings) if training else None
            registry = Registry.from_settings(settings)
            if rollouts:
                try:
                    await _rollouts(client, settings, registry, reliably_resolved(scenarios, stats), concurrency)
                except (RolloutRunningError, RegistryError) as exc:
                    console.print(f"[red]error:[/] the rollout demo cannot run: {exc}")
                    raise typer.Exit(1) from exc
            if drill:
                await drill_stage(client, settings, registry, trained, scenarios, stats, concurrency)

    asyncio.run(run())
    ui = f"{settings.temporal_ui_url}/namespaces/{settings.temporal_namespace}/workflows"
    console.print(f"\nTrajectories: s3://{settings.s3_bucket}/trajectories/ at {settings.s3_endpoint}")
    console.print(f"Temporal UI:  {_listing(ui, 'SimulatedIncidentWorkflow')}", soft_wrap=True)
    if training:
        console.print(f"Training:     {_listing(ui, 'TrainingCycleWorkflow')}", soft_wrap=True)
    if rollouts:
        console.print(f"Rollouts:     {_listing(ui, 'ModelRolloutWorkflow')} · the latest: {ui}/{ROLLOUT_WORKFLOW_ID}",
                      soft_wrap=True)
    if drill:
        console.print(f"Learning:     {_listing(ui, 'ContinuousLearningWorkflow')} (the drill's scheduled cycles)",
                      soft_wrap=True)
    console.print(_disk_note(settings, before))
    console.print("The stack is still running; stop it with `agent-sre dev down`, then `agent-sre dev clean` "
                  "removes the data.")


def _disk_note(settings: Settings, before: int) -> str:
    """How much the data dir grew during the demo, and what it holds: the data outlives the demo, a few GB of it.
    (Growth, not bytes written: the object store reclaims deleted objects' space while the demo runs.)"""
    from agent_sre import stack
    from agent_sre.cli.dev import human_bytes

    data = settings.data_dir.resolve()
    parts = {"S3 data": data / "seaweedfs", "models": settings.models_dir.resolve(), "logs": data / "logs"}
    sizes = " · ".join(f"{name} {human_bytes(stack.disk_usage(path))}" for name, path in parts.items())
    wrote = stack.disk_usage(data) - before
    return f"Disk:         {data} grew by {human_bytes(max(wrote, 0))} and holds {sizes}"


async def _training(client: Client, settings: Settings) -> str | None:
    """A training cycle on a budget of minutes, through the same TrainingCycleWorkflow as `agent-sre train`.
    Returns the trained version, for the drill to continue from."""
    from datetime import UTC, datetime

    from temporalio.client import WorkflowFailureError

    from agent_sre.cli.train import follow
    from agent_sre.models.training import TrainingRequest
    from agent_sre.workflows.training import TrainingCycleWorkflow

    version = f"demo-sft-grpo-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    request = TrainingRequest.model_validate({
        "algorithm": "sft+grpo", "base": "base", "version": version, "requested_by": "make demo",
        "reason": "the demo's short training cycle",
        "data": {"trajectories": {"since": datetime.now(UTC).date().isoformat(), "policies": ["runbook"],
                                  "limit": 24}},
        "sft": {"max_steps": DEMO_SFT_STEPS, "learning_rate": 1e-4, "max_length": 6144},
        "grpo": {"max_steps": DEMO_GRPO_STEPS, "group_size": 2, "max_turns": 10, "max_new_tokens": 64,
                 "learning_rate": 1e-5},
        "evaluation": {"limit": DEMO_EVAL_SCENARIOS, "max_turns": 10, "max_new_tokens": 64}})
    console.print(f"\n[bold]2. Training cycle[/] — SmolLM2-135M-Instruct → {version}: SFT ({DEMO_SFT_STEPS} "
                  f"steps) on the runbook's resolved and escalated episodes above, then GRPO ({DEMO_GRPO_STEPS} "
                  f"step, 2 rollouts) on the simulator, then both models on {DEMO_EVAL_SCENARIOS} held-out scenarios "
                  "and the gate. A budget that fits minutes on a CPU: it shows the loop, not a trained agent "
                  "(docs/benchmarks.md has the longer run).")
    workflow_id = f"training-{version}"
    handle = await client.start_workflow(TrainingCycleWorkflow.run, request, id=workflow_id,
                                         task_queue=settings.queue_training,
                                         static_summary=f"make demo: train {version}")
    await follow(client, workflow_id, final=False)
    try:
        status = await handle.result()
    except WorkflowFailureError as exc:
        console.print(f"[red]error:[/] the training cycle failed: {getattr(exc.cause, 'message', None) or exc.cause}")
        raise typer.Exit(1) from exc
    print_outcomes(console, _before_after(status))
    return status.candidate


def _before_after(status: TrainingStatus) -> Table:
    gate = status.gate
    verdict = (f"gate {'passed' if gate.passed else 'failed'}: {status.candidate} is {gate.stage}" if gate is not None
               else f"ended {status.phase}" + (f": {status.stop_reason}" if status.stop_reason else ""))
    table = Table(title=f"before / after training (held-out scenarios) · {verdict}",
                  caption=f"before: {status.base} · after: {status.candidate or '?'}\n{CLOCK_NOTE['simulated']} "
                          "(the batch above: wall-clock)")  # long names: not in a column
    for col in ("model", "episodes", *outcome_headers("simulated")):
        table.add_column(col, justify="left" if col == "model" else "right", no_wrap=True)
    for label, report in zip(("after", "before"), status.evaluation, strict=False):
        table.add_row(label, str(report.overall.episodes), *outcome_cells(report.overall, ".0f"))
    return table


async def drill_stage(client: Client, settings: Settings, registry: Registry, trained: str | None,
                      scenarios: list[Scenario], stats: list[OutcomeStats], concurrency: int) -> DrillReport | None:
    """The production drill, shifting to the fault type the batch above did worst on; None when it resolved all."""
    from agent_sre.cli.drill import report_table, show_cycle, show_progress
    from agent_sre.learning import demo as drill_demo
    from agent_sre.rollout.demo import reliably_resolved

    worst = drill_demo.worst_fault(stats)
    if worst is None:
        console.print("\n[bold]5. Production drill[/] — skipped: the runbook resolved every fault type above, so "
                      "there is no fault type it handles badly to shift the mix to")
        return None
    usual = reliably_resolved(scenarios, stats)
    shifted = [s for s in scenarios if s.fault == worst]
    base = trained if trained is not None and trained in registry.index().versions else "base"
    [rate] = [r.success_rate for r in stats if r.group == worst]
    console.print(
        f"\n[bold]5. Production drill[/] — production ({registry.production().version}) serves "
        f"{drill_demo.INCIDENTS_PER_WINDOW} incidents of the fault types it resolved every time above; halfway "
        f"through, half the incidents become {worst} (resolved {rate:.0%} above). A learning Schedule every "
        f"{drill_demo.EVERY.seconds // 60} min runs ContinuousLearningWorkflow on what production served: "
        f"one off-policy step ({drill_demo.OFFPOLICY_BATCH} episodes) from {base}, candidate and parent on "
        f"{drill_demo.EVAL_SCENARIOS} held-out scenarios, then against production on re-created recent incidents; "
        "a candidate that passes goes through a compressed rollout. Then one more window of incidents.")
    report = await drill_demo.run_demo_drill(client, settings, registry, base, usual, shifted, concurrency,
                                             on_cycle=show_cycle, on_progress=show_progress)
    fit(console, report_table(report))
    for note in report.notes:
        console.print(f"[yellow]note:[/] {note}")
    console.print(f"Its learning stream: `agent-sre learn status --name {report.plan.learning.name}` (plain `learn "
                  "status` shows the default stream, continuous-learning)", soft_wrap=True)
    return report


def _listing(ui: str, workflow_type: str) -> str:
    query = quote(f'WorkflowType="{workflow_type}"')
    return f"{ui}?query={query}"


async def _rollouts(client: Client, settings: Settings, registry: Registry, traffic: list[Scenario],
                    concurrency: int) -> None:
    from agent_sre.models.rollout import describe_step
    from agent_sre.rollout.demo import (
        DEMO_PLAN,
        end_previous_demo_rollout,
        register_candidate,
        register_degraded,
        run_rollout,
    )
    from agent_sre.rollout.routing import read_table

    if (left := await end_previous_demo_rollout(client)) is not None:
        console.print(f"(aborted rollout {left}, left running by an interrupted demo)")
    plan, g, a = DEMO_PLAN, DEMO_PLAN.guardrails, DEMO_PLAN.analysis
    console.print(
        f"\nRollout plan [bold]{plan.name}[/] (weeks compressed into seconds): "
        f"{' → '.join(describe_step(s) for s in plan.steps)}; guardrails every {g.interval.seconds}s (success ≥ "
        f"{g.min_success_rate:.0%}, harmful ≤ {g.max_harmful_rate:.0%}, from {g.min_incidents} incidents); analysis "
        f"needs {a.min_samples} incidents per arm and passes within {a.success_margin:.0%} of the baseline. "
        f"Traffic: {len(traffic)} scenarios of the {len({s.fault for s in traffic})} fault types the runbook resolved "
        f"every time above, {concurrency} at a time, each routed by the rollout (no policy named).")

    candidate = await asyncio.to_thread(register_candidate, registry)
    console.print(f"\n[bold]3. Rollout of a new version[/] — {candidate}: the runbook policy registered as a new "
                  "version (a stand-in: minutes of CPU training do not make a model worth serving)")
    good = await run_rollout(client, settings, registry, candidate, traffic, concurrency=concurrency,
                             on_decision=_show_decision)
    degraded = await asyncio.to_thread(register_degraded, registry)
    console.print(f"\n[bold]4. Rollback of a degraded version[/] — {degraded}: the scripted policy without a script "
                  "(claims a fix at once, fixes nothing)")
    bad = await run_rollout(client, settings, registry, degraded, traffic, concurrency=concurrency,
                            on_decision=_show_decision)

    fit(console, _rollout_table([good, bad]))
    for r in (good, bad):
        assert r.result is not None
        console.print(f"{r.candidate}: [bold]{r.result.outcome.replace('_', ' ')}[/] — {r.result.reason}")
    production = await asyncio.to_thread(registry.production)
    table = await asyncio.to_thread(read_table, registry.client, registry.bucket)
    split = (f"{table.weight:g}% to {table.candidate.version}" if table and table.candidate
             else f"every new incident to the production version {production.version}")
    console.print(f"Registry: production is {production.version} · routing: {split} · "
                  "`agent-sre models list` shows every version's stage history")


def _show_decision(decision: Decision, demo: DemoRollout) -> None:
    served = Counter(r.outcome.model_version for r in demo.served)
    step = f"step {decision.step + 1}" if decision.step is not None else "end"
    console.print(f"  {decision.at:%H:%M:%S}  {step:<7} [bold]{decision.action}[/]: {decision.reason}  [dim]("
                  f"served so far: {demo.candidate} {served[demo.candidate]} · {demo.baseline} "
                  f"{served[demo.baseline]})[/]")


def _rollout_table(rollouts: list[DemoRollout]) -> Table:
    table = Table(title="rollouts",
                  caption="c/b: candidate/baseline, over the incidents each served during the rollout")
    for col in ("candidate", "baseline", "plan", "result", "took", "decisions", "served c/b", "success c/b"):
        table.add_column(col, no_wrap=True, justify="right" if col in ("took", "decisions") else "left")
    colour = {"succeeded": "green", "rolled_back": "red", "aborted": "yellow"}
    for r in rollouts:
        assert r.result is not None
        rates = [r.success_rate(v) for v in (r.candidate, r.baseline)]
        table.add_row(r.candidate, r.baseline, r.plan, f"[{colour[r.result.outcome]}]{r.result.outcome}[/]",
                      f"{r.wall_s:.0f}s", str(len(r.result.decisions)),
                      f"{len(r.served_by(r.candidate))} / {len(r.served_by(r.baseline))}",
                      " / ".join("-" if x is None else f"{x:.0%}" for x in rates))
    return table
