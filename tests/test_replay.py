"""Recorded histories of the incident workflows replay against the current workflow code.

A workflow resumes by replaying its history: after a worker restart, on another worker, after a deploy. Code that
no longer makes the commands its history recorded fails that replay, and every remediation in flight would stall.
tests/histories/ holds one episode as it ran (the runbook policy, tool execution `local`, a 2 s settle window):
SimulatedIncidentWorkflow and its child IncidentRemediationWorkflow; and, recorded later, the NamespaceLockWorkflow
that lent its namespace to such a remediation's write (still running: it waits for the next request). And the
long-running workflows, the ones most likely to be running when code changes (tests/record_long_running.py says
how each was recorded): every run of ModelRolloutWorkflow's continue-as-new chain for rollouts promoted, rolled
back and aborted (model-rollout-*.json), and ContinuousLearningWorkflow cycles (learning-cycle-*.json). These tests
replay each with `Replayer`, no server involved.

When a replay fails, the change alters what the workflow does at some point of its history:

- Workflows already running would see it (most changes): branch on `workflow.patched("<change id>")`, keeping
  the old path for histories recorded before it, so both the recorded histories and the running workflows replay.
  Once none of those can be running any more, `workflow.deprecate_patch` and then remove the old path.
- Nothing recorded before it can still be running (a dev store wiped, a workflow renamed): re-record, from the
  repository root, with

      .venv/bin/python tests/test_replay.py [WorkflowType ...]

  which records on a throwaway embedded stack and rewrites tests/histories/ (or only the histories of the
  workflow types named). Commit the new files with the change, saying why the old histories no longer apply.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
from recorded_histories import HISTORIES, LEARNING_FILES, ROLLOUT_FILES, load, save, throwaway_stack, type_of
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from agent_sre.episodes import run_episode
from agent_sre.models.lock import lock_id
from agent_sre.models.remediation import PolicyRef, RemediationRequest
from agent_sre.models.rollout import RolloutRequest, RolloutResult
from agent_sre.models.trajectory import Trajectory
from agent_sre.scenarios import load_scenarios
from agent_sre.temporal import connect
from agent_sre.workers.main import build_workers
from agent_sre.workflows.incident import IncidentRemediationWorkflow
from agent_sre.workflows.learning import ContinuousLearningWorkflow
from agent_sre.workflows.lock import NamespaceLockWorkflow
from agent_sre.workflows.rollout import ModelRolloutWorkflow
from agent_sre.workflows.simulated import SimulatedIncidentWorkflow

RECORDED = {"SimulatedIncidentWorkflow": HISTORIES / "simulated-incident.json",
            "IncidentRemediationWorkflow": HISTORIES / "incident-remediation.json",
            "NamespaceLockWorkflow": HISTORIES / "namespace-lock.json"}
LONG_RUNNING = {"ModelRolloutWorkflow": ROLLOUT_FILES, "ContinuousLearningWorkflow": LEARNING_FILES}
SCENARIO_FAULT = "bad_image"


def recorded(workflow_type: str) -> WorkflowHistory:
    """A history as `record` wrote it: the workflow id (the episode names its child after its own) and the events."""
    return load(RECORDED[workflow_type])


def long_running(name: str) -> list[Path]:
    return sorted(HISTORIES.glob(LONG_RUNNING[name]))


# Runs that do not replay today, with why: strict, so the test fails once they do and the entry must go.
DOES_NOT_REPLAY: dict[str, str] = {}  # history file stem -> why it cannot replay yet (a strict xfail)


def replay_cases(paths: list[Path]) -> list[object]:
    """One case per history, named after its file, those in DOES_NOT_REPLAY expected to fail."""
    return [pytest.param(p, id=p.stem, marks=[pytest.mark.xfail(strict=True, raises=RuntimeError,
                                                                reason=DOES_NOT_REPLAY[p.stem])]
                         if p.stem in DOES_NOT_REPLAY else []) for p in paths]


def rollouts() -> dict[str, list[Path]]:
    """Each recorded rollout's runs, first to last: model-rollout-<rollout>-run<n>.json."""
    runs: dict[str, list[Path]] = {}
    for path in sorted(long_running("ModelRolloutWorkflow"), key=lambda p: int(p.stem.rsplit("-run", 1)[1])):
        runs.setdefault(path.stem.rsplit("-run", 1)[0], []).append(path)
    return runs


