"""The namespace lease: one remediation at a time writes to a namespace (`NamespaceLockWorkflow`)."""

from __future__ import annotations

import hashlib
from datetime import datetime

from pydantic import BaseModel, Field

# Signal names, for the activity that signal-with-starts the lock and for the holders, which the lock does not
# import: any workflow with a `lease_granted` signal can hold a lease.
ACQUIRE = "acquire"
LEASE_GRANTED = "lease_granted"


def lock_id(namespace: str, kubeconfig: str | None) -> str:
    """One lock per namespace of one cluster (the kubeconfig, hashed: it may be a path or a URL)."""
    cluster = hashlib.sha256(kubeconfig.encode()).hexdigest()[:12] if kubeconfig else "default"
    return f"lock-{cluster}-{namespace}"


class LeaseRequest(BaseModel):
    holder: str = Field(description="the requesting workflow's id: the grant is signalled to it, it releases")
    lease_s: float = Field(gt=0, description="how long the holder may keep the lease without releasing it: a "
                                             "holder that died (terminated, timed out) cannot block the namespace")


class LeaseGrant(BaseModel):
    lock_id: str
    holder: str
    previous: str | None = Field(default=None, description="who held the lease last, if anyone did")
    previous_released_at: datetime | None = Field(
        default=None, description="when that holder released it (or its lease ran out): a holder that read the "
                                  "namespace before then reads again before it writes")


class LockState(BaseModel):
    """NamespaceLockWorkflow's input, and what it carries across continue-as-new."""

    waiting: list[LeaseRequest] = Field(default_factory=list, description="requests not granted yet, FIFO")
    previous: str | None = None
    previous_released_at: datetime | None = None
    max_grants: int = Field(default=100, ge=1, description="grants per run before continuing as new")
    idle_s: float = Field(default=3600.0, gt=0, description="how long the lock waits, unheld, before it ends; longer "
                          "than an incident runs, so a holder learns of every release since it began reading")


class AcquireRequest(BaseModel):
    """The `request_lease` activity's input: where the lock is, and what is asked of it."""

    lock_id: str
    task_queue: str = Field(description="where the lock runs if it has to be started: the requester's own queue")
    lease: LeaseRequest


class LockStatus(BaseModel):
    holder: str | None
    waiting: list[str]
    grants: int
