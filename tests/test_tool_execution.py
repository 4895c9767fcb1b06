"""Where tool calls run (TaskQueues.tool_execution) and what a crash costs in each mode, against the real dev server,
simulator and workers; and the worker wiring that lets tools share the workflows' queue."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest
from crash_once_worker import CRASH_EXIT_CODE
from isolated_workers import isolated_queues, running_workers
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from worker_process import start_worker, stop_worker

from agent_sre import faults
from agent_sre.config import Settings
from agent_sre.models.episode import EpisodeRequest
from agent_sre.models.incident import Incident, RemediationLimits
from agent_sre.models.remediation import IncidentOutcome, PolicyRef, ToolExecution
from agent_sre.models.tools import MAX_WAIT_S, ToolCall
from agent_sre.scenarios import load_scenarios
from agent_sre.simulator.client import SimulatorClient
from agent_sre.temporal import connect, start_incident, task_queues
from agent_sre.tools.client import api_client
from agent_sre.workers.main import queue_contents
from agent_sre.workflows.incident import (
    ENDING,
    FAULT_CLASS,
    MODEL_VERSION,
    OUTCOME,
    SERVICE,
    IncidentRemediationWorkflow,
)
from agent_sre.workflows.options import QUICK_TIMEOUT
from agent_sre.workflows.simulated import SimulatedIncidentWorkflow, environment_name

SCENARIO = next(s for s in load_scenarios() if s.fault == "bad_image")
QUICK_S = QUICK_TIMEOUT.total_seconds()


def test_queues_configured_with_one_name_serve_the_contents_of_each(settings: Settings) -> None:
    one = settings.model_copy(update={"queue_tools": settings.queue_agent, "queue_policy": settings.queue_agent})
    contents = queue_contents(one)
    assert set(contents) == {settings.queue_agent, settings.queue_training}
    workflows, activities = contents[settings.queue_agent]
    names = [fn.__name__ for fn in activities]
    assert {"IncidentRemediationWorkflow", "SimulatedIncidentWorkflow"} <= {w.__name__ for w in workflows}
    assert {"run_tool", "observe", "create_and_inject", "decide_next_action", "store_trajectory"} <= set(names)
    assert len(names) == len(set(names))  # each registered once, or the worker refuses to start


def test_the_workflows_queue_can_run_the_cluster_activities_locally(settings: Settings) -> None:
    """`local` runs them as local activities: only activities registered on the workflow's worker can."""
    contents = queue_contents(settings)
    on_agent = {fn.__name__ for fn in contents[settings.queue_agent][1]}
    assert {fn.__name__ for fn in contents[settings.queue_tools][1]} <= on_agent


def _of_type(events: list, event_type: int) -> list:
    return [e for e in events if e.event_type == event_type]


async def _activities_and_markers(client: Client, workflow_id: str) -> tuple[Counter[tuple[str, str]], int]:
    """(activity type, task queue) of every scheduled activity, and how many local-activity markers."""
    events = (await client.get_workflow_handle(workflow_id).fetch_history()).events
    scheduled = Counter((e.activity_task_scheduled_event_attributes.activity_type.name,
                         e.activity_task_scheduled_event_attributes.task_queue.name)
                        for e in _of_type(events, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED))
    markers = _of_type(events, EventType.EVENT_TYPE_MARKER_RECORDED)
    return scheduled, sum(e.marker_recorded_event_attributes.marker_name == "core_local_activity" for e in markers)


@pytest.mark.parametrize("mode", ["queue", "local"])
async def test_each_mode_runs_the_episode_where_it_says(stack: Settings, mode: ToolExecution) -> None:
    client = await connect(stack)
    script = [ToolCall(tool="list_pods"), ToolCall(tool="rollout_undo", args={"deployment": SCENARIO.target}),
              ToolCall(tool="rollout_status", args={"deployment": SCENARIO.target})]
    async with running_workers(client, stack) as settings:
        queues = task_queues(settings).model_copy(update={"tool_execution": mode})
        episode_id = f"episode-mode-{mode}-{uuid.uuid4().hex[:8]}"
        result = await client.execute_workflow(
            SimulatedIncidentWorkflow.run,
            EpisodeRequest(scenario=SCENARIO, policy=PolicyRef(name="scripted", script=script), queues=queues,
                           limits=RemediationLimits(settle_s=0)),
            id=episode_id, task_queue=settings.queue_agent)
        parent, parent_markers = await _activities_and_markers(client, episode_id)
        timeouts = await _activity_timeouts(client, result.outcome.workflow_id)
        child, child_markers = await _activities_and_markers(client, result.outcome.workflow_id)
        child_events = (await client.get_workflow_handle(result.outcome.workflow_id).fetch_history()).events
        listed = (await client.get_workflow_handle(result.outcome.workflow_id).describe()).typed_search_attributes
    assert result.outcome.outcome == "resolved" and result.outcome.writes == 1 and result.outcome.steps == 4
    assert result.environment == environment_name(episode_id)
    assert result.environment not in {e["name"] for e in SimulatorClient(stack.sim_url).list_envs()}
    # The episode starts the remediation with what it is listed by; the remediation upserts only how it ended, once
    # (besides TemporalChangeVersion, which the SDK upserts itself for each `workflow.patched` taken).
    upserts = _of_type(child_events, EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES)
    ours = [sorted(set(e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields)
                   - {"TemporalChangeVersion"}) for e in upserts]
    assert [fields for fields in ours if fields] == [["Ending", "Outcome"]]
    assert (listed[FAULT_CLASS], listed[SERVICE], listed[MODEL_VERSION], listed[ENDING], listed[OUTCOME]) == (
        SCENARIO.ground_truth.fault_class, SCENARIO.alert.labels["service"], "runbook-v1", "finished", "resolved")
    tools = settings.queue_tools
    if mode == "queue":
        assert parent == Counter({("create_and_inject", tools): 1, ("delete_environment", tools): 1})
        # No snapshot_cluster: the injection's snapshot, taken as the alert fired, is the baseline. Before its one
        # write the remediation asks for the namespace's write lease, on its own queue.
        assert child == Counter({("run_tool", tools): 3, ("observe", tools): 1,
                                 ("request_lease", settings.queue_agent): 1})
        # rollout_status may wait up to MAX_WAIT_S for the cluster: its activity may take that much longer.
        assert sorted(timeouts) == [QUICK_S, QUICK_S, QUICK_S, QUICK_S, QUICK_S + MAX_WAIT_S]
    else:  # reads beside the workflow; the one write an activity of its own, on the workflow's queue
        assert parent == Counter() and parent_markers == 2
        assert child == Counter({("run_tool", settings.queue_agent): 1, ("request_lease", settings.queue_agent): 1})
        assert child_markers == 9  # 4 decisions, the 2 reads, observe, reward, store
        assert timeouts == [QUICK_S, QUICK_S]


