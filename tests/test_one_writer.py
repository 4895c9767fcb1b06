"""Issue #38 on the embedded stack (Temporal dev server, simulator over HTTP, real activities and policies): one
remediation per problem, and one writer per namespace at a time (NamespaceLockWorkflow)."""

from __future__ import annotations

import asyncio
import random
from datetime import datetime, timedelta

import pytest
from isolated_workers import running_workers, terminate_running
from temporalio.client import Client, WorkflowHandle

from agent_sre import faults
from agent_sre.alerts.receiver import plan_delivery
from agent_sre.config import Settings
from agent_sre.models.alert import Alert, AlertmanagerWebhook
from agent_sre.models.incident import Incident, RemediationLimits
from agent_sre.models.lock import LockStatus, lock_id
from agent_sre.models.remediation import ApprovalDecision, IncidentOutcome, PolicyRef, RemediationStatus
from agent_sre.models.scenario import Scenario
from agent_sre.models.tools import Risk, ToolCall
from agent_sre.models.trajectory import Trajectory
from agent_sre.scenarios import load_scenarios
from agent_sre.simulator.client import SimulatorClient
from agent_sre.temporal import connect, start_incident
from agent_sre.tools.client import api_client
from agent_sre.workflows.incident import IncidentRemediationWorkflow
from agent_sre.workflows.lock import NamespaceLockWorkflow

pytestmark = pytest.mark.asyncio(loop_scope="session")
RUNBOOK = PolicyRef(name="runbook")


@pytest.fixture(scope="module")
def catalog() -> dict[str, Scenario]:
    """The first scenario of each (app, fault)."""
    first: dict[str, Scenario] = {}
    for s in load_scenarios():
        first.setdefault(f"{s.app}/{s.fault}", s)
    return first


def _cluster(settings: Settings, *scenarios: Scenario) -> str:
    """A fresh simulated cluster with the scenarios' apps and faults; its API server's URL."""
    env = SimulatorClient(settings.sim_url).create_env(apps=sorted({s.app for s in scenarios}))
    for scenario in scenarios:
        faults.inject(api_client(env["server"]), scenario)
    return env["server"]


@pytest.fixture
def fired() -> datetime:
    """When this test's alerts first fired: a firing episode of its own, so a workflow id no other test (or earlier
    run against the same server) has used."""
    return datetime(2025, 3, 1) + timedelta(seconds=random.randrange(10**8))


def _alert(scenario: Scenario, fired: datetime, minutes: int = 0, **labels: str) -> Alert:
    """The scenario's alert (or one of its group, with other labels), fired `minutes` after `fired`."""
    return scenario.alert.model_copy(update={"labels": {**scenario.alert.labels, **labels},
                                             "startsAt": fired + timedelta(minutes=minutes)})


def _incident(scenario: Scenario, cluster: str, alert: Alert, **limits: object) -> Incident:
    return Incident.from_alert(alert, kubeconfig=cluster, scenario=scenario,
                               limits=RemediationLimits(settle_s=1.0, **limits))  # type: ignore[arg-type]


def _restart(deployment: str) -> ToolCall:
    return ToolCall(tool="rollout_restart", args={"deployment": deployment})


async def _phase(handle: WorkflowHandle, phase: str) -> RemediationStatus:
    for _ in range(400):
        status = await handle.query(IncidentRemediationWorkflow.status)
        if status.phase == phase:
            return status
        await asyncio.sleep(0.05)
    raise AssertionError(f"never reached {phase}; last status {status}")


async def _lock(client: Client, namespace: str, cluster: str) -> LockStatus:
    return await client.get_workflow_handle_for(NamespaceLockWorkflow.run, lock_id(namespace, cluster)).query(
        NamespaceLockWorkflow.status)


async def _trajectory(handle: WorkflowHandle) -> Trajectory:
    return await handle.query(IncidentRemediationWorkflow.trajectory)


def _stale(t: Trajectory) -> list[int]:
    return [s.index for s in t.steps if s.result is not None and s.result.stale]


