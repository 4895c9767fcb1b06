"""A cycle's data: the trajectory objects written inside its window, validated, de-duplicated against everything
learnt before, redacted, and scored again with the human feedback that arrived since they were stored.

The window is by the objects' last-modified time: after the previous watermark, up to the cutoff less
`settle_s` (a write in flight at the cutoff lands in the next cycle). Objects are partitioned by the day their
episode started, so the partitions from `late_days` before the watermark are listed too: an episode that ended
(and was stored) after midnight is not missed.

Validation is the training cycle's own (`training.data.select_episodes`), object by object: schema, duplicates,
incomplete or cancelled episodes, missing verdicts, each refusal with its reason. An object that is not trajectory
data at all (a line that is not a trajectory.v1, or no line) is quarantined whole: copied under
`learning/<name>/quarantine/` beside a reason record, left in place, and never read into a cycle. An episode the
stream learnt from in an earlier cycle (same incident id and run) is a duplicate, whatever object holds it now.
Late feedback is the ratings stored beside the trajectory after its feedback window
(`trajectory_store.write_late_feedback`, which `agent-sre incident feedback` calls).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from minio import Minio
from minio.datatypes import Object

from agent_sre import cas
from agent_sre.learning import store
from agent_sre.learning.replay import replay_scenario
from agent_sre.models.learning import CycleData, LearningConfig, LearningState, QuarantinedObject
from agent_sre.models.registry import DataItem
from agent_sre.models.training import RejectedEpisode, TrainingRequest, TrajectoryFilter
from agent_sre.models.trajectory import Trajectory
from agent_sre.redaction import redact_trajectory
from agent_sre.rewards import compute_reward
from agent_sre.training.data import MAX_LISTED_REJECTIONS, episode_id, select_episodes
from agent_sre.training.sft import is_expert_episode
from agent_sre.trajectory_store import objects_of_versions, read_late_feedback


@dataclass
class Gathered:
    """The cycle's figures (small: they travel in the workflow's history) and what it stores beside them."""

    data: CycleData
    episodes: list[Trajectory] = field(default_factory=list)  # accepted, as trained on, in key order
    sources: list[DataItem] = field(default_factory=list)  # the objects holding them, pinned by hash


def window_start(config: LearningConfig, state: LearningState) -> datetime | None:
    return state.watermark.through if state.watermark is not None else config.start_at


def in_window(obj: Object, start: datetime | None, end: datetime) -> bool:
    modified = obj.last_modified
    return modified is not None and (start is None or modified > start) and modified <= end


def with_late_feedback(client: Minio, bucket: str, t: Trajectory, config: LearningConfig) -> tuple[Trajectory, bool]:
    """`t` redacted, with the feedback given after its window added to its own, and its reward recomputed.
    Returns it and whether late feedback was folded in."""
    late = read_late_feedback(client, bucket, t)
    t = redact_trajectory(t)
    t.feedback = [*t.feedback, *late]
    t.reward = compute_reward(t, config.reward)
    return t, bool(late)


def quarantine(client: Minio, bucket: str, name: str, key: str, body: bytes, reasons: list[str]) -> QuarantinedObject:
    """Copy the bytes that were judged aside, with the reasons. A later cycle meeting the object again (its
    watermark did not move) writes the same two objects."""
    copy_key = store.quarantine_key(name, key)
    entry = QuarantinedObject(key=key, copy_key=copy_key, sha256=hashlib.sha256(body).hexdigest(), bytes=len(body),
                              reasons=reasons)
    store.put(client, bucket, copy_key, body, "application/octet-stream")
    store.put(client, bucket, copy_key + ".reason.json", json.dumps(
        {**entry.model_dump(), "quarantined_at": datetime.now(UTC).isoformat()}, indent=1).encode(), "application/json")
    return entry


def unreadable(selection_counts: dict[str, int], rejected: list[RejectedEpisode]) -> list[str]:
    """Why an object is not trajectory data at all (empty: it is, whatever its episodes' other faults)."""
    if not selection_counts.get("read"):
        return ["empty: no trajectory line in the object"]
    return [f"line {r.line}: {reason}" for r in rejected for reason in r.reasons if reason.startswith("schema:")]


def gather(client: Minio, bucket: str, config: LearningConfig, state: LearningState, window_end: datetime,
           usable: Callable[[list[Trajectory]], tuple[int, str | None]],
           on_object: Callable[[int], None] = lambda n: None) -> Gathered:
    """Read, validate, de-duplicate and score the episodes written in the window; quarantine bad objects."""
    start = window_start(config, state)
    out = Gathered(CycleData(window_start=start, window_end=window_end))
    data, counts = out.data, Counter[str]()
    if start is not None and window_end <= start:
        return out
    since = (start - timedelta(days=config.late_days)).date() if start is not None else None
    wanted = config.training.data.trajectories
    policies = TrajectoryFilter(policies=wanted.policies)
    learnt = {ident: cycle for ids in state.learnt.values() for ident, cycle in ids.items()}
    seen: dict[str, str] = {}
    for key, obj in objects_of_versions(client, bucket, since, wanted.model_versions):
        data.listed += 1
        if not in_window(obj, start, window_end):
            continue
        data.new_objects += 1
        on_object(data.new_objects)
        found = cas.read(client, bucket, key)
        if found is None:
            counts["vanished since listed"] += 1
            continue
        body = found[0]
        selection = select_episodes([(key, body)], policies, bucket)
        if reasons := unreadable(selection.manifest.counts, selection.manifest.rejected):
            entry = quarantine(client, bucket, config.name, key, body, reasons)
            data.quarantined += [entry][:MAX_LISTED_REJECTIONS - len(data.quarantined)]
            counts["quarantined objects"] += 1
            continue
        counts.update({k: v for k, v in selection.manifest.counts.items() if k != "accepted"})
        _listed(data, selection.manifest.rejected)
        accepted_here = 0
        for t in selection.episodes:
            ident = episode_id(t)
            if ident in learnt or ident in seen:
                where = (f"learnt from in cycle {learnt[ident]}" if ident in learnt
                         else f"already read from {seen[ident]}")
                counts.update(["rejected", "rejected: duplicate"])
                _listed(data, [RejectedEpisode(key=key, line=_line_of(body, ident), episode=ident, reasons=[
                    f"duplicate: incident {t.incident.id} run {t.run_id} {where}"])])
                continue
            seen[ident] = key
            prepared, late = with_late_feedback(client, bucket, t, config)
            out.episodes.append(prepared)
            data.late_feedback += late
            accepted_here += 1
        if accepted_here:
            out.sources.append(DataItem(uri=f"s3://{bucket}/{key}", sha256=hashlib.sha256(body).hexdigest(),
                                        bytes=len(body), rows=accepted_here))
    data.episodes = counts["accepted"] = len(out.episodes)
    data.source_objects = len(out.sources)
    data.usable, data.nothing_to_learn = usable(out.episodes)
    data.counts = dict(counts)
    return out


def _line_of(body: bytes, ident: str) -> int:
    """The line (from 1) of an accepted episode in its object: `select_episodes` keeps the episodes, not lines."""
    for number, line in enumerate(body.decode("utf-8", errors="replace").splitlines(), start=1):
        if line.strip() and episode_id(Trajectory.model_validate_json(line)) == ident:
            return number
    raise ValueError(f"episode {ident} is not in the object it was read from")


def _listed(data: CycleData, rejected: list[RejectedEpisode]) -> None:
    data.rejected.extend(rejected[:MAX_LISTED_REJECTIONS - len(data.rejected)])


def episodes_file(episodes: list[Trajectory]) -> bytes:
    return "".join(t.model_dump_json() + "\n" for t in episodes).encode()


def learnt_by_day(body: bytes) -> dict[str, list[str]]:
    """Start date (UTC) → episode ids of a cycle's dataset, as the state records what was learnt from."""
    days: dict[str, list[str]] = {}
    for line in body.decode().splitlines():
        if line.strip():
            t = Trajectory.model_validate_json(line)
            started = t.started_at.astimezone(UTC) if t.started_at.tzinfo else t.started_at
            days.setdefault(started.date().isoformat(), []).append(episode_id(t))
    return days


def usable_for(request: TrainingRequest) -> Callable[[list[Trajectory]], tuple[int, str | None]]:
    """How many accepted episodes the request's stages can learn from, and why none when the algorithm cannot
    learn from them at all. Off-policy RL learns from every episode, provided their returns differ from their
    baselines (its own check, the one its training cycle applies); SFT from an expert policy's clean successes;
    GRPO from the incidents the simulator can re-create."""
    stages = request.stages
    experts = request.sft.expert_policies if request.sft is not None else []

    def count(episodes: list[Trajectory]) -> tuple[int, str | None]:
        if request.offpolicy is not None and episodes:
            from agent_sre.training.offpolicy import check_learnable  # torch: only on the training workers

            try:
                check_learnable(episodes, request.offpolicy)
            except ValueError as exc:
                return 0, f"off-policy RL: {exc}"
            return len(episodes), None
        return sum(("sft" in stages and is_expert_episode(t, experts))
                   or ("grpo" in stages and not isinstance(replay_scenario(t), str)) for t in episodes), None

    return count
