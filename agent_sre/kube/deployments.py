"""The deployment controller's arithmetic, as kube-controller-manager does it (pkg/controller/deployment).

Pure functions over ReplicaSet figures, so the rules can be read (and tested) apart from the simulator's
controller (`simulator/controllers/deployment.py`): how far a rolling update may surge and how much availability
it may give up (`maxSurge` rounded up, `maxUnavailable` rounded down, 25% each by default), how many pods the new
ReplicaSet gets, which old ReplicaSets shrink and by how much (unhealthy replicas first, never below
`replicas - maxUnavailable` available), proportional scaling when the replica count changes mid-rollout, and the
status the deployment reports. The fault catalog uses `rollout_impact` to know whether a broken rollout of a
service takes it down.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

Obj = dict[str, Any]

REVISION = "deployment.kubernetes.io/revision"
REVISION_HISTORY = "deployment.kubernetes.io/revision-history"
DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
# deployment annotations the controller does not copy onto its ReplicaSets (annotationsToSkip upstream)
NOT_COPIED = frozenset({REVISION, REVISION_HISTORY, DESIRED_REPLICAS, MAX_REPLICAS,
                        "kubectl.kubernetes.io/last-applied-configuration", "deprecated.deployment.rollback.to"})
DEFAULT_PROGRESS_DEADLINE_S = 600


def scaled(value: Any, total: int, round_up: bool) -> int:
    """An IntOrString against `total`: "25%" of 2 is 1 rounded up, 0 rounded down; 1 is 1."""
    if isinstance(value, str):
        if not value.endswith("%"):
            return int(value)
        share = total * float(value[:-1]) / 100.0
        return math.ceil(share) if round_up else math.floor(share)
    return int(value)


def _rolling(spec: Obj) -> Obj | None:
    strategy = spec.get("strategy") or {}
    if strategy.get("type", "RollingUpdate") != "RollingUpdate":
        return None
    return strategy.get("rollingUpdate") or {"maxSurge": "25%", "maxUnavailable": "25%"}


def fenceposts(spec: Obj) -> tuple[int, int]:
    """(maxSurge, maxUnavailable) of a deployment spec; both zero after rounding means one may be unavailable, on
    the theory that a surge pod might not fit the quota (ResolveFenceposts). (0, 0) for Recreate."""
    rolling = _rolling(spec)
    if rolling is None:
        return 0, 0
    replicas = spec.get("replicas", 1)
    surge = scaled(rolling.get("maxSurge", 0), replicas, True)
    unavailable = scaled(rolling.get("maxUnavailable", 0), replicas, False)
    return surge, 1 if surge == 0 and unavailable == 0 else unavailable


def max_surge(spec: Obj) -> int:
    return fenceposts(spec)[0]


def max_unavailable(spec: Obj) -> int:
    """How many replicas may be unavailable (MaxUnavailable upstream): never more than there are."""
    replicas: int = spec.get("replicas", 1)
    if _rolling(spec) is None or replicas == 0:
        return 0
    return min(fenceposts(spec)[1], replicas)


def rollout_impact(spec: Obj) -> Literal["none", "partial", "outage"]:
    """What a rollout whose new pods never become available does to the serving pods: a Recreate or a budget of
    unavailability covering every replica takes the service down; a smaller budget removes that many old pods;
    none keeps them all (the rollout is merely stuck)."""
    replicas = spec.get("replicas", 1)
    if _rolling(spec) is None:
        return "outage" if replicas else "none"
    unavailable = max_unavailable(spec)
    return "none" if unavailable == 0 else "outage" if unavailable >= replicas else "partial"


@dataclass
class ReplicaSetFigures:
    """What the controller reads of one ReplicaSet: its name, desired size, available pods, and age order."""

    name: str
    replicas: int
    available: int
    order: tuple[str, str]  # (creationTimestamp, name): ReplicaSetsByCreationTimestamp
    max_replicas: int | None = None  # the max-replicas annotation, for proportional scaling


def new_replicas(spec: Obj, all_sets: list[ReplicaSetFigures], new: ReplicaSetFigures) -> int:
    """The size the new ReplicaSet may grow to now (NewRSNewReplicas)."""
    replicas: int = spec.get("replicas", 1)
    rolling = _rolling(spec)
    if rolling is None:
        return replicas
    surge = scaled(rolling.get("maxSurge", 0), replicas, True)
    current = sum(rs.replicas for rs in all_sets)
    if current >= replicas + surge:
        return new.replicas
    return new.replicas + min(replicas + surge - current, replicas - new.replicas)


def scale_down_olds(spec: Obj, new: ReplicaSetFigures, olds: list[ReplicaSetFigures]) -> dict[str, int]:
    """The rolling update's scale-down half (reconcileOldReplicaSets): old ReplicaSet name -> new size.

    First unhealthy replicas of old sets go, oldest set first, within what availability allows counting the new
    set's unavailable pods; then available old replicas go while more than `replicas - maxUnavailable` are
    available."""
    active = sorted((rs for rs in olds if rs.replicas > 0), key=lambda rs: rs.order)
    if not active:
        return {}
    replicas = spec.get("replicas", 1)
    min_available = replicas - max_unavailable(spec)
    all_pods = new.replicas + sum(rs.replicas for rs in active)
    budget = all_pods - min_available - (new.replicas - new.available)
    if budget <= 0:
        return {}
    before = {rs.name: rs.replicas for rs in active}
    sizes = dict(before)
    cleaned = 0
    for rs in active:  # cleanupUnhealthyReplicas
        if cleaned >= budget:
            break
        unhealthy = rs.replicas - rs.available
        if unhealthy > 0:
            cut = min(budget - cleaned, unhealthy)
            sizes[rs.name] -= cut
            cleaned += cut
    allowed = new.available + sum(rs.available for rs in active) - min_available  # scaleDownOldReplicaSets...
    for rs in active:
        if allowed <= 0:
            break
        cut = min(sizes[rs.name], allowed)
        sizes[rs.name] -= cut
        allowed -= cut
    return {name: size for name, size in sizes.items() if size != before[name]}


def proportional(spec: Obj, sets: list[ReplicaSetFigures], status_replicas: int) -> dict[str, int]:
    """Sizes after a scaling event in the middle of a rolling update (`scale` upstream): the difference to the
    allowed total is shared among the active sets by their share of the previous maximum, largest set first."""
    active = [rs for rs in sets if rs.replicas > 0]
    replicas = spec.get("replicas", 1)
    allowed = replicas + max_surge(spec) if replicas > 0 else 0
    to_add = allowed - sum(rs.replicas for rs in active)
    if to_add == 0:
        return {}
    active.sort(key=lambda rs: rs.order, reverse=to_add > 0)  # ties: newer first when growing, older shrinking
    active.sort(key=lambda rs: -rs.replicas)  # larger sets first (a stable sort keeps the tie order)
    sizes, added = {}, 0
    for rs in active:
        if replicas == 0:
            fraction = -rs.replicas
        else:
            before = rs.max_replicas or status_replicas
            fraction = math.floor(rs.replicas * allowed / before + 0.5) - rs.replicas if before else 0
        share = 0 if to_add == added else min(fraction, to_add - added) if to_add > 0 else max(fraction, to_add - added)
        sizes[rs.name] = rs.replicas + share
        added += share
    if active:
        sizes[active[0].name] = max(0, sizes[active[0].name] + to_add - added)
    return {rs.name: sizes[rs.name] for rs in active if sizes[rs.name] != rs.replicas}


def complete(spec: Obj, status: Obj, generation: int) -> bool:
    """DeploymentComplete: every replica updated and available, no old pods left, the spec observed."""
    replicas = spec.get("replicas", 1)
    return bool(status.get("updatedReplicas", 0) == replicas and status.get("replicas", 0) == replicas
                and status.get("availableReplicas", 0) == replicas
                and status.get("observedGeneration", 0) >= generation)


def progressed(old: Obj, new: Obj) -> bool:
    """DeploymentProgressing: more updated, ready or available replicas, or fewer old ones, than last time."""
    return bool(new.get("updatedReplicas", 0) > old.get("updatedReplicas", 0)
                or new.get("replicas", 0) - new.get("updatedReplicas", 0)
                < old.get("replicas", 0) - old.get("updatedReplicas", 0)
                or new.get("readyReplicas", 0) > old.get("readyReplicas", 0)
                or new.get("availableReplicas", 0) > old.get("availableReplicas", 0))
