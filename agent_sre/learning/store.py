"""A learning stream in the object store, under `learning/<name>/` in the configured bucket:

    state.json                                  learning.state.v1: watermark, episodes learnt from, running cycle
    cycles/<cutoff>-<id hash>/cycle.json        learning.cycle.v1, written when the cycle ends
    cycles/<cutoff>-<id hash>/episodes.jsonl    the episodes as trained on (redacted, rewards recomputed)
    cycles/<cutoff>-<id hash>/replay-*.yaml     production incidents re-created for GRPO and for evaluation
    quarantine/<trajectory key>                 a copy of a bad trajectory object, beside <key>.reason.json

The state changes only by compare-and-swap (agent_sre.cas): a claim when a cycle begins (one cycle at a time per
stream, whatever started it: schedule, backfill, trigger), then either a commit (watermark, learnt episodes and
the claim's release in one write) or a release. A commit by a cycle that already committed changes nothing, so a
retried end never counts data twice.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable
from datetime import date, datetime

from minio import Minio

from agent_sre import cas
from agent_sre.models.learning import CycleClaim, CycleRecord, LearningState, Watermark
from agent_sre.models.registry import DataItem

PREFIX = "learning"


class ClaimHeld(Exception):
    """Another cycle of the stream holds the claim."""

    def __init__(self, claim: CycleClaim) -> None:
        super().__init__(f"cycle {claim.cycle_id} (run {claim.run_id}) has held the stream since {claim.since:%F %T}")
        self.claim = claim


def state_key(name: str) -> str:
    return f"{PREFIX}/{name}/state.json"


def cycles_prefix(name: str) -> str:
    return f"{PREFIX}/{name}/cycles/"


def cycle_dir(name: str, cutoff: datetime, cycle_id: str) -> str:
    """Sorted by cutoff, so the latest cycles are the last keys listed."""
    return f"{cycles_prefix(name)}{cutoff:%Y%m%dT%H%M%SZ}-{hashlib.sha256(cycle_id.encode()).hexdigest()[:8]}/"


def record_key(record: CycleRecord) -> str:
    return cycle_dir(record.name, record.cutoff, record.cycle_id) + "cycle.json"


def quarantine_key(name: str, key: str) -> str:
    return f"{PREFIX}/{name}/quarantine/{key}"


def put(client: Minio, bucket: str, key: str, body: bytes, content_type: str, rows: int | None = None) -> DataItem:
    """Store `body` in one PUT; returns it pinned by hash."""
    client.put_object(bucket, key, io.BytesIO(body), len(body), content_type=content_type)
    return DataItem(uri=f"s3://{bucket}/{key}", sha256=hashlib.sha256(body).hexdigest(), bytes=len(body), rows=rows)


def read_state(client: Minio, bucket: str, name: str) -> LearningState:
    try:
        found = cas.read_model(client, bucket, state_key(name), LearningState)
    except cas.CorruptDocument as exc:
        raise ValueError(f"the learning state of {name} is damaged; no cycle can run until it is repaired: "
                         f"{exc}") from exc
    return found[0] if found else LearningState(name=name)


def _update(client: Minio, bucket: str, name: str,
            change: Callable[[LearningState | None], LearningState | None]) -> LearningState:
    try:
        stored = cas.update_model(client, bucket, state_key(name), LearningState, change)
    except cas.CorruptDocument as exc:
        raise ValueError(f"the learning state of {name} is damaged: {exc}") from exc
    return stored or LearningState(name=name)


def claim(client: Minio, bucket: str, name: str, new: CycleClaim, stale: str | None = None) -> LearningState:
    """Hold the stream for `new`'s cycle (again, for a retry of it); a claim by the cycle `stale` (which is no longer
    running) is taken over. Raises ClaimHeld when another cycle holds it."""
    def change(state: LearningState | None) -> LearningState | None:
        state = state or LearningState(name=name)
        held = state.claim
        if held is not None and held.cycle_id not in (new.cycle_id, stale):
            raise ClaimHeld(held)
        if held == new:
            return None
        state.claim = new
        return state

    return _update(client, bucket, name, change)


def release(client: Minio, bucket: str, name: str, cycle_id: str) -> LearningState:
    """Let go of the stream without moving the watermark (a skipped or failed cycle); a no-op when not held."""
    def change(state: LearningState | None) -> LearningState | None:
        if state is None or state.claim is None or state.claim.cycle_id != cycle_id:
            return None
        state.claim = None
        return state

    return _update(client, bucket, name, change)


def commit(client: Minio, bucket: str, name: str, watermark: Watermark, learnt: dict[str, list[str]],
           keep_from: date) -> LearningState:
    """Move the watermark, record the episodes learnt from (start date → episode ids) and release the claim, in one
    write. Dates before `keep_from` are no longer listed by any cycle, so they are dropped from the state."""
    cycle_id = watermark.cycle_id

    def change(state: LearningState | None) -> LearningState | None:
        if state is not None and state.watermark is not None and state.watermark.cycle_id == cycle_id:
            return None  # committed already: a retried end
        if state is None or state.claim is None or state.claim.cycle_id != cycle_id:
            holder = state.claim.cycle_id if state is not None and state.claim is not None else "no cycle"
            raise ValueError(f"cycle {cycle_id} lost its claim on {name} ({holder} holds it); its data is not "
                             "committed and its watermark not moved")
        for day, ids in learnt.items():
            state.learnt.setdefault(day, {}).update(dict.fromkeys(ids, cycle_id))
        state.learnt = {day: ids for day, ids in sorted(state.learnt.items()) if day >= keep_from.isoformat()}
        state.watermark, state.claim = watermark, None
        state.committed_cycles += 1
        return state

    return _update(client, bucket, name, change)


def put_sources(client: Minio, bucket: str, key: str, items: list[DataItem]) -> DataItem:
    body = json.dumps([i.model_dump() for i in items], indent=1).encode()
    return put(client, bucket, key, body, "application/json", rows=len(items))


def read_sources(client: Minio, bucket: str, stored: DataItem) -> list[DataItem]:
    """A cycle's source objects, from the list pinned by `stored` (refused if its bytes changed)."""
    key = stored.uri.split("/", 3)[3]
    found = cas.read(client, bucket, key)
    if found is None or hashlib.sha256(found[0]).hexdigest() != stored.sha256:
        raise ValueError(f"{stored.uri} changed or disappeared since the cycle stored it")
    return [DataItem.model_validate(i) for i in json.loads(found[0])]


