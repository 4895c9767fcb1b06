"""Per-service golden signals (request rate, error ratio, p99 latency) derived from the cluster's state.

Traffic enters at each app's entry service and fans out along the dependency graph (`apps.Edge`). A call fails
when the callee cannot be reached (no ready endpoints, a Service port or targetPort nobody listens on, a
NetworkPolicy dropping the caller's packets, Chaos Mesh loss, its name not resolving under DNSChaos) or when the
callee's own requests fail (IOChaos failing a data store's file operations); failures
of critical dependencies fail the caller's request, so errors and latency climb the graph towards the users.
Signals are seen from the clients' side, as a service mesh or an ingress would report them.

`render_prometheus` exposes them, with a few kube-state-metrics series, in the Prometheus text format.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from agent_sre.apps import traffic
from agent_sre.apps.software import Outcome
from agent_sre.kube.netpol import blocking_policy
from agent_sre.simulator.chaos import resolves
from agent_sre.simulator.cluster import Cluster, Obj
from agent_sre.simulator.kubelet import cpu_limit_m

if TYPE_CHECKING:
    from agent_sre.apps.catalog import AppSpec, ServiceSpec
    from agent_sre.simulator.chaos import PodEffects
    from agent_sre.simulator.kubelet import PodState

BASE_ERROR_RATIO = 0.0008
CLIENT_TIMEOUT_S = 5.0  # what callers wait for a connection whose packets are dropped
SOFT_DEPENDENCY_TIMEOUT_S = 0.3  # optional calls (recommendations, notifications) are cut short
IO_OPS_PER_QUERY = 3  # a data store's request waits on this many file operations (a read, the log write, its sync)
CFS_PERIOD_S = 0.1  # the kernel's CFS bandwidth period (cpu.cfs_period_us, 100 ms)


@dataclass(frozen=True)
class GoldenSignals:
    requests_per_second: float
    error_ratio: float
    latency_p99_seconds: float


@dataclass(frozen=True)
class EdgeHealth:
    """Calls from one service to another as the caller experiences them."""

    error_ratio: float
    latency_p99_seconds: float
    failure: str  # what the caller's client reports for a failed call ("" when calls succeed)


@dataclass
class Computed:
    services: dict[tuple[str, str], GoldenSignals] = field(default_factory=dict)
    edges: dict[tuple[str, str, str], EdgeHealth] = field(default_factory=dict)
    # (namespace, caller) -> the failing calls, rounded, as logs show them:
    # (callee, calls per request, error ratio of the calls, failure, p99 of the call, critical)
    failing_edges: dict[tuple[str, str], tuple[tuple[str, float, float, str, float, bool], ...]] = field(
        default_factory=dict)
    load: dict[tuple[str, str], float] = field(default_factory=dict)  # traffic per serving pod vs. normal
    auth_failures: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)  # (ns, db) -> users


@dataclass
class _Backend:
    """How a Service's backends look to a client."""

    reachable: float  # fraction of connections that reach a listening, ready process
    failure: str
    serving: int
    ip: str = "10.96.0.1"  # the Service's cluster IP, as a failing client reports it
    abort: float = 0.0
    loss: float = 0.0
    delay_s: float = 0.0
    cpu_factor: float = 1.0
    io_error: float = 0.0  # share of requests failing on a file operation (IOChaos fault)
    io_delay_s: float = 0.0  # added to each file operation (IOChaos latency)
    cpu_limit_m: float = float("inf")  # the lowest CPU limit of a serving pod's app container

    def key(self) -> tuple[float, str, int, str, float, float, float, float, float, float, float]:
        return (self.reachable, self.failure, self.serving, self.ip, self.abort, self.loss, self.delay_s,
                self.cpu_factor, self.io_error, self.io_delay_s, self.cpu_limit_m)


def _combine(*ratios: float) -> float:
    ok = 1.0
    for r in ratios:
        ok *= 1.0 - min(1.0, max(0.0, r))
    return 1.0 - ok


