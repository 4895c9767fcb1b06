"""The workload model: the controllers that turn specs into running (or failing) pods.

`attach(cluster)` registers one reconcile function. Each pass runs, in order, what a real control plane would:
Chaos Mesh (effects, pod kills), the node lifecycle controller (cordon taint), the deployment controller
(ReplicaSets with revisions, rolling updates, Recreate), the ReplicaSet controller (pods, quota admission),
the scheduler, the kubelet (`kubelet.py`), then status: ReplicaSets, Deployments, Endpoints, quotas, usage
for `kubectl top`, golden signals and logs.

`sync()` runs before every API request, so a pass is skipped unless something was written since the last one
or simulated time reached the next moment at which some state changes (a back-off ends, a pod turns ready, a
chaos schedule ticks). Everything time-dependent is computed from elapsed simulated time, so the state at a
given moment does not depend on how often anyone looked.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache, partial
from typing import Any

from agent_sre.kube import deployments
from agent_sre.kube.times import parse_duration
from agent_sre.simulator import chaos, kubelet, logs, scheduling, signals
from agent_sre.simulator.cluster import Cluster, Obj, clone
from agent_sre.simulator.kubelet import INF, NamespaceView, PodState

REVISION = deployments.REVISION
HASH_LABEL = "pod-template-hash"
SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
SYSTEM_CPU_M, SYSTEM_MEMORY = 180.0, 1.1 * 1024 ** 3  # kubelet, containerd and daemonsets on every node
RESYNC_S = 300.0  # at the latest, a pass runs every 5 simulated minutes (logs and usage stay fresh)
MAX_CATCH_UP_PASSES = 500  # a longer jump of the clock is finished in one step
COALESCE_WRITES_S = 1.0  # writes closer together than this (simulated) are acted on in one pass
SIGNAL_INPUTS = ("services", "endpoints", "networkpolicies.networking.k8s.io", "namespaces")
CREATE_RETRY_S = 30.0  # the ReplicaSet controller retries a pod the quota refused
SCHEDULE_RETRY_S = 60.0  # the scheduler retries an unschedulable pod
CONTROLLER_ROUNDS = 16  # deployment and ReplicaSet controllers take turns until neither changes anything


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
    chaos_ticks: dict[str, int] = field(default_factory=dict)  # pod-kill experiment uid -> last tick done
    created: dict[str, float] = field(default_factory=dict)  # uid -> creation time (chaos timing)
    ip_counter: dict[str, int] = field(default_factory=dict)  # node -> last host octet handed out
    failing_since: dict[tuple[str, ...], float] = field(default_factory=dict)  # a failure logs lines from then on
    signals: tuple[Any, signals.Computed] | None = None  # (what they were computed from, the signals)
    waking: set[str] = field(default_factory=set)  # ReplicaSets and Deployments with pods about to be available
    index: Index | None = None  # kept from pass to pass while only passes write pods and sets (`_Pass._everything`)
    # what each controller step last saw when it found nothing to do: (step, object) -> its inputs
    settled: dict[tuple[str, ...], Any] = field(default_factory=dict)

    def merge(self, other: WorkloadState) -> None:
        for name in ("pods", "hashes", "pod_counter", "progress", "first_failure", "chaos_ticks",
                     "created", "ip_counter", "failing_since", "settled"):
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


def attach(cluster: Cluster) -> None:
    """Register the workload model on `cluster` (idempotent)."""
    if "workload" not in cluster.model:
        now = cluster.clock.now()
        cluster.model["workload"] = WorkloadState(last_sync=now, last_pass=now)
        cluster.model.setdefault("usage", {})
        cluster.model.setdefault("node_usage", {})
        cluster.model.setdefault("signals", {})
        cluster.model.setdefault("apps", {})
    if reconcile not in cluster.controllers:
        cluster.controllers.append(reconcile)


def export(cluster: Cluster, namespace: str) -> WorkloadState:
    """The controllers' memory about one namespace (for install templates)."""
    state: WorkloadState = cluster.model["workload"]
    out = WorkloadState(next_change=state.next_change, next_display=state.next_display, last_pass=state.last_pass)
    out.merge(state)
    out.pods = {k: v for k, v in state.pods.items() if k[0] == namespace}
    return out


def adopt(cluster: Cluster, state: WorkloadState, settled: bool = False, index: Index | None = None) -> None:
    """Take over the controllers' memory of an install (`export`). `settled`: the cluster holds exactly the objects
    that memory settled on (an install into an empty cluster), so when nothing is due, the first sync carries on
    from there with one pass at the clock instead of re-examining everything (a full pass would find nothing to
    do, so the result is the same); `index` (`Index.of` those very objects) is then forked rather than rebuilt."""
    attach(cluster)
    own: WorkloadState = cluster.model["workload"]
    own.merge(state)
    if settled and index is not None:
        own.index = index.fork()
    if settled and state.next_change == INF:
        own.seen_revision, own.last_pass = cluster.revision, state.last_pass
        own.next_change, own.next_display = INF, cluster.clock.now()


def reconcile(cluster: Cluster, writing: bool = False) -> None:
    """Bring the cluster to the current simulated time, passing through every moment at which state changes.

    Writes arrive between syncs (the API syncs before serving each request, the write included), so a change
    is acted on at the time of the last sync: a deployment patched and then left alone for ten simulated minutes
    rolls out during those minutes, not at their end. Writes in a row (an injection, a fix of several calls) are
    acted on together, in one pass at the first one's time, when nothing else is due in between (`writing`).
    """
    state: WorkloadState = cluster.model["workload"]
    now = cluster.clock.now()
    if writing and cluster.revision != state.seen_revision and min(state.next_change, state.next_display) > now \
            and now - state.last_sync <= COALESCE_WRITES_S and now - state.last_pass < RESYNC_S:
        return
    last: _Pass | None = None
    for _ in range(MAX_CATCH_UP_PASSES):
        if cluster.revision != state.seen_revision:
            at = min(max(state.last_sync, state.last_pass), now)
        elif state.next_change <= now:
            at = max(state.next_change, state.last_pass)
        else:
            break
        last = _run_pass(cluster, state, at)
    else:
        last = _run_pass(cluster, state, now)
    if state.next_display <= now or now - state.last_pass >= RESYNC_S:
        last = _run_pass(cluster, state, now)  # what only shows (back-off phases, counts) is brought up to date
    if last is not None:
        last.finish()
    state.last_sync = now


def _run_pass(cluster: Cluster, state: WorkloadState, at: float) -> _Pass:
    done = _Pass(cluster, state, at)
    state.next_change, state.next_display = done.run()
    state.seen_revision = cluster.revision
    cluster.written = set()  # the pass's own writes: the next pass looks again only at what API requests write
    state.last_pass = at
    return done


# --- helpers ----------------------------------------------------------------------------------------------------

def _encode(digest: bytes, n: int) -> str:
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
    return _encode(hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest(), length)


def _short(text: str) -> str:
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
        owner = _owner_uid(obj)
        if resource == "pods":
            gone = gone or _terminal(obj)
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


class _Deferred(Mapping[Any, Any]):
    """A read-only table worked out when first read."""

    __slots__ = ("_work", "_table")

    def __init__(self, work: Callable[[], dict[Any, Any]]) -> None:
        self._work: Callable[[], dict[Any, Any]] | None = work
        self._table: dict[Any, Any] = {}

    def _get(self) -> dict[Any, Any]:
        if self._work is not None:
            self._table, self._work = self._work(), None
        return self._table

    def __getitem__(self, key: Any) -> Any:
        return self._get()[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())


def _max_revision(sets: list[Obj]) -> int:
    return max((int((r["metadata"].get("annotations") or {}).get(REVISION, "0")) for r in sets), default=0)


