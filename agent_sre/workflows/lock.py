"""NamespaceLockWorkflow: the writes of concurrent remediations in one namespace, one holder at a time.

An entity workflow per namespace (id `lock-<cluster>-<namespace>`, `models.lock.lock_id`). A holder asks with the
`acquire` signal (signal-with-start, so the first request starts the lock), gets `lease_granted` in FIFO order,
and lets go with `release`. Each time a lease runs `lease_s` unreleased the lock asks whether its holder still
runs (the grant is sent again: a signal to an ended workflow fails): a live holder keeps it however long a human
takes to approve its write, a holder that died (terminated, timed out) loses it, so it cannot block the
namespace. The grant says who held the lease before and when they let go, which is how a holder that read the
namespace before that knows to read it again. The lock continues as new after `max_grants` grants and ends after
`idle_s` unheld.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import FailureError

from agent_sre.models.lock import ACQUIRE, LEASE_GRANTED, LeaseGrant, LeaseRequest, LockState, LockStatus

# A lease that runs out is taken back only from a holder that has ended (histories before it took it back at once).
HOLDER_ALIVE_PATCH = "lease-kept-by-a-live-holder"


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
        if not await self._tell(grant):  # the holder has ended: it wrote nothing under this lease
            self._holder = None
            return
        while not await self._released_within(request.lease_s):
            if workflow.patched(HOLDER_ALIVE_PATCH) and self._holder is not None and await self._tell(grant):
                continue  # still running (waiting for a human, say): the lease is its own until it lets go
            workflow.logger.warning("the lease of %s ran out after %.0fs; taken back", request.holder,
                                    request.lease_s)
            break
        self._holder = None
        self._previous, self._previous_released_at = request.holder, workflow.now()

    async def _released_within(self, seconds: float) -> bool:
        try:
            await workflow.wait_condition(lambda: self._holder is None, timeout=timedelta(seconds=seconds))
        except TimeoutError:
            return False
        return True

    @staticmethod
    async def _tell(grant: LeaseGrant) -> bool:
        """Signal the grant to its holder; False when the holder has ended."""
        try:
            # By name: a holder may be a workflow of any type (and incident.py, one of them, imports this module).
            await workflow.get_external_workflow_handle(grant.holder).signal(LEASE_GRANTED, grant)
        except FailureError:
            return False
        return True

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
