"""Trajectories (and their reward records) in the object store, partitioned for training.

Layout, one episode per object, JSON lines (one trajectory.v1 per line, so objects can later be compacted by
concatenation):

    trajectories/date=YYYY-MM-DD/model=<model_version>/<workflow_id>__<run_id>.jsonl
    rewards/date=YYYY-MM-DD/model=<model_version>/<workflow_id>__<run_id>.json

The date is the episode's start (UTC). Each object is written with a single `put_object` of known length, so a
reader sees the whole episode or nothing, and the key is a pure function of the trajectory, so a retried write
overwrites the same object with the same bytes. Trajectories are redacted before they leave the process.
The reward record is stored beside the trajectory because it is recomputed (late human feedback, a new reward
function) while the trajectory itself is written once.
"""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Iterable, Iterator
from datetime import UTC, date, datetime
from typing import Any
from urllib.parse import quote

from minio import Minio
from minio.datatypes import Object
from minio.error import S3Error

from agent_sre.models.remediation import StoredTrajectory
from agent_sre.models.reward import RewardConfig, RewardRecord
from agent_sre.models.trajectory import Trajectory
from agent_sre.redaction import redact_model, redact_trajectory
from agent_sre.rewards import compute_reward

log = logging.getLogger(__name__)

TRAJECTORIES = "trajectories"
REWARDS = "rewards"
_DAY_RE = re.compile(rf"^{TRAJECTORIES}/date=(?P<date>\d{{4}}-\d{{2}}-\d{{2}})/$")
_KEY_RE = re.compile(rf"^{TRAJECTORIES}/date=\d{{4}}-\d{{2}}-\d{{2}}/model=[^/]+/[^/]+\.jsonl$")


def _segment(value: str) -> str:
    """A key segment: ids and versions may hold '/', which would add a level to the partitioning."""
    return quote(value, safe="-_.~+:@")


def _key(root: str, t: Trajectory, ext: str) -> str:
    day = t.started_at.astimezone(UTC).date() if t.started_at.tzinfo else t.started_at.date()
    return (f"{root}/date={day.isoformat()}/model={_segment(t.model_version)}/"
            f"{_segment(t.workflow_id)}__{_segment(t.run_id)}.{ext}")


def trajectory_key(t: Trajectory) -> str:
    return _key(TRAJECTORIES, t, "jsonl")


def reward_key(t: Trajectory) -> str:
    return _key(REWARDS, t, "json")


def _put(client: Minio, bucket: str, key: str, body: bytes, content_type: str) -> None:
    client.put_object(bucket, key, io.BytesIO(body), length=len(body), content_type=content_type)


def write_trajectory(client: Minio, bucket: str, t: Trajectory) -> StoredTrajectory:
    """Redact and store one trajectory, and its reward record when it has one. Store errors propagate."""
    redacted = redact_trajectory(t)
    body = (redacted.model_dump_json() + "\n").encode()
    key = trajectory_key(t)
    _put(client, bucket, key, body, "application/x-ndjson")
    if t.reward is not None:
        write_reward(client, bucket, t, t.reward)
    return StoredTrajectory(key=key, bytes=len(body), written_at=datetime.now(UTC))


def write_reward(client: Minio, bucket: str, t: Trajectory, record: RewardRecord) -> str:
    """Store (or replace, after late feedback) the reward record of a trajectory, redacted; returns its key."""
    key = reward_key(t)
    _put(client, bucket, key, redact_model(record).model_dump_json().encode(), "application/json")
    return key


def _read(client: Minio, bucket: str, key: str) -> bytes:
    response = client.get_object(bucket, key)
    try:
        return response.read()
    finally:
        response.close()
        response.release_conn()


def read_trajectories(client: Minio, bucket: str, key: str) -> list[Trajectory]:
    """Every trajectory in one stored object."""
    trajectories = []
    for number, line in enumerate(_read(client, bucket, key).decode().splitlines(), start=1):
        if line.strip():
            try:
                trajectories.append(Trajectory.model_validate_json(line))
            except ValueError as exc:
                raise ValueError(f"s3://{bucket}/{key} line {number} is not a trajectory.v1: {exc}") from exc
    return trajectories


def read_reward(client: Minio, bucket: str, t: Trajectory) -> RewardRecord | None:
    """The stored reward record of a trajectory, or None when none was stored."""
    try:
        return RewardRecord.model_validate_json(_read(client, bucket, reward_key(t)))
    except S3Error as exc:
        if exc.code == "NoSuchKey":
            return None
        raise


def trajectory_keys(client: Minio, bucket: str, since: date | None = None,
                    model_version: str | None = None) -> Iterator[str]:
    """Keys of stored trajectories started on or after `since` (UTC date), served by `model_version`, in key
    order (date, then model, then workflow). Only the matching partitions are listed."""
    for obj in trajectory_objects(client, bucket, since, model_version):
        yield obj.object_name


def trajectory_objects(client: Minio, bucket: str, since: date | None = None,
                       model_version: str | None = None) -> Iterator[Object]:
    """`trajectory_keys` with each object's listing entry (last modified, ETag, size)."""
    for day in client.list_objects(bucket, prefix=f"{TRAJECTORIES}/", recursive=False):
        match = _DAY_RE.match(day.object_name or "")
        if match is None:
            log.warning("skipping s3://%s/%s: not a date partition", bucket, day.object_name)
            continue
        if since is not None and match["date"] < since.isoformat():
            continue
        prefix = match.string + (f"model={_segment(model_version)}/" if model_version is not None else "")
        for obj in client.list_objects(bucket, prefix=prefix, recursive=True):
            if _KEY_RE.match(obj.object_name or ""):
                yield obj
            else:
                log.warning("skipping s3://%s/%s: not a trajectory key", bucket, obj.object_name)


def iter_trajectories(client: Minio, bucket: str, since: date | None = None,
                      model_version: str | None = None) -> Iterator[Trajectory]:
    """Stored trajectories, filtered by start date and model version (see `trajectory_keys`)."""
    for key in trajectory_keys(client, bucket, since, model_version):
        yield from read_trajectories(client, bucket, key)


def dataset_rows(trajectories: Iterable[Trajectory], config: RewardConfig | None = None) -> Iterator[dict[str, Any]]:
    """Training rows, one per finished-and-judged episode: the conversation exactly as the model saw it, the
    per-step shaping rewards (one per assistant turn, in order), the episode reward and the verdict.

    With `config` the reward is recomputed (new function, late feedback); otherwise the stored one is used.
    Episodes without a verdict cannot be scored and are skipped."""
    for t in trajectories:
        if t.verdict is None:
            log.warning("skipping %s/%s: no verdict", t.workflow_id, t.run_id)
            continue
        reward = t.reward if config is None and t.reward is not None else compute_reward(t, config or RewardConfig())
        yield {
            "incident_id": t.incident.id,
            "workflow_id": t.workflow_id,
            "run_id": t.run_id,
            "model_version": t.model_version,
            "policy": t.policy,
            "fault_class": t.incident.fault_class,
            "messages": [m.model_dump() for m in t.conversation],
            "step_rewards": reward.step_rewards,
            "reward": reward.total,
            "reward_function": reward.function,
            "reward_components": reward.components,
            "termination": t.termination,
            "verdict": t.verdict.model_dump(mode="json"),
        }
