"""The continuous-learning cycle's activities, on the training task queue beside the training cycle's:

- `begin_cycle`: claim the stream for this cycle, or say why it does not run (another cycle of the stream is
  running, or a rollout is: a candidate is judged on production traffic before the next one is trained).
- `gather_cycle_data`: the episodes written since the watermark, validated, de-duplicated, redacted and scored
  (agent_sre.learning.data); stores the cycle's dataset and writes the replay scenario files.
- `prepare_rollout`: the registry's checks before a rollout starts, and its request.
- `finish_cycle`: commit the cycle's data (watermark and episodes learnt, one compare-and-swap) or only let go of
  the stream, then store the cycle's record.

Refusals that retrying cannot fix (a damaged state, a rollout the registry does not allow) are non-retryable
errors with the reason; store errors are retried by Temporal.
"""

from __future__ import annotations

import asyncio
import hashlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from agent_sre import cas
from agent_sre.activities.training import refuse
from agent_sre.learning import store as streams
from agent_sre.learning.data import episodes_file, gather, learnt_by_day, usable_for
from agent_sre.learning.replay import replay_sets, scenario_file
from agent_sre.models.learning import (
    BeginCycle,
    CycleData,
    CycleRecord,
    CycleStart,
    FinishRequest,
    GatherRequest,
    LearningConfig,
    ReplaySet,
    RolloutPrep,
    Watermark,
)
from agent_sre.models.rollout import RolloutRequest
from agent_sre.models.trajectory import Trajectory
from agent_sre.registry import Registry, RegistryError
from agent_sre.rollout.client import RolloutRunningError, preflight
from agent_sre.scenarios import ScenarioError
from agent_sre.training.gate import load_suite


async def running(client: Client, workflow_id: str, run_id: str | None = None) -> bool:
    """Whether the workflow (its latest run, unless `run_id` names one) is running now."""
    try:
        return (await client.get_workflow_handle(workflow_id, run_id=run_id).describe()).status \
            == WorkflowExecutionStatus.RUNNING
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return False
        raise


def base_version(versions: Registry, config: LearningConfig) -> tuple[str, str]:
    """(production version, the version to train from): production when it is a model and the config says so."""
    production = versions.production().version
    if config.from_production and versions.card(production).files:
        return production, production
    return production, config.training.base


def write_replay(versions: Registry, data_dir: Path, folder: str, config: LearningConfig,
                 episodes: list[Trajectory]) -> ReplaySet:
    """The replay scenario files: on this worker's disk for the training job and the evaluation (which run on the
    training queue too), and in the store with the cycle's record."""
    _, suite = load_suite(config.training.evaluation)
    sets = replay_sets(episodes, config.replay_eval_share, config.replay_eval_limit, {s.name for s in suite})
    out = ReplaySet(train=[s.name for s in sets.train], evaluate=[s.name for s in sets.evaluate],
                    not_replayable=dict(sets.not_replayable))
    local = data_dir.resolve() / folder
    client, bucket = versions.client, versions.bucket
    for kind, scenarios in (("train", sets.train), ("eval", sets.evaluate)):
        if not scenarios:
            continue
        body = scenario_file(scenarios)
        path = local / f"replay-{kind}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
        out.stored.append(streams.put(client, bucket, f"{folder}replay-{kind}.yaml", body, "application/yaml",
                                      rows=len(scenarios)))
        if kind == "train":
            out.train_file = str(path)
        else:
            out.evaluate_file = str(path)
    return out


def commit_data(versions: Registry, record: CycleRecord, late_days: int) -> Watermark:
    """Move the watermark over the cycle's window and record its episodes as learnt, after checking that its
    dataset is still the one trained on."""
    data = record.data
    if data is None or data.dataset is None or data.dataset_key is None:
        raise ValueError(f"cycle {record.cycle_id} has no dataset to commit")
    client, bucket = versions.client, versions.bucket
    found = cas.read(client, bucket, data.dataset_key)
    if found is None or hashlib.sha256(found[0]).hexdigest() != data.dataset.sha256:
        raise ValueError(f"{data.dataset.uri} changed or disappeared since the cycle trained on it; nothing committed")
    mark = Watermark(through=data.window_end, cycle_id=record.cycle_id, committed_at=datetime.now(UTC))
    state = streams.commit(client, bucket, record.name, mark, learnt_by_day(found[0]),
                           keep_from=(data.window_end - timedelta(days=late_days)).date())
    assert state.watermark is not None
    return state.watermark


