"""The incident workflow's verdict waits for fresh containers' liveness probes, as the in-process one does
(tests/test_observer_settle.py): on the embedded stack, a restart of a slow starter whose liveness probe is broken
looks healthy when the settle window ends (a provisional verdict), and is judged again after the kubelet has killed
it. The history that wait records replays."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import pytest
from isolated_workers import running_workers
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from agent_sre import faults
from agent_sre.config import Settings
from agent_sre.models.incident import Incident, RemediationLimits
from agent_sre.models.remediation import IncidentOutcome, PolicyRef
from agent_sre.models.tools import ToolCall
from agent_sre.simulator.client import SimulatorClient
from agent_sre.temporal import connect, start_incident
from agent_sre.tools.client import api_client
from agent_sre.workflows.incident import IncidentRemediationWorkflow

pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest.mark.parametrize(("fix", "outcome"), [("rollout_restart", "unresolved"), ("rollout_undo", "resolved")])
async def test_a_restart_is_judged_after_the_liveness_probe_of_a_slow_starter_has_acted(
        stack: Settings, fix: str, outcome: str) -> None:
    # shop/payment starts in 25 s; its broken liveness probe kills it about 75 s later. The cluster runs 10x, so the
    # 5 s settle window (50 s of its clock) ends when the restarted pod is ready and not yet killed.
    scenario = faults.get_fault("readiness_probe").scenario(
        "live-payment", "shop", "shop", "payment", {"probe": "liveness", "mode": "port", "port": 9191}, seed=3)
    env = SimulatorClient(stack.sim_url).create_env(apps=["shop"], speed=10)
    faults.inject(api_client(env["server"]), scenario)
    fired = datetime(2025, 6, 1) + timedelta(seconds=random.randrange(10**8))
    incident = Incident.from_alert(scenario.alert.model_copy(update={"startsAt": fired}), kubeconfig=env["server"],
                                   scenario=scenario, limits=RemediationLimits(settle_s=5.0))
    policy = PolicyRef(name="scripted", script=[ToolCall(tool=fix, args={"deployment": "payment"})])
    client = await connect(stack)
    async with running_workers(client, stack) as settings:
        started = await start_incident(client, incident, policy=policy, settings=settings)
        result: IncidentOutcome = await started.handle.result()
        history = await started.handle.fetch_history()
    assert result.outcome == outcome
    await Replayer(workflows=[IncidentRemediationWorkflow], data_converter=pydantic_data_converter).replay_workflow(
        history)  # raises if the wait's commands do not come back the same