async def test_three_alerts_of_one_group_are_one_incident_and_one_fix(
        stack: Settings, catalog, fired: datetime) -> None:
    """cart at zero replicas makes three services' error rates fire: one incident, one scale back, and a re-sent
    notification of the group after it finished starts nothing."""
    scenario = catalog["shop/scaled_to_zero"]
    group = [_alert(scenario, fired, m, **labels) for m, labels in
             enumerate([{}, {"service": "checkout"}, {"service": "payment"}])]
    webhook = AlertmanagerWebhook.model_validate({
        "version": "4", "groupKey": '{}:{alertname="HighErrorRate"}', "status": "firing", "receiver": "agent-sre",
        "alerts": [a.model_dump(mode="json") for a in reversed(group)]})
    [unit] = plan_delivery(webhook)
    assert unit.incident is not None
    cluster = _cluster(stack, scenario)
    incident = unit.incident.model_copy(update={"kubeconfig": cluster, "scenario": scenario,
                                                "limits": RemediationLimits(settle_s=1.0)})
    client = await connect(stack)
    async with running_workers(client, stack) as settings:
        started = await start_incident(client, incident, policy=RUNBOOK, settings=settings)
        outcome: IncidentOutcome = await started.handle.result()
        trajectory = await _trajectory(started.handle)
        again = await start_incident(client, incident, policy=RUNBOOK, settings=settings)
    assert (outcome.outcome, outcome.writes) == ("resolved", 1)
    assert [s.action for s in trajectory.writes] == [ToolCall(tool="scale", args={"deployment": "cart",
                                                                                   "replicas": 1})]
    assert len(trajectory.incident.alerts) == 3 and "3 alerts of one group" in trajectory.conversation[1].content
    assert (again.handling, again.workflow_id) == ("finished", started.workflow_id)


async def test_two_incidents_in_one_namespace_write_one_after_the_other(
        stack: Settings, catalog, fired: datetime) -> None:
    """Two alerts about one bad rollout (the ratchet of issue #38: a second rollback undoes the first). The second
    incident to reach its write finds the first's fix: it reads again, sees cart healthy, and writes nothing."""
    scenario = catalog["shop/bad_image"]
    cluster = _cluster(stack, scenario)
    first = _incident(scenario, cluster, _alert(scenario, fired))
    second = _incident(scenario, cluster, _alert(scenario, fired, 1, alertname="KubePodCrashLooping"))
    client = await connect(stack)
    async with running_workers(client, stack) as settings:
        started = [await start_incident(client, i, policy=RUNBOOK, settings=settings) for i in (first, second)]
        outcomes: list[IncidentOutcome] = await asyncio.gather(*(s.handle.result() for s in started))
        trajectories = [await _trajectory(s.handle) for s in started]
        lock = await _lock(client, scenario.namespace, cluster)
    assert sum(o.writes for o in outcomes) == 1, outcomes
    assert [o.outcome for o in outcomes] == ["resolved", "resolved"]
    writer, reader = sorted(trajectories, key=lambda t: -len(t.writes))
    assert [s.action.tool for s in writer.writes if s.action] == ["rollout_undo"] and not _stale(writer)
    [stale] = _stale(reader)
    assert reader.steps[stale].result is not None and writer.workflow_id in reader.steps[stale].result.output
    assert reader.steps[stale + 1].action == ToolCall(tool="list_pods")  # it reads again before anything else
    assert reader.termination == "finished" and lock.holder is None


@pytest.mark.parametrize(("lease_s", "human_s"), [(None, 0.0), (2.0, 8.0)],
                         ids=["default-lease", "approval-outlasts-the-lease"])
