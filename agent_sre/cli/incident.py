"""`agent-sre incident`: start a remediation by hand, follow it, and answer it (approval, feedback, cancel).

Every command talks to Temporal through the same entry points the alert receiver uses (`agent_sre.temporal`);
ID is the remediation's workflow id, as printed by `start`/`report` and shown in the Temporal UI.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import re
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import typer
from rich.markup import escape
from rich.table import Table

from agent_sre.cli import common
from agent_sre.cli.common import POLICY_HELP, no_workflow, not_running, policy_ref, run_with_client, unpolled
from agent_sre.cli.common import fail as _fail
from agent_sre.cli.output import Format, OutputOption, emit, make_console
from agent_sre.models.endings import Outcome, Termination  # option types: typer reads them when the CLI starts

if TYPE_CHECKING:  # the commands import what they use when they run: `--help` stays quick (bench/cli_startup.py)
    from temporalio.client import Client, WorkflowExecutionDescription, WorkflowHandle

    from agent_sre.cli.steps_view import StepPrinter
    from agent_sre.cli.views import IncidentState, IncidentSummary
    from agent_sre.config import Settings
    from agent_sre.models.alert import Alert
    from agent_sre.models.episode import EpisodeRequest
    from agent_sre.models.incident import Incident, RemediationLimits
    from agent_sre.models.remediation import ApprovalDecision, IncidentOutcome, PolicyRef, RemediationStatus
    from agent_sre.models.reward import HumanFeedback
    from agent_sre.models.scenario import Scenario
    from agent_sre.models.trajectory import Trajectory

app = typer.Typer(help="Start, follow and answer remediations.", no_args_is_help=True)
console = make_console()
T = TypeVar("T")

RiskName = Literal["low", "medium", "high"]  # the write risks (models.tools.Risk)
SEARCH_VALUE = re.compile(r"^[A-Za-z0-9][-A-Za-z0-9_./]*$")  # a value safe inside a visibility query's quotes
QUERY_TIMEOUT = timedelta(seconds=10)
FOLLOW_POLL_S = 1.0
KUBECONFIG_HELP = ("the cluster to act on, as the worker sees it: a kubeconfig path or a simulator environment URL "
                   "(default: the worker's own)")

# Options shared by every way of starting a remediation.
PolicyOption = Annotated[str | None, typer.Option("--policy",
                                                  help=f"{POLICY_HELP}; default: the routing activity picks")]
KubeconfigOption = Annotated[str | None, typer.Option("--kubeconfig", help=KUBECONFIG_HELP)]
ApprovalRiskOption = Annotated[RiskName | None, typer.Option(
    "--approval-risk", help="writes at or above this risk wait for `incident approve`")]
FeedbackWindowOption = Annotated[float | None, typer.Option(
    "--feedback-window", min=0, help="seconds after the verdict during which `incident feedback` counts")]
WaitOption = Annotated[bool, typer.Option("--wait", help="wait for the outcome and print it")]


# --- ways in ----------------------------------------------------------------------------------------------------

@app.command("start")
def start(
    alert: Path = typer.Option(None, "--alert", exists=True, dir_okay=False,
                               help="an Alert JSON, or an Alertmanager v4 webhook JSON (each firing alert starts one)"),
    scenario: Path = typer.Option(None, "--scenario", exists=True, dir_okay=False,
                                  help="a scenario YAML: injected into a fresh simulated environment, then remediated"),
    name: str = typer.Option(None, "--name", help="which scenario, when the file holds several"),
    policy: PolicyOption = None,
    kubeconfig: KubeconfigOption = None,
    approval_risk: ApprovalRiskOption = None,
    feedback_window: FeedbackWindowOption = None,
    wait: WaitOption = False,
) -> None:
    """Start a remediation from an alert file or a scenario file."""
    from agent_sre.models.episode import EpisodeRequest
    from agent_sre.models.incident import Incident, RemediationLimits

    if (alert is None) == (scenario is None):
        raise typer.BadParameter("give exactly one of --alert FILE or --scenario FILE")
    ref = None if policy is None else policy_ref(policy)
    if alert is not None:
        limits = _limits(RemediationLimits(), approval_risk, feedback_window)
        incidents = [_bad_input(partial(Incident.from_alert, a, source="cli", kubeconfig=kubeconfig, limits=limits))
                     for a in _firing_alerts(alert)]
        _within_scope(incidents)
        _run(lambda client, settings: _start_incidents(client, settings, incidents, ref, wait, "incident start"))
    else:
        if kubeconfig is not None:
            raise typer.BadParameter("a scenario runs in a fresh simulated environment of its own",
                                     param_hint="--kubeconfig")
        chosen = _load_scenario(scenario, name)
        request = EpisodeRequest(scenario=chosen, policy=ref)  # None: the routing activity decides
        request.limits = _limits(request.limits, approval_risk, feedback_window)
        _run(lambda client, settings: _start_episode(client, settings, request, wait))


@app.command("report")
def report(
    text: str = typer.Argument(..., help='the problem in the user\'s words, e.g. "my checkout page keeps failing"'),
    namespace: str = typer.Option(..., "--namespace", "-n"),
    service: str = typer.Option(None, "--service", help="the service the user means, when known"),
    policy: PolicyOption = None,
    kubeconfig: KubeconfigOption = None,
    approval_risk: ApprovalRiskOption = None,
    feedback_window: FeedbackWindowOption = None,
    wait: WaitOption = False,
) -> None:
    """Start a remediation from a user's plain-language report (no alert needed)."""
    from agent_sre.models.incident import Incident, RemediationLimits

    incident = _bad_input(lambda: Incident(
        source="user_report", report=text, namespace=namespace, service=service, kubeconfig=kubeconfig,
        limits=_limits(RemediationLimits(), approval_risk, feedback_window)))
    ref = None if policy is None else policy_ref(policy)
    _within_scope([incident])
    _run(lambda client, settings: _start_incidents(client, settings, [incident], ref, wait, "incident report"))


