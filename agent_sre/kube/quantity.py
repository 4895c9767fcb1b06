"""Kubernetes resource quantities ("256Mi", "100m") as numbers, for the simulator's scheduler and kubelet and the
faults that size requests and limits against the nodes."""

from __future__ import annotations

from functools import lru_cache

from kubernetes.utils import parse_quantity


@lru_cache(maxsize=4096)
def quantity(value: str | int | float) -> float:
    """A Kubernetes quantity as a float ("256Mi" -> 268435456.0, "100m" -> 0.1)."""
    return float(parse_quantity(value))
