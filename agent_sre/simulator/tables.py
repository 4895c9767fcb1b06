"""Server-side printing: `meta.k8s.io/v1` Table objects with the columns a real apiserver prints.

kubectl 1.32 asks the server for tables (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`), so these
functions decide what `kubectl get` shows. Each printer follows the apiserver's own (pkg/printers/internalversion)
so output looks the same against the simulator and a real cluster; ages use the simulated clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from agent_sre.kube.selectors import selector_to_string
from agent_sre.kube.times import age, human_duration, parse_time
from agent_sre.simulator.cluster import Obj

Column = tuple[str, str, int]  # name, type, priority (1 = only with -o wide)
Printer = Callable[[Obj, float], list[Any]]


def _age(obj: Obj, now: float) -> str:
    return age(obj.get("metadata", {}).get("creationTimestamp"), now)


def _format_labels(labels: dict[str, str] | None) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted((labels or {}).items())) or "<none>"


def _containers(spec: dict[str, Any]) -> tuple[str, str]:
    containers = spec.get("containers") or []
    return ",".join(c.get("name", "") for c in containers), ",".join(c.get("image", "") for c in containers)


# --- printers, one per resource ---------------------------------------------------------------------------------

def _pod_status(pod: Obj, now: float) -> tuple[str, str, str]:
    """printPod's READY, STATUS and RESTARTS cells, including the Init:, Terminating and '(2m ago)' forms."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    init_specs = {c.get("name"): c for c in spec.get("initContainers") or []}
    sidecar = {n for n, c in init_specs.items() if c.get("restartPolicy") == "Always"}
    total = len(spec.get("containers") or []) + len(sidecar)
    ready = restarts = sidecar_restarts = 0
    last_restart: float | None = None
    sidecar_last: float | None = None
    phase = status.get("phase") or ""
    reason = status.get("reason") or phase
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"

    def finished(cs: dict[str, Any]) -> float | None:
        return parse_time(((cs.get("lastState") or {}).get("terminated") or {}).get("finishedAt"))

    initializing = False
    init_statuses = status.get("initContainerStatuses") or []
    for i, cs in enumerate(init_statuses):
        restarts += cs.get("restartCount", 0)
        t = finished(cs)
        if t is not None and (last_restart is None or t > last_restart):
            last_restart = t
        is_sidecar = cs.get("name") in sidecar
        if is_sidecar:
            sidecar_restarts += cs.get("restartCount", 0)
            if t is not None and (sidecar_last is None or t > sidecar_last):
                sidecar_last = t
        state = cs.get("state") or {}
        term, wait = state.get("terminated"), state.get("waiting")
        if term is not None and term.get("exitCode", 0) == 0:
            continue
        if is_sidecar and cs.get("started"):
            ready += 1 if cs.get("ready") else 0
            continue
        if term is not None:
            if term.get("reason"):
                reason = "Init:" + term["reason"]
            elif term.get("signal"):
                reason = f"Init:Signal:{term['signal']}"
            else:
                reason = f"Init:ExitCode:{term.get('exitCode', 0)}"
        elif wait is not None and wait.get("reason") and wait["reason"] != "PodInitializing":
            reason = "Init:" + wait["reason"]
        else:
            reason = f"Init:{i}/{len(init_specs)}"
        initializing = True
        break

    initialized = any(c.get("type") == "Initialized" and c.get("status") == "True"
                      for c in status.get("conditions") or [])
    if not initializing or initialized:
        restarts, last_restart = sidecar_restarts, sidecar_last
        has_running = False
        for cs in reversed(status.get("containerStatuses") or []):
            restarts += cs.get("restartCount", 0)
            t = finished(cs)
            if t is not None and (last_restart is None or t > last_restart):
                last_restart = t
            state = cs.get("state") or {}
            wait, term = state.get("waiting"), state.get("terminated")
            if wait is not None and wait.get("reason"):
                reason = wait["reason"]
            elif term is not None and term.get("reason"):
                reason = term["reason"]
            elif term is not None:
                reason = f"Signal:{term['signal']}" if term.get("signal") else f"ExitCode:{term.get('exitCode', 0)}"
            elif cs.get("ready") and state.get("running") is not None:
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            pod_ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                            for c in status.get("conditions") or [])
            reason = "Running" if pod_ready else "NotReady"

    if pod.get("metadata", {}).get("deletionTimestamp"):
        if status.get("reason") == "NodeLost":
            reason = "Unknown"
        elif phase not in ("Succeeded", "Failed"):
            reason = "Terminating"
    restarts_cell = str(restarts)
    if restarts and last_restart is not None:
        restarts_cell = f"{restarts} ({human_duration(now - last_restart)} ago)"
    return f"{ready}/{total}", reason, restarts_cell


