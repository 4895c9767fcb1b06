"""A learning cycle's data against the session's real S3 store (and Temporal, which `begin_cycle` asks whether a
rollout or another cycle is running): the watermark, de-duplication across cycles, a retried cycle that counts
nothing twice, late human feedback, quarantine of bad objects, and the sim-replay scenario sets."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from learning_fixtures import recent
from llm_fixtures import runbook_episode
from store_fixtures import settings_with_own_bucket
from temporalio.testing import ActivityEnvironment

from agent_sre import cas
from agent_sre.config import Settings
from agent_sre.learning import store as streams
from agent_sre.learning.data import usable_for
from agent_sre.learning.replay import replay_scenario, replay_sets, scenario_file
from agent_sre.models.learning import (
    BeginCycle,
    CycleClaim,
    CycleData,
    CycleRecord,
    FinishRequest,
    GatherRequest,
    LearningConfig,
)
from agent_sre.models.registry import DataItem
from agent_sre.models.reward import HumanFeedback
from agent_sre.models.training import DataSelection, OffPolicyConfig, TrainingRequest, TrajectoryFilter
from agent_sre.models.trajectory import Trajectory
from agent_sre.rewards import compute_reward
from agent_sre.scenarios import default_catalog, heldout_suite, load_scenarios
from agent_sre.storage import object_store
from agent_sre.temporal import connect
from agent_sre.trajectory_store import feedback_prefix, write_late_feedback, write_trajectory
from agent_sre.workers.main import build_activities
from agent_sre.workflows.learning import training_request


@pytest.fixture
def bucket_settings(s3_store: Settings) -> Iterator[Settings]:
    with settings_with_own_bucket(s3_store, "learn") as settings:
        yield settings


def config(**kw: Any) -> LearningConfig:
    """SFT on the runbook's episodes: every resolved one is usable."""
    return LearningConfig.model_validate({"name": f"t-{uuid.uuid4().hex[:8]}", "min_episodes": 1, "settle_s": 0,
                                          "training": {"algorithm": "sft", "base": "base",
                                                       "sft": {"expert_policies": ["runbook"]}}, **kw})


def episode(run: int, **kw: Any) -> Trajectory:
    return recent(runbook_episode(run_id=f"run-{run}", **kw))


class Cycle:
    """One cycle's activities, as the workflow calls them."""

    def __init__(self, settings: Settings, conf: LearningConfig, env: ActivityEnvironment) -> None:
        self.settings, self.config, self.env = settings, conf, env
        self.activities = build_activities(settings).learning
        self.id = f"cycle-{uuid.uuid4().hex[:6]}"
        self.cutoff = datetime.now(UTC)  # after the writes it should see (settle_s is 0 here)

    async def begin(self) -> Any:
        claim = CycleClaim(cycle_id=self.id, workflow_id=self.id, run_id="r1", since=datetime.now(UTC))
        return await self.env.run(self.activities.begin_cycle, BeginCycle(config=self.config, claim=claim))

    def gather(self) -> CycleData:
        return self.env.run(self.activities.gather_cycle_data, GatherRequest(config=self.config, cycle_id=self.id,
                                                                        cutoff=self.cutoff))

    def finish(self, data: CycleData, commit: bool) -> CycleRecord:
        record = CycleRecord(name=self.config.name, cycle_id=self.id, run_id="r1", cutoff=self.cutoff,
                             started_at=self.cutoff, status="registered" if commit else "skipped", data=data)
        return self.env.run(self.activities.finish_cycle, FinishRequest(record=record, commit=commit, late_days=2))


@pytest.fixture
async def env(temporal_server: Settings) -> ActivityEnvironment:
    return ActivityEnvironment(client=await connect(temporal_server))


