"""ContinuousLearningWorkflow against the session's real Temporal dev server and S3 store, with the tiny model
trained for real (TrainingCycleWorkflow as its child): a cycle below the data threshold is skipped and commits
nothing; a cycle whose candidate passes every gate registers it with its data, commits the watermark and starts a
rollout that outlives it (the incidents its production gate re-creates are not trained on), and the next cycle
skips while that rollout runs; a failing gate archives the candidate, starts no rollout and leaves the data for the
next cycle."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from isolated_workers import running_workers, terminate_running
from learning_fixtures import recent
from llm_fixtures import runbook_episode
from rich.console import Console
from store_fixtures import settings_with_own_bucket
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError
from typer.testing import CliRunner

from agent_sre.cli import app
from agent_sre.cli import learn as learn_cli
from agent_sre.config import Settings
from agent_sre.learning import store as streams
from agent_sre.models.learning import CycleRecord, LearningConfig, LearningCycleInput
from agent_sre.models.rollout import AnalyzeStep, BakeStep, RolloutPlan, SetWeightStep
from agent_sre.models.trajectory import Trajectory
from agent_sre.registry import Registry
from agent_sre.scenarios import default_catalog, heldout_suite, load_scenarios
from agent_sre.storage import object_store
from agent_sre.temporal import connect
from agent_sre.trajectory_store import write_trajectory
from agent_sre.workflows.learning import ContinuousLearningWorkflow

BASE = "tiny-v0"
# production's incidents in these tests: two catalog scenarios of one fault class that the runbook resolves; the
# replay split keeps one of a class out of training to evaluate on (REPLAYED, the first by its hash)
REPLAYED, TRAINED = "bad-image-cart-s0", "bad-image-checkout-s0"
HOLD = RolloutPlan(name="hold", steps=[SetWeightStep(weight=10), BakeStep(duration=timedelta(hours=1)),
                                       AnalyzeStep(), SetWeightStep(weight=100)])
LENIENT = {"success_rate": 1, "false_positive_rate": 1, "harmful_rate": 1, "invalid_action_rate": 1}


class Stream:
    """A bucket of the test's own with the tiny model registered, workers on isolated queues, and a learning
    stream whose rollouts run on them."""

    def __init__(self, settings: Settings, client: Client, isolated: Settings) -> None:
        self.settings, self.client, self.isolated = settings, client, isolated
        self.registry = Registry.from_settings(settings)
        self.s3 = object_store(settings)
        self.started: list[str] = []

    def config(self, **kw: Any) -> LearningConfig:
        training = {"algorithm": "sft", "base": BASE, "requested_by": "test",
                    "sft": {"expert_policies": ["runbook"], "max_steps": 2, "learning_rate": 2e-3,
                            "lr_scheduler": "constant", "max_length": 2048},
                    "evaluation": {"suite": str(heldout_suite()), "limit": 1, "max_turns": 1, "max_new_tokens": 8,
                                   "tolerances": kw.pop("tolerances", LENIENT)}}
        return LearningConfig.model_validate({
            "name": f"t-{uuid.uuid4().hex[:8]}", "training": training, "min_episodes": 2, "settle_s": 0,
            "replay_eval_share": 0.99, "replay_eval_limit": 1, "rollout_queue": self.isolated.queue_agent,
            "rollout_workflow_id": f"rollout-{uuid.uuid4().hex[:8]}", **kw})

    def serve(self, n: int) -> list[str]:
        """n resolved production episodes, of the replayed and the trained scenario in turn; returns their keys."""
        catalog = {s.name: s for s in load_scenarios(default_catalog())}
        keys = []
        for i in range(n):
            scenario = catalog[(REPLAYED, TRAINED)[i % 2]]
            t: Trajectory = recent(runbook_episode(run_id=f"run-{uuid.uuid4().hex[:6]}"))
            t = t.model_copy(update={"incident": t.incident.model_copy(update={"scenario": scenario})})
            keys.append(write_trajectory(self.s3, self.settings.s3_bucket, t).key)
        return keys

    async def cycle(self, config: LearningConfig) -> CycleRecord:
        workflow_id = f"learning-{config.name}-{uuid.uuid4().hex[:6]}"
        self.started += [workflow_id, f"{workflow_id}-training", config.rollout_workflow_id]
        return await self.client.execute_workflow(
            ContinuousLearningWorkflow.run, LearningCycleInput(config=config, cutoff=datetime.now(UTC)),
            id=workflow_id, task_queue=self.isolated.queue_training)


@pytest.fixture
async def stream(temporal_server: Settings, s3_store: Settings,
                 tiny_model_dir: Path) -> AsyncIterator[Stream]:
    with settings_with_own_bucket(s3_store, "cycle") as settings:
        Registry.from_settings(settings).register(BASE, policy="llm", by="test", weights_dir=tiny_model_dir,
                                                  reason="tiny test base")
        client = await connect(settings)
        async with running_workers(client, settings) as isolated:
            s = Stream(settings, client, isolated)
            try:
                yield s
            finally:
                await terminate_running(client, s.started)


async def test_a_cycle_below_the_data_threshold_is_skipped_and_commits_nothing(stream: Stream) -> None:
    stream.serve(2)
    config = stream.config(min_episodes=3)
    record = await stream.cycle(config)
    assert record.status == "skipped" and record.training is None and record.version is None
    assert record.reason == "2 usable new episodes (2 accepted), fewer than 3: the data waits"
    assert record.data is not None and record.data.dataset is None  # nothing stored for a skipped cycle
    state = streams.read_state(stream.s3, stream.settings.s3_bucket, config.name)
    assert state.watermark is None and state.claim is None and not state.learnt
    assert streams.list_records(stream.s3, stream.settings.s3_bucket, config.name) == [record]
    with pytest.raises(RPCError, match="not found"):  # no training was started
        await stream.client.get_workflow_handle(f"{record.cycle_id}-training").describe()


async def test_a_passing_cycle_registers_commits_and_starts_a_rollout_that_the_next_cycle_waits_for(
        stream: Stream, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(learn_cli, "console", Console(width=250))
    keys = stream.serve(3)
    config = stream.config(rollout_plan=HOLD.model_dump(mode="json"))
    record = await stream.cycle(config)

    assert record.status == "registered", record.reason
    assert record.version is not None and record.base == BASE and record.production == "runbook-v1"
    data = record.data
    assert data is not None and (data.episodes, data.usable) == (3, 3)
    sources = streams.read_sources(stream.s3, stream.settings.s3_bucket, data.sources)
    assert sorted(i.uri for i in sources) == sorted(f"s3://{stream.settings.s3_bucket}/{k}" for k in keys)
    assert data.replay.evaluate == [REPLAYED] and data.replay.train == [TRAINED]
    # the incidents the production gate re-creates are not trained on: 2 of the 3 episodes are REPLAYED's
    assert record.training is not None and record.training.registered and record.training.data.episodes == 1
    assert record.training.data.counts["filtered: evaluation scenario"] == 2
    candidate, production = record.production_eval
    assert (candidate.version, production.version) == (record.version, "runbook-v1")
    assert production.overall.success_rate == 1.0 and record.production_gate.passed
    # the version says exactly what it learnt from: its dataset, pinned by hash, and through it this record
    card = stream.registry.card(record.version)
    assert card.training_request["data"]["trajectories"]["objects"] == [data.dataset_key]
    assert [i.sha256 for i in card.data_manifest] == [data.dataset.sha256]
    stored = streams.record_of_dataset(stream.s3, stream.settings.s3_bucket, data.dataset_key)
    assert stored == record and stored.watermark is not None and stored.watermark.through == data.window_end
    shown = await asyncio.to_thread(CliRunner().invoke, app, ["learn", "show", record.version, "--name", config.name])
    assert shown.exit_code == 0, shown.output
    text = re.sub(r"\s+", " ", shown.output)
    assert f"status │ registered: {record.version} passed its gates" in text and "committed │ watermark" in text
    assert all(f"{i.uri} sha256 {i.sha256[:12]}" in text for i in sources) and "sources │ 3 objects" in text
    # the rollout outlives the cycle, and the next cycle waits for it
    assert record.rollout is not None and record.rollout.request.candidate == record.version
    rollout = stream.client.get_workflow_handle(record.rollout.workflow_id)
    assert (await rollout.describe()).status == WorkflowExecutionStatus.RUNNING
    assert stream.registry.get(record.version).stage == "canary"
    stream.serve(3)
    after = await stream.cycle(config)
    assert after.status == "skipped" and after.reason.startswith(f"a rollout is still running as "
                                                                 f"{config.rollout_workflow_id}")
    state = streams.read_state(stream.s3, stream.settings.s3_bucket, config.name)
    assert state.watermark == record.watermark and state.committed_cycles == 1 and state.claim is None


async def test_a_failing_gate_archives_the_candidate_starts_no_rollout_and_keeps_the_data(stream: Stream) -> None:
    stream.serve(3)
    # held-out: the trained tiny model may not lose success against the tiny base (both resolve nothing);
    # production: it resolves nothing where the runbook in production resolves everything
    strict = {**LENIENT, "success_rate": 0}
    config = stream.config(rollout_plan=HOLD.model_dump(mode="json"), tolerances=strict)
    record = await stream.cycle(config)

    assert record.status == "rejected", record.reason
    assert record.reason.startswith(f"{record.version} is worse than production runbook-v1 on re-created recent "
                                    "incidents: success rate 0.0% vs parent 100.0% (tolerance 0.0%): worse beyond")
    assert record.production_gate is not None and not record.production_gate.passed
    assert record.production_gate.reasons[0].startswith("success rate 0.0% vs parent 100.0%")
    assert ": ok" not in record.reason  # only what failed
    version = stream.registry.get(record.version)
    assert version.stage == "archived" and "failed the training gate against runbook-v1" in version.history[-1].reason
    assert record.rollout is None
    assert stream.registry.production().version == "runbook-v1" and not stream.registry.index().in_stage("canary")
    state = streams.read_state(stream.s3, stream.settings.s3_bucket, config.name)
    assert state.watermark is None and not state.learnt and state.claim is None