def _backend(cluster: Cluster, ns: str, svc: ServiceSpec, pods: Mapping[tuple[str, str], PodState],
             effects: Mapping[tuple[str, str], PodEffects]) -> _Backend:
    service = cluster.get("services", ns, svc.name)
    if service is None:
        return _Backend(0.0, f"dial tcp: lookup {svc.name} on 10.96.0.10:53: no such host", 0)
    spec = service.get("spec") or {}
    ip = spec.get("clusterIP", "10.96.0.1")
    refused = f"dial tcp {ip}:{svc.port}: connect: connection refused"
    if not any(p.get("port") == svc.port for p in spec.get("ports") or []):
        return _Backend(0.0, refused, 0, ip)
    endpoints = cluster.get("endpoints", ns, svc.name) or {}
    ready = listening = 0
    backend = _Backend(0.0, refused, 0, ip)
    for subset in endpoints.get("subsets") or []:
        ports = {p.get("port") for p in subset.get("ports") or []}
        for address in subset.get("addresses") or []:
            ready += 1
            name = (address.get("targetRef") or {}).get("name", "")
            ps = pods.get((ns, name))
            if ps is None or ps.failure_since is not None:
                continue
            listens = {r.outcome.listen_port for k, r in ps.runs.items() if k.startswith("main/")}
            if not ports & listens:
                continue
            listening += 1
            pod = cluster.get("pods", ns, name)
            for container in (pod or {}).get("spec", {}).get("containers") or []:
                if container.get("name") == svc.container and (limit := cpu_limit_m(container)) is not None:
                    backend.cpu_limit_m = min(backend.cpu_limit_m, limit)
            fx = effects.get((ns, name))
            if fx is not None:
                backend.abort += fx.abort
                backend.loss += fx.loss
                backend.delay_s = max(backend.delay_s, (fx.delay_ms + fx.http_delay_ms) / 1000.0)
                backend.cpu_factor = max(backend.cpu_factor, 1.0 + fx.cpu_millicores / 1000.0)
                backend.io_error += fx.io_error
                backend.io_delay_s = max(backend.io_delay_s, fx.io_delay_ms / 1000.0)
    if listening:
        backend.abort /= listening
        backend.loss /= listening
        backend.io_error /= listening
    backend.serving = listening
    backend.reachable = listening / ready if ready else 0.0
    return backend


# (pod, app of the pod, packet loss, delay ms, DNSChaos (action, patterns)) of each pod of the namespace that chaos
# acts on, in effects order
CallerEffects = tuple[tuple[str, str | None, float, float, tuple[tuple[str, tuple[str, ...]], ...]], ...]


def _caller_effects(caller: str, callee: str, ns: str, chaos: CallerEffects) -> tuple[float, float, float, str]:
    """(loss, delay seconds, share of lookups of `callee` failing, how: "error" or "random") that chaos on the
    caller's own pods adds to its calls to `callee`."""
    loss = delay = unresolved = 0.0
    how = ""
    mine = [(fx_loss, fx_delay, dns) for _, app, fx_loss, fx_delay, dns in chaos if app == caller]
    if mine:
        loss = sum(fx_loss for fx_loss, _, _ in mine) / len(mine)
        delay = max(fx_delay for _, fx_delay, _ in mine) / 1000.0
        answers = [resolves(dns, callee, ns) for _, _, dns in mine]
        unresolved = sum(1 for a in answers if a) / len(mine)
        how = "error" if "error" in answers else "random" if "random" in answers else ""
    return loss, delay, unresolved, how


def _lookup_failure(caller: ServiceSpec, callee: ServiceSpec, how: str) -> str:
    """What the caller's client library reports when DNSChaos answers its lookup of `callee`: SERVFAIL (`error`),
    or a random address (`random`) the connection to which times out."""
    runtime, name = caller.software.runtime, callee.name
    if how == "error":
        return {"node": f"getaddrinfo EAI_AGAIN {name}", "python": "[Errno -3] Temporary failure in name resolution",
                "java": f"java.net.UnknownHostException: {name}: Temporary failure in name resolution"}.get(
            runtime, f"dial tcp: lookup {name} on 10.96.0.10:53: server misbehaving")
    digest = hashlib.blake2b(f"{caller.name}/{name}".encode(), digest_size=4).digest()
    address = f"{digest[0] % 223 + 1}.{digest[1]}.{digest[2]}.{digest[3] % 254 + 1}:{callee.port}"
    return {"node": f"connect ETIMEDOUT {address}", "python": "[Errno 110] Connection timed out",
            "java": "java.net.SocketTimeoutException: Connect timed out"}.get(
        runtime, f"dial tcp {address}: i/o timeout")