class _Conditions:
    """A status's conditions, changed as SetDeploymentCondition does: the same status and reason leave a condition
    alone; a new reason keeps its lastTransitionTime; a changed condition moves to the end of the list."""

    def __init__(self, items: list[Obj], now: float) -> None:
        self.items, self.stamp = [dict(c) for c in items], kubelet.stamp(now)

    def get(self, kind: str) -> Obj | None:
        return next((c for c in self.items if c.get("type") == kind), None)

    def remove(self, kind: str) -> None:
        self.items = [c for c in self.items if c.get("type") != kind]

    def put(self, condition: Obj) -> None:
        self.remove(condition["type"])
        self.items.append(condition)

    def set(self, kind: str, status: str, reason: str, message: str, at: float | None = None) -> None:
        current = self.get(kind)
        if current is not None and current.get("status") == status and current.get("reason") == reason:
            return
        self.renew(kind, status, reason, message, at)

    def renew(self, kind: str, status: str, reason: str, message: str, at: float | None = None) -> None:
        """Record the condition as of now (or `at`), even with an unchanged reason (Progressing renews on each
        progress)."""
        current = self.get(kind)
        stamp = self.stamp if at is None else kubelet.stamp(at)
        since = current["lastTransitionTime"] if current is not None and current.get("status") == status else stamp
        self.put({"type": kind, "status": status, "lastUpdateTime": stamp, "lastTransitionTime": since,
                  "reason": reason, "message": message})


def _owner_uid(obj: Obj) -> str | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return ref.get("uid")
    return None


def _terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


# --- one reconcile pass -----------------------------------------------------------------------------------------