# --- following and answering ------------------------------------------------------------------------------------

@app.command("status")
def status(workflow_id: str = typer.Argument(..., metavar="ID", help="the remediation's workflow id"),
           output: OutputOption = Format.table) -> None:
    """Where a remediation stands: phase, steps, last action, and the outcome once judged."""
    from temporalio.client import WorkflowExecutionStatus
    from temporalio.service import RPCError

    from agent_sre.cli.views import IncidentState

    async def show(client: Client, settings: Settings) -> None:
        if (found := await _remediation(client, workflow_id)) is None:
            return
        handle, desc = found
        state = IncidentState(workflow_id=handle.id, workflow_type=desc.workflow_type,
                              execution_status=desc.status.name if desc.status else "?", started_at=desc.start_time)
        if (why := await unpolled(client, desc.task_queue)) is not None:  # a query would wait 30 s for nobody
            state.status_unknown = why
        else:
            try:
                state.status = await _status(handle)
            except RPCError as e:
                state.status_unknown = f"no answer to the status query: {e.message} (is a worker running?)"
        if desc.status == WorkflowExecutionStatus.RUNNING:
            state.waiting_on, state.failing_workflow_task_attempt = _waiting_on(desc)
        elif desc.status == WorkflowExecutionStatus.COMPLETED:
            state.outcome = await _outcome(client, handle.id)
        elif desc.status is not None:
            state.ended = await _why_it_ended(handle)
        emit(output, state, lambda: _print_state(state))

    _run(show, not_found=no_workflow("workflow", workflow_id))


def _print_state(state: IncidentState) -> None:
    table = Table(show_header=False, title=f"incident {state.workflow_id}")
    table.add_row("workflow", f"{state.workflow_type} · {state.execution_status}")
    table.add_row("started", f"{state.started_at:%Y-%m-%d %H:%M:%S %Z}")
    if state.status_unknown is not None:
        table.add_row("status", f"[yellow]not known: {escape(state.status_unknown)}[/]")
    if state.status is not None:
        _status_rows(table, state.status, state.workflow_id)
    for line in state.waiting_on:
        table.add_row("waiting on", escape(line))
    if state.failing_workflow_task_attempt is not None:
        table.add_row("workflow task", f"[red]failing, attempt {state.failing_workflow_task_attempt}[/]: the "
                                       "worker's log says why")
    if state.outcome is not None:
        _outcome_rows(table, state.outcome)
    if state.ended is not None:
        table.add_row("ended", f"[red]{state.execution_status.lower()}[/]: {escape(state.ended)}")
    console.print(table)


