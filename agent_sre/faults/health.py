"""Service health read from the Kubernetes API alone, so the oracle judges a real cluster the same way.

A service is healthy when its deployment runs the replicas the app expects, fully rolled out and available, no
pod of it is pending, crash-looping, unready or freshly restarted, its Service exposes the port clients use and
has ready endpoints on a port the pods declare, no NetworkPolicy drops its callers' traffic, no pod of it uses
its whole CPU limit (metrics.k8s.io: the CFS quota is throttling it, what kube-prometheus's CPUThrottlingHigh
warns of), and no Chaos Mesh experiment is acting on it.
"""

from __future__ import annotations

import hashlib
import json
import marshal
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from agent_sre.apps import traffic
from agent_sre.apps.catalog import AppSpec, labels
from agent_sre.kube.chaosmesh import PAUSE_ANNOTATION
from agent_sre.kube.client import Kube, KubeError, Obj
from agent_sre.kube.netpol import blocking_policy
from agent_sre.kube.quantity import quantity
from agent_sre.kube.selectors import matches
from agent_sre.kube.times import parse_duration, parse_time

THROTTLED_AT = 0.95  # of its CPU limit: a container using this much is held back by its CFS quota
RECENT_RESTART_S = 600.0  # longer than the longest crash-loop back-off (5m) plus a run: a looping container
# always shows a recent exit, and one that died this recently has not proven it is healthy again
WAITING_PROBLEMS = {"CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError",
                    "RunContainerError", "CreateContainerError", "InvalidImageName"}
# what must survive an incident (deleting one of these is "worse"); network policies and chaos experiments are
# deliberately absent: deleting them is how some incidents are fixed
KEPT_KINDS = ("deployment", "service", "configmap", "secret", "persistentvolumeclaim", "resourcequota", "node")
PRINTS_KEPT = 4096  # remembered fingerprints (by exact content); the memo starts over beyond this
_prints: dict[bytes, str] = {}


def _pod_problem(pod: Obj, now: float | None) -> str | None:
    name, status = pod["metadata"]["name"], pod.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return f"pod {name} is Pending: {cond.get('message') or cond.get('reason', '')}"
    for cs in status.get("initContainerStatuses") or []:
        state = cs.get("state") or {}
        if "terminated" in state and state["terminated"].get("exitCode") == 0:
            continue
        reason = (state.get("waiting") or {}).get("reason") or ("running" if "running" in state else "Error")
        return f"pod {name} is stuck initialising (init container {cs.get('name')}: {reason})"
    problems = []
    for cs in status.get("containerStatuses") or []:
        state, last = cs.get("state") or {}, (cs.get("lastState") or {}).get("terminated") or {}
        waiting = (state.get("waiting") or {}).get("reason")
        if waiting in WAITING_PROBLEMS:
            detail = f", last exit: {last.get('reason')}" if last.get("reason") else ""
            problems.append(f"pod {name}: container {cs.get('name')} is {waiting} "
                            f"({cs.get('restartCount', 0)} restarts{detail})")
            continue
        finished = parse_time(last.get("finishedAt"))
        if now is not None and finished is not None and now - finished < RECENT_RESTART_S:
            problems.append(f"pod {name}: container {cs.get('name')} restarted {int(now - finished)}s ago "
                            f"(exit: {last.get('reason', 'Error')})")
    if problems:
        return problems[0]
    if status.get("phase") not in ("Running", "Succeeded"):
        return f"pod {name} is {status.get('phase', 'Pending')}"
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    return None if ready else f"pod {name} is Running but not Ready"


def _chaos_active(obj: Obj, now: float | None) -> bool:
    meta, spec = obj["metadata"], obj.get("spec") or {}
    if (meta.get("annotations") or {}).get(PAUSE_ANNOTATION) == "true":
        return False
    if obj.get("kind") == "Schedule":
        return True
    conditions = {c.get("type"): c.get("status") for c in (obj.get("status") or {}).get("conditions") or []}
    if conditions.get("AllRecovered") == "True":
        return False
    if spec.get("action") == "pod-kill":  # one-off: done once its pods are killed; their replacements tell the rest
        return conditions.get("AllInjected") != "True"
    duration, created = parse_duration(spec.get("duration")), parse_time(meta.get("creationTimestamp"))
    return not (duration is not None and created is not None and now is not None and now - created >= duration)


