"""`agent-sre rollout`: start a model rollout, follow it, and steer it (promote, pause, resume, abort, rollback).

There is one rollout at a time (workflow id `model-rollout`). The controls are Temporal updates: the workflow
checks each one and refuses, with the reason, what cannot apply now. `rollback` is a signal, the same one
Alertmanager and `temporal workflow signal --workflow-id model-rollout --name rollback --input '"why"'` send.
"""

from __future__ import annotations

import asyncio
import getpass
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from agent_sre.cli.common import fail as _fail
from agent_sre.cli.common import run_with_client
from agent_sre.cli.models import console as models_console
from agent_sre.cli.models import registry_call
from agent_sre.cli.output import Format, OutputOption, emit

if TYPE_CHECKING:
    from temporalio.client import Client
    from temporalio.workflow import UpdateMethodMultiParam

    from agent_sre.config import Settings
    from agent_sre.models.rollout import RolloutControl, RolloutStatus
    from agent_sre.workflows.rollout import ModelRolloutWorkflow

    Control = UpdateMethodMultiParam[[ModelRolloutWorkflow, RolloutControl], RolloutStatus]  # one of its updates

app = typer.Typer(help="Roll a model version out: A/B test, gradual traffic, automatic rollback.",
                  no_args_is_help=True)
console = models_console
BY_HELP = "who decides (recorded in the rollout's history); default: your login name"



def _run(action: Callable[[Client, Settings], Awaitable[None]]) -> None:
    """Connect, run, and turn Temporal's refusals into one-line errors."""
    from temporalio.client import WorkflowQueryFailedError, WorkflowUpdateFailedError
    from temporalio.service import RPCError, RPCStatusCode

    try:
        run_with_client(action)
    except WorkflowUpdateFailedError as exc:
        _fail(f"refused: {exc.cause.message if hasattr(exc.cause, 'message') else exc.cause}")
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND or "already completed" in exc.message:
            _fail("no rollout is running (`agent-sre rollout start` begins one)")
        _fail(f"Temporal refused: {exc.message}")
    except WorkflowQueryFailedError as exc:
        _fail(f"the rollout did not answer: {exc}")


@app.command("start")
def start(
    candidate: str = typer.Option(..., "--candidate", help="the registered candidate version"),
    baseline: str = typer.Option(None, "--baseline", help="default: the production version"),
    plan: str = typer.Option("default", "--plan", help="default, fast-canary, or a plan YAML file"),
    reason: str = typer.Option("", "--reason"),
    notify: str = typer.Option(None, "--notify", help="URL to POST each rollback event to"),
    by: str = typer.Option(None, "--by", help=BY_HELP),
) -> None:
    """Start rolling CANDIDATE out against production; the plan and the registry are checked first."""
    from agent_sre.models.rollout import RolloutRequest, format_duration
    from agent_sre.rollout.client import RolloutRunningError, preflight, start_rollout
    from agent_sre.rollout.plans import PlanError, load_plan

    try:
        chosen = load_plan(plan)
    except PlanError as exc:
        _fail(str(exc))
    try:
        against = registry_call(lambda r: preflight(r, candidate, baseline))
        request = RolloutRequest(candidate=candidate, baseline=against, plan=chosen, reason=reason,
                                 notify_url=notify, requested_by=by or getpass.getuser())
    except (RolloutRunningError, ValueError) as exc:
        _fail(str(exc))

    async def go(client: Client, settings: Settings) -> None:
        try:
            handle = await start_rollout(client, request, settings)
        except RolloutRunningError as exc:
            _fail(str(exc))
        waits = sum((s.duration for s in chosen.steps if s.kind in ("bake", "ab_test")), timedelta())
        console.print(f"rollout of {candidate} against {against} started as {handle.id}: plan {chosen.name}, "
                      f"{len(chosen.steps)} steps, {format_duration(waits)} of scheduled waits")
        console.print(f"follow it: agent-sre rollout status · {settings.temporal_ui_url}/namespaces/"
                      f"{settings.temporal_namespace}/workflows/{handle.id}")

    _run(go)


@app.command("status")
def status(output: OutputOption = Format.table) -> None:
    """Where the rollout stands: step, weight, time left, the latest analysis and the decisions so far."""
    from agent_sre.rollout.client import ROLLOUT_WORKFLOW_ID
    from agent_sre.workflows.rollout import ModelRolloutWorkflow

    async def show(client: Client, settings: Settings) -> None:
        st = await client.get_workflow_handle(ROLLOUT_WORKFLOW_ID).query(ModelRolloutWorkflow.status)
        emit(output, st, lambda: print_status(st))

    _run(show)