def write_record(client: Minio, bucket: str, record: CycleRecord) -> str:
    key = record_key(record)
    put(client, bucket, key, record.model_dump_json(indent=1).encode(), "application/json")
    return key


def read_record(client: Minio, bucket: str, key: str) -> CycleRecord | None:
    try:
        found = cas.read_model(client, bucket, key, CycleRecord)
    except cas.CorruptDocument as exc:
        raise ValueError(str(exc)) from exc
    return found[0] if found else None


def list_records(client: Minio, bucket: str, name: str, last: int | None = None) -> list[CycleRecord]:
    """The stream's cycle records, oldest first (the last `last` of them)."""
    dirs = sorted(o.object_name for o in client.list_objects(bucket, prefix=cycles_prefix(name)) if o.is_dir)
    records = [read_record(client, bucket, d + "cycle.json") for d in (dirs[-last:] if last else dirs)]
    return [r for r in records if r is not None]  # a directory without a record: a cycle still running


def record_of_dataset(client: Minio, bucket: str, dataset_key: str) -> CycleRecord | None:
    """The record of the cycle whose dataset is `dataset_key` (what a version's training request names)."""
    if not dataset_key.startswith(f"{PREFIX}/") or not dataset_key.endswith("/episodes.jsonl"):
        return None
    return read_record(client, bucket, dataset_key.removesuffix("episodes.jsonl") + "cycle.json")
