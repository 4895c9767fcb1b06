"""One isolated simulated cluster: an in-memory object store, a simulated clock, events, logs and an audit log.

The store knows nothing about workloads; controllers registered on the cluster (see `workload.py`) turn specs
into status whenever `sync()` is called. The API layer calls `sync()` before serving each request, so state is
always current for the simulated time of the request without a background thread.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent_sre.kube.errors import ApiError
from agent_sre.kube.times import rfc3339
from agent_sre.simulator.resources import BY_KEY

Obj = dict[str, Any]
Controller = Callable[["Cluster", bool], None]  # (cluster, writing): see `Cluster.sync`

SIM_EPOCH = 1_767_225_600.0  # 2026-01-01T00:00:00Z: simulated clocks start here, so runs are reproducible
CLOCKS = ("fixed", "wall")  # where an environment's clock starts: SIM_EPOCH, or the wall clock's present


def clock_start(clock: str) -> float:
    """The start of an environment's clock: SIM_EPOCH ("fixed": reproducible runs, as episodes, training and
    evaluation need) or the wall clock at its creation, to the second ("wall": for people with kubectl, which
    computes some ages itself, from the wall clock: describe's events)."""
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {', '.join(CLOCKS)}, not {clock!r}")
    return SIM_EPOCH if clock == "fixed" else float(int(time.time()))


class SimClock:
    """Simulated time: real elapsed time scaled by `speed`, plus explicit advances (for training episodes)."""

    def __init__(self, speed: float = 1.0, start: float = SIM_EPOCH) -> None:
        self.speed = speed
        self.start = start  # the environment's epoch: its apps were installed relative to it
        self._real0 = time.monotonic()
        self._offset = 0.0

    def now(self) -> float:
        return self.start + (time.monotonic() - self._real0) * self.speed + self._offset

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("the simulated clock cannot go backwards")
        self._offset += seconds


def clone(value: Any) -> Any:
    """A deep copy of JSON-like data (what the store holds), several times faster than copy.deepcopy."""
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clone(v) for v in value]
    return value


@dataclass
class AuditRecord:
    """One mutating request that reached the cluster (the durability tests count these)."""

    ts: float
    verb: str
    resource: str
    namespace: str
    name: str
    idempotency_key: str | None = None
    detail: str = ""


@dataclass(frozen=True)
class Timer:
    """Something the environment does when its clock passes `at` (a fault that arrives later): held by the
    environment, so it happens whoever drives the clock - an episode's actions, `advance`, or real time."""

    at: float
    what: str
    fire: Callable[[], None]