@app.command("list")
def list_incidents(
    outcome: Outcome | None = typer.Option(None, "--outcome", help="only remediations judged so"),
    service: str = typer.Option(None, "--service", help="only this service's"),
    fault: str = typer.Option(None, "--fault", help="only this fault class's (simulated episodes know theirs)"),
    model: str = typer.Option(None, "--model", help="only those served by this model version"),
    ending: Termination | None = typer.Option(None, "--ending", help=(
        "only those the agent ended so; `escalated`: the ones it handed to a human")),
    running: bool = typer.Option(False, "--running", help="only remediations still running"),
    limit: int = typer.Option(20, "--limit", min=1, max=1000),
    output: OutputOption = Format.table,
) -> None:
    """Recent remediations, newest first, by the search attributes the Temporal UI filters on."""
    from agent_sre.cli.views import IncidentSummary
    from agent_sre.workflows.incident import ENDING, FAULT_CLASS, MODEL_VERSION, OUTCOME, SERVICE

    clauses = ["WorkflowType = 'IncidentRemediationWorkflow'"]
    for key, value, option in ((OUTCOME, outcome, "--outcome"), (SERVICE, service, "--service"),
                               (FAULT_CLASS, fault, "--fault"), (MODEL_VERSION, model, "--model"),
                               (ENDING, ending, "--ending")):
        if value is not None:
            if not SEARCH_VALUE.match(value):
                raise typer.BadParameter(f"{value!r} is not a name (letters, digits, '-', '_', '.', '/')",
                                         param_hint=option)
            clauses.append(f"{key.name} = '{value}'")
    if running:
        clauses.append("ExecutionStatus = 'Running'")
    query = " AND ".join(clauses)

    async def show(client: Client, settings: Settings) -> None:
        found = [IncidentSummary(
            workflow_id=w.id, execution_status=w.status.name.lower() if w.status else "?", started_at=w.start_time,
            **{field: w.typed_search_attributes.get(key) for field, key in (
                ("service", SERVICE), ("fault_class", FAULT_CLASS), ("model_version", MODEL_VERSION),
                ("ending", ENDING), ("outcome", OUTCOME))})
            async for w in client.list_workflows(query, limit=limit)]
        emit(output, found, lambda: _print_summaries(found, query))

    _run(show)


def _print_summaries(found: list[IncidentSummary], query: str) -> None:
    from agent_sre.tools.render import table as kubectl_table

    if not found:
        console.print(f"no remediation matches {query}", highlight=False)
        return
    rows = [(w.workflow_id, w.execution_status, f"{w.started_at:%Y-%m-%d %H:%M:%S}",
             *(value or "-" for value in (w.service, w.fault_class, w.model_version, w.ending, w.outcome)))
            for w in found]
    # As `kubectl get` prints: whole ids, never wrapped into a cell, whatever the terminal's width.
    headers = ("ID", "STATUS", "STARTED (UTC)", "SERVICE", "FAULT", "MODEL", "ENDED", "OUTCOME")
    console.print(kubectl_table(headers, rows), markup=False, highlight=False, soft_wrap=True)
    console.print("[dim]what the agent did in one: agent-sre incident steps ID[/]")


@app.command("steps")
def steps(
    workflow_id: str = typer.Argument(None, metavar="ID", help="the remediation's (or its episode's) workflow id"),
    trajectory: str = typer.Option(None, "--trajectory", metavar="KEY", help=(
        "a stored trajectory's key, as `status` prints it: read from the store, without Temporal")),
    full: bool = typer.Option(False, "--full", help="whole tool outputs, not their first lines"),
    follow: bool = typer.Option(False, "--follow", "-f", help=(
        "print each step once the agent has taken it, until the remediation is judged")),
) -> None:
    """What the agent did, step by step: each action, what the cluster answered, and the step's reward.

    A running remediation answers its `trajectory` query (a worker must poll its queue); a completed one is read
    from the store, as it was recorded (redacted)."""
    from temporalio.client import WorkflowExecutionStatus

    from agent_sre.cli.steps_view import StepPrinter
    from agent_sre.workflows.incident import IncidentRemediationWorkflow

    if (workflow_id is None) == (trajectory is None):
        raise typer.BadParameter("give exactly one of ID or --trajectory KEY")
    printer = StepPrinter(console, full)
    if trajectory is not None:
        if follow:
            raise typer.BadParameter("a stored episode has ended; follow a running one by its ID",
                                     param_hint="--follow")
        printer.trajectory(_stored_episode(common.get_settings(), trajectory))
        return

    async def show(client: Client, settings: Settings) -> None:
        if (found := await _remediation(client, workflow_id, wait=follow)) is None:
            return
        handle, desc = found
        if follow:
            await _follow_steps(client, settings, handle, desc.task_queue, printer)
            return
        completed = desc.status == WorkflowExecutionStatus.COMPLETED
        if completed and (key := (await _outcome(client, handle.id)).trajectory_key):
            printer.trajectory(_stored_episode(settings, key))
            return
        if (why := await unpolled(client, desc.task_queue)) is not None:
            _fail(f"{handle.id} cannot be asked for its steps: {why}")
        t = await handle.query(IncidentRemediationWorkflow.trajectory, rpc_timeout=QUERY_TIMEOUT)
        if t is None:
            console.print(f"{handle.id} has taken no step yet: it is choosing the model version")
            return
        printer.trajectory(t, await _status(handle))

    _run(show, not_found=no_workflow("workflow", workflow_id))