def _pod(pod: Obj, now: float) -> list[Any]:
    status = pod.get("status") or {}
    ready, reason, restarts = _pod_status(pod, now)
    ips = status.get("podIPs") or []
    ip = (ips[0].get("ip") if ips else status.get("podIP")) or "<none>"
    gates = (pod.get("spec") or {}).get("readinessGates") or []
    if gates:
        true_types = {c.get("type") for c in status.get("conditions") or [] if c.get("status") == "True"}
        gates_cell = f"{sum(g.get('conditionType') in true_types for g in gates)}/{len(gates)}"
    else:
        gates_cell = "<none>"
    return [pod["metadata"]["name"], ready, reason, restarts, _age(pod, now), ip,
            (pod.get("spec") or {}).get("nodeName") or "<none>", status.get("nominatedNodeName") or "<none>",
            gates_cell]


def _deployment(d: Obj, now: float) -> list[Any]:
    spec, status = d.get("spec") or {}, d.get("status") or {}
    names, images = _containers((spec.get("template") or {}).get("spec") or {})
    return [d["metadata"]["name"], f"{status.get('readyReplicas', 0)}/{spec.get('replicas', 1)}",
            status.get("updatedReplicas", 0), status.get("availableReplicas", 0), _age(d, now), names, images,
            selector_to_string(spec.get("selector")) or "<none>"]


def _replicaset(rs: Obj, now: float) -> list[Any]:
    spec, status = rs.get("spec") or {}, rs.get("status") or {}
    names, images = _containers((spec.get("template") or {}).get("spec") or {})
    return [rs["metadata"]["name"], spec.get("replicas", 1), status.get("replicas", 0),
            status.get("readyReplicas", 0), _age(rs, now), names, images,
            selector_to_string(spec.get("selector")) or "<none>"]


def _service_external_ip(spec: dict[str, Any], status: dict[str, Any]) -> str:
    kind = spec.get("type", "ClusterIP")
    external = spec.get("externalIPs") or []
    if kind in ("ClusterIP", "NodePort"):
        return ",".join(external) or "<none>"
    if kind == "LoadBalancer":
        ingress = [i.get("ip") or i.get("hostname") for i in (status.get("loadBalancer") or {}).get("ingress") or []]
        return ",".join([*ingress, *external]) or "<pending>"
    if kind == "ExternalName":
        return spec.get("externalName") or "<none>"
    return "<unknown>"


def _service(svc: Obj, now: float) -> list[Any]:
    spec = svc.get("spec") or {}
    cluster_ips = spec.get("clusterIPs") or ([spec["clusterIP"]] if spec.get("clusterIP") else [])
    ports = ",".join(
        f"{p.get('port')}:{p['nodePort']}/{p.get('protocol', 'TCP')}" if p.get("nodePort")
        else f"{p.get('port')}/{p.get('protocol', 'TCP')}"
        for p in spec.get("ports") or [])
    return [svc["metadata"]["name"], spec.get("type", "ClusterIP"), cluster_ips[0] if cluster_ips else "<none>",
            _service_external_ip(spec, svc.get("status") or {}), ports or "<none>", _age(svc, now),
            _format_labels(spec.get("selector"))]


def format_endpoints(ep: Obj, limit: int = 3) -> str:
    """formatEndpoints: up to three ip:port pairs, then '+ N more...'; '<none>' without subsets."""
    subsets = ep.get("subsets") or []
    if not subsets:
        return "<none>"
    shown: list[str] = []
    count = 0
    for ss in subsets:
        addresses = [a.get("ip", "") for a in ss.get("addresses") or []]
        ports = ss.get("ports") or []
        pairs = addresses if not ports else [f"{ip}:{p.get('port')}" for p in ports for ip in addresses]
        count += len(pairs)
        shown.extend(pairs[: max(0, limit - len(shown))])
    text = ",".join(shown)
    return f"{text} + {count - limit} more..." if count > limit else text


