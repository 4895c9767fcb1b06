"""The trajectory store against the session's real SeaweedFS S3 server (`s3_store` fixture)."""

from __future__ import annotations

import io
import json
import socket
import uuid
from collections.abc import Iterator
from datetime import date, timedelta
from typing import Any

import pytest
import urllib3
from minio import Minio
from temporalio.testing import ActivityEnvironment
from trajectory_factory import START, finish, make_trajectory, read, write

from agent_sre.config import Settings
from agent_sre.models.reward import HumanFeedback, RewardConfig
from agent_sre.models.tools import ToolCall, ToolResult
from agent_sre.models.trajectory import Step, Trajectory
from agent_sre.redaction import redact_trajectory
from agent_sre.rewards import compute_reward
from agent_sre.storage import ensure_bucket, object_store
from agent_sre.trajectory_store import (
    dataset_rows,
    iter_trajectories,
    read_reward,
    trajectory_key,
    write_reward,
    write_trajectory,
)
from agent_sre.workers.main import build_activities

LEAKY_OUTPUT = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\ndata:\n  password: hunter2\n"


@pytest.fixture
def client(s3_store: Settings) -> Minio:
    return object_store(s3_store)


@pytest.fixture
def bucket(client: Minio) -> Iterator[str]:
    """A bucket of its own per test, so listings see only what the test wrote."""
    name = f"traj-{uuid.uuid4().hex[:12]}"
    ensure_bucket(client, name)
    yield name
    for obj in client.list_objects(name, recursive=True):
        client.remove_object(name, obj.object_name)
    client.remove_bucket(name)


def episode(model_version: str = "runbook-v1", day: int = 0, run: str = "a", steps: list[Step] | None = None,
            **kw: Any) -> Trajectory:
    t = make_trajectory(steps or [read(), write(), finish()], model_version=model_version,
                        start=START + timedelta(days=day), **kw)
    t.run_id = f"run-{run}"
    t.reward = compute_reward(t, RewardConfig()) if t.verdict else None
    return t


def test_key_layout_is_partitioned_by_date_and_model() -> None:
    t = episode(model_version="qwen/sre-1.5")
    assert trajectory_key(t) == ("trajectories/date=2026-03-14/model=qwen%2Fsre-1.5/"
                                 f"{t.workflow_id}__run-a.jsonl")


def test_write_then_read_back_redacted(client: Minio, bucket: str) -> None:
    t = episode()
    t.steps[0].result = ToolResult(tool="get_resource", ok=True, output=LEAKY_OUTPUT)
    stored = write_trajectory(client, bucket, t)

    assert stored.key == trajectory_key(t)
    raw = client.get_object(bucket, stored.key).read()
    assert stored.bytes == len(raw) == client.stat_object(bucket, stored.key).size
    assert raw.endswith(b"\n") and raw.count(b"\n") == 1  # one JSON line
    assert b"hunter2" not in raw and b"<redacted:secret>" in raw
    assert json.loads(raw)["schema_version"] == "trajectory.v1"

    (back,) = iter_trajectories(client, bucket)
    assert back == redact_trajectory(t)
    assert read_reward(client, bucket, t) == t.reward


def test_a_retried_write_overwrites_the_same_object_identically(client: Minio, bucket: str) -> None:
    t = episode()
    first = write_trajectory(client, bucket, t)
    body = client.get_object(bucket, first.key).read()
    second = write_trajectory(client, bucket, t)
    assert second.key == first.key and client.get_object(bucket, second.key).read() == body
    assert [o.object_name for o in client.list_objects(bucket, prefix="trajectories/", recursive=True)] == [first.key]


def test_filters_by_date_and_model_version(client: Minio, bucket: str) -> None:
    episodes = [episode("runbook-v1", day=0, run="a"), episode("llm-7", day=0, run="b"),
                episode("runbook-v1", day=1, run="c"), episode("llm-7", day=2, run="d"),
                episode("org/m-2", day=1, run="e")]
    for t in reversed(episodes):
        write_trajectory(client, bucket, t)

    def runs(**kw) -> list[str]:
        return [t.run_id for t in iter_trajectories(client, bucket, **kw)]

    assert runs() == ["run-b", "run-a", "run-e", "run-c", "run-d"]  # key order: date, then model
    assert runs(model_version="runbook-v1") == ["run-a", "run-c"]
    assert runs(model_version="org/m-2") == ["run-e"]
    assert runs(since=date(2026, 3, 15)) == ["run-e", "run-c", "run-d"]
    assert runs(since=date(2026, 3, 15), model_version="llm-7") == ["run-d"]
    assert runs(since=date(2026, 3, 17)) == []


def test_recomputed_reward_replaces_the_stored_one(client: Minio, bucket: str) -> None:
    t = episode()
    write_trajectory(client, bucket, t)
    late = t.model_copy(update={"feedback": [HumanFeedback(rating=1, comment="thanks")]})
    write_reward(client, bucket, t, compute_reward(late, RewardConfig()))
    stored = read_reward(client, bucket, t)
    assert stored is not None and stored.components["feedback"] == 1.0 and stored.total == t.reward.total + 1


def test_training_rows_from_stored_trajectories(client: Minio, bucket: str) -> None:
    judged = episode(run="a", steps=[read(), write(), read(), finish()])
    unjudged = episode(run="b", outcome=None)
    for t in (judged, unjudged):
        write_trajectory(client, bucket, t)

    assert read_reward(client, bucket, unjudged) is None  # nothing stored beside an unscored episode
    (row,) = dataset_rows(iter_trajectories(client, bucket))
    assert row["run_id"] == "run-a" and row["model_version"] == "runbook-v1" and row["fault_class"] == "bad-image"
    assert row["messages"] == [m.model_dump() for m in judged.conversation]
    assistant_turns = [m for m in row["messages"] if m["role"] == "assistant"]
    assert len(row["step_rewards"]) == len(assistant_turns) == len(judged.steps)
    assert row["reward"] == judged.reward.total and row["verdict"]["outcome"] == "resolved"
    json.dumps(row)  # plain JSON, ready for a datasets loader

    (weighted,) = dataset_rows(iter_trajectories(client, bucket), RewardConfig(function="weighted"))
    assert weighted["reward_function"] == "weighted" and 0.0 <= weighted["reward"] <= 1.0


def test_an_object_that_is_not_a_trajectory_is_named_in_the_error(client: Minio, bucket: str) -> None:
    key = trajectory_key(episode())
    client.put_object(bucket, key, io.BytesIO(b'{"not": "a trajectory"}\n'), 24)
    with pytest.raises(ValueError, match=f"s3://{bucket}/{key} line 1 is not a trajectory.v1"):
        list(iter_trajectories(client, bucket))


def test_store_activity_writes_to_the_configured_bucket(s3_store: Settings, client: Minio) -> None:
    t = episode(run=uuid.uuid4().hex[:8])
    t.steps[1].decision.action = ToolCall(tool="set_env", args={"deployment": "cart", "container": "cart",
                                                                "name": "DB_PASSWORD", "value": "hunter2"})
    stored = ActivityEnvironment().run(build_activities(s3_store).trajectories.store_trajectory, t)
    raw = client.get_object(s3_store.s3_bucket, stored.key).read()
    assert len(raw) == stored.bytes and b"hunter2" not in raw


def test_store_activity_raises_when_the_store_is_down(settings: Settings) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    down = build_activities(settings.model_copy(update={"s3_endpoint": f"127.0.0.1:{port}"}))
    with pytest.raises(urllib3.exceptions.HTTPError, match="Connection refused"):
        ActivityEnvironment().run(down.trajectories.store_trajectory, episode())