@dataclass
class Cluster:
    name: str
    clock: SimClock = field(default_factory=SimClock)
    objects: dict[str, dict[tuple[str, str], Obj]] = field(default_factory=dict)
    audit: list[AuditRecord] = field(default_factory=list)
    # (namespace, pod, container) -> {"current": [...], "previous": [...]}; written by the workload model
    logs: dict[tuple[str, str, str], Mapping[str, list[str]]] = field(default_factory=dict)
    controllers: list[Controller] = field(default_factory=list)
    # Free-form per-cluster state owned by controllers (e.g. the app model, usage figures, golden signals).
    model: dict[str, Any] = field(default_factory=dict)
    # (kind, namespace, name) -> (object, resourceVersion, its JSON): the API's responses reuse an unchanged object's
    encoded: dict[tuple[str, str, str], tuple[Obj, str, bytes]] = field(default_factory=dict)
    _rv: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    revision: int = 0  # bumped on every write; controllers use it to skip work when nothing changed
    # (resource, namespace, name) of each object created, replaced or deleted since the workload model last took
    # the set (a reconcile pass, which looks again at what these writes affect); None: not known (after a bulk
    # install), so the next pass looks at everything
    written: set[tuple[str, str, str]] | None = None
    timers: list[Timer] = field(default_factory=list)  # what is still due, earliest first

    # --- store -----------------------------------------------------------------------------------------------
    def get(self, resource: str, namespace: str, name: str) -> Obj | None:
        return self.objects.get(resource, {}).get((namespace, name))

    def must_get(self, resource: str, namespace: str, name: str) -> Obj:
        obj = self.get(resource, namespace, name)
        if obj is None:
            rt = BY_KEY[resource]
            raise ApiError(404, "NotFound", f'{rt.plural}{"." + rt.group if rt.group else ""} "{name}" not found')
        return obj

    def list(self, resource: str, namespace: str | None = None) -> list[Obj]:
        items = self.objects.get(resource, {})
        if namespace is None:
            return list(items.values())
        return [o for (ns, _), o in items.items() if ns == namespace]

    def create(self, resource: str, obj: Obj, dry_run: bool = False) -> Obj:
        """Store a new object; `dry_run`: checked and stamped as it would be stored, but not stored (the API's
        `dryRun=All`: no resourceVersion, as nothing was written)."""
        rt = BY_KEY[resource]
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        if not meta.get("name"):
            raise ApiError(422, "Invalid", "metadata.name: Required value")
        ns = meta.get("namespace", "") if rt.namespaced else ""
        if rt.namespaced and not ns:
            ns = meta["namespace"] = "default"
        if rt.namespaced and resource != "namespaces" and self.get("namespaces", "", ns) is None:
            raise ApiError(404, "NotFound", f'namespaces "{ns}" not found')
        bucket = self.objects.setdefault(resource, {})
        if (ns, meta["name"]) in bucket:
            raise ApiError(409, "AlreadyExists", f'{rt.plural} "{meta["name"]}" already exists')
        obj.setdefault("apiVersion", rt.group_version)
        obj.setdefault("kind", rt.kind)
        meta.setdefault("uid", str(uuid.uuid4()))
        if "creationTimestamp" not in meta:
            meta["creationTimestamp"] = rfc3339(self.clock.now())
        meta["generation"] = 1
        if dry_run:
            return obj
        meta["resourceVersion"] = str(next(self._rv))
        bucket[(ns, meta["name"])] = obj
        self._wrote(resource, ns, meta["name"])
        return obj

    def replace(self, resource: str, obj: Obj) -> Obj:
        """Store a new version of an existing object, bumping resourceVersion (and generation on spec change).

        Stored objects are never changed in place - a new version is a new object - because environments installed
        from one template share its objects until they write them; `obj` may share branches with the old version,
        so its metadata is copied before being stamped."""
        meta = obj["metadata"] = dict(obj["metadata"])
        key = (meta.get("namespace", "") if BY_KEY[resource].namespaced else "", meta["name"])
        old = self.objects.get(resource, {}).get(key)
        if old is None:
            raise ApiError(404, "NotFound", f'{resource} "{meta["name"]}" not found')
        meta["uid"] = old["metadata"]["uid"]
        meta["creationTimestamp"] = old["metadata"]["creationTimestamp"]
        gen = old["metadata"].get("generation", 1)
        meta["generation"] = gen + 1 if obj.get("spec") != old.get("spec") else gen
        meta["resourceVersion"] = str(next(self._rv))
        self.objects[resource][key] = obj
        self._wrote(resource, *key)
        return obj

    def continue_versions_after(self, highest: int) -> None:
        """Objects copied in from elsewhere (an app template) keep their resourceVersions: new ones must follow."""
        self._rv = itertools.count(max(next(self._rv), highest + 1))

    def delete(self, resource: str, namespace: str, name: str) -> Obj:
        obj = self.must_get(resource, namespace, name)
        del self.objects[resource][(namespace, name)]
        self._wrote(resource, namespace, name)
        return obj

    def _wrote(self, resource: str, namespace: str, name: str) -> None:
        self.revision += 1
        if self.written is not None:
            self.written.add((resource, namespace, name))

    def snapshot(self, resource: str, namespace: str, name: str) -> Obj | None:
        """A deep copy, for callers that want to edit an object before `replace`."""
        obj = self.get(resource, namespace, name)
        return clone(obj) if obj is not None else None

    # --- events, audit, time -----------------------------------------------------------------------------------
    def record_event(self, involved: Obj, reason: str, message: str, type_: str = "Normal", count: int = 1, *,
                     at: float | None = None, key: str | None = None, component: str | None = None) -> Obj:
        """Record (or bump the count of) an event about `involved`, as the kubelet and controllers do.

        `key` distinguishes events of the same reason (the apiserver aggregates by reason *and* message), `at`
        stamps a past moment the caller computed, and `component` names the reporter (scheduler, controllers).
        Returns the stored event so a caller may set an absolute `count`.
        """
        meta = involved["metadata"]
        ns = meta.get("namespace", "default")
        name = f'{meta["name"]}.{key or reason.lower()}'
        now = rfc3339(self.clock.now() if at is None else at)
        existing = self.get("events", ns, name)
        if existing is not None:  # a new version (stored objects are never changed in place), its own to the caller
            updated = {**existing, "count": existing.get("count", 1) + count, "lastTimestamp": now,
                       "message": message, "involvedObject": dict(existing.get("involvedObject") or {}),
                       "source": dict(existing.get("source") or {})}
            self.objects["events"][(ns, name)] = updated
            return updated
        return self.create("events", {
            "metadata": {"name": name, "namespace": ns},
            "involvedObject": {"kind": involved.get("kind"), "name": meta["name"], "namespace": ns,
                               "uid": meta.get("uid"), "apiVersion": involved.get("apiVersion")},
            "reason": reason, "message": message, "type": type_, "count": count,
            "firstTimestamp": now, "lastTimestamp": now,
            "source": {"component": component or ("kubelet" if involved.get("kind") == "Pod"
                                                  else "controller-manager")},
        })

    def record_audit(self, verb: str, resource: str, namespace: str, name: str,
                     idempotency_key: str | None = None, detail: str = "") -> None:
        self.audit.append(AuditRecord(self.clock.now(), verb, resource, namespace, name, idempotency_key, detail))

    def schedule(self, timer: Timer) -> None:
        self.timers = sorted([*self.timers, timer], key=lambda t: t.at)

    def sync(self, writing: bool = False) -> None:
        """Bring status up to the current simulated time: fire the timers it has passed (each taken off first, as
        what it does goes through the API, which syncs again), then run every controller. `writing`: a write
        request follows, so a controller may leave earlier writes for the next sync to take together with it."""
        while self.timers and self.timers[0].at <= self.clock.now():
            timer, self.timers = self.timers[0], self.timers[1:]
            timer.fire()
        for controller in self.controllers:
            controller(self, writing)