def _spawned_by(obj: Obj) -> str:
    """` (spawned by Schedule/x)` for a Schedule's child: deleting it alone does not end the fault, the Schedule
    spawns the next one (an active Schedule is itself a reason until it is deleted or paused)."""
    owner = next((r for r in obj["metadata"].get("ownerReferences") or [] if r.get("kind") == "Schedule"), None)
    return f" (spawned by Schedule/{owner.get('name')})" if owner else ""


def _chaos_selects(obj: Obj, ns: str, pod_labels: dict[str, str]) -> bool:
    spec = obj.get("spec") or {}
    if obj.get("kind") == "Schedule":
        kind = spec.get("type", "")
        spec = spec.get(kind[:1].lower() + kind[1:]) or {}
    selectors = [spec.get("selector") or {}]
    if spec.get("direction") in ("from", "both") and spec.get("target"):
        selectors.append((spec["target"] or {}).get("selector") or {})
    for sel in selectors:
        if ns not in (sel.get("namespaces") or [obj["metadata"].get("namespace")]):
            continue
        match = {"matchLabels": sel.get("labelSelectors") or {},
                 "matchExpressions": sel.get("expressionSelectors") or []}
        if matches(match, pod_labels):
            return True
    return False


@dataclass(frozen=True)
class Expected:
    """What one service should look like: from the app's spec, or (an app we do not know) from the cluster."""

    name: str
    replicas: int
    port: int | None
    port_name: str | None
    labels: dict[str, str]
    callers: tuple[tuple[str, dict[str, str]], ...] = ()
    entry: bool = False  # users reach it from outside the namespace, through the ingress controller
    capacity_rps: float = 0.0  # what one pod serves (0: unknown)


def expectations(app: AppSpec | None, deployments: dict[str, Obj], services: dict[str, Obj]) -> list[Expected]:
    if app is not None:
        return [Expected(s.name, s.replicas, s.port, "http" if s.probe == "http" else s.name, labels(app, s),
                         tuple((c.name, labels(app, c)) for c in app.callers(s.name)), s.entry_rps > 0,
                         s.software.capacity_rps) for s in app.services]
    out = []
    for name, dep in sorted(deployments.items()):
        ports = ((services.get(name) or {}).get("spec") or {}).get("ports") or [{}]
        template = (dep.get("spec") or {}).get("template") or {}
        out.append(Expected(name, (dep.get("spec") or {}).get("replicas", 1), ports[0].get("port"),
                            ports[0].get("name"), dict((template.get("metadata") or {}).get("labels") or {})))
    return out


