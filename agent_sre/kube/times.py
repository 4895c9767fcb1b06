"""Kubernetes timestamps as kubectl shows them: one implementation for the simulator's server-side tables and
the tools' client-side rendering (which must not depend on the simulator: it also reads real clusters)."""

from __future__ import annotations

from datetime import datetime


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