def _endpoints(ep: Obj, now: float) -> list[Any]:
    return [ep["metadata"]["name"], format_endpoints(ep), _age(ep, now)]


def node_roles(node: Obj) -> str:
    roles = set()
    for key, value in (node.get("metadata", {}).get("labels") or {}).items():
        if key.startswith("node-role.kubernetes.io/"):
            roles.add(key.split("/", 1)[1])
        elif key == "kubernetes.io/role":
            roles.add(value)
    return ",".join(sorted(r for r in roles if r)) or "<none>"


def node_status(node: Obj) -> str:
    status = [("Ready" if c.get("status") == "True" else "NotReady")
              for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"] or ["Unknown"]
    if (node.get("spec") or {}).get("unschedulable"):
        status.append("SchedulingDisabled")
    return ",".join(status)


def _node(node: Obj, now: float) -> list[Any]:
    status = node.get("status") or {}
    info = status.get("nodeInfo") or {}
    addresses = status.get("addresses") or []

    def address(kind: str) -> str:
        return next((a.get("address") for a in addresses if a.get("type") == kind), None) or "<none>"

    return [node["metadata"]["name"], node_status(node), node_roles(node), _age(node, now),
            info.get("kubeletVersion", ""), address("InternalIP"), address("ExternalIP"),
            info.get("osImage") or "<unknown>", info.get("kernelVersion") or "<unknown>",
            info.get("containerRuntimeVersion") or "<unknown>"]


def _event(ev: Obj, now: float) -> list[Any]:
    first = age(ev.get("firstTimestamp") or ev.get("eventTime"), now)
    last = age(ev.get("lastTimestamp"), now) if ev.get("lastTimestamp") else first
    involved = ev.get("involvedObject") or {}
    source = ev.get("source") or {}
    source_cell = ", ".join(p for p in (source.get("component"), source.get("host")) if p) or \
        ev.get("reportingComponent") or ""
    count = ((ev.get("series") or {}).get("count")) or ev.get("count", 1)
    return [last, ev.get("type", ""), ev.get("reason", ""),
            f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}", involved.get("fieldPath", ""),
            source_cell, str(ev.get("message", "")).strip(), first, count, ev["metadata"]["name"]]


def _configmap(cm: Obj, now: float) -> list[Any]:
    return [cm["metadata"]["name"], len(cm.get("data") or {}) + len(cm.get("binaryData") or {}), _age(cm, now)]


def _secret(secret: Obj, now: float) -> list[Any]:
    data = len(secret.get("data") or {}) + len(set(secret.get("stringData") or {}) - set(secret.get("data") or {}))
    return [secret["metadata"]["name"], secret.get("type", "Opaque"), data, _age(secret, now)]


def _namespace(ns: Obj, now: float) -> list[Any]:
    return [ns["metadata"]["name"], (ns.get("status") or {}).get("phase", "Active"), _age(ns, now)]


def _networkpolicy(np: Obj, now: float) -> list[Any]:
    selector = selector_to_string((np.get("spec") or {}).get("podSelector")) or "<none>"
    return [np["metadata"]["name"], selector, _age(np, now)]


def _resourcequota(quota: Obj, now: float) -> list[Any]:
    status = quota.get("status") or {}
    hard = status.get("hard") or (quota.get("spec") or {}).get("hard") or {}
    used = status.get("used") or {}
    request: list[str] = []
    limit: list[str] = []
    for name in sorted(hard):
        (limit if name.startswith("limits.") else request).append(f"{name}: {used.get(name, '0')}/{hard[name]}")
    return [quota["metadata"]["name"], _age(quota, now), ", ".join(request), ", ".join(limit)]


def _pvc(pvc: Obj, now: float) -> list[Any]:
    spec, status = pvc.get("spec") or {}, pvc.get("status") or {}
    modes = {"ReadWriteOnce": "RWO", "ReadOnlyMany": "ROX", "ReadWriteMany": "RWX", "ReadWriteOncePod": "RWOP"}
    return [pvc["metadata"]["name"], status.get("phase", "Pending"), spec.get("volumeName", ""),
            (status.get("capacity") or {}).get("storage", ""),
            ",".join(modes.get(m, m) for m in status.get("accessModes") or []),
            spec.get("storageClassName", ""), spec.get("volumeAttributesClassName") or "<unset>", _age(pvc, now),
            spec.get("volumeMode", "Filesystem")]