def _io_failure(callee: ServiceSpec) -> str:
    """What a client reads back when the data store failed a file operation (EIO) while serving it."""
    if callee.software.runtime == "postgres":
        return 'pq: could not read block 7 in file "base/16384/16397": Input/output error'
    return f"{callee.name}: Input/output error"


class _Inputs:
    """Everything one namespace's signals follow from, beyond the pods' own states (which the backends sum up).

    Equal inputs give equal signals, so they are computed once for all environments: episodes of one app pass
    through the same few states. Objects count by identity and resourceVersion (stored objects are never changed
    in place); the inputs keep them alive, so an identity is not reused while cached."""

    __slots__ = ("app", "ns", "backends", "policies", "ns_labels", "chaos", "surge", "_key", "_hash")

    def __init__(self, app: AppSpec, ns: str, backends: dict[str, _Backend], policies: list[Obj],
                 ns_labels: Mapping[str, str], chaos: CallerEffects,
                 surge: tuple[tuple[str, float], ...] = ()) -> None:
        self.app, self.ns, self.backends, self.policies, self.ns_labels, self.chaos, self.surge = \
            app, ns, backends, policies, ns_labels, chaos, surge
        self._key = (id(app), ns, tuple((name, b.key()) for name, b in backends.items()),
                     tuple((id(p), p["metadata"].get("resourceVersion")) for p in policies),
                     tuple(ns_labels.items()), chaos, surge)
        self._hash = hash(self._key)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Inputs) and self._key == other._key


@dataclass(frozen=True)
class _NamespaceSignals:
    services: dict[tuple[str, str], GoldenSignals]
    edges: dict[tuple[str, str, str], EdgeHealth]
    failing_edges: dict[tuple[str, str], tuple[tuple[str, float, float, str, float, bool], ...]]
    load: dict[tuple[str, str], float]


def compute(cluster: Cluster, effects: Mapping[tuple[str, str], PodEffects],
            pods: Mapping[tuple[str, str], PodState]) -> Computed:
    """Golden signals of every installed app's services at the current state."""
    out = Computed()
    all_policies = cluster.list("networkpolicies.networking.k8s.io")
    surges = bool(cluster.list("configmaps", traffic.LOADGEN_NAMESPACE))
    apps_of = {(p["metadata"]["namespace"], p["metadata"]["name"]): (p["metadata"].get("labels") or {}).get("app", "")
               for key in effects for p in [cluster.get("pods", *key)] if p is not None}
    for ns, instance in cluster.model.get("apps", {}).items():
        app: AppSpec = instance.spec
        ns_obj = cluster.get("namespaces", "", ns) or {"metadata": {}}
        chaos = tuple((key[1], apps_of.get(key), fx.loss, fx.delay_ms, fx.dns) for key, fx in effects.items()
                      if key[0] == ns)
        loadgen = cluster.get("configmaps", traffic.LOADGEN_NAMESPACE, ns) if surges else None
        part = _namespace_signals(_Inputs(
            app, ns, {s.name: _backend(cluster, ns, s, pods, effects) for s in app.topological()},
            [p for p in all_policies if p["metadata"].get("namespace") == ns], ns_obj["metadata"].get("labels") or {},
            chaos, tuple(sorted(traffic.factors((loadgen or {}).get("data")).items()))))
        out.services.update(part.services)
        out.edges.update(part.edges)
        out.failing_edges.update(part.failing_edges)
        out.load.update(part.load)
        out.auth_failures.update(_auth_failures(cluster, ns, app, pods))
    return out