async def _follow_steps(client: Client, settings: Settings, handle: WorkflowHandle[Any, Any], task_queue: str,
                        printer: StepPrinter) -> None:
    """Print each step once taken (a write once it has run), and the approval a write waits for, until the
    trajectory has its verdict or the workflow ends; a completed one's last steps come from the store, rewarded."""
    from temporalio.client import WorkflowExecutionStatus

    from agent_sre.cli.steps_view import is_taken
    from agent_sre.workflows.incident import IncidentRemediationWorkflow

    printed, hinted = 0, -1
    console.print(f"[bold]steps of {escape(handle.id)}[/]")
    while True:
        desc = await handle.describe()
        if desc.status == WorkflowExecutionStatus.COMPLETED:
            if (o := await _outcome(client, handle.id)).trajectory_key:
                printer.trajectory(_stored_episode(settings, o.trajectory_key), start=printed, header=False)
            else:  # it stored no trajectory: its outcome says how it ended
                console.print(f"ended: {o.termination} · verdict: {o.outcome} · reward {o.reward.total:+.2f} "
                              f"({o.reward.function})")
            return
        if desc.status != WorkflowExecutionStatus.RUNNING:
            ended = desc.status.name.lower() if desc.status else "?"
            _fail(f"{handle.id} ended {ended}: {await _why_it_ended(handle)}")
        if (why := await unpolled(client, task_queue)) is not None:
            _fail(f"{handle.id} cannot be followed: {why}")
        t = await handle.query(IncidentRemediationWorkflow.trajectory, rpc_timeout=QUERY_TIMEOUT)
        if t is not None:
            taken = len(t.steps) - (1 if t.steps and not is_taken(t.steps[-1]) else 0)
            for step in t.steps[printed:taken]:
                printer.step(step)
            printed = taken
            if t.verdict is not None:
                printer.ending(t)
                return
            if taken < len(t.steps) and hinted != taken:
                if (st := await _status(handle)).pending_step == taken:
                    printer.waiting(t.workflow_id, t.steps[taken], st.pending_assessment, with_action=True)
                    hinted = taken
        await asyncio.sleep(FOLLOW_POLL_S)


@app.command("feedback")
def feedback(
    workflow_id: str = typer.Argument(..., metavar="ID"),
    rating: int = typer.Option(..., "--rating", min=-1, max=1, help="-1 bad, 0 neutral, 1 good"),
    comment: str = typer.Option("", "--comment"),
    author: str = typer.Option(None, "--author", help="default: your login name"),
    trajectory: str = typer.Option(None, "--trajectory", metavar="KEY", help=(
        "the episode's stored key (as `incident status` shows it), for a remediation Temporal no longer keeps")),
) -> None:
    """Rate a remediation once it has been judged; the rating is folded into its reward.

    During its feedback window the rating goes to the workflow, which folds it into the reward it stores. After
    it (the remediation has completed and stored its trajectory) the rating is stored beside the trajectory, and
    the next learning cycle that reads the episode recomputes its reward with it (docs/continuous-learning.md).
    """
    from temporalio.client import WorkflowExecutionStatus
    from temporalio.service import RPCError, RPCStatusCode

    from agent_sre.models.remediation import IncidentOutcome
    from agent_sre.models.reward import HumanFeedback

    fb = _bad_input(lambda: HumanFeedback(rating=rating, comment=comment, author=author or getpass.getuser(),
                                          at=datetime.now(UTC)))
    if trajectory is not None:
        _record_late(common.get_settings(), workflow_id, trajectory, fb)  # no Temporal: the store alone
        return

    async def send(client: Client, settings: Settings) -> None:
        handle = client.get_workflow_handle(workflow_id, result_type=IncidentOutcome)
        try:
            desc = await handle.describe()
        except RPCError as e:
            if e.status != RPCStatusCode.NOT_FOUND:
                raise
            _fail(f"unknown incident {workflow_id}: Temporal has no such workflow (or no longer keeps it, past "
                  "the namespace's retention); rate a stored episode by its key with --trajectory")
        if desc.workflow_type == "SimulatedIncidentWorkflow":
            _fail(f"{workflow_id} is a simulated episode; rate its remediation, {workflow_id}-remediation")
        if desc.workflow_type != "IncidentRemediationWorkflow":
            _fail(f"{workflow_id} is a {desc.workflow_type}, not a remediation")
        if desc.status == WorkflowExecutionStatus.RUNNING:
            await _rate_running(handle, fb)
            return
        if desc.status != WorkflowExecutionStatus.COMPLETED:
            status_name = desc.status.name.lower() if desc.status else "?"
            _fail(f"{workflow_id} ended {status_name}: it stored no trajectory to rate")
        _record_late(settings, workflow_id, (await handle.result()).trajectory_key, fb)

    _run(send, not_found=no_workflow("workflow", workflow_id))