def service_health(k8s: Kube, app: AppSpec | None, ns: str) -> dict[str, list[str]]:
    """service -> why it is unhealthy, for every unhealthy service in namespace `ns`. With `app`, the app's own
    expectations apply (replicas, ports, the call graph); without, every deployment is held to its own spec."""
    deployments = {d["metadata"]["name"]: d for d in k8s.list("deployment", ns)}
    now = k8s.server_time
    services = {s["metadata"]["name"]: s for s in k8s.list("service", ns)}
    endpoints = {e["metadata"]["name"]: e for e in k8s.list("endpoints", ns)}
    pods = [p for p in k8s.list("pod", ns) if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    by_app: dict[str | None, list[Obj]] = {}  # selectors name the app: only its pods can match
    for pod in pods:
        by_app.setdefault((pod["metadata"].get("labels") or {}).get("app"), []).append(pod)
    policies = k8s.list("networkpolicy", ns)
    ns_labels = k8s.get("namespace", ns)["metadata"].get("labels") or {}
    chaos = [c for c in k8s.chaos(ns) if _chaos_active(c, now)]
    demand = _demand(k8s, app, ns)
    throttled = _throttled(k8s, ns, pods)
    out: dict[str, list[str]] = {}
    for want in expectations(app, deployments, services):
        dep = deployments.get(want.name)
        selector = ((dep or {}).get("spec") or {}).get("selector") or {"matchLabels": {"app": want.name}}
        app_label = (selector.get("matchLabels") or {}).get("app")
        own = [p for p in (pods if app_label is None else by_app.get(app_label, []))
               if matches(selector, p["metadata"].get("labels"))]
        reasons = _deployment_reasons(dep, want, own, now)
        reasons += [throttled[p["metadata"]["name"]] for p in own if p["metadata"]["name"] in throttled][:1]
        if want.port is not None:
            reasons += _service_reasons(services.get(want.name), endpoints.get(want.name), want, own)
        for caller, caller_labels in want.callers:
            blocked = blocking_policy(policies, ns, want.labels, ns, caller_labels, ns_labels, want.port or 0,
                                      want.port_name)
            if blocked is not None:
                reasons.append(f"ingress from {caller} is blocked by networkpolicy/{blocked}")
        if want.entry:
            blocked = blocking_policy(policies, ns, want.labels, traffic.INGRESS_NAMESPACE, traffic.INGRESS_LABELS,
                                      traffic.INGRESS_NAMESPACE_LABELS, want.port or 0, want.port_name)
            if blocked is not None:
                reasons.append(f"ingress from outside (the ingress controller in {traffic.INGRESS_NAMESPACE}) is "
                               f"blocked by networkpolicy/{blocked}")
        if demand is not None and dep is not None and want.capacity_rps:
            reasons += _overload(want, dep, demand.get(want.name, 0.0))
        for exp in chaos:
            if _chaos_selects(exp, ns, want.labels):
                reasons.append(f"chaos experiment {exp.get('kind')}/{exp['metadata']['name']}{_spawned_by(exp)} is "
                               f"acting on it")
        if reasons:
            out[want.name] = reasons
    return out


def _throttled(k8s: Kube, ns: str, pods: list[Obj]) -> dict[str, str]:
    """pod -> why, for each pod with a container using its whole CPU limit (read only when some pod has one; a
    cluster without metrics-server tells nothing)."""
    limits = {(p["metadata"]["name"], c.get("name")): quantity(cpu) for p in pods
              for c in p["spec"].get("containers") or []
              if (cpu := ((c.get("resources") or {}).get("limits") or {}).get("cpu")) is not None}
    if not limits:
        return {}
    try:
        items = k8s.metrics("pods", ns)
    except KubeError:  # metrics.k8s.io not served (no metrics-server): throttling cannot be seen
        return {}
    out = {}
    for item in items:
        pod = item["metadata"]["name"]
        for c in item.get("containers") or []:
            limit = limits.get((pod, c.get("name")))
            used = quantity((c.get("usage") or {}).get("cpu", "0"))
            if limit and used >= THROTTLED_AT * limit:
                out[pod] = (f"pod {pod}: container {c.get('name')} uses its whole CPU limit ({used * 1000:.0f}m of "
                            f"{limit * 1000:.0f}m): CFS throttles it")
    return out


def _demand(k8s: Kube, app: AppSpec | None, ns: str) -> dict[str, float] | None:
    """Requests per second at each service while the load generator surges some (None on a normal day)."""
    if app is None:
        return None
    loadgen = k8s.find("configmap", ns, traffic.LOADGEN_NAMESPACE)
    surge = traffic.factors((loadgen or {}).get("data"))
    return traffic.demand(app, surge) if surge else None


def _overload(want: Expected, dep: Obj, rps: float) -> list[str]:
    available = (dep.get("status") or {}).get("availableReplicas", 0)
    served = available * want.capacity_rps * traffic.SERVED_UTILISATION
    if rps <= served + 1e-6:
        return []
    return [f"{rps:.0f} requests/s arrive; its {available} available pods serve {served:.0f} without failing"]


def _deployment_reasons(dep: Obj | None, svc: Expected, pods: list[Obj], now: float | None) -> list[str]:
    if dep is None:
        return [f"deployment/{svc.name} is missing"]
    spec, status, meta = dep.get("spec") or {}, dep.get("status") or {}, dep["metadata"]
    replicas = spec.get("replicas", 1)
    reasons = []
    if replicas < svc.replicas:
        reasons.append(f"deployment/{svc.name} is scaled to {replicas} (the app needs {svc.replicas})")
    available = status.get("availableReplicas", 0)
    if available < replicas:
        reasons.append(f"deployment/{svc.name}: {available}/{replicas} replicas available")
    if status.get("updatedReplicas", 0) < replicas or status.get("replicas", 0) > replicas or \
            status.get("observedGeneration", 0) < meta.get("generation", 1):
        reasons.append(f"deployment/{svc.name}: rollout not complete ({status.get('updatedReplicas', 0)} of "
                       f"{replicas} updated, {status.get('replicas', 0)} pods)")
    problems = [p for p in (_pod_problem(pod, now) for pod in sorted(pods, key=lambda p: p["metadata"]["name"]))
                if p is not None]
    return reasons + problems[:2]


def _service_reasons(service: Obj | None, endpoints: Obj | None, svc: Expected, pods: list[Obj]) -> list[str]:
    if service is None:
        return [f"service/{svc.name} is missing"]
    ports = [p.get("port") for p in (service.get("spec") or {}).get("ports") or []]
    if svc.port not in ports:
        return [f"service/{svc.name} exposes port(s) {ports}; its clients connect to {svc.port}"]
    subsets = (endpoints or {}).get("subsets") or []
    ready = [s for s in subsets if s.get("addresses")]
    if not ready:
        return [f"service/{svc.name} has no ready endpoints"]
    declared = {p.get("containerPort") for pod in pods for c in pod["spec"].get("containers") or []
                for p in c.get("ports") or []}
    served = {p.get("port") for s in ready for p in s.get("ports") or []}
    if declared and not served & declared:
        return [f"service/{svc.name} sends traffic to port(s) {sorted(served)} but its pods listen on "
                f"{sorted(declared)}"]
    return []


# --- what exists, and what it says -----------------------------------------------------------------------------

def _items(k8s: Kube, ns: str) -> Iterable[tuple[str, Obj]]:
    yield from (("deployment", o) for o in k8s.list("deployment", ns))
    yield from (("service", o) for o in k8s.list("service", ns))
    yield from (("configmap", o) for o in k8s.list("configmap", ns))
    yield from (("secret", o) for o in k8s.list("secret", ns))
    yield from (("persistentvolumeclaim", o) for o in k8s.list("persistentvolumeclaim", ns))
    yield from (("resourcequota", o) for o in k8s.list("resourcequota", ns))
    yield from (("networkpolicy", o) for o in k8s.list("networkpolicy", ns))
    yield from (("node", o) for o in k8s.list("node"))


def _content(kind: str, obj: Obj) -> Any:
    if kind in ("configmap", "secret"):
        return obj.get("data") or {}
    spec = dict(obj.get("spec") or {})
    if kind == "deployment":
        return {k: v for k, v in spec.items() if k != "template"} | {"template": spec.get("template")}
    if kind == "service":
        return {k: spec.get(k) for k in ("selector", "ports", "type")}
    return spec


def inventory(k8s: Kube, ns: str) -> list[str]:
    """kind/name of every object that must survive, sorted."""
    return sorted(f"{kind}/{obj['metadata']['name']}" for kind, obj in _items(k8s, ns) if kind in KEPT_KINDS)


def fingerprints(k8s: Kube, ns: str) -> dict[str, str]:
    """kind/name -> a hash of what the object says (a false alarm's check: was anything changed?)."""
    return {f"{kind}/{obj['metadata']['name']}": _fingerprint(_content(kind, obj)) for kind, obj in _items(k8s, ns)}


def _fingerprint(content: Any) -> str:
    """The hash of `content`'s sorted JSON, remembered by its exact value: episodes judge the same objects again
    and again, and marshalling is several times cheaper than sorted JSON. Equal marshal bytes mean equal types and
    values (1, 1.0 and True differ), so the JSON is the same; what marshal cannot take is hashed afresh."""
    try:
        key = marshal.dumps(content)
    except ValueError:
        key = None
    digest = _prints.get(key) if key is not None else None
    if digest is None:
        text = json.dumps(content, sort_keys=True, default=str)
        digest = hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
        if key is not None:
            if len(_prints) >= PRINTS_KEPT:
                _prints.clear()
            _prints[key] = digest
    return digest
