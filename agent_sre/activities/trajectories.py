"""The storage activity: redacts and writes a finished trajectory to the object store.

Store errors are raised, never swallowed: Temporal retries with backoff while the workflow keeps the trajectory
in its state, and the deterministic key makes every retry overwrite the same object with the same bytes.
"""

from __future__ import annotations

from minio import Minio
from temporalio import activity

from agent_sre.models.remediation import StoredTrajectory
from agent_sre.models.trajectory import Trajectory
from agent_sre.trajectory_store import write_trajectory


class TrajectoryActivities:
    """Built once per worker with its store client (fail-fast timeouts, no client-side retries: Temporal's retry
    policy owns the backoff and keeps the attempts visible) and bucket."""

    def __init__(self, store: Minio, bucket: str) -> None:
        self._store, self._bucket = store, bucket

    @activity.defn
    def store_trajectory(self, t: Trajectory) -> StoredTrajectory:
        return write_trajectory(self._store, self._bucket, t)
