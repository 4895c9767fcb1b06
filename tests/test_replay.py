"""Recorded histories of the incident workflows replay against the current workflow code.

A workflow resumes by replaying its history: after a worker restart, on another worker, after a deploy. Code that
no longer makes the commands its history recorded fails that replay, and every remediation in flight would stall.
tests/histories/ holds one episode as it ran (the runbook policy, tool execution `local`, a 2 s settle window):
SimulatedIncidentWorkflow and its child IncidentRemediationWorkflow; and, recorded later, the NamespaceLockWorkflow
that lent its namespace to such a remediation's write (still running: it waits for the next request). These tests
replay each with `Replayer`, no server involved.

When a replay fails, the change alters what the workflow does at some point of its history:

- Workflows already running would see it (most changes): branch on `workflow.patched("<change id>")`, keeping
  the old path for histories recorded before it, so both the recorded histories and the running workflows replay.
  Once none of those can be running any more, `workflow.deprecate_patch` and then remove the old path.
- Nothing recorded before it can still be running (a dev store wiped, a workflow renamed): re-record, from the
  repository root, with

      .venv/bin/python tests/test_replay.py

  which runs one episode on a throwaway embedded stack and rewrites tests/histories/ (or only the histories of
  the workflow types named after it). Commit the new files with the change, saying why the old histories no
  longer apply.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import uuid
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from agent_sre import stack
from agent_sre.config import get_settings
from agent_sre.episodes import run_episode
from agent_sre.models.lock import lock_id
from agent_sre.models.remediation import PolicyRef, RemediationRequest
from agent_sre.models.trajectory import Trajectory
from agent_sre.scenarios import load_scenarios
from agent_sre.stack.isolated import isolated_env
from agent_sre.temporal import connect
from agent_sre.workers.main import build_workers
from agent_sre.workflows.incident import IncidentRemediationWorkflow
from agent_sre.workflows.lock import NamespaceLockWorkflow
from agent_sre.workflows.simulated import SimulatedIncidentWorkflow

HISTORIES = Path(__file__).with_name("histories")
RECORDED = {"SimulatedIncidentWorkflow": HISTORIES / "simulated-incident.json",
            "IncidentRemediationWorkflow": HISTORIES / "incident-remediation.json",
            "NamespaceLockWorkflow": HISTORIES / "namespace-lock.json"}
SCENARIO_FAULT = "bad_image"


def recorded(workflow_type: str) -> WorkflowHistory:
    """A history as `record` wrote it: the workflow id (the episode names its child after its own) and the events."""
    saved = json.loads(RECORDED[workflow_type].read_text())
    return WorkflowHistory.from_json(saved["workflow_id"], saved["history"])


def replayer(*workflows: type) -> Replayer:
    return Replayer(workflows=list(workflows), data_converter=pydantic_data_converter)


@pytest.mark.parametrize("workflow_type", sorted(RECORDED))
async def test_recorded_history_replays_on_the_current_code(workflow_type: str) -> None:
    history = recorded(workflow_type)
    assert history.events[0].workflow_execution_started_event_attributes.workflow_type.name == workflow_type
    await replayer(IncidentRemediationWorkflow, SimulatedIncidentWorkflow, NamespaceLockWorkflow).replay_workflow(
        history)  # raises if not


@workflow.defn(name="IncidentRemediationWorkflow", sandboxed=False)
class RemediationThatSkipsItsWork:
    """A remediation that finishes at once: not what its recorded history says it did."""

    @workflow.run
    async def run(self, request: RemediationRequest) -> None:
        return None


async def test_a_workflow_that_acts_differently_fails_to_replay() -> None:
    with pytest.raises(workflow.NondeterminismError):
        await replayer(RemediationThatSkipsItsWork).replay_workflow(recorded("IncidentRemediationWorkflow"))


async def record(directory: Path, workflow_types: list[str]) -> None:
    """Run one episode on a throwaway embedded stack and write the histories of `workflow_types` to `directory`."""
    with tempfile.TemporaryDirectory() as data_dir:
        os.environ.update(isolated_env(Path(data_dir)))
        get_settings.cache_clear()
        settings = get_settings().model_copy(update={"tool_execution": "local"})
        await stack.up(settings)
        try:
            client = await connect(settings)
            async with AsyncExitStack() as workers:
                for worker in build_workers(client, settings):
                    await workers.enter_async_context(worker)
                scenario = next(s for s in load_scenarios() if s.fault == SCENARIO_FAULT)
                episode_id = f"replay-{uuid.uuid4().hex[:8]}"
                result = await run_episode(client, settings, scenario, PolicyRef(name="runbook"), episode_id)
                remediation = client.get_workflow_handle(result.outcome.workflow_id)
                incident = (await remediation.query("trajectory", result_type=Trajectory)).incident
            recorded_ids = {"SimulatedIncidentWorkflow": episode_id, "IncidentRemediationWorkflow": remediation.id,
                            "NamespaceLockWorkflow": lock_id(incident.namespace, incident.kubeconfig)}
            for workflow_type in workflow_types:
                workflow_id = recorded_ids[workflow_type]
                history = await client.get_workflow_handle(workflow_id).fetch_history()
                path = directory / RECORDED[workflow_type].name
                saved = {"workflow_id": workflow_id, "history": json.loads(history.to_json())}
                path.write_text(json.dumps(saved, indent=1) + "\n")
                print(f"{path}: {len(history.events)} events, {result.outcome.steps} steps, {result.outcome.outcome}")
        finally:
            await stack.down(settings)


if __name__ == "__main__":
    HISTORIES.mkdir(exist_ok=True)
    asyncio.run(record(HISTORIES, sys.argv[1:] or sorted(RECORDED)))
