"""Trajectories (and their reward records) in the object store, partitioned for training.

Layout, one episode per object, JSON lines (one trajectory.v1 per line, so objects can later be compacted by
concatenation):

    trajectories/date=YYYY-MM-DD/model=<model_version>/<workflow_id>__<run_id>.jsonl
    rewards/date=YYYY-MM-DD/model=<model_version>/<workflow_id>__<run_id>.json
    feedback/date=YYYY-MM-DD/model=<model_version>/<workflow_id>__<run_id>/<at>-<hash>.json

The date is the episode's start (UTC). Each object is written with a single `put_object` of known length, so a
reader sees the whole episode or nothing, and the key is a pure function of the trajectory, so a retried write
overwrites the same object with the same bytes. Trajectories are redacted before they leave the process.
The reward record is stored beside the trajectory as the workflow computed it. Human feedback given after the
incident's feedback window (`agent-sre incident feedback` on a completed remediation) is stored as one object per
rating under the episode's `feedback/` prefix, named by its content: concurrent ratings never overwrite each other,
a retried write rewrites the same object, and learning cycles recompute the reward with them.
"""

from __future__ import annotations

import hashlib
import io
import logging
import re
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, date, datetime
from typing import Any
from urllib.parse import quote

from minio import Minio
from minio.datatypes import Object
from minio.error import S3Error

from agent_sre.models.remediation import StoredTrajectory
from agent_sre.models.reward import HumanFeedback, LateFeedback, RewardConfig, RewardRecord
from agent_sre.models.trajectory import Trajectory
from agent_sre.redaction import redact_model, redact_trajectory
from agent_sre.rewards import compute_reward

log = logging.getLogger(__name__)

TRAJECTORIES = "trajectories"
REWARDS = "rewards"
FEEDBACK = "feedback"
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


def _check_key(key: str) -> None:
    if not _KEY_RE.match(key):
        raise ValueError(f"{key!r} is not a trajectory key ({TRAJECTORIES}/date=…/model=…/….jsonl)")


def feedback_prefix(key: str) -> str:
    """Where the late feedback on the episode stored at trajectory `key` goes."""
    _check_key(key)
    return f"{FEEDBACK}/{key[len(TRAJECTORIES) + 1:-len('.jsonl')]}/"


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
    """Store the reward record of a trajectory, redacted; returns its key."""
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


def read_episode(client: Minio, bucket: str, key: str) -> Trajectory:
    """The one episode stored at trajectory `key`. LookupError when nothing is stored there, ValueError when `key`
    is not a trajectory key or its object does not hold exactly one trajectory.v1."""
    _check_key(key)
    try:
        [t] = read_trajectories(client, bucket, key)
    except S3Error as exc:
        if exc.code == "NoSuchKey":
            raise LookupError(f"no trajectory stored at s3://{bucket}/{key}") from exc
        raise
    except ValueError as exc:
        raise ValueError(f"s3://{bucket}/{key} does not hold one episode: {exc}") from exc
    return t


def write_late_feedback(client: Minio, bucket: str, key: str, workflow_id: str, feedback: HumanFeedback) -> str:
    """Store a rating of `workflow_id`'s episode, stored at trajectory `key`, given after its feedback window,
    redacted; returns the feedback object's key. LookupError when no trajectory is stored there, ValueError when
    the object is not that remediation's one episode."""
    prefix = feedback_prefix(key)
    t = read_episode(client, bucket, key)
    if t.workflow_id != workflow_id:
        raise ValueError(f"s3://{bucket}/{key} holds an episode of {t.workflow_id}, not of {workflow_id}")
    record = redact_model(LateFeedback(incident_id=t.incident.id, workflow_id=t.workflow_id, run_id=t.run_id,
                                       trajectory_key=key, feedback=feedback))
    body = record.model_dump_json().encode()
    at = f"{feedback.at.astimezone(UTC):%Y%m%dT%H%M%S%fZ}-" if feedback.at is not None else ""
    feedback_key = f"{prefix}{at}{hashlib.sha256(body).hexdigest()[:16]}.json"
    _put(client, bucket, feedback_key, body, "application/json")
    return feedback_key


def read_late_feedback(client: Minio, bucket: str, t: Trajectory) -> list[HumanFeedback]:
    """The ratings of `t` given after its feedback window, in the order given (keys start with the time). An
    object that is not a feedback.v1 of this episode is skipped with a warning: it must not stop the episode from
    being learnt from."""
    found = []
    for obj in client.list_objects(bucket, prefix=feedback_prefix(trajectory_key(t)), recursive=True):
        try:
            record = LateFeedback.model_validate_json(_read(client, bucket, obj.object_name))
        except ValueError as exc:
            log.warning("skipping s3://%s/%s: not a feedback.v1 (%s)", bucket, obj.object_name, exc)
            continue
        if (record.workflow_id, record.run_id) != (t.workflow_id, t.run_id):
            log.warning("skipping s3://%s/%s: it rates %s/%s", bucket, obj.object_name, record.workflow_id,
                        record.run_id)
            continue
        found.append(record.feedback)
    return found


def trajectory_keys(client: Minio, bucket: str, since: date | None = None,
                    model_version: str | None = None) -> Iterator[str]:
    """Keys of stored trajectories started on or after `since` (UTC date), served by `model_version`, in key
    order (date, then model, then workflow). Only the matching partitions are listed."""
    for key, _ in trajectory_objects(client, bucket, since, model_version):
        yield key


def trajectory_objects(client: Minio, bucket: str, since: date | None = None,
                       model_version: str | None = None) -> Iterator[tuple[str, Object]]:
    """`trajectory_keys`, each with its object's listing entry (last modified, ETag, size)."""
    for day in client.list_objects(bucket, prefix=f"{TRAJECTORIES}/", recursive=False):
        match = _DAY_RE.match(day.object_name or "")
        if match is None:
            log.warning("skipping s3://%s/%s: not a date partition", bucket, day.object_name)
            continue
        if since is not None and match["date"] < since.isoformat():
            continue
        prefix = match.string + (f"model={_segment(model_version)}/" if model_version is not None else "")
        for obj in client.list_objects(bucket, prefix=prefix, recursive=True):
            if obj.object_name is not None and _KEY_RE.match(obj.object_name):
                yield obj.object_name, obj
            else:
                log.warning("skipping s3://%s/%s: not a trajectory key", bucket, obj.object_name)


def objects_of_versions(client: Minio, bucket: str, since: date | None,
                        model_versions: Sequence[str]) -> Iterator[tuple[str, Object]]:
    """`trajectory_objects` of each of `model_versions` in turn; of every version when none is named."""
    versions: Sequence[str | None] = model_versions or [None]
    for version in versions:
        yield from trajectory_objects(client, bucket, since, version)


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