def replayer(*workflows: type) -> Replayer:
    return Replayer(workflows=list(workflows), data_converter=pydantic_data_converter)


@pytest.mark.parametrize("workflow_type", sorted(RECORDED))
async def test_recorded_history_replays_on_the_current_code(workflow_type: str) -> None:
    history = recorded(workflow_type)
    assert type_of(history) == workflow_type
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


@pytest.mark.parametrize("path", replay_cases([p for name in sorted(LONG_RUNNING) for p in long_running(name)]))
async def test_every_recorded_run_of_the_long_running_workflows_replays(path: Path) -> None:
    history = load(path)
    assert type_of(history) in LONG_RUNNING
    await replayer(ModelRolloutWorkflow, ContinuousLearningWorkflow).replay_workflow(history)  # raises if not


def test_every_long_running_workflow_has_recorded_runs() -> None:
    """The parametrized replay above would pass, empty, if a re-recording lost a workflow's files."""
    assert rollouts() and all(len(runs) > 1 for runs in rollouts().values())  # each continued as new
    assert long_running("ContinuousLearningWorkflow")


@workflow.defn(name="ModelRolloutWorkflow", sandboxed=False)
class RolloutThatRoutesTwice(ModelRolloutWorkflow):
    """Sets every routing table twice: one activity its recorded history does not have, at each weight change."""

    async def _route(self, weight: float, reason: str, to_candidate_for_good: bool = False) -> None:
        await super()._route(weight, reason, to_candidate_for_good)
        await super()._route(weight, reason, to_candidate_for_good)

    @workflow.run
    async def run(self, req: RolloutRequest) -> RolloutResult:
        return await super().run(req)


@pytest.mark.parametrize("path", [runs[i] for runs in rollouts().values() for i in (0, -1)], ids=lambda p: p.stem)
async def test_a_rollout_that_schedules_another_activity_fails_to_replay(path: Path) -> None:
    with pytest.raises(workflow.NondeterminismError, match="Nondeterminism error: Activity"):  # the extra one
        await replayer(RolloutThatRoutesTwice).replay_workflow(load(path))


async def record(directory: Path, workflow_types: list[str]) -> None:
    """Run one episode on a throwaway embedded stack and write the histories of `workflow_types` to `directory`."""
    async with throwaway_stack() as base:
        settings = base.model_copy(update={"tool_execution": "local"})
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
        print(f"episode {episode_id}: {result.outcome.steps} steps, {result.outcome.outcome}")
        for workflow_type in workflow_types:
            history = await client.get_workflow_handle(recorded_ids[workflow_type]).fetch_history()
            save(directory / RECORDED[workflow_type].name, history)


async def record_all(directory: Path, workflow_types: list[str]) -> None:
    """The episode's workflows in one episode; each long-running workflow by its own recorder."""
    from record_long_running import record_learning, record_rollouts  # recording only: the training stack

    recorders = {"ModelRolloutWorkflow": record_rollouts, "ContinuousLearningWorkflow": record_learning}
    if episode := [t for t in workflow_types if t in RECORDED]:
        await record(directory, episode)
    for workflow_type in workflow_types:
        if workflow_type in recorders:
            await recorders[workflow_type](directory)


if __name__ == "__main__":
    HISTORIES.mkdir(exist_ok=True)
    asyncio.run(record_all(HISTORIES, sys.argv[1:] or [*RECORDED, *LONG_RUNNING]))