FEEDBACK_CONFIRM_TIMEOUT = timedelta(seconds=60)
STORE_TIMEOUT_S = 10.0


async def _rate_running(handle: WorkflowHandle[Any, IncidentOutcome], fb: HumanFeedback) -> None:
    """The `feedback` update: outside the feedback window the workflow refuses it, saying why (`_run` prints it)."""
    from agent_sre.workflows.incident import IncidentRemediationWorkflow

    await handle.execute_update(IncidentRemediationWorkflow.feedback, fb, rpc_timeout=QUERY_TIMEOUT)
    outcome = await _outcome_within(handle, FEEDBACK_CONFIRM_TIMEOUT)
    sent = f"feedback {fb.rating:+d} sent to {handle.id}, inside its feedback window"
    if outcome is None:
        console.print(f"{sent}; it has not finished yet (see `incident status`)")
    else:
        console.print(f"{sent}: reward {outcome.reward.total:+.2f}")


async def _outcome_within(handle: WorkflowHandle[Any, IncidentOutcome], timeout: timedelta) -> IncidentOutcome | None:
    try:
        return await asyncio.wait_for(handle.result(), timeout.total_seconds())
    except TimeoutError:
        return None


def _record_late(settings: Settings, workflow_id: str, key: str | None, fb: HumanFeedback) -> None:
    """Store a rating beside the episode's trajectory, for the learning cycles (its window has closed)."""
    import urllib3
    from minio.error import S3Error

    from agent_sre.storage import object_store
    from agent_sre.trajectory_store import write_late_feedback

    if key is None:
        _fail(f"{workflow_id} stored no trajectory (store_trajectory was off): there is nothing to rate")
    try:
        stored = write_late_feedback(object_store(settings, timeout_s=STORE_TIMEOUT_S), settings.s3_bucket, key,
                                     workflow_id, fb)
    except (LookupError, ValueError) as e:
        _fail(str(e))
    except (S3Error, urllib3.exceptions.HTTPError) as e:
        _fail(f"cannot store the feedback in s3://{settings.s3_bucket} at {settings.s3_endpoint}: {e}")
    console.print(f"feedback {fb.rating:+d} on {workflow_id} recorded after its feedback window: "
                  f"s3://{settings.s3_bucket}/{stored}; the next learning cycle that reads the episode folds it "
                  "into its reward")


@app.command("approve")
def approve(workflow_id: str = typer.Argument(..., metavar="ID"),
            step: int = typer.Option(..., "--step", min=0, help="the step waiting for approval (see `status`)"),
            reason: str = typer.Option("", "--reason"),
            by: str = typer.Option(None, "--by", help="default: your login name")) -> None:
    """Let a risky write that is waiting for a human run."""
    from agent_sre.models.remediation import ApprovalDecision

    _decide(workflow_id, ApprovalDecision(step=step, approved=True, by=by or getpass.getuser(), reason=reason))