class LearningActivities:
    """Built once per worker with the registry (short store timeouts: Temporal's retry policies own the retries),
    whose store and bucket hold the streams' state and the cycles' data too, and the worker's data directory (the
    replay scenario files)."""

    def __init__(self, registry: Registry, data_dir: Path) -> None:
        self._registry, self._data_dir = registry, data_dir

    @activity.defn
    async def begin_cycle(self, req: BeginCycle) -> CycleStart:
        config, client = req.config, activity.client()
        s3, bucket = self._registry.client, self._registry.bucket
        try:
            production, base = await asyncio.to_thread(base_version, self._registry, config)
            if await running(client, config.rollout_workflow_id):
                return CycleStart(skip=f"a rollout is still running as {config.rollout_workflow_id}: a candidate is "
                                       "judged on production traffic before the next one is trained",
                                  production=production, base=base)
            state = await asyncio.to_thread(streams.read_state, s3, bucket, config.name)
            held, stale = state.claim, None
            if held is not None and held.cycle_id != req.claim.cycle_id:
                if await running(client, held.workflow_id, held.run_id):
                    return CycleStart(skip=f"cycle {held.cycle_id} of {config.name} is still running",
                                      production=production, base=base)
                stale = held.cycle_id
            state = await asyncio.to_thread(streams.claim, s3, bucket, config.name, req.claim, stale)
        except streams.ClaimHeld as exc:
            return CycleStart(skip=str(exc), production=production, base=base)
        except (ValueError, RegistryError) as exc:
            raise refuse(exc) from exc
        return CycleStart(watermark=state.watermark, production=production, base=base, took_over=stale)

    @activity.defn
    def gather_cycle_data(self, req: GatherRequest) -> CycleData:
        config = req.config
        client, bucket = self._registry.client, self._registry.bucket
        try:
            state = streams.read_state(client, bucket, config.name)
            if state.claim is None or state.claim.cycle_id != req.cycle_id:
                raise ValueError(f"cycle {req.cycle_id} does not hold {config.name}; it must not read its data")
            got = gather(client, bucket, config, state, req.cutoff - timedelta(seconds=config.settle_s),
                         usable_for(config.training), on_object=activity.heartbeat)
            if got.data.usable >= config.min_episodes:  # a skipped cycle stores nothing: the next reads it again
                folder = streams.cycle_dir(config.name, req.cutoff, req.cycle_id)
                got.data.dataset = streams.put(client, bucket, folder + "episodes.jsonl", episodes_file(got.episodes),
                                               "application/x-ndjson", rows=len(got.episodes))
                got.data.sources = streams.put_sources(client, bucket, folder + "sources.json", got.sources)
                if config.replay:
                    got.data.replay = write_replay(self._registry, self._data_dir, folder, config, got.episodes)
        except (ValueError, ScenarioError) as exc:
            raise refuse(exc) from exc
        return got.data

    @activity.defn
    def prepare_rollout(self, req: RolloutPrep) -> RolloutRequest:
        plan = req.config.rollout_plan
        if plan is None:
            raise refuse(ValueError(f"{req.config.name} has no rollout plan"))
        try:
            baseline = preflight(self._registry, req.candidate, None)
        except (RegistryError, RolloutRunningError) as exc:
            raise refuse(exc) from exc
        return RolloutRequest(candidate=req.candidate, baseline=baseline, plan=plan,
                              requested_by=req.config.training.requested_by,
                              reason=f"continuous learning, cycle {req.cycle_id}: passed the held-out and "
                                     "production gates")

    @activity.defn
    def finish_cycle(self, req: FinishRequest) -> CycleRecord:
        record = req.record.model_copy(deep=True)
        client, bucket = self._registry.client, self._registry.bucket
        try:
            if req.commit:
                record.watermark = commit_data(self._registry, record, req.late_days)
            else:
                streams.release(client, bucket, record.name, record.cycle_id)
            streams.write_record(client, bucket, record)
        except ValueError as exc:
            raise refuse(exc) from exc
        return record
