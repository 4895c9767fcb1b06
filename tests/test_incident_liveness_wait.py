"""The incident workflow's verdict waits for fresh containers' liveness probes, as the in-process one does
(tests/test_observer_settle.py): on the embedded stack, a restart of a slow starter whose liveness probe is broken
looks healthy when the settle window ends (a provisional verdict), and is judged again after the kubelet has killed
it. The history that wait records replays."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable
from datetime import datetime, timedelta

import pytest
from isolated_workers import running_workers
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer, WorkflowReplayResult

from agent_sre import faults
from agent_sre.config import Settings
from agent_sre.models.incident import Incident, RemediationLimits
from agent_sre.models.remediation import IncidentOutcome, PolicyRef
from agent_sre.models.tools import ToolCall
from agent_sre.models.trajectory import Trajectory
from agent_sre.simulator.client import SimulatorClient
from agent_sre.temporal import connect, start_incident
from agent_sre.tools.client import api_client
from agent_sre.workflows.incident import IncidentRemediationWorkflow

pytestmark = pytest.mark.asyncio(loop_scope="session")


def _payment_incident(stack: Settings, speed: float, settle_s: float) -> Incident:
    """shop/payment with a liveness probe on a port nothing listens on: it starts in 25 s (of the cluster's clock)
    and its probe kills it about 75 s later."""
    scenario = faults.get_fault("readiness_probe").scenario(
        "live-payment", "shop", "shop", "payment", {"probe": "liveness", "mode": "port", "port": 9191}, seed=3)
    env = SimulatorClient(stack.sim_url).create_env(apps=["shop"], speed=speed)
    faults.inject(api_client(env["server"]), scenario)
    fired = datetime(2025, 6, 1) + timedelta(seconds=random.randrange(10**8))
    return Incident.from_alert(scenario.alert.model_copy(update={"startsAt": fired}), kubeconfig=env["server"],
                               scenario=scenario, limits=RemediationLimits(settle_s=settle_s))


def _replays(history: WorkflowHistory) -> Awaitable[WorkflowReplayResult]:
    """Raises if the history's commands do not come back the same from the current code."""
    return Replayer(workflows=[IncidentRemediationWorkflow],
                    data_converter=pydantic_data_converter).replay_workflow(history)


@pytest.mark.parametrize(("fix", "outcome"), [("rollout_restart", "unresolved"), ("rollout_undo", "resolved")])
async def test_a_restart_is_judged_after_the_liveness_probe_of_a_slow_starter_has_acted(
        stack: Settings, fix: str, outcome: str) -> None:
    # The cluster runs 10x, so the 5 s settle window (50 s of its clock) ends when the restarted pod is ready and not
    # yet killed.
    incident = _payment_incident(stack, speed=10, settle_s=5.0)
    policy = PolicyRef(name="scripted", script=[ToolCall(tool=fix, args={"deployment": "payment"})])
    client = await connect(stack)
    async with running_workers(client, stack) as settings:
        started = await start_incident(client, incident, policy=policy, settings=settings)
        result: IncidentOutcome = await started.handle.result()
        history = await started.handle.fetch_history()
    assert result.outcome == outcome
    await _replays(history)


async def test_a_cancel_ends_the_wait_for_liveness_probes(stack: Settings) -> None:
    # At 5x the restarted pod runs 5 s after the restart and its probe acts about 15 s later: after the 8 s settle
    # window the workflow waits in durable timers.
    incident = _payment_incident(stack, speed=5, settle_s=8.0)
    policy = PolicyRef(name="scripted", script=[ToolCall(tool="rollout_restart", args={"deployment": "payment"})])
    client = await connect(stack)
    async with running_workers(client, stack) as settings:
        started = await start_incident(client, incident, policy=policy, settings=settings)
        async with asyncio.timeout(120):  # generous: a busy machine is slow to start the workers
            while (status := await started.handle.query(IncidentRemediationWorkflow.status)).waiting is None or \
                    status.waiting.on != "timer liveness probes":
                assert status.phase not in ("rewarding", "storing", "done"), status
                await asyncio.sleep(0.2)
        await started.handle.signal(IncidentRemediationWorkflow.cancel)
        result: IncidentOutcome = await asyncio.wait_for(started.handle.result(), timeout=30)
        trajectory: Trajectory = await started.handle.query(IncidentRemediationWorkflow.trajectory)
        history = await started.handle.fetch_history()
    assert (result.termination, result.outcome) == ("cancelled", "unresolved")
    assert trajectory.verdict is not None
    assert trajectory.verdict.reasons == ["not judged: the incident was cancelled while it was being observed"]
    await _replays(history)