def print_status(st: RolloutStatus) -> None:
    from agent_sre.models.rollout import describe_step, format_duration

    table = Table(show_header=False, title=f"rollout {st.rollout_id}")
    table.add_row("candidate / baseline", f"{st.candidate} / {st.baseline} · plan {st.plan}")
    table.add_row("phase", st.phase + (f": {st.pause_reason}" if st.pause_reason else ""))
    if st.step is not None:
        table.add_row("step", f"{st.step_index + 1}/{st.steps}: {describe_step(st.step)}")
    table.add_row("weight", f"{st.weight:g}% of new incidents to {st.candidate}")
    if st.time_left_s is not None:
        table.add_row("time left in step", format_duration(timedelta(seconds=round(st.time_left_s))))
    if st.latest_guardrail is not None:
        g = st.latest_guardrail
        table.add_row("guardrails", f"{'[red]BREACHED[/] ' if g.breached else ''}{g.reason} "
                                    f"(checked {g.checked_at:%Y-%m-%d %H:%M})")
    if st.latest_analysis is not None:
        a = st.latest_analysis
        table.add_row("latest analysis", f"{a.judgement} · window {a.window_start:%Y-%m-%d %H:%M} → "
                                         f"{a.window_end:%Y-%m-%d %H:%M} · {a.candidate.incidents} vs "
                                         f"{a.baseline.incidents} incidents")
        for line in a.reasons:
            table.add_row("", line)
    table.add_row("runs", f"{st.runs} (continue-as-new)")
    console.print(table)
    decisions = Table(title="decisions")
    for col in ("when", "step", "action", "by", "why"):
        decisions.add_column(col)
    for d in st.decisions:
        decisions.add_row(f"{d.at:%Y-%m-%d %H:%M:%S}", str(d.step + 1) if d.step is not None else "-", d.action,
                          d.by, d.reason)
    console.print(decisions)


ACTED_ON_BY_THE_LOOP = frozenset({"promote", "promote_full", "abort"})  # the update only wakes the rollout
SETTLE_S = 5.0


def _control(pick: Callable[[type[ModelRolloutWorkflow]], Control], reason: str, by: str | None) -> None:
    """Send the update `pick` names on the workflow class (a function of it: the class is imported only here)."""
    from agent_sre.models.rollout import RolloutControl, describe_step
    from agent_sre.rollout.client import ROLLOUT_WORKFLOW_ID
    from agent_sre.workflows.rollout import ModelRolloutWorkflow

    update = pick(ModelRolloutWorkflow)
    name = getattr(update, "__name__")  # noqa: B009 - the method's, which is the update's: the protocol type does not say so

    async def send(client: Client, settings: Settings) -> None:
        handle = client.get_workflow_handle(ROLLOUT_WORKFLOW_ID)
        st = await handle.execute_update(update, RolloutControl(by=by or getpass.getuser(), reason=reason))
        if name in ACTED_ON_BY_THE_LOOP:  # show where it went, not where it was
            st = await _moved_on(lambda: handle.query(ModelRolloutWorkflow.status), st)
        console.print(f"{name}: accepted · {st.phase}"
                      + (f" · step {st.step_index + 1}/{st.steps}: {describe_step(st.step)}" if st.step else ""))

    _run(send)


async def _moved_on(status: Callable[[], Awaitable[RolloutStatus]], before: RolloutStatus) -> RolloutStatus:
    """The rollout's status once its loop has acted on a control (it wakes at once), or `before` after SETTLE_S."""
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        now = await status()
        if (now.phase, now.step_index) != (before.phase, before.step_index):
            return now
    return before


REASON = typer.Option("", "--reason", help="why (recorded in the rollout's history)")
BY = typer.Option(None, "--by", help=BY_HELP)


@app.command("promote")
def promote(full: bool = typer.Option(False, "--full", help="skip every remaining step: 100% and production"),
            reason: str = REASON, by: str = BY) -> None:
    """End the current step now and go on to the next (with --full: finish the rollout now)."""
    _control(lambda w: w.promote_full if full else w.promote, reason, by)


@app.command("pause")
def pause(reason: str = REASON, by: str = BY) -> None:
    """Hold the rollout where it is; timers stop, guardrails keep watching."""
    _control(lambda w: w.pause, reason, by)


@app.command("resume")
def resume(reason: str = REASON, by: str = BY) -> None:
    """Go on where the rollout was paused: the step keeps the time it had left; a pause for an inconclusive analysis
    gets a fresh round of extensions."""
    _control(lambda w: w.resume, reason, by)


@app.command("abort")
def abort(reason: str = REASON, by: str = BY) -> None:
    """Stop the rollout: all traffic to the baseline, the candidate back to the candidate stage."""
    _control(lambda w: w.abort, reason, by)


@app.command("retry")
def retry(reason: str = REASON, by: str = BY) -> None:
    """Withdraw an abort the rollout has not carried out yet (until then every promote is refused)."""
    _control(lambda w: w.retry, reason, by)


@app.command("rollback")
def rollback(reason: str = typer.Option(..., "--reason", help="why (recorded and announced)"),
             by: str = BY) -> None:
    """Roll back now: all traffic to the baseline, the candidate marked rolled_back, a rollback event."""
    from agent_sre.rollout.client import ROLLOUT_WORKFLOW_ID
    from agent_sre.workflows.rollout import ModelRolloutWorkflow

    async def send(client: Client, settings: Settings) -> None:
        handle = client.get_workflow_handle(ROLLOUT_WORKFLOW_ID)
        await handle.signal(ModelRolloutWorkflow.rollback, f"{reason} (by {by or getpass.getuser()})")
        console.print("rollback requested; `agent-sre rollout status` shows when it is done")

    _run(send)
