"""Asking a namespace's lock for its lease, from a workflow (which cannot signal-with-start)."""

from __future__ import annotations

from temporalio import activity
from temporalio.common import WorkflowIDReusePolicy

from agent_sre.models.lock import ACQUIRE, AcquireRequest, LockState
from agent_sre.workflows.lock import NamespaceLockWorkflow


@activity.defn
async def request_lease(request: AcquireRequest) -> None:
    """Queue the holder at the lock, starting the lock if none runs: the grant comes back as a signal to the
    holder. Safe to retry: the lock keeps a repeated request's place."""
    await activity.client().start_workflow(
        NamespaceLockWorkflow.run, LockState(), id=request.lock_id, task_queue=request.task_queue,
        start_signal=ACQUIRE, start_signal_args=[request.lease], id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE)
