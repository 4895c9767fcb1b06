"""What the controllers remember between passes, the index of pods and ReplicaSets by owner they share, and the
stable names (uids, pod suffixes, hashes) they give what they create, so the same history gives the same names."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agent_sre.simulator import signals
from agent_sre.simulator.cluster import Obj
from agent_sre.simulator.kubelet import PodState

SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


@dataclass
class WorkloadState:
    """What the controllers remember between passes (beyond what the objects themselves record)."""

    seen_revision: int = -1
    next_change: float = 0.0  # the next moment state others depend on changes: a pass must run then
    next_display: float = 0.0  # the next moment only displayed state changes: a pass runs before it is read
    last_sync: float = 0.0  # when the cluster last synced: writes since then happened at about that time
    last_pass: float = 0.0
    pods: dict[tuple[str, str], PodState] = field(default_factory=dict)
    hashes: dict[tuple[str, int], str] = field(default_factory=dict)  # (deployment uid, generation) -> hash
    pod_counter: dict[str, int] = field(default_factory=dict)  # replicaset uid -> pods created
    progress: dict[str, float] = field(default_factory=dict)  # deployment uid -> when its rollout last progressed
    first_failure: dict[tuple[str, str], float] = field(default_factory=dict)  # (kind/uid, reason) -> since
    chaos_ticks: dict[str, int] = field(default_factory=dict)  # uid of a pod-kill experiment that has killed -> 0
    last_scheduled: dict[str, float] = field(default_factory=dict)  # Schedule uid -> its last spawn (status.time)
    spawned: dict[str, int] = field(default_factory=dict)  # Schedule uid -> children spawned (their names)
    schedule_warned: dict[str, float] = field(default_factory=dict)  # Schedule uid -> tick last warned about
    created: dict[str, float] = field(default_factory=dict)  # uid -> creation time (chaos timing)
    ip_counter: dict[str, int] = field(default_factory=dict)  # node -> last host octet handed out
    failing_since: dict[tuple[str, ...], float] = field(default_factory=dict)  # a failure logs lines from then on
    signals: tuple[Any, signals.Computed] | None = None  # (what they were computed from, the signals)
    waking: set[str] = field(default_factory=set)  # ReplicaSets and Deployments with pods about to be available
    index: Index | None = None  # kept from pass to pass while only passes write pods and sets (`Pass.everything`)
    # what each controller step last saw when it found nothing to do: (step, object) -> its inputs
    settled: dict[tuple[str, ...], Any] = field(default_factory=dict)
    # HPA uid -> (its last sync, its recommendations in the stabilization window: (replicas, when)), and the HPA
    # generation that sync saw (a changed spec is looked at without waiting for the period)
    autoscaling: dict[str, tuple[float, tuple[tuple[int, float], ...]]] = field(default_factory=dict)
    autoscaling_seen: dict[str, Any] = field(default_factory=dict)

    def merge(self, other: WorkloadState) -> None:
        for name in ("pods", "hashes", "pod_counter", "progress", "first_failure", "chaos_ticks", "last_scheduled",
                     "spawned", "schedule_warned", "created", "ip_counter", "failing_since", "settled", "autoscaling",
                     "autoscaling_seen"):
            getattr(self, name).update(getattr(other, name))
        if self.signals is None:  # keyed by everything it follows from: a cluster with more in it recomputes
            self.signals = other.signals

    def fork(self) -> WorkloadState:
        """A copy another cluster can change: pod states are changed in place, so each gets its own; the other
        tables are replaced entry by entry, with values that are never changed, so copies of the tables do."""
        out = WorkloadState(next_change=self.next_change, next_display=self.next_display, last_pass=self.last_pass)
        out.merge(self)
        out.pods = {key: ps.fork() for key, ps in self.pods.items()}
        return out


def safe_encode(digest: bytes, n: int) -> str:
    number = int.from_bytes(digest, "big")
    out = []
    for _ in range(n):
        number, r = divmod(number, len(SAFE_ALPHABET))
        out.append(SAFE_ALPHABET[r])
    return "".join(out)


def stable_uid(*parts: object) -> str:
    """A UUID derived from names, so the same install and the same history give the same uids."""
    digest = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=16).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-4{digest[13:16]}-a{digest[17:20]}-{digest[20:32]}"


def stable_suffix(*parts: object, length: int = 5) -> str:
    """A pod-name style suffix (Kubernetes' safe alphabet) derived from names."""
    return safe_encode(hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest(), length)


def short_hash(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=4).hexdigest()


@dataclass
class Index:
    """Live pods by (namespace, name), and pods and ReplicaSets by their controller's uid."""

    live: dict[tuple[str, str], Obj] = field(default_factory=dict)
    pods_of: dict[str, dict[str, Obj]] = field(default_factory=lambda: defaultdict(dict))  # ReplicaSet uid -> pods
    sets_of: dict[str, dict[str, Obj]] = field(default_factory=lambda: defaultdict(dict))  # Deployment uid -> sets
    set_owner: dict[str, str] = field(default_factory=dict)  # ReplicaSet uid -> Deployment uid

    def put(self, resource: str, obj: Obj, gone: bool = False) -> str | None:
        """Record `obj` as it now is (or `gone`); returns its controller's uid."""
        meta = obj["metadata"]
        owner = owner_uid(obj)
        if resource == "pods":
            gone = gone or terminal(obj)
            if gone:
                self.live.pop((meta["namespace"], meta["name"]), None)
            else:
                self.live[(meta["namespace"], meta["name"])] = obj
        if owner:
            children = (self.pods_of if resource == "pods" else self.sets_of)[owner]
            if gone:
                children.pop(meta["name"], None)
            else:
                children[meta["name"]] = obj
            if resource == "replicasets.apps":
                self.set_owner[meta["uid"]] = owner
        return owner

    @classmethod
    def of(cls, objects: Mapping[str, Mapping[tuple[str, str], Obj]]) -> Index:
        """The index of a store's ReplicaSets and pods."""
        index = cls()
        for rs in objects.get("replicasets.apps", {}).values():
            index.put("replicasets.apps", rs)
        for pod in objects.get("pods", {}).values():
            index.put("pods", pod)
        return index

    def fork(self) -> Index:
        """A copy another cluster can change: its tables are copied, the objects in them are shared (never changed
        in place)."""
        return Index(dict(self.live), defaultdict(dict, {k: dict(v) for k, v in self.pods_of.items()}),
                     defaultdict(dict, {k: dict(v) for k, v in self.sets_of.items()}), dict(self.set_owner))


def owner_uid(obj: Obj) -> str | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            uid: str | None = ref.get("uid")
            return uid
    return None


def terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
