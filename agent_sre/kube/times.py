"""Kubernetes times: RFC 3339 stamps, ages as kubectl shows them, Go durations, the server's clock.

One implementation for the simulator (which stamps and tables objects), the tools (which render ages on the
server's clock) and the fault oracle (which reads Chaos Mesh durations), so they cannot disagree.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from functools import lru_cache

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


@lru_cache(maxsize=4096)
def rfc3339(ts: float) -> str:
    """Cached: on a manual clock a pass stamps every event and object it creates with the same moment."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(timestamp: str | None) -> float | None:
    """An RFC 3339 timestamp as epoch seconds; None when absent or unparsable."""
    if not timestamp:
        return None
    try:
        return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery `duration.HumanDuration`: 45s, 3m20s, 47m, 5h12m, 30h, 3d4h, 120d, 2y30d."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if hours < 24 * 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if hours < 24 * 365 * 2:
        return f"{days}d"
    if hours < 24 * 365 * 8:
        return f"{days // 365}y{days % 365}d" if days % 365 else f"{days // 365}y"
    return f"{days // 365}y"


def age(timestamp: str | None, now: float) -> str:
    """kubectl's translateTimestampSince: how long ago `timestamp` was, at `now` (the cluster's clock)."""
    t = parse_time(timestamp)
    return "<unknown>" if t is None else human_duration(now - t)


def parse_duration(text: str | None) -> float | None:
    """A Go duration ("90s", "1h30m") in seconds; None when absent or unparseable."""
    if not text:
        return None
    parts = _DURATION.findall(str(text))
    if not parts or "".join(n + u for n, u in parts) != str(text).strip():
        return None
    return sum(float(n) * _UNITS[u] for n, u in parts)


def http_date(header: str) -> float | None:
    """An HTTP `Date` header as epoch seconds (how a client learns the server's clock); None when unparsable."""
    try:
        return parsedate_to_datetime(header).timestamp()
    except (TypeError, ValueError):
        return None