def hpa_targets(hpa: Obj) -> str:
    """`cpu: 45%/80%` per metric, the current value `<unknown>` until the controller has measured one (kubectl's
    formatHPAMetrics: two metrics, then `+ N more...`)."""
    spec, statuses = hpa.get("spec") or {}, (hpa.get("status") or {}).get("currentMetrics") or []
    out = []
    for i, metric in enumerate(spec.get("metrics") or []):
        source = metric.get("resource") or {}
        target = source.get("target") or {}
        current_status = ((statuses[i] if i < len(statuses) else {}).get("resource") or {}).get("current") or {}
        if metric.get("type") != "Resource":
            out.append("<unknown>/<unknown>")
        elif target.get("averageValue") is not None:
            out.append(f"{source.get('name')}: {current_status.get('averageValue', '<unknown>')}/"
                       f"{target['averageValue']}")
        else:
            current = current_status.get("averageUtilization")
            wanted = target.get("averageUtilization")
            out.append(f"{source.get('name')}: {'<unknown>' if current is None else f'{current}%'}/"
                       f"{'<auto>' if wanted is None else f'{wanted}%'}")
    if not out:
        return "<none>"
    return ", ".join(out[:2]) + (f" + {len(out) - 2} more..." if len(out) > 2 else "")


def _hpa(hpa: Obj, now: float) -> list[Any]:
    spec, status = hpa.get("spec") or {}, hpa.get("status") or {}
    ref = spec.get("scaleTargetRef") or {}
    return [hpa["metadata"]["name"], f"{ref.get('kind', '')}/{ref.get('name', '')}", hpa_targets(hpa),
            spec.get("minReplicas", "<unset>"), spec.get("maxReplicas", 0), status.get("currentReplicas", 0),
            _age(hpa, now)]


def job_status(job: Obj) -> str:
    """kubectl's STATUS of a job: the condition that is true, else Running (Suspended while suspended)."""
    conditions = {c.get("type"): c.get("status") for c in (job.get("status") or {}).get("conditions") or []}
    for kind in ("Complete", "Failed", "FailureTarget", "SuccessCriteriaMet"):
        if conditions.get(kind) == "True":
            return kind
    return "Suspended" if conditions.get("Suspended") == "True" else "Running"


def _job(job: Obj, now: float) -> list[Any]:
    spec, status = job.get("spec") or {}, job.get("status") or {}
    completions = spec.get("completions")
    succeeded = status.get("succeeded", 0)
    done = f"{succeeded}/{completions}" if completions is not None else \
        f"{succeeded}/1 of {spec.get('parallelism', 1)}"
    started, finished = parse_time(status.get("startTime")), parse_time(status.get("completionTime"))
    duration = human_duration((finished if finished is not None else now) - started) if started is not None else ""
    names, images = _containers((spec.get("template") or {}).get("spec") or {})
    return [job["metadata"]["name"], job_status(job), done, duration, _age(job, now), names, images,
            selector_to_string(spec.get("selector")) or "<none>"]


def _cronjob(cj: Obj, now: float) -> list[Any]:
    spec, status = cj.get("spec") or {}, cj.get("status") or {}
    template = ((spec.get("jobTemplate") or {}).get("spec") or {})
    names, images = _containers((template.get("template") or {}).get("spec") or {})
    last = status.get("lastScheduleTime")
    return [cj["metadata"]["name"], spec.get("schedule", ""), spec.get("timeZone") or "<none>",
            str(bool(spec.get("suspend"))), len(status.get("active") or []), age(last, now) if last else "<none>",
            _age(cj, now), names, images, selector_to_string(template.get("selector")) or "<none>"]


def _name_age(obj: Obj, now: float) -> list[Any]:
    return [obj["metadata"]["name"], _age(obj, now)]