async def test_the_watermark_and_the_learnt_episodes_make_every_episode_count_once(
        bucket_settings: Settings, env: ActivityEnvironment) -> None:
    settings, conf = bucket_settings, config()
    client, bucket = object_store(settings), settings.s3_bucket
    first = [episode(i) for i in range(3)]
    keys = [write_trajectory(client, bucket, t).key for t in first]

    one = Cycle(settings, conf, env)
    start = await one.begin()
    assert start.skip is None and start.watermark is None
    assert (start.production, start.base) == ("runbook-v1", "base")  # production has no weights: the template's
    data = one.gather()
    assert (data.episodes, data.usable, data.new_objects) == (3, 3, 3)
    assert data.sources is not None and data.source_objects == 3
    sources = streams.read_sources(client, bucket, data.sources)
    assert sorted(i.uri for i in sources) == sorted(f"s3://{bucket}/{k}" for k in keys)
    assert all(i.sha256 == hashlib.sha256(cas.read(client, bucket, k)[0]).hexdigest()
               for i, k in zip(sorted(sources, key=lambda i: i.uri), sorted(keys), strict=True))
    assert data.dataset is not None and data.dataset.rows == 3
    again = one.gather()  # a retried activity reads the same objects and stores the same dataset
    assert again.dataset == data.dataset and again.sources == data.sources
    committed = one.finish(data, commit=True)
    assert committed.watermark is not None and committed.watermark.through == one.cutoff
    assert one.finish(data, commit=True).watermark == committed.watermark  # a retried end commits nothing more
    state = streams.read_state(client, bucket, conf.name)
    assert state.claim is None and state.committed_cycles == 1
    assert sum(len(ids) for ids in state.learnt.values()) == 3

    await asyncio.sleep(1.1)  # the store's modification times have whole seconds
    # after the watermark: one episode written again (same key), the same episode under another model partition,
    # and one new episode rated twice, at the same time, after its feedback window
    write_trajectory(client, bucket, first[0])
    write_trajectory(client, bucket, first[1].model_copy(update={"model_version": "runbook-v2"}))
    fresh = episode(7)
    fresh_key = write_trajectory(client, bucket, fresh).key
    now = datetime.now(UTC)
    late = [HumanFeedback(rating=-1, comment="fixed the wrong thing", author="oncall", at=now),
            HumanFeedback(rating=-1, comment="and paged nobody", author="lead", at=now)]
    await asyncio.gather(*(asyncio.to_thread(write_late_feedback, client, bucket, fresh_key, fresh.workflow_id, f)
                           for f in late))
    junk = b'{"rating": 1}'  # not a feedback.v1: skipped with a warning, the episode still learnt from
    client.put_object(bucket, feedback_prefix(fresh_key) + "junk.json", io.BytesIO(junk), len(junk))

    two = Cycle(settings, conf, env)
    assert (await two.begin()).watermark == committed.watermark
    data = two.gather()
    assert (data.new_objects, data.episodes, data.late_feedback) == (3, 1, 1)
    assert data.counts["rejected: duplicate"] == 2
    reasons = [r.reasons[0] for r in data.rejected]
    assert all(f"learnt from in cycle {one.id}" in r for r in reasons) and len(reasons) == 2
    stored = cas.read(client, bucket, data.dataset_key)
    assert stored is not None
    [trained] = [Trajectory.model_validate_json(line) for line in stored[0].decode().splitlines()]
    assert trained.run_id == "run-7" and sorted(f.author for f in trained.feedback) == ["lead", "oncall"]
    assert trained.reward is not None and trained.reward.components["feedback"] == -2.0
    assert trained.reward == compute_reward(fresh.model_copy(update={"feedback": trained.feedback}), conf.reward)
    # skipped: nothing is committed and the next cycle reads the same window again
    two.finish(data, commit=False)
    three = Cycle(settings, conf, env)
    assert (await three.begin()).watermark == committed.watermark
    assert three.gather().episodes == 1


async def test_one_cycle_at_a_time_and_a_stale_claim_is_taken_over(bucket_settings: Settings,
                                                                   env: ActivityEnvironment) -> None:
    settings, conf = bucket_settings, config()
    client, bucket = object_store(settings), settings.s3_bucket
    holder = CycleClaim(cycle_id="elsewhere", workflow_id="not-a-running-workflow", run_id=str(uuid.uuid4()),
                        since=datetime.now(UTC))
    streams.claim(client, bucket, conf.name, holder)
    with pytest.raises(streams.ClaimHeld, match="cycle elsewhere"):
        streams.claim(client, bucket, conf.name, holder.model_copy(update={"cycle_id": "other"}))
    cycle = Cycle(settings, conf, env)
    start = await cycle.begin()  # the holder's workflow is not running: its claim is stale
    assert start.skip is None and start.took_over == "elsewhere"
    assert streams.read_state(client, bucket, conf.name).claim.cycle_id == cycle.id
    with pytest.raises(Exception, match="does not hold"):
        Cycle(settings, conf, env).gather()