async def _activity_timeouts(client: Client, workflow_id: str) -> list[float]:
    """The start-to-close timeout, in seconds, of every activity the workflow scheduled."""
    events = (await client.get_workflow_handle(workflow_id).fetch_history()).events
    return [e.activity_task_scheduled_event_attributes.start_to_close_timeout.ToTimedelta().total_seconds()
            for e in _of_type(events, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)]


def _crash_worker(settings: Settings, marker: Path, log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, AGENT_SRE_QUEUE_AGENT=settings.queue_agent, AGENT_SRE_QUEUE_TOOLS=settings.queue_tools,
               AGENT_SRE_QUEUE_POLICY=settings.queue_policy, AGENT_SRE_QUEUE_TRAINING=settings.queue_training)
    script = Path(__file__).with_name("crash_once_worker.py")
    return subprocess.Popen([sys.executable, str(script), str(marker)], env=env, stdout=log.open("wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)


async def test_a_crash_after_a_local_read_re_runs_the_reads_and_writes_once(stack: Settings, tmp_path: Path) -> None:
    """The worker dies after a local read ran but before its workflow task completed: the next worker re-runs the
    reads since the last committed write, and every write still happens exactly once."""
    settings = isolated_queues(stack).model_copy(update={"tool_execution": "local"})
    sim = SimulatorClient(stack.sim_url)
    env = sim.create_env(apps=[SCENARIO.app], seed=SCENARIO.seed)
    faults.inject(api_client(env["server"]), SCENARIO)
    audit_before = len(sim.audit(env["name"]))
    bystander = next(name for name in ("frontend", "catalog") if name != SCENARIO.target)
    script = [ToolCall(tool="list_pods"),
              ToolCall(tool="rollout_restart", args={"deployment": bystander}),  # committed before the crash
              ToolCall(tool="get_events"),  # the worker dies right after this one ran
              ToolCall(tool="rollout_undo", args={"deployment": SCENARIO.target})]
    incident = Incident(id=uuid.uuid4().hex[:12], alert=SCENARIO.alert, namespace=SCENARIO.namespace,
                        kubeconfig=env["server"], scenario=SCENARIO, limits=RemediationLimits(settle_s=0))
    client = await connect(settings)
    marker = tmp_path / "crashed"
    crashing = _crash_worker(settings, marker, tmp_path / "crash-worker.log")
    try:
        started = await start_incident(client, incident, policy=PolicyRef(name="scripted", script=script),
                                       settings=settings)
        code = await asyncio.to_thread(crashing.wait, 60)
    finally:
        if crashing.poll() is None:
            crashing.kill()
            crashing.wait()
    crash_log = (tmp_path / "crash-worker.log").read_text()
    assert code == CRASH_EXIT_CODE and marker.read_text() == started.workflow_id, crash_log
    second = start_worker(tmp_path / "worker.log", AGENT_SRE_QUEUE_AGENT=settings.queue_agent,
                          AGENT_SRE_QUEUE_TOOLS=settings.queue_tools, AGENT_SRE_QUEUE_POLICY=settings.queue_policy,
                          AGENT_SRE_QUEUE_TRAINING=settings.queue_training)
    try:
        outcome: IncidentOutcome = await asyncio.wait_for(started.handle.result(), timeout=120)
        trajectory = await started.handle.query(IncidentRemediationWorkflow.trajectory)
    finally:
        stop_worker(second)
    assert outcome.outcome == "resolved" and outcome.writes == 2 and outcome.steps == 5, outcome
    assert trajectory is not None and [s.action.tool for s in trajectory.steps if s.action] == [
        "list_pods", "rollout_restart", "get_events", "rollout_undo", "finish"]
    writes = [r for r in sim.audit(env["name"])[audit_before:] if r.get("idempotency_key")]
    per_key = Counter(r["idempotency_key"] for r in writes)
    assert len(per_key) == 2 and set(per_key.values()) == {1}, per_key
