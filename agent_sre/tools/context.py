"""What a tool call needs besides its arguments: the cluster, the incident's namespace, the write's identity."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from kubernetes.client import ApiClient

from agent_sre.kube.client import Kube
from agent_sre.tools.guard import Guard
from agent_sre.tools.write_rules import WriteRules

DEFAULT_MAX_CHARS = 2000
FIRST_POLL_S = 0.05  # a waiting tool's first re-read comes this soon after its first read ...
POLL_S = 1.0  # ... and its waits double up to this


def poll_delay(reads: int) -> float:
    """Seconds to wait after a waiting tool's `reads`-th read: 50 ms, doubling to one second (client-go's backoff
    shape). A rollout that completes in a blink, as on the simulator's fast clock, is seen in a blink; a long one
    costs the API server one read a second."""
    return min(POLL_S, FIRST_POLL_S * 2.0 ** (reads - 1))


def sleep_backing_off(reads: int) -> None:
    time.sleep(poll_delay(reads))


class ToolFailure(Exception):
    """A call that cannot be carried out as asked (no such container, no earlier revision): ok=False, not refused."""


@dataclass
class ToolContext:
    api: ApiClient
    namespace: str  # the incident's namespace: the only one writes may touch
    idempotency_key: str | None = None  # required for writes; the same key on a retry makes the write act once
    attempt: int = 1  # the activity attempt (>1 on a retry): a delete that finds nothing on a retry is done
    max_chars: int = DEFAULT_MAX_CHARS
    approved: bool = False  # a high-risk write goes ahead (approved by a human, or by the incident's limits)
    rules: WriteRules = field(default_factory=WriteRules)
    # What a waiting tool does after its n-th read: sleep, backing off; on a simulated clock that only actions
    # move (training episodes), advance it instead.
    pause: Callable[[int], None] = field(default=sleep_backing_off)

    @cached_property
    def kube(self) -> Kube:
        return Kube(self.api, self.namespace, guard=Guard(self.approved, self.rules))

    def now(self) -> float:
        """The server's clock when known (the simulator's runs on simulated time), else the local one."""
        return self.kube.server_time or time.time()