@lru_cache(maxsize=4096)
def _namespace_signals(inputs: _Inputs) -> _NamespaceSignals:
    out = _NamespaceSignals({}, {}, {}, {})
    app, ns, backends, policies, ns_labels = inputs.app, inputs.ns, inputs.backends, inputs.policies, inputs.ns_labels
    order = app.topological()
    service_labels = app.service_labels()
    entry = app.entry()
    # users come in through the ingress controller, from outside the namespace
    ingress_blocked = bool(policies) and blocking_policy(
        policies, ns, service_labels[entry.name], traffic.INGRESS_NAMESPACE, traffic.INGRESS_LABELS,
        traffic.INGRESS_NAMESPACE_LABELS, entry.port, "http" if entry.probe == "http" else entry.name) is not None \
        and backends[entry.name].serving > 0
    surge = dict(inputs.surge)
    normal = traffic.demand(app) if surge else None
    rps = traffic.demand(app, surge, ingress_blocked)
    internal_error: dict[str, float] = {}
    internal_p99: dict[str, float] = {}
    for s in order:  # callees first: failures flow up the graph
        backend = backends[s.name]
        sw = s.software
        capacity = backend.serving * sw.capacity_rps
        utilisation = rps[s.name] / capacity if capacity else 0.0
        # traffic per serving pod against a normal day's (the catalog's replicas at the catalog's demand)
        share = rps[s.name] / normal[s.name] if normal is not None and normal[s.name] else 1.0
        out.load[(ns, s.name)] = share * s.replicas / backend.serving if backend.serving else 0.0
        overload = 1.0 - 1.0 / utilisation if utilisation > 1.0 else 0.0
        slowdown = 1.0 if utilisation < 0.7 else 1.0 + min(20.0, (utilisation - 0.7) * 10.0)
        own_p99 = sw.p99_ms / 1000.0 * slowdown * backend.cpu_factor + backend.delay_s + \
            IO_OPS_PER_QUERY * backend.io_delay_s
        throttled = sw.cpu_millicores * out.load[(ns, s.name)] / backend.cpu_limit_m
        if throttled > 1.0:  # CFS throttling: work stretches over `throttled` periods, the tail waits out each
            own_p99 = own_p99 * throttled + CFS_PERIOD_S * (throttled - 1.0)
        failures, dep_latency = [BASE_ERROR_RATIO, overload, backend.abort, backend.io_error], 0.0
        failing: list[tuple[str, float, float, str, float, bool]] = []
        for edge in s.deps:
            callee = app.service(edge.callee)
            health = _edge(ns, s, callee, backends[callee.name], internal_error[callee.name],
                           internal_p99[callee.name], policies, ns_labels, service_labels, inputs.chaos)
            out.edges[(ns, s.name, callee.name)] = health
            if edge.critical:
                p = health.error_ratio
                failures.append(edge.calls * p if edge.calls <= 1 else 1.0 - (1.0 - p) ** edge.calls)
                latency = health.latency_p99_seconds * (1.0 if edge.calls <= 1 else min(edge.calls, 2.0))
            else:
                latency = min(health.latency_p99_seconds, SOFT_DEPENDENCY_TIMEOUT_S)
            if edge.calls >= 0.01:
                dep_latency = max(dep_latency, latency)
            if health.error_ratio >= 0.01 or health.latency_p99_seconds >= 1.0:
                failing.append((callee.name, edge.calls, round(health.error_ratio, 2), health.failure,
                                round(health.latency_p99_seconds, 1), edge.critical))
        internal_error[s.name] = _combine(*failures)
        internal_p99[s.name] = own_p99 + dep_latency
        if failing:
            out.failing_edges[(ns, s.name)] = tuple(failing)
    for s in order:
        backend = backends[s.name]
        callers = app.calls_to(s.name)
        arriving = rps[s.name]
        if s is entry and ingress_blocked:  # the ingress cannot connect: users get a 504 after its connect timeout
            arriving = s.entry_rps * surge.get(s.name, 1.0)
            demand = [(arriving, 1.0, traffic.INGRESS_TIMEOUT_S)]
        else:  # what does not come from the app's own callers: the users, and any surge from outside
            outside = s.entry_rps if not surge else \
                max(0.0, arriving - sum(rps[c.name] * e.calls for c, e in callers))
            demand = [(outside, _combine(1.0 - backend.reachable, internal_error[s.name]),
                       internal_p99[s.name] if backend.serving else 0.0)]
        for caller, edge in callers:
            health = out.edges[(ns, caller.name, s.name)]
            demand.append((rps[caller.name] * edge.calls, health.error_ratio, health.latency_p99_seconds))
        total = sum(d for d, _, _ in demand)
        error = sum(d * e for d, e, _ in demand) / total if total else 0.0
        p99 = max((lat for d, _, lat in demand if d > 0), default=internal_p99[s.name])
        out.services[(ns, s.name)] = GoldenSignals(round(arriving, 3), round(error, 4), round(p99, 4))
    return out


