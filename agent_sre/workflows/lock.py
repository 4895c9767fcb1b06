"""NamespaceLockWorkflow: the writes of concurrent remediations in one namespace, one holder at a time.

An entity workflow per namespace (id `lock-<cluster>-<namespace>`, `models.lock.lock_id`). A holder asks with the
`acquire` signal (signal-with-start, so the first request starts the lock), gets `lease_granted` in FIFO order,
and lets go with `release`; a lease that runs out (`lease_s`) is taken back, so a holder that died cannot block
the namespace. The grant says who held the lease before and when they let go, which is how a holder that read
the namespace before that knows to read it again. The lock continues as new after `max_grants` grants and ends
after `idle_s` unheld.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import FailureError

from agent_sre.models.lock import ACQUIRE, LEASE_GRANTED, LeaseGrant, LeaseRequest, LockState, LockStatus


@workflow.defn(name="NamespaceLockWorkflow", sandboxed=False)
class NamespaceLockWorkflow:
    @workflow.init
    def __init__(self, state: LockState) -> None:
        self._waiting = list(state.waiting)
        self._holder: str | None = None
        self._previous, self._previous_released_at = state.previous, state.previous_released_at
        self._grants = 0

    @workflow.run
    async def run(self, state: LockState) -> None:
        while self._grants < state.max_grants:
            try:
                await workflow.wait_condition(lambda: bool(self._waiting), timeout=timedelta(seconds=state.idle_s))
            except TimeoutError:
                return  # nobody asked for a while: the next request starts a new run
            await self._lend(self._waiting.pop(0))
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(state.model_copy(update={
            "waiting": self._waiting, "previous": self._previous, "previous_released_at": self._previous_released_at}))

    async def _lend(self, request: LeaseRequest) -> None:
        """Grant the lease and wait for its release, or for it to run out."""
        grant = LeaseGrant(lock_id=workflow.info().workflow_id, holder=request.holder, previous=self._previous,
                           previous_released_at=self._previous_released_at)
        self._holder = request.holder
        self._grants += 1
        try:
            # By name: a holder may be a workflow of any type (and incident.py, one of them, imports this module).
            await workflow.get_external_workflow_handle(request.holder).signal(LEASE_GRANTED, grant)
        except FailureError:  # the holder has ended: it wrote nothing under this lease
            self._holder = None
            return
        try:
            await workflow.wait_condition(lambda: self._holder is None, timeout=timedelta(seconds=request.lease_s))
        except TimeoutError:
            workflow.logger.warning("the lease of %s ran out after %.0fs; taken back", request.holder,
                                    request.lease_s)
        self._holder = None
        self._previous, self._previous_released_at = request.holder, workflow.now()

    @workflow.signal(name=ACQUIRE)
    def acquire(self, request: LeaseRequest) -> None:
        """Queue a request; a repeated one (the requesting activity retried) keeps its place."""
        if request.holder != self._holder and all(w.holder != request.holder for w in self._waiting):
            self._waiting.append(request)

    @workflow.signal
    def release(self, holder: str) -> None:
        """The holder is done writing, or a requester no longer waits."""
        if holder == self._holder:
            self._holder = None
        self._waiting = [w for w in self._waiting if w.holder != holder]

    @workflow.query
    def status(self) -> LockStatus:
        return LockStatus(holder=self._holder, waiting=[w.holder for w in self._waiting], grants=self._grants)
