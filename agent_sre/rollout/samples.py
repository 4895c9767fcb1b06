"""The incidents a model version served in a time window, as the outcome facts the analysis compares.

Read from the trajectory store's `date=/model=` partitions, so only the days of the window and the one version
are listed. Guardrails re-read a sliding window every check, so each stored trajectory is parsed once per process:
trajectory objects are written once under a key derived from the run (a retry rewrites the same bytes), which
makes the key a safe cache key.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime

from minio import Minio

from agent_sre.models.trajectory import Trajectory
from agent_sre.rewards.base import EpisodeFacts
from agent_sre.trajectory_store import read_trajectories, trajectory_keys

CACHE_SIZE = 200_000


@dataclass(frozen=True)
class OutcomeSample:
    started_at: datetime
    resolved: bool
    harmful: bool  # the incident was made worse (the same reading as episodes.summarize)
    false_positive: bool
    time_to_mitigate_s: float | None  # only when resolved

    @classmethod
    def of(cls, t: Trajectory) -> OutcomeSample | None:
        """None for an episode not judged yet: it has no outcome to compare."""
        if t.verdict is None:
            return None
        facts = EpisodeFacts.of(t)
        started = t.started_at if t.started_at.tzinfo else t.started_at.replace(tzinfo=UTC)
        return cls(started_at=started, resolved=facts.resolved, harmful=facts.outcome == "worse",
                   false_positive=facts.false_positive, time_to_mitigate_s=facts.time_to_mitigate_s)


_cache: OrderedDict[tuple[str, str], list[OutcomeSample]] = OrderedDict()
_lock = threading.Lock()


def _samples_of(client: Minio, bucket: str, key: str) -> list[OutcomeSample]:
    with _lock:
        if (hit := _cache.get((bucket, key))) is not None:
            _cache.move_to_end((bucket, key))
            return hit
    parsed = [s for t in read_trajectories(client, bucket, key) if (s := OutcomeSample.of(t)) is not None]
    with _lock:
        _cache[(bucket, key)] = parsed
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return parsed


def served(client: Minio, bucket: str, model_version: str, start: datetime, end: datetime) -> list[OutcomeSample]:
    """Judged incidents that `model_version` started serving in [start, end)."""
    last_day = end.astimezone(UTC).date().isoformat()
    found = []
    for key in trajectory_keys(client, bucket, since=start.astimezone(UTC).date(), model_version=model_version):
        if key.split("/")[1].removeprefix("date=") > last_day:  # keys come in date order: the window is behind us
            break
        found += [s for s in _samples_of(client, bucket, key) if start <= s.started_at < end]
    return found