async def test_bad_objects_are_quarantined_with_the_reason_and_the_cycle_goes_on(
        bucket_settings: Settings, env: ActivityEnvironment) -> None:
    settings, conf = bucket_settings, config()
    client, bucket = object_store(settings), settings.s3_bucket
    good = write_trajectory(client, bucket, episode(1)).key
    day = datetime.now(UTC).date().isoformat()
    bad = {f"trajectories/date={day}/model=runbook-v1/broken__1.jsonl": b'{"schema_version": "trajectory.v1"}\n',
           f"trajectories/date={day}/model=runbook-v1/empty__1.jsonl": b"\n",
           f"trajectories/date={day}/model=runbook-v1/binary__1.jsonl": b"\xff\xfe\x00garbage",
           # one good line and one bad: the whole object is quarantined
           f"trajectories/date={day}/model=runbook-v1/mixed__1.jsonl":
               episode(2).model_dump_json().encode() + b"\nnot json\n"}
    for key, body in bad.items():
        client.put_object(bucket, key, io.BytesIO(body), len(body))
    unjudged = write_trajectory(client, bucket, episode(3).model_copy(update={"verdict": None})).key

    cycle = Cycle(settings, conf, env)
    await cycle.begin()
    data = cycle.gather()

    assert data.episodes == 1 and [i.uri for i in streams.read_sources(client, bucket, data.sources)] \
        == [f"s3://{bucket}/{good}"]
    quarantined = {q.key: q for q in data.quarantined}
    assert set(quarantined) == set(bad)
    assert quarantined[next(k for k in bad if "empty" in k)].reasons == ["empty: no trajectory line in the object"]
    assert quarantined[next(k for k in bad if "broken" in k)].reasons[0].startswith("line 1: schema: not a traj")
    assert quarantined[next(k for k in bad if "mixed" in k)].reasons[0].startswith("line 2: schema:")
    for key, body in bad.items():  # copied aside with the reason; the original stays where it was
        entry = quarantined[key]
        assert cas.read(client, bucket, entry.copy_key)[0] == body == cas.read(client, bucket, key)[0]
        reason = json.loads(cas.read(client, bucket, entry.copy_key + ".reason.json")[0])
        assert reason["reasons"] == entry.reasons and reason["key"] == key
    # an incomplete episode is refused with its reason, not quarantined: its object is trajectory data
    assert data.counts["rejected: incomplete"] == 1
    assert any(r.key == unjudged and "no verdict" in " ".join(r.reasons) for r in data.rejected)


def test_replay_sets_split_by_scenario_keep_the_evaluation_suite_out_and_read_back(tmp_path: Path) -> None:
    catalog = load_scenarios(default_catalog())
    heldout = load_scenarios(heldout_suite())

    def served(scenario: Any, run: int) -> Trajectory:
        t = runbook_episode(run_id=f"run-{run}")
        return t.model_copy(update={"incident": t.incident.model_copy(update={"scenario": scenario})})

    episodes = [served(s, i) for i, s in enumerate(catalog[:30] + catalog[:5] + heldout[:2])]
    real_alert = runbook_episode(run_id="run-99")
    real_alert = real_alert.model_copy(update={"incident": real_alert.incident.model_copy(update={"scenario": None})})
    made_up = catalog[0].faults[0].model_copy(update={"fault": "no-such-fault"})
    unknown = served(catalog[0].model_copy(update={"name": "made-up", "faults": [made_up]}), 98)
    sets = replay_sets([*episodes, real_alert, unknown], eval_share=0.3, eval_limit=4,
                       held_out={s.name for s in heldout})

    assert len(sets.evaluate) <= 4 and not {s.name for s in sets.evaluate} & {s.name for s in sets.train}
    assert {s.name for s in sets.train} | {s.name for s in sets.evaluate} <= {s.name for s in catalog + heldout}
    assert not {s.name for s in sets.train} & {s.name for s in heldout}
    assert sets.not_replayable["no scenario: not a simulated incident, its fault class is unknown"] == 1
    assert sets.not_replayable["unknown to the simulator: fault 'no-such-fault' of app 'shop'"] == 1
    assert replay_sets([*episodes], 0.3, 4, set()).evaluate == sets.evaluate  # the same split every time
    (tmp_path / "train.yaml").write_bytes(scenario_file(sets.train))
    assert load_scenarios(tmp_path / "train.yaml") == sets.train
    # a stored scenario that redaction touched is not replayed unless the catalog has it
    redacted = catalog[0].model_copy(update={"name": "not-in-catalog", "symptom": "<redacted:secret>"})
    assert replay_scenario(served(redacted, 97)).startswith("redacted:")