@app.command("reject")
def reject(workflow_id: str = typer.Argument(..., metavar="ID"),
           step: int = typer.Option(..., "--step", min=0, help="the step waiting for approval (see `status`)"),
           reason: str = typer.Option("", "--reason", help="shown to the agent as the refusal"),
           by: str = typer.Option(None, "--by", help="default: your login name")) -> None:
    """Refuse a risky write; the agent sees the refusal and carries on."""
    from agent_sre.models.remediation import ApprovalDecision

    _decide(workflow_id, ApprovalDecision(step=step, approved=False, by=by or getpass.getuser(), reason=reason))


@app.command("cancel")
def cancel(workflow_id: str = typer.Argument(..., metavar="ID")) -> None:
    """Stop acting (at the next step, or at once while the model thinks); the incident is still judged and
    recorded. One that arrives while it settles, observes or takes feedback ends that wait too."""
    from agent_sre.workflows.incident import IncidentRemediationWorkflow

    async def send(client: Client, settings: Settings) -> None:
        await client.get_workflow_handle(workflow_id).signal(IncidentRemediationWorkflow.cancel)
        console.print(f"cancel sent to {workflow_id}")

    _run(send, not_found=not_running("workflow", workflow_id))


# --- helpers ----------------------------------------------------------------------------------------------------

def _decide(workflow_id: str, decision: ApprovalDecision) -> None:
    """The `approve` or `reject` update: the workflow refuses a step that is not the one waiting, saying why."""
    from agent_sre.workflows.incident import IncidentRemediationWorkflow

    async def send(client: Client, settings: Settings) -> None:
        handle = client.get_workflow_handle(workflow_id)
        update = IncidentRemediationWorkflow.approve if decision.approved else IncidentRemediationWorkflow.reject
        st = await handle.execute_update(update, decision, rpc_timeout=QUERY_TIMEOUT)
        verb = "approved" if decision.approved else "rejected"
        console.print(f"step {decision.step} ({st.last_action}) of {workflow_id} {verb}: the incident is {st.phase}")

    _run(send, not_found=not_running("workflow", workflow_id))


def _firing_alerts(path: Path) -> list[Alert]:
    from agent_sre.models.alert import Alert, AlertmanagerWebhook

    data = _bad_input(lambda: json.loads(path.read_text()), f"{path} is not JSON")
    if isinstance(data, dict) and "alerts" in data:
        alerts = _bad_input(lambda: AlertmanagerWebhook.model_validate(data), f"{path} (webhook)").alerts
    else:
        alerts = [_bad_input(lambda: Alert.model_validate(data), f"{path} (alert)")]
    firing = [a for a in alerts if a.status == "firing"]
    if not firing:
        _fail(f"{path}: no firing alert in it (resolved alerts do not start remediations)")
    return firing


def _load_scenario(path: Path, name: str | None) -> Scenario:
    from agent_sre.scenarios import pick_scenario  # here: it loads the fault catalog, slow for other commands

    return _bad_input(lambda: pick_scenario(path, name))


def _limits(base: RemediationLimits, approval_risk: RiskName | None,
            feedback_window: float | None) -> RemediationLimits:
    """The command line's overrides of the remediation's limits."""
    from agent_sre.models.tools import Risk

    update: dict[str, Any] = {}
    if approval_risk is not None:
        update["approval_risk"] = Risk[approval_risk.upper()]
    if feedback_window is not None:
        update["feedback_window_s"] = feedback_window
    return base.model_copy(update=update)


def _within_scope(incidents: list[Incident]) -> None:
    """Refuse, before anything starts, incidents in namespaces the agent may not act in (`agent_sre.scope`)."""
    from agent_sre.scope import out_of_scope

    settings = common.get_settings()
    refusals = dict.fromkeys(why for incident in incidents if (why := out_of_scope(incident.namespace, settings)))
    if refusals:
        _fail("; ".join(refusals) + "; nothing was started")


async def _start_incidents(client: Client, settings: Settings, incidents: list[Incident], policy: PolicyRef | None,
                           wait: bool, span: str) -> None:
    """Each incident started inside a span named `span`, the root of the incident's trace."""
    from agent_sre.spans import starting
    from agent_sre.temporal import start_incident

    for incident in incidents:
        with starting(span, incident):
            started = await start_incident(client, incident, policy=policy, settings=settings)
        how = {"started": "started", "attached": "attached to the running remediation",
               "finished": "this firing's remediation has already finished; nothing started:"}[started.handling]
        console.print(f"{how} [bold]{started.workflow_id}[/]")
        if wait:
            _print_outcome(await _outcome(client, started.workflow_id))
        else:
            _print_follow_hint(started.workflow_id)


