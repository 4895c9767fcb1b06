"""Durability with real processes: the worker is killed (SIGKILL) or stopped (SIGTERM, as Kubernetes stops a pod)
mid-incident and a new one finishes it; the simulator's audit log proves that no write was executed twice."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest
from isolated_workers import isolated_queues

from agent_sre import faults
from agent_sre.config import Settings
from agent_sre.models.incident import Incident, RemediationLimits
from agent_sre.models.remediation import ApprovalDecision, IncidentOutcome, PolicyRef, RemediationStatus
from agent_sre.models.tools import Risk, ToolCall
from agent_sre.scenarios import load_scenarios
from agent_sre.simulator.client import SimulatorClient
from agent_sre.temporal import connect, start_incident
from agent_sre.tools.client import api_client
from agent_sre.workflows.incident import IncidentRemediationWorkflow

pytestmark = pytest.mark.asyncio(loop_scope="session")


def _worker_process(settings: Settings, log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, AGENT_SRE_QUEUE_AGENT=settings.queue_agent, AGENT_SRE_QUEUE_TOOLS=settings.queue_tools,
               AGENT_SRE_QUEUE_POLICY=settings.queue_policy)
    return subprocess.Popen([sys.executable, "-m", "agent_sre.cli", "worker", "--metrics-port", "0"], env=env,
                            stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)


async def _await_phase(handle, phase: str, timeout_s: float = 60) -> RemediationStatus:
    for _ in range(int(timeout_s / 0.1)):
        status = await handle.query(IncidentRemediationWorkflow.status)
        if status.phase == phase:
            return status
        await asyncio.sleep(0.1)
    raise AssertionError(f"never reached {phase}; last status {status}")


def _stop_gracefully(worker: subprocess.Popen[bytes], sig: signal.Signals, log: Path) -> None:
    worker.send_signal(sig)
    assert worker.wait(timeout=60) == 0, log.read_text()
    assert f"{sig.name}: stopping the workers" in log.read_text()


@pytest.mark.parametrize("end", [signal.SIGKILL, signal.SIGTERM])
async def test_worker_ended_mid_incident_completes_without_double_writes(stack: Settings, tmp_path: Path,
                                                                         end: signal.Signals) -> None:
    settings = isolated_queues(stack)
    scenario = next(s for s in load_scenarios() if s.fault == "bad_image")
    sim = SimulatorClient(stack.sim_url)
    env = sim.create_env(apps=[scenario.app], seed=scenario.seed)
    faults.inject(api_client(env["server"]), scenario)
    audit_before = len(sim.audit(env["name"]))
    deployment = scenario.target
    bystander = next(name for name in ("frontend", "catalog") if name != deployment)
    script = [
        ToolCall(tool="rollout_restart", args={"deployment": bystander}),  # LOW risk: runs at once
        ToolCall(tool="rollout_undo", args={"deployment": deployment}),  # MEDIUM: waits for approval
        ToolCall(tool="list_pods"),
    ]
    incident = Incident(id=uuid.uuid4().hex[:12], alert=scenario.alert, namespace=scenario.namespace,
                        kubeconfig=env["server"], scenario=scenario,
                        limits=RemediationLimits(settle_s=1.0, approval_risk=Risk.MEDIUM))
    client = await connect(settings)
    logs = tmp_path / "worker-1.log", tmp_path / "worker-2.log"
    first = _worker_process(settings, logs[0])
    try:
        started = await start_incident(client, incident, policy=PolicyRef(name="scripted", script=script),
                                       settings=settings)
        await _await_phase(started.handle, "awaiting_approval")
        if end == signal.SIGTERM:
            _stop_gracefully(first, end, logs[0])
    finally:
        if first.poll() is None:  # SIGKILL, or a failed graceful stop: the process and its threads vanish
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    await started.handle.signal(IncidentRemediationWorkflow.approve_action,
                                ApprovalDecision(step=1, approved=True, by="test"))
    second = _worker_process(settings, logs[1])
    try:
        outcome: IncidentOutcome = await asyncio.wait_for(started.handle.result(), timeout=120)
        _stop_gracefully(second, signal.SIGINT, logs[1])
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
            second.wait()
    assert outcome.writes == 2 and outcome.outcome == "resolved", outcome
    writes = [r for r in sim.audit(env["name"])[audit_before:] if r.get("idempotency_key")]
    per_key = Counter(r["idempotency_key"] for r in writes)
    assert len(per_key) == 2 and set(per_key.values()) == {1}, per_key
