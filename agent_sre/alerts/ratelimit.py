"""A token bucket: how many remediations alerts may start, so that one delivery (or a storm of them) cannot start
hundreds at once."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class TokenBucket:
    """`per_minute` tokens a minute, at most `per_minute` saved up (a burst of a minute's worth)."""

    per_minute: float
    clock: Callable[[], float] = time.monotonic
    tokens: float = field(init=False)
    updated: float = field(init=False)

    def __post_init__(self) -> None:
        self.tokens, self.updated = self.per_minute, self.clock()

    def take(self) -> bool:
        """One token if there is one."""
        now = self.clock()
        self.tokens = min(self.per_minute, self.tokens + (now - self.updated) * self.per_minute / 60)
        self.updated = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True

    def give_back(self) -> None:
        """Return a token that started nothing (a redelivery attached to its running remediation)."""
        self.tokens = min(self.per_minute, self.tokens + 1)