async def _start_episode(client: Client, settings: Settings, request: EpisodeRequest, wait: bool) -> None:
    from agent_sre.temporal import task_queues
    from agent_sre.workflows.simulated import SimulatedIncidentWorkflow

    scenario = request.scenario
    request = request.model_copy(update={"queues": task_queues(settings)})
    episode_id = f"episode-cli-{uuid.uuid4().hex[:8]}-{scenario.name}"
    handle = await client.start_workflow(SimulatedIncidentWorkflow.run, request, id=episode_id,
                                         task_queue=settings.queue_agent)
    console.print(f"started [bold]{episode_id}[/] (scenario {scenario.name}); "
                  f"its remediation will be [bold]{episode_id}-remediation[/]")
    if wait:
        _print_outcome((await handle.result()).outcome)
    else:
        _print_follow_hint(episode_id)


def _print_follow_hint(workflow_id: str) -> None:
    console.print(f"[dim]follow it: agent-sre incident steps {escape(workflow_id)} -f[/]")


def _waiting_on(desc: WorkflowExecutionDescription) -> tuple[list[str], int | None]:
    """What a running remediation waits on that its status query cannot say: activities not yet picked up by a
    worker (a queue nobody serves), retrying or failing; and the attempt of a workflow task that keeps failing."""
    from temporalio.api.enums.v1 import PendingActivityState

    lines = []
    for pending in desc.raw_description.pending_activities:
        state = PendingActivityState.Name(pending.state).removeprefix("PENDING_ACTIVITY_STATE_").lower()
        line = f"{pending.activity_type.name} · {state} · attempt {pending.attempt}"
        if pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED:
            line += " · no worker has picked it up (is one serving its task queue?)"
        if pending.last_failure.message:
            line += f" · last failure: {pending.last_failure.message}"
        lines.append(line)
    attempt = desc.raw_description.pending_workflow_task.attempt
    return lines, attempt if attempt > 1 else None


async def _remediation(client: Client, workflow_id: str, wait: bool = False
                       ) -> tuple[WorkflowHandle[Any, Any], WorkflowExecutionDescription] | None:
    """The remediation `workflow_id` names: itself, or a simulated episode's child. While the episode is still
    injecting its fault: None, said, or with `wait` the child once the running episode has started it. Any other
    workflow is an error."""
    from temporalio.client import WorkflowExecutionStatus
    from temporalio.service import RPCError, RPCStatusCode

    episode = client.get_workflow_handle(workflow_id)
    desc = await episode.describe()
    handle = episode
    if desc.workflow_type == "SimulatedIncidentWorkflow":  # an episode: what matters is its remediation
        console.print(f"{workflow_id} is a simulated episode ({desc.status.name if desc.status else '?'}); "
                      f"its remediation is {workflow_id}-remediation")
        handle = client.get_workflow_handle(f"{workflow_id}-remediation")
        while True:
            try:
                desc = await handle.describe()
                break
            except RPCError as e:
                if e.status != RPCStatusCode.NOT_FOUND:
                    raise
            if not wait:
                console.print("the remediation has not started yet: the fault is still being injected")
                return None
            if (status := (await episode.describe()).status) != WorkflowExecutionStatus.RUNNING:
                _fail(f"{workflow_id} ended {status.name.lower() if status else '?'} before it started its "
                      "remediation (see the Temporal UI for why)")
            await asyncio.sleep(FOLLOW_POLL_S)
    elif desc.workflow_type != "IncidentRemediationWorkflow":
        _fail(f"{workflow_id} is a {desc.workflow_type}, not a remediation")
    return handle, desc


async def _outcome(client: Client, workflow_id: str) -> IncidentOutcome:
    from agent_sre.workflows.incident import IncidentRemediationWorkflow

    return await client.get_workflow_handle_for(IncidentRemediationWorkflow.run, workflow_id).result()


async def _status(handle: WorkflowHandle[Any, Any]) -> RemediationStatus:
    from agent_sre.workflows.incident import IncidentRemediationWorkflow

    return await handle.query(IncidentRemediationWorkflow.status, rpc_timeout=QUERY_TIMEOUT)


