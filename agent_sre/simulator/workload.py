"""The workload model: the controllers that turn specs into running (or failing) pods.

`attach(cluster)` registers one reconcile function. Each pass runs, in order, what a real control plane would,
one module of `controllers/` each: Chaos Mesh (effects, pod kills), the node lifecycle controller (cordon taint),
the persistent volume controller (a claim it cannot provision), the deployment controller (ReplicaSets with
revisions, rolling updates, Recreate), the ReplicaSet controller (pods, quota admission), the scheduler, the
kubelet, then status: ReplicaSets, Deployments, Endpoints, quotas, usage for `kubectl top`, golden signals and logs.

`sync()` runs before every API request, so a pass is skipped unless something was written since the last one
or simulated time reached the next moment at which some state changes (a back-off ends, a pod turns ready, a
chaos schedule ticks). Everything time-dependent is computed from elapsed simulated time, so the state at a
given moment does not depend on how often anyone looked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from functools import cache, partial
from typing import Any

from agent_sre.apps import traffic
from agent_sre.simulator import signals
from agent_sre.simulator.cluster import Cluster
from agent_sre.simulator.controllers import (
    autoscaling,
    chaos,
    deployment,
    endpoints,
    job,
    kubelet,
    logs,
    nodes,
    quota,
    replicaset,
    scheduler,
    usage,
    volumes,
)
from agent_sre.simulator.controllers.context import SIGNAL_INPUTS, Pass
from agent_sre.simulator.controllers.state import Index, WorkloadState
from agent_sre.simulator.kubelet import INF

RESYNC_S = 300.0  # at the latest, a pass runs every 5 simulated minutes (logs and usage stay fresh)
MAX_CATCH_UP_PASSES = 500  # a longer jump of the clock is finished in one step
COALESCE_WRITES_S = 1.0  # writes closer together than this (simulated) are acted on in one pass
CONTROLLER_ROUNDS = 16  # deployment and ReplicaSet controllers take turns until neither changes anything


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
    last: Pass | None = None
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
        finish(last)
    state.last_sync = now


def _run_pass(cluster: Cluster, state: WorkloadState, at: float) -> Pass:
    done = Pass(cluster, state, at)
    state.next_change, state.next_display = _run(done)
    state.seen_revision = cluster.revision
    cluster.written = set()  # the pass's own writes: the next pass looks again only at what API requests write
    state.last_pass = at
    return done


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


# --- one reconcile pass -----------------------------------------------------------------------------------------

def _run(p: Pass) -> tuple[float, float]:
    p.full = p.c.revision != p.st.seen_revision
    p.take_written()
    if p.everything:  # an API request may have deleted pods (passes forget the pods they delete themselves)
        p.st.index = None
        p.st.pods = {k: v for k, v in p.st.pods.items() if p.c.get("pods", *k) is not None}
    waiting, p.st.waking = p.waiting(), set()
    chaos.reconcile(p)
    nodes.reconcile(p)
    volumes.reconcile(p)
    scheduler.reconcile(p)
    kubelet.reconcile(p)
    if job.reconcile(p):  # new pods of jobs start in this pass
        scheduler.reconcile(p)
        kubelet.reconcile(p)
    autoscaling.reconcile(p)  # before the deployment controller: a new scale is acted on in this pass
    p.touched |= waiting
    # after API writes, the first round syncs every ReplicaSet (a cheap count), so a set the deployment
    # controller just resized acts in the same round, as it did when every deployment was synced
    everything, every_set = p.everything, p.full
    for _ in range(CONTROLLER_ROUNDS):  # as informers requeue: what changed since the last round
        queue, p.dirty, changed = p.dirty | waiting, set(), False
        for dep in p.c.list("deployments.apps"):
            if everything or dep["metadata"]["uid"] in queue:
                changed |= deployment.sync(p, dep)
        for rs in p.c.list("replicasets.apps"):
            if every_set or rs["metadata"]["uid"] in queue:
                changed |= replicaset.sync(p, rs)
        if not changed:
            break
        everything, every_set, waiting = False, False, set()
        scheduler.reconcile(p)
        kubelet.reconcile(p)
    replicaset.status(p)
    deployment.status(p)
    endpoints.reconcile(p)
    quota.reconcile(p)
    p.computed = _signals(p)
    p.c.model["signals"] = p.computed.services
    p.c.model["edges"] = p.computed.edges
    p.failing = logs.failing_since(p, p.computed)
    if p.endpoints_changed and p.waiting_for_services():
        p.next_change = p.now  # a waiting init container may see its service now
    return p.next_change, p.next_display


def _signals(p: Pass) -> signals.Computed:
    """The golden signals, recomputed only when what they follow from changed: Services, Endpoints, network
    policies, namespaces, chaos effects, or which pods fail to log in to a database."""
    objects = p.st.signals[0][0] if p.st.signals and not (p.signal_inputs or p.endpoints_changed) \
        else \
        tuple((o["metadata"].get("namespace"), o["metadata"]["name"], o["metadata"].get("resourceVersion"))
              for resource in SIGNAL_INPUTS for o in p.c.list(resource)) + \
        tuple((o["metadata"]["name"], o["metadata"].get("resourceVersion"))
              for o in p.c.list("configmaps", traffic.LOADGEN_NAMESPACE))  # the load generator's settings
    key = (objects,
           tuple(sorted((k, fx.failure, fx.cpu_millicores, fx.memory_bytes, fx.delay_ms, fx.loss, fx.abort,
                         fx.http_delay_ms, fx.dns, fx.io_delay_ms, fx.io_error) for k, fx in p.effects.items())),
           tuple(sorted(k for k, ps in p.st.pods.items()
                        if any(signals.fails_to_log_in(r.outcome) for r in ps.runs.values()))),
           tuple(p.c.model.get("apps", {})))
    if p.st.signals is None or p.st.signals[0] != key:
        p.st.signals = (key, signals.compute(p.c, p.effects, p.st.pods))
    return p.st.signals[1]


def finish(p: Pass) -> None:
    """What only readers see - usage for `kubectl top` and logs - for the last pass of a sync: passes in
    between (a clock jump stepping through state changes) skip it. Usage is worked out when first read: the
    next pass replaces it, and any read follows that pass (the API syncs first), so the state it comes from
    is still this pass's then."""
    figures = cache(partial(usage.usage, p, p.computed.load))
    p.c.model["usage"] = _Deferred(lambda: figures()[0])
    p.c.model["node_usage"] = _Deferred(lambda: figures()[1])
    logs.write(p, *p.failing)
