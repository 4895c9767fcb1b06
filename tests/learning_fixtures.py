"""Helpers for the continuous-learning tests: episodes as production writes them now."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agent_sre.models.trajectory import Trajectory


def recent(t: Trajectory, minutes_ago: float = 5) -> Trajectory:
    """The episode moved to now: objects are partitioned by start date, and cycles list the recent partitions."""
    shift = datetime.now(UTC) - timedelta(minutes=minutes_ago) - t.started_at
    return t.model_copy(update={
        "started_at": t.started_at + shift, "mitigated_at": t.mitigated_at and t.mitigated_at + shift,
        "ended_at": t.ended_at and t.ended_at + shift,
        "steps": [s.model_copy(update={"at": s.at + shift}) for s in t.steps]})
