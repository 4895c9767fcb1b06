"""Synthetic served incidents for rollout tests: trajectories with chosen outcomes, written through the real
trajectory store, so the rollout's analysis reads them exactly as it reads production data."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from minio import Minio
from trajectory_factory import finish, make_trajectory, read, write

from agent_sre.models.trajectory import Trajectory
from agent_sre.trajectory_store import write_trajectory

Served = Literal["resolved", "unresolved", "false_positive", "worse"]


@dataclass(frozen=True)
class Profile:
    """One day of one version's incidents, in the order they arrive (spread evenly over the day)."""

    outcomes: tuple[Served, ...]
    ttm_s: float


BASELINE = Profile(("resolved",) * 7 + ("unresolved", "unresolved", "false_positive"), ttm_s=120)
GOOD = Profile(("resolved",) * 9 + ("unresolved",), ttm_s=60)
WEAK = Profile(("resolved",) * 5 + ("unresolved",) * 5, ttm_s=150)  # fixes less, harms nothing
HARMFUL = Profile(("resolved",) * 4 + ("worse",) * 4 + ("unresolved",) * 2, ttm_s=90)
SPARSE = Profile(("resolved", "resolved"), ttm_s=60)  # too little traffic to judge


def episode(version: str, start: datetime, served: Served, ttm_s: float) -> Trajectory:
    if served == "resolved":
        t = make_trajectory([read(), write(), finish()], outcome="resolved", mitigated_after_s=ttm_s)
    elif served == "unresolved":  # gave up without claiming a fix
        t = make_trajectory([read(), read()], outcome="unresolved", termination="step_limit", alert_resolved=False)
    elif served == "false_positive":  # claimed a fix that the observer rejects
        t = make_trajectory([read(), write(), finish()], outcome="unresolved", alert_resolved=False)
    else:
        t = make_trajectory([read(), write(), finish()], outcome="worse", alert_resolved=False)
    moved = t.model_copy(update={"model_version": version, "started_at": start,
                                 "mitigated_at": start + timedelta(seconds=ttm_s),
                                 "ended_at": start + timedelta(seconds=ttm_s + 30)})
    moved.workflow_id, moved.run_id = f"incident-shop-{uuid.uuid4().hex[:12]}", "run-1"
    return moved


def seed(client: Minio, bucket: str, version: str, profile: Profile, start: datetime, days: int) -> int:
    """`days` days of `profile` from `start`; returns the number of incidents written."""
    per_day = len(profile.outcomes)
    episodes = [episode(version, start + timedelta(days=day, hours=(i + 0.5) * 24 / per_day), served, profile.ttm_s)
                for day in range(days) for i, served in enumerate(profile.outcomes)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda t: write_trajectory(client, bucket, t), episodes))
    return len(episodes)