def _status_rows(table: Table, st: RemediationStatus, workflow_id: str) -> None:
    from agent_sre.cli.steps_view import assessment_text, waiting_text

    table.add_row("phase", st.phase)
    table.add_row("model", st.model_version or "-")
    table.add_row("steps", str(st.steps))
    table.add_row("last action", st.last_action or "-")
    if st.pending_approval is not None:
        table.add_row("waiting for approval", escape(f"step {st.pending_step}: {st.pending_approval.tool} "
                                                     f"{json.dumps(st.pending_approval.args)}")
                      + f"\n[dim]agent-sre incident approve|reject {escape(workflow_id)} --step {st.pending_step}[/]")
        if st.pending_assessment is not None:
            table.add_row("held because", escape(assessment_text(st.pending_assessment)))
    if st.waiting is not None:
        table.add_row("waiting for", escape(waiting_text(st.waiting, datetime.now(UTC))))
    table.add_row("resolved signal", "received" if st.alert_resolved else "-")
    table.add_row("outcome", st.outcome or "-")
    if st.escalation is not None:
        table.add_row("escalation", escape(st.escalation))


def _outcome_rows(table: Table, o: IncidentOutcome) -> None:
    table.add_row("termination", o.termination)
    table.add_row("writes / refused / invalid", f"{o.writes} / {o.refused} / {o.invalid}")
    table.add_row("diagnosis", escape(o.diagnosis or "-"))
    table.add_row("summary", escape(o.summary or "-"))
    table.add_row("time to mitigate (wall)", f"{o.time_to_mitigate_s:.1f}s" if o.time_to_mitigate_s is not None
                  else "-")
    parts = ", ".join(f"{k} {v:+g}" for k, v in o.reward.components.items())
    table.add_row("reward", f"{o.reward.total:+.2f} ({o.reward.function}: {parts})")
    if o.trajectory_key:
        table.add_row("trajectory", escape(o.trajectory_key))


def _print_outcome(o: IncidentOutcome) -> None:
    table = Table(show_header=False, title=f"outcome of {o.workflow_id}")
    table.add_row("outcome", o.outcome)
    table.add_row("model", o.model_version)
    table.add_row("steps", str(o.steps))
    _outcome_rows(table, o)
    console.print(table)


def _stored_episode(settings: Settings, key: str) -> Trajectory:
    import urllib3
    from minio.error import S3Error

    from agent_sre.storage import object_store
    from agent_sre.trajectory_store import read_episode

    try:
        return read_episode(object_store(settings, timeout_s=STORE_TIMEOUT_S), settings.s3_bucket, key)
    except (LookupError, ValueError) as e:
        _fail(str(e))
    except (S3Error, urllib3.exceptions.HTTPError) as e:
        _fail(f"cannot read s3://{settings.s3_bucket}/{key} at {settings.s3_endpoint}: {e}")


def _bad_input(make: Callable[[], T], where: str = "") -> T:
    """Run a parser/constructor; turn what the user got wrong into one clear line (prefixed by `where`)."""
    from pydantic import ValidationError

    from agent_sre.validation import explain

    prefix = f"{where}: " if where else ""
    try:
        return make()
    except ValidationError as e:
        _fail(prefix + explain(e))
    except (ValueError, OSError) as e:
        _fail(f"{prefix}{e}")



async def _why_it_ended(handle: WorkflowHandle[Any, Any]) -> str:
    """The reason a workflow that did not complete gives in its history: its failure, or who ended it and why."""
    from temporalio.client import WorkflowFailureError

    try:
        await handle.result()
    except WorkflowFailureError as e:
        return str(e.cause or e)
    return "it completed"


def _run(action: Callable[[Client, Settings], Awaitable[None]], not_found: str = "no such workflow") -> None:
    """Connect, run, and report Temporal's refusals as errors rather than tracebacks."""
    from temporalio.client import (
        WorkflowFailureError,
        WorkflowQueryFailedError,
        WorkflowUpdateFailedError,
        WorkflowUpdateRPCTimeoutOrCancelledError,
    )

    try:
        run_with_client(action, not_found=not_found)
    except WorkflowUpdateFailedError as e:
        _fail(f"refused: {e.cause}")
    except WorkflowUpdateRPCTimeoutOrCancelledError:
        _fail("the workflow did not answer in time (is a worker polling its task queue?)")
    except WorkflowQueryFailedError as e:
        _fail(f"the workflow did not answer: {e}")
    except WorkflowFailureError as e:
        _fail(f"the workflow failed: {e.cause}")