def _edge(ns: str, caller: ServiceSpec, callee: ServiceSpec, backend: _Backend, callee_error: float,
          callee_p99: float, policies: list[Obj], ns_labels: Mapping[str, str],
          service_labels: Mapping[str, Mapping[str, str]], chaos: CallerEffects) -> EdgeHealth:
    blocked = policies and blocking_policy(policies, ns, service_labels[callee.name], ns, service_labels[caller.name],
                                           ns_labels, callee.port, "http" if callee.probe == "http" else callee.name)
    if blocked and backend.serving:
        return EdgeHealth(1.0, CLIENT_TIMEOUT_S, f"dial tcp {backend.ip}:{callee.port}: i/o timeout")
    caller_loss, caller_delay, unresolved, how = _caller_effects(caller.name, callee.name, ns, chaos)
    loss = _combine(backend.loss, caller_loss)
    loss_error = min(1.0, loss ** 1.5) if loss < 1.0 else 1.0
    unreachable = 1.0 - backend.reachable
    error = _combine(unreachable, loss_error, callee_error, unresolved)
    latency = callee_p99 + caller_delay
    if loss >= 0.01:
        latency = CLIENT_TIMEOUT_S if loss_error >= 0.01 else latency + 0.2
    if how == "random" and unresolved >= 0.01:  # connecting to a random address: the dial times out
        latency = CLIENT_TIMEOUT_S
    if unresolved >= max(unreachable, loss_error, callee_error, 0.01):
        return EdgeHealth(round(error, 4), round(latency, 4), _lookup_failure(caller, callee, how))
    if unreachable >= 0.999:
        return EdgeHealth(1.0, 0.002, backend.failure)
    if loss_error >= max(unreachable, callee_error, 0.01):
        failure = "context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
    elif unreachable >= max(callee_error, 0.01):
        failure = backend.failure
    elif backend.abort >= 0.01 and backend.abort >= callee_error * 0.5:
        failure = f'Post "http://{callee.name}:{callee.port}/": EOF'
    elif backend.io_error >= 0.01 and backend.io_error >= callee_error * 0.5:
        failure = _io_failure(callee)
    elif callee_error >= 0.01:
        failure = f"{callee.name} responded 503 Service Unavailable"
    else:
        failure = ""
    return EdgeHealth(round(error, 4), round(latency, 4), failure)


def fails_to_log_in(outcome: Outcome) -> bool:
    """A crash on a rejected database password (the database logs each attempt)."""
    return outcome.kind == "crash" and _rejected_password(outcome.lines)


@lru_cache(maxsize=4096)  # asked for every container at every reconcile pass
def _rejected_password(lines: tuple[str, ...]) -> bool:
    return any("password authentication failed" in line for line in lines)