async def test_a_write_waits_while_another_incident_holds_the_namespace(
        stack: Settings, catalog, fired: datetime, lease_s: float | None, human_s: float) -> None:
    """The first incident holds the lease while its write waits for a human; the second's write waits behind it,
    then is not run (the namespace changed under it), and its next write runs. A human slower than the lease (8 s
    against 2): the lock checks on its holder every `namespace_lease_s`, and a live one keeps the lease."""
    scenario = catalog["shop/bad_image"]
    cluster = _cluster(stack, scenario)
    holder = _incident(scenario, cluster, _alert(scenario, fired), approval_risk=Risk.LOW, approval_timeout_s=120,
                       namespace_lease_s=lease_s)
    waiter = _incident(scenario, cluster, _alert(scenario, fired, 1, alertname="KubePodCrashLooping"))
    client = await connect(stack)
    async with running_workers(client, stack) as settings:
        first = await start_incident(client, holder, policy=PolicyRef(name="scripted", script=[_restart("cart")]),
                                     settings=settings)
        await _phase(first.handle, "awaiting_approval")
        second = await start_incident(client, waiter, settings=settings,
                                      policy=PolicyRef(name="scripted", script=[_restart("cart")] * 2))
        await _phase(second.handle, "awaiting_lease")
        await asyncio.sleep(human_s)
        lock = await _lock(client, scenario.namespace, cluster)
        waiting = await second.handle.query(IncidentRemediationWorkflow.status)
        await first.handle.signal(IncidentRemediationWorkflow.approve_action,
                                  ApprovalDecision(step=0, approved=True, by="alice"))
        outcomes = [await asyncio.wait_for(s.handle.result(), timeout=120) for s in (first, second)]
        held, waited = [await _trajectory(s.handle) for s in (first, second)]
    assert (lock.holder, lock.waiting) == (first.workflow_id, [second.workflow_id])
    assert waiting.phase == "awaiting_lease"
    assert [o.writes for o in outcomes] == [1, 1]
    assert _stale(waited) == [0] and waited.steps[1].result is not None and waited.steps[1].result.ok
    assert held.mitigated_at is not None and waited.steps[1].at > held.mitigated_at  # never interleaved


async def test_a_holder_that_died_loses_the_lease_when_it_runs_out(stack: Settings, catalog, fired: datetime) -> None:
    scenario = catalog["shop/bad_image"]
    cluster = _cluster(stack, scenario)
    doomed = _incident(scenario, cluster, _alert(scenario, fired), approval_risk=Risk.LOW, approval_timeout_s=600,
                       namespace_lease_s=5)
    waiter = _incident(scenario, cluster, _alert(scenario, fired, 1, alertname="KubePodCrashLooping"))
    client = await connect(stack)
    async with running_workers(client, stack) as settings:
        first = await start_incident(client, doomed, policy=PolicyRef(name="scripted", script=[_restart("cart")]),
                                     settings=settings)
        await _phase(first.handle, "awaiting_approval")
        second = await start_incident(client, waiter, settings=settings,
                                      policy=PolicyRef(name="scripted", script=[_restart("cart")] * 2))
        await _phase(second.handle, "awaiting_lease")
        await first.handle.terminate(reason="the holder dies: no release")
        outcome: IncidentOutcome = await asyncio.wait_for(second.handle.result(), timeout=60)
        trajectory = await _trajectory(second.handle)
    assert outcome.writes == 1 and _stale(trajectory) == [0]
    assert first.workflow_id in (trajectory.steps[0].result.output if trajectory.steps[0].result else "")


async def test_incidents_in_two_namespaces_write_in_parallel(stack: Settings, catalog, fired: datetime) -> None:
    """shop's incident holds shop's lease, waiting for a human; bank's writes and finishes meanwhile."""
    shop, bank = catalog["shop/bad_image"], catalog["bank/oom_limit"]
    cluster = _cluster(stack, shop, bank)
    client = await connect(stack)
    async with running_workers(client, stack) as settings:
        holding = _incident(shop, cluster, _alert(shop, fired), approval_risk=Risk.LOW, approval_timeout_s=120)
        held = await start_incident(client, holding,
                                    policy=PolicyRef(name="scripted", script=[_restart("cart")]), settings=settings)
        try:
            await _phase(held.handle, "awaiting_approval")
            other = await start_incident(client, _incident(bank, cluster, _alert(bank, fired)), settings=settings,
                                         policy=PolicyRef(name="scripted", script=[_restart(bank.target)]))
            outcome: IncidentOutcome = await asyncio.wait_for(other.handle.result(), timeout=60)
            still = await held.handle.query(IncidentRemediationWorkflow.status)
            locks = [await _lock(client, ns, cluster) for ns in (shop.namespace, bank.namespace)]
        finally:
            await terminate_running(client, [held.workflow_id])
    assert outcome.writes == 1 and still.phase == "awaiting_approval"
    assert locks[0].holder == held.workflow_id and locks[1].holder is None and locks[1].grants == 1
