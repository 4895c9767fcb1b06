"""The storage activity: redacts and writes a finished trajectory to the object store.

Store errors are raised, never swallowed: Temporal retries with backoff while the workflow keeps the trajectory
in its state, and the deterministic key makes every retry overwrite the same object with the same bytes.
"""

from __future__ import annotations

from temporalio import activity

from agent_sre.config import get_settings
from agent_sre.models.remediation import StoredTrajectory
from agent_sre.models.trajectory import Trajectory
from agent_sre.storage import object_store
from agent_sre.trajectory_store import write_trajectory

STORE_TIMEOUT_S = 10.0


@activity.defn
def store_trajectory(t: Trajectory) -> StoredTrajectory:
    settings = get_settings()
    # Fail fast (no client-side retries): Temporal's retry policy owns the backoff and keeps the attempts visible.
    return write_trajectory(object_store(settings, timeout_s=STORE_TIMEOUT_S), settings.s3_bucket, t)