def test_the_replay_split_judges_every_fault_class_production_saw_more_than_once() -> None:
    """A hash of the name alone can put every scenario of a class in training, the class a shift brings included
    (a drill's init-fail, both of its scenarios); the split is by class."""
    catalog = load_scenarios(default_catalog())
    classes = ["bad_image", "oom_limit", "scaled_to_zero", "none", "init_container_fail"]
    served = [s for fault in classes for s in [c for c in catalog if c.fault == fault][:2]]
    episodes = [runbook_episode(run_id=f"run-{i}") for i in range(len(served))]
    episodes = [t.model_copy(update={"incident": t.incident.model_copy(update={"scenario": s})})
                for t, s in zip(episodes, served, strict=True)]

    sets = replay_sets(episodes, eval_share=0.2, eval_limit=10, held_out=set())
    assert sorted(s.fault for s in sets.evaluate) == sorted(classes)  # one of each class judged,
    assert sorted(s.fault for s in sets.train) == sorted(classes)  # the other trained
    few = replay_sets(episodes, eval_share=0.2, eval_limit=3, held_out=set())
    assert len({s.fault for s in few.evaluate}) == 3  # a limit spans classes before it takes a second of one
    assert replay_sets(episodes, eval_share=0, eval_limit=10, held_out=set()).evaluate == []
    alone = replay_sets(episodes[:1], eval_share=0.99, eval_limit=10, held_out=set())
    assert len(alone.evaluate) == 1 and alone.train == []  # a class of one goes by its hash


def test_what_each_algorithm_can_learn_from_decides_the_usable_count() -> None:
    catalog = {s.name: s for s in load_scenarios(default_catalog())}

    def served(outcome: str, run: int, scenario: str | None = None) -> Trajectory:
        t = runbook_episode(outcome=outcome, run_id=f"run-{run}")
        if scenario is not None:
            t = t.model_copy(update={"incident": t.incident.model_copy(update={"scenario": catalog[scenario]})})
        return t.model_copy(update={"reward": compute_reward(t, LearningConfig().reward)})

    alike = [served("resolved", i) for i in range(3)]
    mixed = [*alike, served("unresolved", 3, "bad-image-cart-s0")]

    def count(training: dict[str, Any], episodes: list[Trajectory]) -> tuple[int, str | None]:
        return usable_for(config(training={"base": "base", **training}).training)(episodes)

    assert count({"algorithm": "offpolicy"}, mixed) == (4, None)  # every episode, returns differ
    none, why = count({"algorithm": "offpolicy"}, alike)
    assert none == 0 and why.startswith("off-policy RL: no learning signal: all 3 episodes have the same return")
    assert count({"algorithm": "sft", "sft": {"expert_policies": ["runbook"]}}, mixed) == (3, None)  # clean successes
    assert count({"algorithm": "grpo"}, mixed) == (1, None)  # the one incident the simulator can re-create
    assert count({"algorithm": "offpolicy"}, []) == (0, None)


def test_a_cycle_rehearses_only_what_was_stored_by_its_window_end() -> None:
    """A cycle's training request bounds its rehearsal listing by the window's end (or the template's own earlier
    bound), so a late or retried cycle rehearses what its own time saw, not episodes stored while it ran."""
    end = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    data = CycleData(window_start=None, window_end=end, episodes=9, usable=9,
                     dataset=DataItem(uri="s3://b/learning/x/episodes.jsonl", sha256="0" * 64))
    record = CycleRecord(name="drill", cycle_id="c1", run_id="r1", cutoff=end, started_at=end, base="prod-v1",
                         version="drill-v2")
    earlier = datetime(2026, 11, 21, tzinfo=UTC)
    for template_until, expected in ((None, end), (earlier, earlier)):
        rehearse = TrajectoryFilter(model_versions=["prod-v1"], resolved_only=True, written_until=template_until)
        config = LearningConfig(training=TrainingRequest(
            algorithm="offpolicy", base="base", offpolicy=OffPolicyConfig(), data=DataSelection(rehearsal=rehearse)))
        request = training_request(config, record, data)
        assert request.data.rehearsal is not None and request.data.rehearsal.written_until == expected
        assert request.data.trajectories.objects == ["learning/x/episodes.jsonl"]
    plain = training_request(LearningConfig(), record, data)
    assert plain.data.rehearsal is None