def _auth_failures(cluster: Cluster, ns: str, app: AppSpec,
                   pods: Mapping[tuple[str, str], PodState]) -> dict[tuple[str, str], tuple[str, ...]]:
    """Database users whose clients are failing to authenticate right now (the database logs each attempt)."""
    users: dict[tuple[str, str], set[str]] = {}
    for (pns, name), ps in pods.items():
        if pns != ns:
            continue
        for run in ps.runs.values():
            if fails_to_log_in(run.outcome):
                pod = cluster.get("pods", ns, name) or {"metadata": {}}
                service = (pod["metadata"].get("labels") or {}).get("app", "")
                if not app.has(service):
                    continue
                env = app.service(service).literal_env()
                users.setdefault((ns, env.get("DB_HOST", "")), set()).add(env.get("DB_USER", ""))
    return {k: tuple(sorted(v)) for k, v in users.items()}


def golden_signals(cluster: Cluster) -> dict[tuple[str, str], GoldenSignals]:
    """Signals per (namespace, service) at the cluster's current simulated time."""
    cluster.sync()
    return dict(cluster.model.get("signals", {}))


# --- Prometheus exposition --------------------------------------------------------------------------------------

class _Collector:
    """Builds the metric families for a set of environments at scrape time."""

    def __init__(self, envs: Mapping[str, Cluster]) -> None:
        self.envs = envs

    def collect(self) -> Iterator[Metric]:
        svc_labels = ["env", "namespace", "service"]
        rps = GaugeMetricFamily("agent_sre_sim_requests_per_second", "Requests per second arriving at a service.",
                                labels=svc_labels)
        errors = GaugeMetricFamily("agent_sre_sim_error_ratio", "Fraction of a service's requests that fail.",
                                   labels=svc_labels)
        latency = GaugeMetricFamily("agent_sre_sim_latency_p99_seconds", "99th percentile latency seen by clients.",
                                    labels=svc_labels)
        dep_labels = ["env", "namespace", "deployment"]
        available = GaugeMetricFamily("kube_deployment_status_replicas_available",
                                      "The number of available replicas per deployment.", labels=dep_labels)
        desired = GaugeMetricFamily("kube_deployment_spec_replicas", "Number of desired pods for a deployment.",
                                    labels=dep_labels)
        pod_labels = ["env", "namespace", "pod", "container"]
        restarts = CounterMetricFamily("kube_pod_container_status_restarts", "The number of container restarts.",
                                       labels=pod_labels)
        waiting = GaugeMetricFamily("kube_pod_container_status_waiting_reason",
                                    "Describes the reason the container is currently in waiting state.",
                                    labels=[*pod_labels, "reason"])
        ready = GaugeMetricFamily("kube_pod_status_ready", "Describes whether the pod is ready to serve requests.",
                                  labels=["env", "namespace", "pod", "condition"])
        for env, cluster in sorted(self.envs.items()):
            for (ns, svc), gs in sorted(golden_signals(cluster).items()):
                rps.add_metric([env, ns, svc], gs.requests_per_second)
                errors.add_metric([env, ns, svc], gs.error_ratio)
                latency.add_metric([env, ns, svc], gs.latency_p99_seconds)
            for dep in cluster.list("deployments.apps"):
                meta = dep["metadata"]
                available.add_metric([env, meta["namespace"], meta["name"]],
                                     (dep.get("status") or {}).get("availableReplicas", 0))
                desired.add_metric([env, meta["namespace"], meta["name"]], (dep.get("spec") or {}).get("replicas", 1))
            for pod in cluster.list("pods"):
                meta, status = pod["metadata"], pod.get("status") or {}
                is_ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                               for c in status.get("conditions") or [])
                for condition, value in (("true", is_ready), ("false", not is_ready)):
                    ready.add_metric([env, meta["namespace"], meta["name"], condition], float(value))
                for cs in status.get("containerStatuses") or []:
                    key = [env, meta["namespace"], meta["name"], cs.get("name", "")]
                    restarts.add_metric(key, cs.get("restartCount", 0))
                    reason = ((cs.get("state") or {}).get("waiting") or {}).get("reason")
                    if reason:
                        waiting.add_metric([*key, reason], 1.0)
        yield from (rps, errors, latency, available, desired, restarts, waiting, ready)


def render_prometheus(envs: Mapping[str, Cluster]) -> str:
    """All environments' signals in the Prometheus text format. Call with the simulator's lock held: it syncs."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(envs))
    return generate_latest(registry).decode()
