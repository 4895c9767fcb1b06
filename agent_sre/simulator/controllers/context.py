"""One reconcile pass's shared context: the cluster, the controllers' memory and the moment, what this pass
changed (so each controller looks again only at what may have changed), and the store plumbing every controller
writes through (`write`, `store`, `remove` keep the index and the change sets in step)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from agent_sre.apps.images import ACME, basic_auth
from agent_sre.apps.traffic import LOADGEN_NAMESPACE
from agent_sre.simulator import chaos, kubelet, signals
from agent_sre.simulator.cluster import Cluster, Obj
from agent_sre.simulator.controllers.state import Index, WorkloadState, owner_uid, short_hash
from agent_sre.simulator.kubelet import INF, NamespaceView, PodState

SIGNAL_INPUTS = ("services", "endpoints", "networkpolicies.networking.k8s.io", "namespaces")


class Pass:
    """A pass at `now` over `cluster`, remembering across passes in `state`."""

    computed: signals.Computed  # this pass's golden signals
    failing: tuple[dict[Any, Any], dict[Any, Any]]  # failing calls and logins, with when each began (`logs`)

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
        # (`dirty`) and in all (`touched`), and the namespaces of changed pods. Without API writes since the last
        # pass (`full` False), nothing else can have changed but what waits on time (`st.waking`, ReplicaSets
        # refused by a quota), and the index of the last pass is still right. API writes (`Cluster.written`) are
        # added to these: a written Deployment is dirty, a written Service, Endpoints or quota touches its
        # namespace; only writes of pods or ReplicaSets (or writes not known one by one) make every step look at
        # everything (`everything`) with a fresh index.
        self.dirty: set[str] = set()
        self.touched: set[str] = set()
        self.touched_ns: set[str] = set()
        self.touched_apps: set[tuple[str, str | None]] = set()  # (namespace, app label) of changed pods
        self.written_ns: set[str] = set()  # namespaces of Services and Endpoints that API requests wrote
        self.full = self.everything = self.signal_inputs = True
        self.version = 0  # bumped when the index changes, for the lists cached from it
        self._lists: dict[Any, tuple[int, list[Obj]]] = {}

    def later(self, t: float, display: bool = False) -> None:
        """Ask for a pass at `t`: always when state others depend on changes then; for a change that only shows in
        the status (`display`), a clock jump skips it and one pass at the end brings the status up to date."""
        if t > self.now:
            if display:
                self.next_display = min(self.next_display, t)
            else:
                self.next_change = min(self.next_change, t)

    def write(self, resource: str, obj: Obj) -> Obj:
        stored = self.c.replace(resource, obj)
        self._reindex(resource, stored)
        if resource == "deployments.apps":
            self.mark(stored["metadata"]["uid"])
        return stored

    def store(self, resource: str, obj: Obj) -> Obj:
        obj["metadata"].setdefault("creationTimestamp", kubelet.stamp(self.now))
        stored = self.c.create(resource, obj)
        self._reindex(resource, stored)
        return stored

    def remove(self, resource: str, obj: Obj) -> None:
        meta = obj["metadata"]
        self.c.delete(resource, meta["namespace"], meta["name"])
        self._reindex(resource, obj, gone=True)

    def index(self) -> Index:
        if self.st.index is None:
            self.st.index = Index.of(self.c.objects)
        return self.st.index

    def _reindex(self, resource: str, obj: Obj, gone: bool = False) -> None:
        """Keep the index in step with one written, created or deleted pod or ReplicaSet (already in the store)."""
        if resource not in ("pods", "replicasets.apps"):
            return
        index = self.index()
        owner = index.put(resource, obj, gone)
        if owner:
            self.mark(owner, index.set_owner.get(owner, ""), obj["metadata"]["uid"])
        if resource == "pods":
            meta = obj["metadata"]
            self.touched_ns.add(meta["namespace"])
            self.touched_apps.add((meta["namespace"], (meta.get("labels") or {}).get("app")))
        self.version += 1

    def mark(self, *uids: str) -> None:
        self.dirty.update(uids)
        self.touched.update(uids)

    def waiting(self) -> set[str]:
        """What must be looked at even if nothing changed: sets with pods about to be available, sets whose pods
        a quota refused (they retry)."""
        return self.st.waking | {uid for uid, reason in self.st.first_failure if reason == "FailedCreate"}

    def _cached(self, key: Any, build: Any) -> list[Obj]:
        hit = self._lists.get(key)
        if hit is None or hit[0] != self.version:
            hit = self._lists[key] = (self.version, build())
        return hit[1]

    def event(self, obj: Obj, reason: str, message: str, type_: str = "Normal", component: str | None = None,
               count: int | None = None) -> None:
        event = self.c.record_event(obj, reason, message, type_, key=f"{reason.lower()}-{short_hash(message)}",
                                    component=component, at=self.now)
        if count is not None:
            event["count"] = count

    def kubelet_event(self, pod: Obj, ps: PodState, reason: str, message: str, type_: str, count: int,
                       container: str) -> None:
        key = f"{reason.lower()}-{short_hash(message)}"
        if ps.events.get(key) == count:
            return
        ps.events[key] = count
        event = self.c.record_event(pod, reason, message, type_, key=key, component="kubelet", at=self.now)
        event["count"] = count
        event["involvedObject"]["fieldPath"] = f"spec.containers{{{container}}}"
        event["source"]["host"] = ps.node

    def pods(self, namespace: str | None = None) -> list[Obj]:
        """Live (not terminated) pods, of one namespace or all."""
        live = self.index().live
        return self._cached(("ns", namespace), lambda: [p for (ns, _), p in live.items()
                                                        if namespace is None or ns == namespace])

    def view(self, ns: str) -> NamespaceView:
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
                                 {m["metadata"]["name"]: m for m in self.c.list("configmaps", ns)},
                                 {ACME: basic_auth(*instance.spec.registry_login(instance.seed))} if instance else {})
            self.views[ns] = view
        return view

    def take_written(self) -> None:
        """What API requests wrote since the last pass, as what this pass must look at again."""
        written = self.c.written
        if not self.full:
            self.everything = self.signal_inputs = False
            return
        self.everything = written is None or any(r in ("pods", "replicasets.apps") for r, _, _ in written)
        self.signal_inputs = written is None or any(r in SIGNAL_INPUTS or (r, ns) == ("configmaps", LOADGEN_NAMESPACE)
                                                    for r, ns, _ in written)
        for resource, ns, name in written or ():
            if resource == "deployments.apps":
                dep = self.c.get(resource, ns, name)
                if dep is not None:
                    self.mark(dep["metadata"]["uid"])
            elif resource in ("services", "endpoints", "resourcequotas"):
                self.touched_ns.add(ns)
                if resource != "resourcequotas":
                    self.written_ns.add(ns)

    def waiting_for_services(self) -> bool:
        return any(run.outcome.wait_for is not None for ps in self.st.pods.values() for run in ps.runs.values())

    def delete_pod(self, pod: Obj) -> None:
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        self.remove("pods", pod)
        self.st.pods.pop(key, None)
        for container in [*(pod["spec"].get("initContainers") or []), *(pod["spec"].get("containers") or [])]:
            self.c.logs.pop((key[0], key[1], container["name"]), None)

    def owned_replicasets(self, owner_uid: str) -> list[Obj]:
        return list(self.index().sets_of.get(owner_uid, {}).values())

    def available(self, rs: Obj) -> int:
        """Pods ready for at least minReadySeconds; a pass is asked for when the next one becomes available."""
        uid = rs["metadata"]["uid"]
        memo = self._available_memo.get(uid)
        if memo is not None and memo[0] == self.version and not (rs.get("spec") or {}).get("minReadySeconds"):
            return memo[1]
        count = self._count_available(rs)
        self._available_memo[uid] = (self.version, count)
        return count

    def _count_available(self, rs: Obj) -> int:
        ns = rs["metadata"]["namespace"]
        min_ready = (rs.get("spec") or {}).get("minReadySeconds", 0)
        count = 0
        for pod in self.pods_of(rs):
            ps = self.st.pods.get((ns, pod["metadata"]["name"]))
            if ps is None or not ps.ready or ps.ready_since is None:
                continue
            if ps.ready_since + min_ready <= self.now + kubelet.TIME_EPSILON_S:
                count += 1
            else:
                self.later(ps.ready_since + min_ready)
                self.st.waking.update((rs["metadata"]["uid"], owner_uid(rs) or ""))
        return count

    def pods_of(self, rs: Obj) -> Collection[Obj]:
        """The ReplicaSet's live pods: a view of the index, so take a list before changing them."""
        return self.index().pods_of.get(rs["metadata"]["uid"], {}).values()

    def pod_ip(self, node: Obj) -> str:
        name = node["metadata"]["name"]
        cidr = (node.get("spec") or {}).get("podCIDR") or "10.244.0.0/24"
        prefix = cidr.split("/")[0].rsplit(".", 1)[0]
        n = self.st.ip_counter.get(name, 1) % 253 + 1
        self.st.ip_counter[name] = n
        return f"{prefix}.{n + 1}"