class _Pass:
    def __init__(self, cluster: Cluster, state: WorkloadState, now: float) -> None:
        self.c, self.st, self.now = cluster, state, now
        self.next_change = self.next_display = INF
        self.views: dict[str, NamespaceView] = {}
        self.effects: dict[tuple[str, str], chaos.PodEffects] = {}
        self.synced: set[tuple[str, str]] = set()
        self.endpoints_changed = False
        self.created: dict[str, str] = {}  # deployment uid -> the ReplicaSet this pass created for it
        self._available_memo: dict[str, tuple[int, int]] = {}  # ReplicaSet uid -> (index version, available)
        # uids of ReplicaSets and Deployments whose pods or sets this pass changed: since the last controller round
        # (`_dirty`) and in all (`_touched`), and the namespaces of changed pods. Without API writes since the last
        # pass (`_full` False), nothing else can have changed but what waits on time (`st.waking`, ReplicaSets
        # refused by a quota), and the index of the last pass is still right. API writes (`Cluster.written`) are
        # added to these: a written Deployment is dirty, a written Service, Endpoints or quota touches its
        # namespace; only writes of pods or ReplicaSets (or writes not known one by one) make every step look at
        # everything (`_everything`) with a fresh index.
        self._dirty: set[str] = set()
        self._touched: set[str] = set()
        self._touched_ns: set[str] = set()
        self._touched_apps: set[tuple[str, str | None]] = set()  # (namespace, app label) of changed pods
        self._written_ns: set[str] = set()  # namespaces of Services and Endpoints that API requests wrote
        self._full = self._everything = self._signal_inputs = True
        self._version = 0  # bumped when the index changes, for the lists cached from it
        self._lists: dict[Any, tuple[int, list[Obj]]] = {}

    # --- plumbing ----------------------------------------------------------------------------------------------
    def _later(self, t: float, display: bool = False) -> None:
        """Ask for a pass at `t`: always when state others depend on changes then; for a change that only shows in
        the status (`display`), a clock jump skips it and one pass at the end brings the status up to date."""
        if t > self.now:
            if display:
                self.next_display = min(self.next_display, t)
            else:
                self.next_change = min(self.next_change, t)

    def _write(self, resource: str, obj: Obj) -> Obj:
        stored = self.c.replace(resource, obj)
        self._reindex(resource, stored)
        if resource == "deployments.apps":
            self._mark(stored["metadata"]["uid"])
        return stored

    def _store(self, resource: str, obj: Obj) -> Obj:
        obj["metadata"].setdefault("creationTimestamp", kubelet.stamp(self.now))
        stored = self.c.create(resource, obj)
        self._reindex(resource, stored)
        return stored

    def _remove(self, resource: str, obj: Obj) -> None:
        meta = obj["metadata"]
        self.c.delete(resource, meta["namespace"], meta["name"])
        self._reindex(resource, obj, gone=True)

    def _index(self) -> Index:
        if self.st.index is None:
            self.st.index = Index.of(self.c.objects)
        return self.st.index

    def _reindex(self, resource: str, obj: Obj, gone: bool = False) -> None:
        """Keep the index in step with one written, created or deleted pod or ReplicaSet (already in the store)."""
        if resource not in ("pods", "replicasets.apps"):
            return
        index = self._index()
        owner = index.put(resource, obj, gone)
        if owner:
            self._mark(owner, index.set_owner.get(owner, ""), obj["metadata"]["uid"])
        if resource == "pods":
            meta = obj["metadata"]
            self._touched_ns.add(meta["namespace"])
            self._touched_apps.add((meta["namespace"], (meta.get("labels") or {}).get("app")))
        self._version += 1

    def _mark(self, *uids: str) -> None:
        self._dirty.update(uids)
        self._touched.update(uids)

    def _waiting(self) -> set[str]:
        """What must be looked at even if nothing changed: sets with pods about to be available, sets whose pods
        a quota refused (they retry)."""
        return self.st.waking | {uid for uid, reason in self.st.first_failure if reason == "FailedCreate"}

    def _cached(self, key: Any, build: Any) -> list[Obj]:
        hit = self._lists.get(key)
        if hit is None or hit[0] != self._version:
            hit = self._lists[key] = (self._version, build())
        return hit[1]

    def _event(self, obj: Obj, reason: str, message: str, type_: str = "Normal", component: str | None = None,
               count: int | None = None) -> None:
        event = self.c.record_event(obj, reason, message, type_, key=f"{reason.lower()}-{_short(message)}",
                                    component=component, at=self.now)
        if count is not None:
            event["count"] = count

    def _kubelet_event(self, pod: Obj, ps: PodState, reason: str, message: str, type_: str, count: int,
                       container: str) -> None:
        key = f"{reason.lower()}-{_short(message)}"
        if ps.events.get(key) == count:
            return
        ps.events[key] = count
        event = self.c.record_event(pod, reason, message, type_, key=key, component="kubelet", at=self.now)
        event["count"] = count
        event["involvedObject"]["fieldPath"] = f"spec.containers{{{container}}}"
        event["source"]["host"] = ps.node

    def _pods(self, namespace: str | None = None) -> list[Obj]:
        """Live (not terminated) pods, of one namespace or all."""
        live = self._index().live
        return self._cached(("ns", namespace), lambda: [p for (ns, _), p in live.items()
                                                        if namespace is None or ns == namespace])

    def _view(self, ns: str) -> NamespaceView:
        view = self.views.get(ns)
        if view is None:
            services = {s["metadata"]["name"]: tuple(p.get("port", 0) for p in (s.get("spec") or {}).get("ports") or [])
                        for s in self.c.list("services", ns)}
            ready_ports: dict[str, set[int]] = {}
            for ep in self.c.list("endpoints", ns):
                for subset in ep.get("subsets") or []:
                    if subset.get("addresses"):
                        ready_ports.setdefault(ep["metadata"]["name"], set()).update(
                            p.get("port") for p in subset.get("ports") or [])
            svc_ports: dict[str, set[int]] = {}
            for name, ports in ready_ports.items():
                svc = self.c.get("services", ns, name)
                svc_ports[name] = {p.get("port") for p in ((svc or {}).get("spec") or {}).get("ports") or []
                                   if p.get("targetPort") in ports or p.get("port") in ports}
            instance = self.c.model.get("apps", {}).get(ns)
            view = NamespaceView(ns, services, svc_ports, dict(instance.passwords) if instance else {},
                                 {s["metadata"]["name"]: s for s in self.c.list("secrets", ns)},
                                 {m["metadata"]["name"]: m for m in self.c.list("configmaps", ns)})
            self.views[ns] = view
        return view

    # --- the pass ----------------------------------------------------------------------------------------------
    def run(self) -> tuple[float, float]:
        self._full = self.c.revision != self.st.seen_revision
        self._take_written()
        if self._everything:  # an API request may have deleted pods (passes forget the pods they delete themselves)
            self.st.index = None
            self.st.pods = {k: v for k, v in self.st.pods.items() if self.c.get("pods", *k) is not None}
        waiting, self.st.waking = self._waiting(), set()
        self._chaos()
        self._nodes()
        self._schedule()
        self._kubelet()
        self._touched |= waiting
        # after API writes, the first round syncs every ReplicaSet (a cheap count), so a set the deployment
        # controller just resized acts in the same round, as it did when every deployment was synced
        everything, every_set = self._everything, self._full
        for _ in range(CONTROLLER_ROUNDS):  # as informers requeue: what changed since the last round
            queue, self._dirty, changed = self._dirty | waiting, set(), False
            for dep in self.c.list("deployments.apps"):
                if everything or dep["metadata"]["uid"] in queue:
                    changed |= self._sync_deployment(dep)
            for rs in self.c.list("replicasets.apps"):
                if every_set or rs["metadata"]["uid"] in queue:
                    changed |= self._sync_replicaset(rs)
            if not changed:
                break
            everything, every_set, waiting = False, False, set()
            self._schedule()
            self._kubelet()
        self._replicaset_status()
        self._deployment_status()
        self._endpoints()
        self._quota_status()
        self.computed = self._signals()
        self.c.model["signals"] = self.computed.services
        self.c.model["edges"] = self.computed.edges
        self.failing = self._failing_since(self.computed)
        if self.endpoints_changed and self._waiting_for_services():
            self.next_change = self.now  # a waiting init container may see its service now
        return self.next_change, self.next_display

    def _take_written(self) -> None:
        """What API requests wrote since the last pass, as what this pass must look at again."""
        written = self.c.written
        if not self._full:
            self._everything = self._signal_inputs = False
            return
        self._everything = written is None or any(r in ("pods", "replicasets.apps") for r, _, _ in written)
        self._signal_inputs = written is None or any(r in SIGNAL_INPUTS for r, _, _ in written)
        for resource, ns, name in written or ():
            if resource == "deployments.apps":
                dep = self.c.get(resource, ns, name)
                if dep is not None:
                    self._mark(dep["metadata"]["uid"])
            elif resource in ("services", "endpoints", "resourcequotas"):
                self._touched_ns.add(ns)
                if resource != "resourcequotas":
                    self._written_ns.add(ns)

    def _signals(self) -> signals.Computed:
        """The golden signals, recomputed only when what they follow from changed: Services, Endpoints, network
        policies, namespaces, chaos effects, or which pods fail to log in to a database."""
        objects = self.st.signals[0][0] if self.st.signals and not (self._signal_inputs or self.endpoints_changed) \
            else \
            tuple((o["metadata"].get("namespace"), o["metadata"]["name"], o["metadata"].get("resourceVersion"))
                  for resource in SIGNAL_INPUTS for o in self.c.list(resource))
        key = (objects,
               tuple(sorted((k, fx.failure, fx.cpu_millicores, fx.memory_bytes, fx.delay_ms, fx.loss, fx.abort,
                             fx.http_delay_ms) for k, fx in self.effects.items())),
               tuple(sorted(k for k, ps in self.st.pods.items()
                            if any(signals.fails_to_log_in(r.outcome) for r in ps.runs.values()))),
               tuple(self.c.model.get("apps", {})))
        if self.st.signals is None or self.st.signals[0] != key:
            self.st.signals = (key, signals.compute(self.c, self.effects, self.st.pods))
        return self.st.signals[1]

    def _waiting_for_services(self) -> bool:
        return any(run.outcome.wait_for is not None for ps in self.st.pods.values() for run in ps.runs.values())

    def finish(self) -> None:
        """What only readers see - usage for `kubectl top` and logs - for the last pass of a sync: passes in
        between (a clock jump stepping through state changes) skip it. Usage is worked out when first read: the
        next pass replaces it, and any read follows that pass (the API syncs first), so the state it comes from
        is still this pass's then."""
        usage = cache(partial(self._usage, self.computed.load))
        self.c.model["usage"] = _Deferred(lambda: usage()[0])
        self.c.model["node_usage"] = _Deferred(lambda: usage()[1])
        self._logs(*self.failing)

    # --- Chaos Mesh --------------------------------------------------------------------------------------------
    def _chaos(self) -> None:
        objects = {r: self.c.list(r) for r in (*chaos.CHAOS_RESOURCES.values(), chaos.SCHEDULE_RESOURCE)}
        for items in objects.values():
            for obj in items:
                uid = obj["metadata"]["uid"]
                if uid not in self.st.created:
                    self.st.created[uid] = self.now
                self._chaos_timing(obj)
        experiments = chaos.active_experiments(objects, self.now, self.st.created)
        if not experiments:
            return
        pods = self._pods()
        for exp in experiments:
            selected = chaos.apply(exp, pods, self.effects)
            if exp.kind == "PodChaos" and exp.spec.get("action") == "pod-kill":
                if self.st.chaos_ticks.get(exp.uid, -2) < exp.tick:
                    self.st.chaos_ticks[exp.uid] = exp.tick
                    for pod in selected:
                        self._kill(pod)
                    pods = self._pods()
            self._chaos_status(exp, selected)

    def _chaos_timing(self, obj: Obj) -> None:
        """Wake up when an experiment's duration runs out or its schedule ticks."""
        created = self.st.created[obj["metadata"]["uid"]]
        spec = obj.get("spec") or {}
        if obj.get("kind") == "Schedule":
            interval = chaos.parse_interval(str(spec.get("schedule", "")))
            if interval:
                kind = spec.get("type", "")
                inner = spec.get(kind[:1].lower() + kind[1:]) or {}
                tick = int((self.now - created + kubelet.TIME_EPSILON_S) // interval)
                self._later(created + (tick + 1) * interval)
                duration = parse_duration(inner.get("duration"))
                if duration is not None:
                    self._later(created + tick * interval + duration)
            return
        duration = parse_duration(spec.get("duration"))
        if duration is not None:
            self._later(created + duration)

    def _chaos_status(self, exp: chaos.Experiment, selected: list[Obj]) -> None:
        resource = chaos.SCHEDULE_RESOURCE if exp.tick >= 0 else chaos.CHAOS_RESOURCES[exp.kind]
        obj = self.c.get(resource, exp.namespace, exp.name)
        if obj is None:
            return
        records = [{"id": f"{p['metadata']['namespace']}/{p['metadata']['name']}", "selectorKey": ".",
                    "phase": "Injected"} for p in selected]
        status: dict[str, Any]
        if exp.tick >= 0:
            status = {"time": kubelet.stamp(self.st.created[exp.uid]), "active": [{"kind": exp.kind, "name": exp.name}]}
        else:
            stamp = kubelet.stamp(self.st.created[exp.uid])
            status = {"conditions": [
                {"type": "Selected", "status": "True" if selected else "False"},
                {"type": "AllInjected", "status": "True" if selected else "False"},
                {"type": "AllRecovered", "status": "False"}, {"type": "Paused", "status": "False"}],
                "experiment": {"desiredPhase": "Run", "containerRecords": records,
                               "records": [{"time": stamp, "operation": "Apply", "type": "Succeeded"}]}}
        if obj.get("status") != status:
            self._write(resource, {**obj, "status": status})

    def _kill(self, pod: Obj) -> None:
        """Chaos Mesh deletes the pod (grace period 0); its ReplicaSet replaces it."""
        self._event(pod, "Killing", f"Stopping container {pod['spec']['containers'][0]['name']}", component="kubelet")
        self._delete_pod(pod)

    def _delete_pod(self, pod: Obj) -> None:
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        self._remove("pods", pod)
        self.st.pods.pop(key, None)
        for container in [*(pod["spec"].get("initContainers") or []), *(pod["spec"].get("containers") or [])]:
            self.c.logs.pop((key[0], key[1], container["name"]), None)

    # --- nodes -------------------------------------------------------------------------------------------------
    def _nodes(self) -> None:
        """The node lifecycle controller keeps the unschedulable taint in step with `spec.unschedulable`."""
        for node in self.c.list("nodes"):
            spec = node.get("spec") or {}
            taints = spec.get("taints") or []
            has = any(t.get("key") == scheduling.UNSCHEDULABLE_TAINT for t in taints)
            want = bool(spec.get("unschedulable"))
            if has == want:
                continue
            new = {**node, "spec": dict(spec)}
            if want:
                new["spec"]["taints"] = [*taints, {"key": scheduling.UNSCHEDULABLE_TAINT, "effect": "NoSchedule",
                                                   "timeAdded": kubelet.stamp(self.now)}]
            else:
                rest = [t for t in taints if t.get("key") != scheduling.UNSCHEDULABLE_TAINT]
                if rest:
                    new["spec"]["taints"] = rest
                else:
                    new["spec"].pop("taints", None)
            self._write("nodes", new)
            self._event(new, "NodeNotSchedulable" if want else "NodeSchedulable",
                        f"Node {node['metadata']['name']} status is now: "
                        f"{'NodeNotSchedulable' if want else 'NodeSchedulable'}", component="kubelet")

    # --- deployments -------------------------------------------------------------------------------------------
    def _owned_replicasets(self, owner_uid: str) -> list[Obj]:
        return list(self._index().sets_of.get(owner_uid, {}).values())

    def _template_hash(self, dep: Obj) -> str:
        key = (dep["metadata"]["uid"], dep["metadata"].get("generation", 1))
        value = self.st.hashes.get(key)
        if value is None:
            template = dep["spec"]["template"]
            text = json.dumps(template, sort_keys=True, separators=(",", ":"))
            value = self.st.hashes[key] = _encode(hashlib.blake2b(text.encode(), digest_size=16).digest(), 10)
        return value

    def _available(self, rs: Obj) -> int:
        """Pods ready for at least minReadySeconds; a pass is asked for when the next one becomes available."""
        uid = rs["metadata"]["uid"]
        memo = self._available_memo.get(uid)
        if memo is not None and memo[0] == self._version and not (rs.get("spec") or {}).get("minReadySeconds"):
            return memo[1]
        count = self._count_available(rs)
        self._available_memo[uid] = (self._version, count)
        return count

    def _count_available(self, rs: Obj) -> int:
        ns = rs["metadata"]["namespace"]
        min_ready = (rs.get("spec") or {}).get("minReadySeconds", 0)
        count = 0
        for pod in self._pods_of(rs):
            ps = self.st.pods.get((ns, pod["metadata"]["name"]))
            if ps is None or not ps.ready or ps.ready_since is None:
                continue
            if ps.ready_since + min_ready <= self.now + kubelet.TIME_EPSILON_S:
                count += 1
            else:
                self._later(ps.ready_since + min_ready)
                self.st.waking.update((rs["metadata"]["uid"], _owner_uid(rs) or ""))
        return count

    def _pods_of(self, rs: Obj) -> Collection[Obj]:
        """The ReplicaSet's live pods: a view of the index, so take a list before changing them."""
        return self._index().pods_of.get(rs["metadata"]["uid"], {}).values()

    def _figures(self, rs: Obj) -> deployments.ReplicaSetFigures:
        meta = rs["metadata"]
        most = (meta.get("annotations") or {}).get(deployments.MAX_REPLICAS, "")
        return deployments.ReplicaSetFigures(meta["name"], rs["spec"].get("replicas", 0), self._available(rs),
                                             (meta.get("creationTimestamp", ""), meta["name"]),
                                             int(most) if most.isdigit() else None)

    @staticmethod
    def _replica_annotations(dep: Obj) -> dict[str, str]:
        spec = dep["spec"]
        replicas = spec.get("replicas", 1)
        return {deployments.DESIRED_REPLICAS: str(replicas),
                deployments.MAX_REPLICAS: str(replicas + deployments.max_surge(spec))}

    @staticmethod
    def _copied_annotations(dep: Obj) -> dict[str, str]:
        """The deployment's annotations its new ReplicaSet carries (the change-cause, for rollout history)."""
        return {k: v for k, v in (dep["metadata"].get("annotations") or {}).items()
                if k not in deployments.NOT_COPIED}

    def _create_replicaset(self, dep: Obj, pod_hash: str, olds: list[Obj]) -> Obj:
        meta, spec = dep["metadata"], dep["spec"]
        template = clone(spec["template"])
        template.setdefault("metadata", {}).setdefault("labels", {})[HASH_LABEL] = pod_hash
        selector = clone(spec["selector"])
        selector.setdefault("matchLabels", {})[HASH_LABEL] = pod_hash
        name = f"{meta['name']}-{pod_hash}"
        empty = deployments.ReplicaSetFigures(name, 0, 0, ("", name))
        replicas = deployments.new_replicas(spec, [self._figures(r) for r in olds], empty)
        annotations = {**self._copied_annotations(dep), REVISION: str(_max_revision(olds) + 1),
                       **self._replica_annotations(dep)}
        rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
              "metadata": {"name": name, "namespace": meta["namespace"],
                           "uid": stable_uid(meta["namespace"], "rs", name),
                           "labels": dict(template["metadata"]["labels"]), "annotations": annotations,
                           "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": meta["name"],
                                                "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}]},
              "spec": {"replicas": replicas, "minReadySeconds": spec.get("minReadySeconds", 0),
                       "selector": selector, "template": template},
              "status": {"replicas": 0, "observedGeneration": 1}}
        rs = self._store("replicasets.apps", rs)
        self.created[meta["uid"]] = name
        if replicas:
            self._event(dep, "ScalingReplicaSet", f"Scaled up replica set {name} to {replicas}",
                        component="deployment-controller")
        return rs

    def _sync_new_replicaset(self, dep: Obj, rs: Obj, olds: list[Obj]) -> Obj:
        """An existing new ReplicaSet takes the deployment's annotations and minReadySeconds, and becomes the newest
        revision again after a rollback, remembering the revisions it had (revision-history)."""
        meta = rs["metadata"]
        annotations = dict(meta.get("annotations") or {})
        annotations.update(self._copied_annotations(dep))
        revision, newest = annotations.get(REVISION, ""), _max_revision(olds) + 1
        if int(revision or 0) < newest:
            annotations[REVISION] = str(newest)
            if revision:
                history = annotations.get(deployments.REVISION_HISTORY)
                annotations[deployments.REVISION_HISTORY] = f"{history},{revision}" if history else revision
        min_ready = dep["spec"].get("minReadySeconds", 0)
        if annotations == meta.get("annotations") and rs["spec"].get("minReadySeconds", 0) == min_ready:
            return rs
        return self._write("replicasets.apps", {**rs, "metadata": {**meta, "annotations": annotations},
                                                "spec": {**rs["spec"], "minReadySeconds": min_ready}})

    def _scale(self, dep: Obj, rs: Obj, replicas: int) -> Obj:
        """Resize a ReplicaSet, stamping the deployment's size on it (what tells a later scaling event apart)."""
        old = rs["spec"].get("replicas", 0)
        annotations = {**(rs["metadata"].get("annotations") or {}), **self._replica_annotations(dep)}
        if old == replicas and annotations == rs["metadata"].get("annotations"):
            return rs
        rs = self._write("replicasets.apps", {**rs, "metadata": {**rs["metadata"], "annotations": annotations},
                                              "spec": {**rs["spec"], "replicas": replicas}})
        if old != replicas:
            self._event(dep, "ScalingReplicaSet", f"Scaled {'up' if replicas > old else 'down'} replica set "
                        f"{rs['metadata']['name']} to {replicas} from {old}", component="deployment-controller")
        return rs

    def _sync_deployment(self, dep: Obj) -> bool:
        """One sync of the deployment controller (syncDeployment); True when it changed a ReplicaSet. Skipped while
        the deployment, its ReplicaSets and their available pods are as they were when it last changed nothing."""
        meta = dep["metadata"]
        owned = self._owned_replicasets(meta["uid"])
        inputs = (meta.get("resourceVersion"), tuple((r["metadata"].get("resourceVersion"), self._available(r),
                                                       len(self._pods_of(r))) for r in owned))
        if self.st.settled.get(("deployment", meta["uid"])) == inputs:
            return False
        if self._sync_deployment_now(dep, owned):
            return True
        self.st.settled[("deployment", meta["uid"])] = inputs
        return False

    def _sync_deployment_now(self, dep: Obj, owned: list[Obj]) -> bool:
        before = self.c.revision
        spec = dep["spec"]
        pod_hash = self._template_hash(dep)
        new = next((r for r in owned if (r["metadata"].get("labels") or {}).get(HASH_LABEL) == pod_hash), None)
        olds = [r for r in owned if r is not new]
        if new is not None:
            new = self._sync_new_replicaset(dep, new, olds)
        recreate = (spec.get("strategy") or {}).get("type") == "Recreate"
        if spec.get("paused") or self._scaling_event(dep, [new, *olds]):
            self._scale_to_size(dep, new, olds)
        elif recreate:
            self._recreate(dep, new, olds, pod_hash)
        else:
            self._roll(dep, new, olds, pod_hash)
        self._sync_revision(dep, pod_hash)
        return self.c.revision != before

    def _sync_revision(self, dep: Obj, pod_hash: str) -> None:
        """The deployment's revision annotation follows its new ReplicaSet's."""
        rs = self.c.get("replicasets.apps", dep["metadata"]["namespace"], f"{dep['metadata']['name']}-{pod_hash}")
        revision = ((rs or {}).get("metadata", {}).get("annotations") or {}).get(REVISION)
        annotations = dep["metadata"].get("annotations") or {}
        if revision is not None and annotations.get(REVISION) != revision:
            self._write("deployments.apps", {**dep, "metadata": {**dep["metadata"],
                                                                 "annotations": {**annotations, REVISION: revision}}})

    @staticmethod
    def _scaling_event(dep: Obj, sets: list[Obj | None]) -> bool:
        """The deployment was resized since its active ReplicaSets were last stamped (isScalingEvent)."""
        size = str(dep["spec"].get("replicas", 1))
        for rs in sets:
            if rs is not None and rs["spec"].get("replicas", 0) > 0:
                desired = (rs["metadata"].get("annotations") or {}).get(deployments.DESIRED_REPLICAS)
                if desired is not None and desired != size:
                    return True
        return False

    def _scale_to_size(self, dep: Obj, new: Obj | None, olds: list[Obj]) -> None:
        """A scaling event (or a paused deployment): the one active set takes the new size; mid-rollout, every
        active set grows or shrinks in proportion (`scale` upstream)."""
        spec = dep["spec"]
        replicas = spec.get("replicas", 1)
        newest_first = sorted(olds, key=lambda r: (r["metadata"].get("creationTimestamp", ""), r["metadata"]["name"]),
                              reverse=True)
        active = [r for r in [*newest_first, new] if r is not None and r["spec"].get("replicas", 0) > 0]
        if len(active) <= 1:
            target = active[0] if active else new if new is not None else next(iter(newest_first), None)
            if target is not None:
                self._scale(dep, target, replicas)
            return
        if new is not None and new["spec"].get("replicas", 0) == replicas and self._available(new) == replicas:
            for old in active:
                if old is not new:
                    self._scale(dep, old, 0)
            return
        if (spec.get("strategy") or {}).get("type") == "Recreate":
            return
        sizes = deployments.proportional(spec, [self._figures(r) for r in active],
                                         (dep.get("status") or {}).get("replicas", 0))
        for rs in active:
            self._scale(dep, rs, sizes.get(rs["metadata"]["name"], rs["spec"].get("replicas", 0)))

    def _roll(self, dep: Obj, new: Obj | None, olds: list[Obj], pod_hash: str) -> None:
        """RollingUpdate (rolloutRolling): grow the new set within maxSurge, then shrink old sets within
        maxUnavailable; one step per sync, as the controller returns after each change."""
        spec = dep["spec"]
        replicas = spec.get("replicas", 1)
        if new is None:
            new = self._create_replicaset(dep, pod_hash, olds)
        size = new["spec"].get("replicas", 0)
        if size > replicas:
            self._scale(dep, new, replicas)
            return
        if size < replicas:
            grown = deployments.new_replicas(spec, [self._figures(r) for r in [new, *olds]], self._figures(new))
            if grown != size:
                self._scale(dep, new, grown)
                return
        sizes = deployments.scale_down_olds(spec, self._figures(new), [self._figures(r) for r in olds])
        for old in olds:
            if old["metadata"]["name"] in sizes:
                self._scale(dep, old, sizes[old["metadata"]["name"]])
        if not sizes and deployments.complete(spec, dep.get("status") or {}, dep["metadata"].get("generation", 1)):
            self._prune_history(olds, spec.get("revisionHistoryLimit", 10))

    def _recreate(self, dep: Obj, new: Obj | None, olds: list[Obj], pod_hash: str) -> None:
        """Recreate (rolloutRecreate): every old pod goes before the new ReplicaSet gets any."""
        spec = dep["spec"]
        active = [r for r in olds if r["spec"].get("replicas", 0) > 0]
        if active:
            for old in active:
                self._scale(dep, old, 0)
            return
        if any(self._pods_of(r) for r in olds):
            return
        if new is None:
            new = self._create_replicaset(dep, pod_hash, olds)
        self._scale(dep, new, spec.get("replicas", 1))
        if deployments.complete(spec, dep.get("status") or {}, dep["metadata"].get("generation", 1)):
            self._prune_history(olds, spec.get("revisionHistoryLimit", 10))

    def _prune_history(self, olds: list[Obj], limit: int) -> None:
        """Old ReplicaSets beyond `revisionHistoryLimit` are deleted, lowest revision first, if scaled to zero and
        without pods (cleanupDeployment)."""
        by_revision = sorted(olds, key=lambda r: int((r["metadata"].get("annotations") or {}).get(REVISION, "0")))
        for rs in by_revision[:max(0, len(olds) - limit)]:
            if rs["spec"].get("replicas") or self._pods_of(rs):
                continue
            self._remove("replicasets.apps", rs)

    # --- replicasets -------------------------------------------------------------------------------------------
    def _sync_replicaset(self, rs: Obj) -> bool:
        pods = self._pods_of(rs)
        desired = rs["spec"].get("replicas", 0)
        if len(pods) == desired:
            self.st.first_failure.pop((rs["metadata"]["uid"], "FailedCreate"), None)
            return False
        if len(pods) > desired:
            for pod in sorted(pods, key=self._deletion_rank)[:len(pods) - desired]:
                self._delete_pod(pod)
                self._event(rs, "SuccessfulDelete", f"Deleted pod: {pod['metadata']['name']}",
                            component="replicaset-controller")
            return True
        ns = rs["metadata"]["namespace"]
        quotas = self.c.list("resourcequotas", ns)
        created = False
        for _ in range(desired - len(pods)):
            pod = self._new_pod(rs)
            if quotas:
                used = scheduling.quota_usage(p["spec"] for p in self._pods(ns))
                rejection = scheduling.quota_rejection(quotas, pod["spec"], used)
                if rejection is not None:
                    key = (rs["metadata"]["uid"], "FailedCreate")
                    since = self.st.first_failure.setdefault(key, self.now)
                    retries = 1 + int((self.now - since + kubelet.TIME_EPSILON_S) // CREATE_RETRY_S)
                    self._event(rs, "FailedCreate", f'Error creating: pods "{pod["metadata"]["name"]}" is '
                                f"forbidden: {rejection}", "Warning", component="replicaset-controller",
                                count=retries)
                    self._later(since + retries * CREATE_RETRY_S, display=True)
                    break
            self.st.pod_counter[rs["metadata"]["uid"]] = self.st.pod_counter.get(rs["metadata"]["uid"], 0) + 1
            self._store("pods", pod)
            self._event(rs, "SuccessfulCreate", f"Created pod: {pod['metadata']['name']}",
                        component="replicaset-controller")
            created = True
        return created

    def _deletion_rank(self, pod: Obj) -> tuple[Any, ...]:
        """The ReplicaSet controller removes unscheduled, then not-ready, then newer pods first."""
        ps = self.st.pods.get((pod["metadata"]["namespace"], pod["metadata"]["name"]))
        scheduled = bool(pod["spec"].get("nodeName"))
        ready = ps is not None and ps.ready
        restarts = sum(c.get("restartCount", 0) for c in (pod.get("status") or {}).get("containerStatuses") or [])
        return (scheduled, ready, -restarts, -(ps.scheduled_at if ps else self.now), pod["metadata"]["name"])

    def _new_pod(self, rs: Obj) -> Obj:
        meta = rs["metadata"]
        n = self.st.pod_counter.get(meta["uid"], 0)
        instance = self.c.model.get("apps", {}).get(meta["namespace"])
        suffix = stable_suffix(instance.seed if instance else 0, meta["uid"], n)  # pod names follow the seed
        name = f"{meta['name']}-{suffix}"
        template = rs["spec"]["template"]
        spec = clone(template.get("spec") or {})
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("serviceAccountName", "default")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("enableServiceLinks", True)
        spec.setdefault("priority", 0)
        spec.setdefault("tolerations", [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 300}])
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "generateName": f"{meta['name']}-", "namespace": meta["namespace"],
                             "uid": stable_uid(meta["namespace"], "pod", name),
                             "labels": dict((template.get("metadata") or {}).get("labels") or {}),
                             "annotations": dict((template.get("metadata") or {}).get("annotations") or {}),
                             "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": meta["name"],
                                                  "uid": meta["uid"], "controller": True,
                                                  "blockOwnerDeletion": True}]},
                "spec": spec, "status": {"phase": "Pending", "qosClass": kubelet.qos_class(spec)}}

    # --- scheduler ---------------------------------------------------------------------------------------------
    def _schedule(self) -> None:
        pending = [p for p in self._pods() if not p["spec"].get("nodeName")]
        if not pending:
            return
        nodes = sorted(self.c.list("nodes"), key=lambda n: n["metadata"]["name"])
        loads: dict[str, scheduling.NodeLoad] = defaultdict(scheduling.NodeLoad)
        for pod in self._pods():
            node = pod["spec"].get("nodeName")
            if node:
                req = scheduling.pod_requests(pod["spec"])
                load = loads[node]
                load.cpu += req["requests.cpu"]
                load.memory += req["requests.memory"]
                load.pods += 1
        for pod in pending:
            node, message = scheduling.schedule(pod["spec"], nodes, loads)
            meta = pod["metadata"]
            key = (meta["namespace"], meta["name"])
            if node is None:
                since = self.st.first_failure.setdefault((meta["uid"], "FailedScheduling"), self.now)
                status = {"phase": "Pending", "qosClass": kubelet.qos_class(pod["spec"]), "conditions": [
                    {"type": "PodScheduled", "status": "False", "lastProbeTime": None,
                     "lastTransitionTime": kubelet.stamp(since), "reason": "Unschedulable", "message": message}]}
                if pod.get("status") != status:
                    self._write("pods", {**pod, "status": status})
                attempts = 1 + int((self.now - since + kubelet.TIME_EPSILON_S) // SCHEDULE_RETRY_S)
                self._event(pod, "FailedScheduling", message, "Warning", component="default-scheduler",
                            count=attempts)
                self._later(since + attempts * SCHEDULE_RETRY_S, display=True)
                continue
            self.st.first_failure.pop((meta["uid"], "FailedScheduling"), None)
            req = scheduling.pod_requests(pod["spec"])
            loads[node].cpu += req["requests.cpu"]
            loads[node].memory += req["requests.memory"]
            loads[node].pods += 1
            node_obj = next(n for n in nodes if n["metadata"]["name"] == node)
            self.st.pods[key] = PodState(node=node, ip=self._pod_ip(node_obj), host_ip=next(
                (a["address"] for a in (node_obj.get("status") or {}).get("addresses") or []
                 if a.get("type") == "InternalIP"), ""), scheduled_at=self.now)
            self._write("pods", {**pod, "spec": {**pod["spec"], "nodeName": node}})
            self._event(pod, "Scheduled", f"Successfully assigned {meta['namespace']}/{meta['name']} to {node}",
                        component="default-scheduler")

    def _pod_ip(self, node: Obj) -> str:
        name = node["metadata"]["name"]
        cidr = (node.get("spec") or {}).get("podCIDR") or "10.244.0.0/24"
        prefix = cidr.split("/")[0].rsplit(".", 1)[0]
        n = self.st.ip_counter.get(name, 1) % 253 + 1
        self.st.ip_counter[name] = n
        return f"{prefix}.{n + 1}"

    # --- kubelet -----------------------------------------------------------------------------------------------
    def _kubelet(self) -> None:
        for pod in self._pods():
            meta = pod["metadata"]
            key = (meta["namespace"], meta["name"])
            if key in self.synced or not pod["spec"].get("nodeName"):
                continue
            self.synced.add(key)
            ps = self.st.pods.get(key)
            if ps is None:  # bound by someone else (a pod created with nodeName): the kubelet starts it now
                node = self.c.get("nodes", "", pod["spec"]["nodeName"])
                if node is None:
                    continue
                ps = self.st.pods[key] = PodState(node=node["metadata"]["name"], ip=self._pod_ip(node), host_ip="",
                                                  scheduled_at=self.now)
            effects = self.effects.get(key)
            if effects is None and ps.quiet_rv == meta.get("resourceVersion"):
                continue  # running, ready and untouched since the last pass: nothing about it can have changed
            status, ready, nxt, display = kubelet.sync_pod(pod, ps, partial(self._view, key[0]), self.now,
                                                           self._kubelet_event,
                                                           pod_failure=effects is not None and effects.failure,
                                                           reread=self._full)
            self._later(nxt)
            self._later(display, display=True)
            if pod.get("status") != status:
                pod = self._write("pods", {**pod, "status": status})
            quiet = ready and effects is None and nxt == INF and display == INF and all(
                r.outcome.kind in ("run", "complete") for r in ps.runs.values())
            ps.quiet_rv = pod["metadata"].get("resourceVersion") if quiet else None

    # --- status ------------------------------------------------------------------------------------------------
    def _replicaset_status(self) -> None:
        for rs in self.c.list("replicasets.apps"):
            if not self._everything and rs["metadata"]["uid"] not in self._touched:
                continue
            pods = self._pods_of(rs)
            ready = sum(1 for p in pods if self.st.pods.get((p["metadata"]["namespace"], p["metadata"]["name"]))
                        and self.st.pods[(p["metadata"]["namespace"], p["metadata"]["name"])].ready)
            status: Obj = {"replicas": len(pods), "fullyLabeledReplicas": len(pods), "readyReplicas": ready,
                           "availableReplicas": self._available(rs),
                           "observedGeneration": rs["metadata"].get("generation", 1)}
            failure = self.st.first_failure.get((rs["metadata"]["uid"], "FailedCreate"))
            if failure is not None:
                status["conditions"] = [{"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
                                         "lastTransitionTime": kubelet.stamp(failure),
                                         "message": self._last_event_message(rs, "FailedCreate")}]
            for key in ("readyReplicas", "availableReplicas"):
                if not status[key]:
                    del status[key]
            if rs.get("status") != status:
                self._write("replicasets.apps", {**rs, "status": status})

    def _last_event_message(self, obj: Obj, reason: str) -> str:
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        events = [e for e in self.c.list("events", ns) if e.get("reason") == reason
                  and e.get("involvedObject", {}).get("name") == name]
        return max(events, key=lambda e: e.get("lastTimestamp", ""))["message"] if events else ""

    def _deployment_status(self) -> None:
        """Each deployment's status as syncRolloutStatus computes it: counts summed over its ReplicaSets, Available
        against `replicas - maxUnavailable`, Progressing renewed on progress and timed out after
        progressDeadlineSeconds without any, and the ReplicaSets' ReplicaFailure."""
        for dep in self.c.list("deployments.apps"):
            meta = dep["metadata"]
            uid = meta["uid"]
            settled = self.st.settled.get(("deployment-status", uid))
            if settled is not None and uid not in self.created and self.now < settled[1] and \
                    (not self._everything and uid not in self._touched
                     or settled[0] == self._status_inputs(dep)):  # untouched: its inputs are as they settled
                self._later(settled[1], display=True)
                continue
            owned = self._owned_replicasets(uid)
            wake = self._one_deployment_status(dep, owned)
            dep = self.c.get("deployments.apps", meta["namespace"], meta["name"]) or dep
            self.st.settled[("deployment-status", uid)] = (self._status_inputs(dep), wake)

    def _status_inputs(self, dep: Obj) -> tuple[Any, ...]:
        """What a deployment's status follows from: its own version and its ReplicaSets'."""
        return (dep["metadata"].get("resourceVersion"),
                tuple(r["metadata"].get("resourceVersion") for r in self._owned_replicasets(dep["metadata"]["uid"])))

    def _one_deployment_status(self, dep: Obj, owned: list[Obj]) -> float:
        """Write one deployment's status; returns when it changes next by itself (its progress deadline)."""
        meta, spec = dep["metadata"], dep["spec"]
        generation = meta.get("generation", 1)
        name = f"{meta['name']}-{self._template_hash(dep)}"
        new = next((r for r in owned if r["metadata"]["name"] == name), None)
        replicas = spec.get("replicas", 1)

        def total(key: str, sets: list[Obj]) -> int:
            return sum((r.get("status") or {}).get(key, 0) for r in sets)

        available = total("availableReplicas", owned)
        status: Obj = {"observedGeneration": generation, "replicas": total("replicas", owned),
                       "updatedReplicas": total("replicas", [new] if new else []),
                       "readyReplicas": total("readyReplicas", owned), "availableReplicas": available,
                       "unavailableReplicas": max(0, sum(r["spec"].get("replicas", 0) for r in owned) - available)}
        old = dep.get("status") or {}
        conditions = _Conditions(old.get("conditions") or [], self.now)
        if available >= replicas - deployments.max_unavailable(spec):
            conditions.set("Available", "True", "MinimumReplicasAvailable", "Deployment has minimum availability.")
        else:
            conditions.set("Available", "False", "MinimumReplicasUnavailable",
                           "Deployment does not have minimum availability.")
        wake = INF
        if spec.get("progressDeadlineSeconds") is not None:
            wake = self._progressing(dep, conditions, old, status, new)
        else:
            conditions.remove("Progressing")
        failures = [c for r in ([new] if new else []) or owned for c in (r.get("status") or {}).get("conditions")
                    or [] if c.get("type") == "ReplicaFailure"]
        failures = failures or [c for r in owned for c in (r.get("status") or {}).get("conditions") or []
                                if c.get("type") == "ReplicaFailure"]
        if failures:
            conditions.put({**failures[0], "lastUpdateTime": failures[0].get("lastTransitionTime")})
        else:
            conditions.remove("ReplicaFailure")
        status["conditions"] = conditions.items
        for key in ("replicas", "updatedReplicas", "readyReplicas", "availableReplicas", "unavailableReplicas"):
            if not status[key]:
                del status[key]
        if old != status:
            self._write("deployments.apps", {**dep, "status": status})
        return wake

    def _progressing(self, dep: Obj, conditions: _Conditions, old: Obj, status: Obj, new: Obj | None) -> float:
        """Update the Progressing condition; returns the progress deadline while it is pending."""
        meta, spec = dep["metadata"], dep["spec"]
        uid = meta["uid"]
        current = conditions.get("Progressing")
        if spec.get("paused"):
            if (current or {}).get("reason") != "DeploymentPaused":
                conditions.set("Progressing", "Unknown", "DeploymentPaused", "Deployment is paused")
            return INF
        if (current or {}).get("reason") == "DeploymentPaused":
            conditions.set("Progressing", "Unknown", "DeploymentResumed", "Deployment is resumed")
        subject = f'ReplicaSet "{new["metadata"]["name"]}"' if new else f'Deployment "{meta["name"]}"'
        if uid in self.created:
            conditions.set("Progressing", "True", "NewReplicaSetCreated", f'Created new replica set "{self.created[uid]}"')
            self.st.progress[uid] = self.now
        current = conditions.get("Progressing")
        if status["replicas"] == status["updatedReplicas"] and (current or {}).get("reason") == "NewReplicaSetAvailable":
            return INF
        if deployments.complete(spec, status, meta.get("generation", 1)):
            conditions.set("Progressing", "True", "NewReplicaSetAvailable", f"{subject} has successfully progressed.")
            return INF
        if deployments.progressed({**old, "updatedReplicas": 0} if uid in self.created else old, status):
            conditions.renew("Progressing", "True", "ReplicaSetUpdated", f"{subject} is progressing.")
            self.st.progress[uid] = self.now
        elif (conditions.get("Progressing") or {}).get("reason") == "ProgressDeadlineExceeded":
            return INF
        deadline = self.st.progress.setdefault(uid, self.now) + spec["progressDeadlineSeconds"]
        if self.now + kubelet.TIME_EPSILON_S >= deadline:  # stamped when it timed out, however late we look
            conditions.set("Progressing", "False", "ProgressDeadlineExceeded", f"{subject} has timed out progressing.",
                           at=deadline)
            return INF
        self._later(deadline, display=True)
        return deadline

    def _by_label(self, ns: str, key: str) -> dict[str, list[Obj]]:
        out: dict[str, list[Obj]] = defaultdict(list)
        for pod in self._pods(ns):
            value = (pod["metadata"].get("labels") or {}).get(key)
            if value is not None:
                out[value].append(pod)
        return out

    def _endpoints(self) -> None:
        """The endpoints controller, per Service, skipped while the Service, its Endpoints and the readiness,
        placement and labels of the pods it may select are as they were last time."""
        services: dict[str, list[Obj]] = defaultdict(list)
        for svc in self.c.list("services"):
            services[svc["metadata"]["namespace"]].append(svc)
        if self._signal_inputs:  # an API request may have deleted a Service (or written an Endpoints)
            for ep in self.c.list("endpoints"):
                if self.c.get("services", ep["metadata"]["namespace"], ep["metadata"]["name"]) is None:
                    self.c.delete("endpoints", ep["metadata"]["namespace"], ep["metadata"]["name"])
        for ns, items in services.items():
            if not self._everything and ns not in self._touched_ns:
                continue  # no API write of it, its Services or Endpoints, and none of its pods changed: as it was
            by_app = self._by_label(ns, "app")
            every_service = self._everything or ns in self._written_ns
            for svc in items:
                selector = (svc.get("spec") or {}).get("selector") or {}
                if not every_service and "app" in selector and (ns, selector["app"]) not in self._touched_apps:
                    continue  # none of the pods it may select changed (nor it, nor its Endpoints): as it was
                key = ("endpoints", ns, svc["metadata"]["name"])
                if self.st.settled.get(key) == self._endpoint_inputs(svc, by_app):
                    continue
                self._endpoints_of(svc, by_app)
                self.st.settled[key] = self._endpoint_inputs(svc, by_app)

    def _candidates(self, svc: Obj, by_app: dict[str, list[Obj]]) -> list[Obj]:
        """The pods a Service's selector may select: those of its app, or all of its namespace's."""
        selector = (svc.get("spec") or {}).get("selector") or {}
        return by_app.get(selector["app"], []) if "app" in selector else self._pods(svc["metadata"]["namespace"])

    def _endpoint_inputs(self, svc: Obj, by_app: dict[str, list[Obj]]) -> tuple[Any, ...]:
        meta = svc["metadata"]
        ns = meta["namespace"]
        pods = []
        for pod in self._candidates(svc, by_app):
            ps = self.st.pods.get((ns, pod["metadata"]["name"]))
            pods.append((pod["metadata"]["name"], pod["spec"].get("nodeName"), ps.ready if ps else None,
                         pod["metadata"].get("labels")))
        endpoints = self.c.get("endpoints", ns, meta["name"])
        return meta.get("resourceVersion"), tuple(pods), endpoints and endpoints["metadata"].get("resourceVersion")

    def _endpoints_of(self, svc: Obj, by_app: dict[str, list[Obj]]) -> None:
        meta, spec = svc["metadata"], svc.get("spec") or {}
        selector = spec.get("selector")
        if not selector:
            return
        ns = meta["namespace"]
        groups: dict[tuple[tuple[str, int, str], ...], dict[str, list[Obj]]] = {}
        for pod in self._candidates(svc, by_app):
            ps = self.st.pods.get((ns, pod["metadata"]["name"]))
            if ps is None or not pod["spec"].get("nodeName"):
                continue
            labels = pod["metadata"].get("labels") or {}
            if any(labels.get(k) != v for k, v in selector.items()):
                continue
            ports = self._resolve_ports(spec.get("ports") or [], pod)
            if ports is None:
                continue
            address = {"ip": ps.ip, "nodeName": ps.node, "targetRef": {
                "kind": "Pod", "namespace": ns, "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}}
            group = groups.setdefault(ports, {"addresses": [], "notReadyAddresses": []})
            group["addresses" if ps.ready else "notReadyAddresses"].append(address)
        subsets = []
        for ports, group in sorted(groups.items()):
            subset: Obj = {k: sorted(v, key=lambda a: a["ip"]) for k, v in group.items() if v}
            subset["ports"] = [{"name": n, "port": p, "protocol": proto} if n else {"port": p, "protocol": proto}
                               for n, p, proto in ports]
            subsets.append(subset)
        existing = self.c.get("endpoints", ns, meta["name"])
        body: Obj = {"apiVersion": "v1", "kind": "Endpoints",
                     "metadata": {"name": meta["name"], "namespace": ns, "labels": dict(meta.get("labels") or {})}}
        if subsets:
            body["subsets"] = subsets
        if existing is None:
            body["metadata"]["uid"] = stable_uid(ns, "endpoints", meta["name"])
            self._store("endpoints", body)
            self.endpoints_changed = True
        elif existing.get("subsets") != body.get("subsets"):
            body["metadata"] = {**existing["metadata"], "labels": body["metadata"]["labels"]}
            self._write("endpoints", body)
            self.endpoints_changed = True

    @staticmethod
    def _resolve_ports(ports: list[Obj], pod: Obj) -> tuple[tuple[str, int, str], ...] | None:
        """The endpoint ports for a pod: a named targetPort the pod does not declare leaves the pod out."""
        named: dict[str, Any] = {p["name"]: p.get("containerPort") for c in pod["spec"].get("containers") or []
                 for p in c.get("ports") or [] if p.get("name")}
        out = []
        for port in ports:
            target: Any = port.get("targetPort", port.get("port"))
            if isinstance(target, str) and not target.isdigit():
                if target not in named:
                    return None
                target = named[target]
            out.append((port.get("name", ""), int(target), port.get("protocol", "TCP")))
        return tuple(out)

    def _quota_status(self) -> None:
        """Usage against each quota, recounted when the quota or the namespace's live pods change."""
        for quota in self.c.list("resourcequotas"):
            ns = quota["metadata"]["namespace"]
            if not self._everything and ns not in self._touched_ns:
                continue  # no API write of it and none of its namespace's pods changed: as it settled
            pods = self._pods(ns)
            key, uids = ("quota", f"{ns}/{quota['metadata']['name']}"), tuple(p["metadata"]["uid"] for p in pods)
            if self.st.settled.get(key) == (quota["metadata"].get("resourceVersion"), uids):
                continue
            hard = (quota.get("spec") or {}).get("hard") or {}
            used = scheduling.quota_usage(p["spec"] for p in pods)
            status = {"hard": dict(hard), "used": {r: scheduling.format_quantity(r, used.get(r, 0.0)) for r in hard}}
            if quota.get("status") != status:
                quota = self._write("resourcequotas", {**quota, "status": status})
            self.st.settled[key] = (quota["metadata"].get("resourceVersion"), uids)

    # --- usage (metrics-server) --------------------------------------------------------------------------------
    def _usage(self, load: dict[tuple[str, str], float]) -> tuple[dict[tuple[str, str], dict[str, tuple[float, float]]],
                                                                  dict[str, tuple[float, float]]]:
        """(pod -> container -> (CPU, memory), node -> (CPU, memory)), as metrics-server reports them."""
        usage: dict[tuple[str, str], dict[str, tuple[float, float]]] = {}
        node_usage: dict[str, list[float]] = {n["metadata"]["name"]: [SYSTEM_CPU_M, SYSTEM_MEMORY]
                                              for n in self.c.list("nodes")}
        for (ns, name), ps in self.st.pods.items():
            pod = self.c.get("pods", ns, name)
            if pod is None:
                continue
            fx = self.effects.get((ns, name))
            app = (pod["metadata"].get("labels") or {}).get("app", "")
            figures = kubelet.usage(pod, ps, self.now, fx.cpu_millicores if fx else 0.0,
                                    fx.memory_bytes if fx else 0.0, load.get((ns, app), 1.0))
            if figures:
                usage[(ns, name)] = figures
                totals = node_usage.setdefault(ps.node, [SYSTEM_CPU_M, SYSTEM_MEMORY])
                for cpu, memory in figures.values():
                    totals[0] += cpu
                    totals[1] += memory
        return usage, {n: (cpu, mem) for n, (cpu, mem) in node_usage.items()}

    # --- logs --------------------------------------------------------------------------------------------------
    def _failing_since(self, computed: signals.Computed) -> tuple[dict[Any, Any], dict[Any, Any]]:
        """The failing calls and database logins per service, each with the moment it started failing (logs
        show errors from then on), tracked at every pass so a clock jump does not move the onset."""
        seen: set[tuple[str, ...]] = set()

        def since(*key: str) -> float:
            seen.add(key)
            return self.st.failing_since.setdefault(key, self.now)

        failing = {(ns, caller): tuple((callee, calls, ratio, why, p99, critical, since(ns, caller, callee, why))
                                       for callee, calls, ratio, why, p99, critical in edges)
                   for (ns, caller), edges in computed.failing_edges.items()}
        inbound = {(ns, db): tuple((user, since(ns, db, "auth", user)) for user in users)
                   for (ns, db), users in computed.auth_failures.items()}
        self.st.failing_since = {k: v for k, v in self.st.failing_since.items() if k in seen}
        return failing, inbound

    def _logs(self, failing: dict[Any, Any], inbound: dict[Any, Any]) -> None:
        for (ns, name), ps in self.st.pods.items():
            pod = self.c.get("pods", ns, name)
            if pod is None:
                continue
            app = (pod["metadata"].get("labels") or {}).get("app", "")
            edges, users = failing.get((ns, app), ()), inbound.get((ns, app), ())
            key = (tuple((k, r.since, r.restarts_before, r.outcome.kind) for k, r in ps.runs.items()),
                   ps.failure_since, edges, users)
            minute, (last_key, last_minute) = int(self.now // 60), ps.log_key or (None, None)
            if key == last_key and minute == last_minute:
                continue
            ps.log_key = (key, minute)
            for container_key, run in ps.runs.items():
                container = container_key.split("/", 1)[1]
                if key == last_key:  # only the minute moved on: a log of the same run starts over (as a new one)
                    entry = self.c.logs.get((ns, name, container))
                    if isinstance(entry, logs.LazyLog) and entry.renew(self.c.clock, self.now, run):
                        continue
                rendered = logs.render(pod, run, self.now, edges, ps.failure_since is not None, users, self.c.clock)
                if rendered is None:
                    self.c.logs.pop((ns, name, container), None)
                else:
                    self.c.logs[(ns, name, container)] = rendered