S, N = "string", "integer"  # a column's type: a string or a number
PRINTERS: dict[str, tuple[tuple[Column, ...], Printer]] = {
    "pods": ((("Name", S, 0), ("Ready", S, 0), ("Status", S, 0), ("Restarts", S, 0), ("Age", S, 0),
              ("IP", S, 1), ("Node", S, 1), ("Nominated Node", S, 1), ("Readiness Gates", S, 1)), _pod),
    "deployments.apps": ((("Name", S, 0), ("Ready", S, 0), ("Up-to-date", N, 0), ("Available", N, 0),
                          ("Age", S, 0), ("Containers", S, 1), ("Images", S, 1), ("Selector", S, 1)), _deployment),
    "replicasets.apps": ((("Name", S, 0), ("Desired", N, 0), ("Current", N, 0), ("Ready", N, 0), ("Age", S, 0),
                          ("Containers", S, 1), ("Images", S, 1), ("Selector", S, 1)), _replicaset),
    "services": ((("Name", S, 0), ("Type", S, 0), ("Cluster-IP", S, 0), ("External-IP", S, 0), ("Port(s)", S, 0),
                  ("Age", S, 0), ("Selector", S, 1)), _service),
    "endpoints": ((("Name", S, 0), ("Endpoints", S, 0), ("Age", S, 0)), _endpoints),
    "nodes": ((("Name", S, 0), ("Status", S, 0), ("Roles", S, 0), ("Age", S, 0), ("Version", S, 0),
               ("Internal-IP", S, 1), ("External-IP", S, 1), ("OS-Image", S, 1), ("Kernel-Version", S, 1),
               ("Container-Runtime", S, 1)), _node),
    "events": ((("Last Seen", S, 0), ("Type", S, 0), ("Reason", S, 0), ("Object", S, 0), ("Subobject", S, 1),
                ("Source", S, 1), ("Message", S, 0), ("First Seen", S, 1), ("Count", N, 1), ("Name", S, 1)), _event),
    "configmaps": ((("Name", S, 0), ("Data", N, 0), ("Age", S, 0)), _configmap),
    "secrets": ((("Name", S, 0), ("Type", S, 0), ("Data", N, 0), ("Age", S, 0)), _secret),
    "namespaces": ((("Name", S, 0), ("Status", S, 0), ("Age", S, 0)), _namespace),
    "networkpolicies.networking.k8s.io": ((("Name", S, 0), ("Pod-Selector", S, 0), ("Age", S, 0)), _networkpolicy),
    "resourcequotas": ((("Name", S, 0), ("Age", S, 0), ("Request", S, 0), ("Limit", S, 0)), _resourcequota),
    "persistentvolumeclaims": ((("Name", S, 0), ("Status", S, 0), ("Volume", S, 0), ("Capacity", S, 0),
                                ("Access Modes", S, 0), ("StorageClass", S, 0), ("VolumeAttributesClass", S, 0),
                                ("Age", S, 0), ("VolumeMode", S, 1)), _pvc),
    "horizontalpodautoscalers.autoscaling": ((("Name", S, 0), ("Reference", S, 0), ("Targets", S, 0),
                                              ("MinPods", S, 0), ("MaxPods", "integer", 0), ("Replicas", "integer", 0),
                                              ("Age", S, 0)), _hpa),
    "jobs.batch": ((("Name", S, 0), ("Status", S, 0), ("Completions", S, 0), ("Duration", S, 0), ("Age", S, 0),
                    ("Containers", S, 1), ("Images", S, 1), ("Selector", S, 1)), _job),
    "cronjobs.batch": ((("Name", S, 0), ("Schedule", S, 0), ("Timezone", S, 0), ("Suspend", S, 0),
                        ("Active", "integer", 0), ("Last Schedule", S, 0), ("Age", S, 0), ("Containers", S, 1),
                        ("Images", S, 1), ("Selector", S, 1)), _cronjob),
}
DEFAULT_PRINTER: tuple[tuple[Column, ...], Printer] = ((("Name", S, 0), ("Age", S, 0)), _name_age)


def _row_object(obj: Obj, include: str) -> dict[str, Any] | None:
    if include == "Object":
        return obj
    if include == "None":
        return None
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata", {})}


def to_table(resource: str, objects: Iterable[Obj], now: float, resource_version: str,
             include_object: str = "Metadata") -> dict[str, Any]:
    """A Table for `objects` of one resource type; `include_object` is the request's includeObject policy."""
    columns, printer = PRINTERS.get(resource, DEFAULT_PRINTER)
    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": printer(obj, now)}
        embedded = _row_object(obj, include_object)
        if embedded is not None:
            row["object"] = embedded
        rows.append(row)
    return {
        "kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": [{"name": n, "type": t, "format": "name" if n == "Name" and i == 0 else "",
                               "description": "", "priority": p} for i, (n, t, p) in enumerate(columns)],
        "rows": rows,
    }
