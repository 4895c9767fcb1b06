"""`kubectl describe` for each readable kind: the fields an SRE looks at first, then the object's events.

Each describer returns the body only; `read.describe` fetches what a describer needs (events, endpoints, the
pods on a node) and fits body and events into the output budget. A small model reads every token, so what carries
no evidence is left out: the padding that aligns values, the pod-template-hash label, a deployment's labels when
they are its template's, the tolerations every pod gets, a crash loop's back-off message, a probe's period and
failure threshold at their defaults, the pod conditions that are True; container start and finish times are ages.
Images, ports, commands, env, limits and requests, probes, container states with reasons and exit codes, restart
counts, conditions, node selectors, affinity, selectors and the events stay.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

from kubernetes.utils import parse_quantity

from agent_sre.apps.images import DOCKER_CONFIG_JSON
from agent_sre.kube.times import age
from agent_sre.tools.compact import event_message
from agent_sre.tools.render import NONE, clean, labels, selector, table
from agent_sre.tools.status import pod_ready, pod_status

Obj = dict[str, Any]
TEMPLATE_HASH = "pod-template-hash"  # a pod's or ReplicaSet's label that its name already carries
# Tolerations every pod gets from the API server (evicted 5 minutes after its node fails): no evidence of anything.
DEFAULT_TOLERATIONS = frozenset({"node.kubernetes.io/not-ready:NoExecute", "node.kubernetes.io/unreachable:NoExecute"})


class Block:
    """`Key: value` lines with kubectl's nesting; values are cleaned of control characters. Values are not aligned
    in a column as kubectl aligns them: the padding costs a token a line and tells a model nothing."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, key: str, value: Any = "", indent: int = 0) -> Block:
        head = f"{'  ' * indent}{key}:"
        text = clean(str(value)) if value != "" else ""
        self.lines.append(f"{head} {text}" if text else head)
        return self

    def line(self, text: str, indent: int = 0) -> Block:
        self.lines.extend(f"{'  ' * indent}{part}" for part in clean(text).split("\n"))
        return self

    def __str__(self) -> str:
        return "\n".join(self.lines)


def _meta(block: Block, obj: Obj, namespaced: bool = True, template: Obj | None = None) -> Obj:
    """Name, namespace, labels (left out when they are the pod `template`'s, shown below) and annotations."""
    meta = obj.get("metadata") or {}
    block.add("Name", meta.get("name", ""))
    if namespaced:
        block.add("Namespace", meta.get("namespace", ""))
    own = {k: v for k, v in (meta.get("labels") or {}).items() if k != TEMPLATE_HASH}
    if template is None or own != {k: v for k, v in ((template.get("metadata") or {}).get("labels") or {}).items()
                                   if k != TEMPLATE_HASH}:
        block.add("Labels", labels(own))
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                   if k != "kubectl.kubernetes.io/last-applied-configuration"}
    if annotations:
        block.add("Annotations", labels({k: str(v)[:120] for k, v in annotations.items()}, sep=", "))
    return meta


def _quantities(mapping: dict[str, Any] | None) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted((mapping or {}).items())) or NONE


def _probe(probe: Obj) -> str:
    if "httpGet" in probe:
        h = probe["httpGet"]
        action = f"http-get {h.get('scheme', 'HTTP').lower()}://:{h.get('port')}{h.get('path', '/')}"
    elif "tcpSocket" in probe:
        action = f"tcp-socket :{probe['tcpSocket'].get('port')}"
    elif "exec" in probe:
        action = f"exec {json.dumps(probe['exec'].get('command') or [])}"
    elif "grpc" in probe:
        action = f"grpc :{probe['grpc'].get('port')}"
    else:
        action = "unknown"
    period, failures = probe.get("periodSeconds", 10), probe.get("failureThreshold", 3)
    return (f"{action} delay={probe.get('initialDelaySeconds', 0)}s timeout={probe.get('timeoutSeconds', 1)}s"
            + (f" period={period}s #failure={failures}" if (period, failures) != (10, 3) else ""))


def _env_value(env: Obj) -> str:
    if "value" in env:
        return str(env["value"])
    source = env.get("valueFrom") or {}
    if "secretKeyRef" in source:
        ref = source["secretKeyRef"]
        return f"<set to the key '{ref.get('key')}' in secret '{ref.get('name')}'>"
    if "configMapKeyRef" in source:
        ref = source["configMapKeyRef"]
        return f"<set to the key '{ref.get('key')}' of config map '{ref.get('name')}'>"
    if "fieldRef" in source:
        return f"({source['fieldRef'].get('fieldPath')})"
    if "resourceFieldRef" in source:
        return f"({source['resourceFieldRef'].get('resource')})"
    return ""


def _state(block: Block, title: str, state: Obj | None, indent: int, now: float) -> None:
    """A container state: its reason, message and exit code; when it started and ended as ages, not timestamps (20
    tokens each). A crash loop's back-off message only repeats the reason and the pod's UID, so it is left out."""
    if not state:
        return
    name = next(iter(state), "")
    detail = state[name] or {}
    block.add(title, name.capitalize(), indent)
    for key, label in (("reason", "Reason"), ("message", "Message"), ("exitCode", "Exit Code")):
        if key == "message" and detail.get("reason") == "CrashLoopBackOff":
            continue
        if detail.get(key) not in (None, ""):
            block.add(label, event_message(detail[key])[:300], indent + 1)
    for key, label in (("startedAt", "Started"), ("finishedAt", "Finished")):
        if detail.get(key):
            block.add(label, f"{age(detail[key], now)} ago", indent + 1)


def _containers(block: Block, title: str, specs: list[Obj], statuses: list[Obj], indent: int,
                now: float = 0.0) -> None:
    if not specs:
        return
    block.add(title, "", indent)
    by_name = {s.get("name"): s for s in statuses}
    for spec in specs:
        block.add(spec.get("name", "?"), "", indent + 1)
        i = indent + 2
        block.add("Image", spec.get("image", ""), i)
        ports = ", ".join(f"{p.get('containerPort')}/{p.get('protocol', 'TCP')}" for p in spec.get("ports") or [])
        if ports:
            block.add("Port", ports, i)
        if spec.get("command"):
            block.add("Command", json.dumps(spec["command"]), i)
        if spec.get("args"):
            block.add("Args", json.dumps(spec["args"]), i)
        status = by_name.get(spec.get("name"))
        if status is not None:
            _state(block, "State", status.get("state"), i, now)
            _state(block, "Last State", status.get("lastState"), i, now)
            block.add("Ready", str(bool(status.get("ready"))), i)
            block.add("Restart Count", status.get("restartCount", 0), i)
        resources = spec.get("resources") or {}
        if resources.get("limits"):
            block.add("Limits", _quantities(resources["limits"]), i)
        if resources.get("requests"):
            block.add("Requests", _quantities(resources["requests"]), i)
        for key, label in (("livenessProbe", "Liveness"), ("readinessProbe", "Readiness"),
                           ("startupProbe", "Startup")):
            if spec.get(key):
                block.add(label, _probe(spec[key]), i)
        sources = [f"{k.removesuffix('Ref')} {v.get('name')}" for src in spec.get("envFrom") or []
                   for k, v in src.items() if isinstance(v, dict)]
        if sources:
            block.add("Environment Variables from", ", ".join(sources), i)
        env = spec.get("env") or []
        block.add("Environment", "" if env else NONE, i)
        for var in env:
            block.add(var.get("name", "?"), _env_value(var)[:200], i + 1)


def _pod_template(block: Block, template: Obj, indent: int = 0) -> None:
    spec = template.get("spec") or {}
    block.add("Pod Template", "", indent)
    block.add("Labels", labels((template.get("metadata") or {}).get("labels")), indent + 1)
    _pull_secrets(block, spec, indent + 1)
    _containers(block, "Init Containers", spec.get("initContainers") or [], [], indent + 1)
    _containers(block, "Containers", spec.get("containers") or [], [], indent + 1)
    _volumes(block, spec, indent + 1)
    _scheduling(block, spec, indent + 1)


def _volumes(block: Block, spec: Obj, indent: int) -> None:
    """The pod's volumes with their source: a claim by name (what a Pending pod's scheduler message names)."""
    volumes = spec.get("volumes") or []
    if not volumes:
        return
    block.add("Volumes", "", indent)
    for volume in volumes:
        source = next((k for k in volume if k != "name"), "")
        claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
        what = f"PersistentVolumeClaim (ClaimName: {claim})" if claim else source[:1].upper() + source[1:]
        block.add(str(volume.get("name", "?")), what, indent + 1)


def _pull_secrets(block: Block, spec: Obj, indent: int) -> None:
    """Where the kubelet takes registry credentials from: before the containers, so a long pod keeps it."""
    if spec.get("imagePullSecrets"):
        block.add("Image Pull Secrets", ",".join(str(s.get("name")) for s in spec["imagePullSecrets"]), indent)


def _scheduling(block: Block, spec: Obj, indent: int) -> None:
    block.add("Node-Selectors", labels(spec.get("nodeSelector")), indent)
    if spec.get("affinity"):
        block.add("Affinity", json.dumps(spec["affinity"], separators=(",", ":"))[:400], indent)
    tolerations = [f"{t.get('key', '')}{'=' + t['value'] if t.get('value') else ''}:{t.get('effect', '')}"
                   for t in spec.get("tolerations") or []]
    tolerations = [t for t in tolerations if t not in DEFAULT_TOLERATIONS]
    if tolerations:
        block.add("Tolerations", ", ".join(tolerations), indent)


def _conditions(block: Block, obj: Obj, columns: tuple[str, ...] = ("type", "status", "reason")) -> None:
    conditions = (obj.get("status") or {}).get("conditions") or []
    if conditions:
        block.add("Conditions")
        rows = [[str(c.get(col, "")) for col in columns] for c in conditions]
        block.line(table([c.capitalize() for c in columns], rows), 1)


def _conditions_line(block: Block, obj: Obj, failing_only: bool = False) -> None:
    """Conditions on one line, `Available=False (MinimumReplicasUnavailable), ...`; `failing_only` (a pod's) shows
    only those that are not True, without their reasons (`ContainersNotReady`: the container states say more)."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    shown = [f"{c.get('type')}={c.get('status')}" + (f" ({c['reason']})" if c.get("reason") and not failing_only
                                                     else "")
             for c in conditions if not failing_only or c.get("status") != "True"]
    if not conditions:
        return
    if failing_only and not shown:
        block.add("Conditions", "all True")
    else:
        others = " (the others True)" if len(shown) < len(conditions) else ""
        block.add("Conditions", ", ".join(shown) + others)


# --- per kind --------------------------------------------------------------------------------------------------
def pod(obj: Obj, now: float, **_: Any) -> str:
    block = Block()
    meta = _meta(block, obj)
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    block.add("Node", spec.get("nodeName") or NONE)
    block.add("Status", pod_status(obj))
    if status.get("message"):
        block.add("Message", status["message"][:300])
    block.add("Ready", pod_ready(obj))
    block.add("IP", status.get("podIP") or NONE)
    owners = meta.get("ownerReferences") or []
    if owners:
        block.add("Controlled By", f"{owners[0].get('kind')}/{owners[0].get('name')}")
    block.add("Age", age(meta.get("creationTimestamp"), now))
    _pull_secrets(block, spec, 0)
    _containers(block, "Init Containers", spec.get("initContainers") or [], status.get("initContainerStatuses") or [],
                0, now)
    _containers(block, "Containers", spec.get("containers") or [], status.get("containerStatuses") or [], 0, now)
    _conditions_line(block, obj, failing_only=True)
    _volumes(block, spec, 0)
    _scheduling(block, spec, 0)
    return str(block)


def deployment(obj: Obj, now: float, **_: Any) -> str:
    block = Block()
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    meta = _meta(block, obj, template=spec.get("template") or {})
    block.add("Age", age(meta.get("creationTimestamp"), now))
    block.add("Selector", labels((spec.get("selector") or {}).get("matchLabels")))
    desired = spec.get("replicas", 1)
    block.add("Replicas", f"{desired} desired | {status.get('updatedReplicas', 0)} updated | "
                          f"{status.get('replicas', 0)} total | {status.get('availableReplicas', 0)} available | "
                          f"{status.get('unavailableReplicas', 0)} unavailable")
    block.add("StrategyType", (spec.get("strategy") or {}).get("type", "RollingUpdate"))
    _pod_template(block, spec.get("template") or {})
    _conditions_line(block, obj)
    return str(block)


def replicaset(obj: Obj, now: float, **_: Any) -> str:
    block = Block()
    meta = _meta(block, obj)
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    owners = meta.get("ownerReferences") or []
    if owners:
        block.add("Controlled By", f"{owners[0].get('kind')}/{owners[0].get('name')}")
    block.add("Selector", labels((spec.get("selector") or {}).get("matchLabels")))
    block.add("Replicas", f"{status.get('replicas', 0)} current / {spec.get('replicas', 0)} desired / "
                          f"{status.get('readyReplicas', 0)} ready")
    _pod_template(block, spec.get("template") or {})
    return str(block)


def service(obj: Obj, now: float, endpoints: Obj | None = None, **_: Any) -> str:
    block = Block()
    _meta(block, obj)
    spec = obj.get("spec") or {}
    block.add("Selector", labels(spec.get("selector")))
    block.add("Type", spec.get("type", "ClusterIP"))
    block.add("IP", spec.get("clusterIP") or NONE)
    for port in spec.get("ports") or []:
        block.add("Port", f"{port.get('name') or '<unset>'}  {port.get('port')}/{port.get('protocol', 'TCP')}")
        block.add("TargetPort", f"{port.get('targetPort', port.get('port'))}/{port.get('protocol', 'TCP')}")
    block.add("Endpoints", endpoint_addresses(endpoints)[0] if endpoints else NONE)
    return str(block)


def endpoint_addresses(endpoints: Obj) -> tuple[str, str]:
    """Ready and not-ready `ip:port` lists of an Endpoints object, comma-separated or <none>."""
    ready: list[str] = []
    not_ready: list[str] = []
    for subset in endpoints.get("subsets") or []:
        ports = [p.get("port") for p in subset.get("ports") or []] or [None]
        for out, key in ((ready, "addresses"), (not_ready, "notReadyAddresses")):
            out.extend(f"{a.get('ip')}:{p}" if p else str(a.get("ip")) for a in subset.get(key) or [] for p in ports)
    return ",".join(ready) or NONE, ",".join(not_ready) or NONE


def endpoints(obj: Obj, now: float, **_: Any) -> str:
    block = Block()
    _meta(block, obj)
    ready, not_ready = endpoint_addresses(obj)
    block.add("Addresses", ready)
    block.add("NotReadyAddresses", not_ready)
    return str(block)


def node(obj: Obj, now: float, pods: list[Obj] | None = None, **_: Any) -> str:
    block = Block()
    meta = _meta(block, obj, namespaced=False)
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    block.add("Age", age(meta.get("creationTimestamp"), now))
    taints = [f"{t.get('key')}{'=' + t['value'] if t.get('value') else ''}:{t.get('effect')}"
              for t in spec.get("taints") or []]
    block.add("Taints", ", ".join(taints) or NONE)
    block.add("Unschedulable", str(bool(spec.get("unschedulable"))).lower())
    _conditions(block, obj, ("type", "status", "reason"))
    block.add("Capacity", _quantities(status.get("capacity")))
    allocatable = status.get("allocatable") or status.get("capacity") or {}
    block.add("Allocatable", _quantities(allocatable))
    if pods is not None:
        running = [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        block.add("Non-terminated Pods", len(running))
        block.add("Allocated resources", "")
        for resource in ("cpu", "memory"):
            requested = _requested(running, resource)
            total = parse_quantity(allocatable.get(resource, 0))
            share = f" ({int(requested * 100 / total)}%)" if total else ""
            shown = f"{int(requested * 1000)}m" if resource == "cpu" else f"{int(requested / 2**20)}Mi"
            block.add(f"{resource} requests", f"{shown}{share}", 1)
    return str(block)


def _requested(pods: list[Obj], resource: str) -> Any:
    """The sum of the containers' requests for `resource` (a Decimal, in cores or bytes)."""
    total = parse_quantity(0)
    for pod_ in pods:
        for container in (pod_.get("spec") or {}).get("containers") or []:
            total += parse_quantity(((container.get("resources") or {}).get("requests") or {}).get(resource, 0))
    return total


def namespace(obj: Obj, now: float, quotas: list[Obj] | None = None, **_: Any) -> str:
    block = Block()
    _meta(block, obj, namespaced=False)
    block.add("Status", (obj.get("status") or {}).get("phase", "Active"))
    for quota in quotas or []:
        block.add("Resource Quota", quota["metadata"]["name"])
        block.line(_quota_table(quota), 1)
    return str(block)


def configmap(obj: Obj, now: float, **_: Any) -> str:
    block = Block()
    _meta(block, obj)
    block.add("Data", "" if obj.get("data") else NONE)
    for key, value in sorted((obj.get("data") or {}).items()):
        text = str(value)
        block.add(key, (text[:300] + "...") if len(text) > 300 else text, 1)
    return str(block)


def secret(obj: Obj, now: float, **_: Any) -> str:
    block = Block()
    _meta(block, obj)
    block.add("Type", obj.get("type", "Opaque"))
    block.add("Data", "" if obj.get("data") else NONE)
    shown = "get_resource names its registries" if obj.get("type") == DOCKER_CONFIG_JSON else \
        "get_resource shows the value"
    for key, value in sorted((obj.get("data") or {}).items()):
        block.add(key, f"{len(base64.b64decode(value or ''))} bytes ({shown})", 1)
    return str(block)


ACCESS_MODES = {"ReadWriteOnce": "RWO", "ReadOnlyMany": "ROX", "ReadWriteMany": "RWX", "ReadWriteOncePod": "RWOP"}


def persistentvolumeclaim(obj: Obj, now: float, pods: list[Obj] | None = None, **_: Any) -> str:
    """kubectl's fields: class, phase, the volume it is bound to, size, access modes, and the pods that mount it."""
    block = Block()
    meta = _meta(block, obj)
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    block.add("StorageClass", spec.get("storageClassName", ""))
    block.add("Status", status.get("phase", "Pending"))
    block.add("Volume", spec.get("volumeName", ""))
    block.add("Capacity", (status.get("capacity") or {}).get("storage", ""))
    block.add("Access Modes", ",".join(ACCESS_MODES.get(m, m) for m in status.get("accessModes") or []))
    block.add("VolumeMode", spec.get("volumeMode", "Filesystem"))
    users = [p["metadata"]["name"] for p in pods or [] if any(
        (v.get("persistentVolumeClaim") or {}).get("claimName") == meta.get("name")
        for v in (p.get("spec") or {}).get("volumes") or [])]
    block.add("Used By", ", ".join(users) or NONE)
    return str(block)


def _peers(peers: list[Obj]) -> list[str]:
    out = []
    for peer in peers:
        if "podSelector" in peer or "namespaceSelector" in peer:
            pods = selector(peer.get("podSelector"))
            namespaces = peer.get("namespaceSelector")
            out.append(f"PodSelector: {pods}" + (f" NamespaceSelector: {selector(namespaces)}"
                                                 if namespaces is not None else ""))
        elif "ipBlock" in peer:
            out.append(f"IPBlock: {peer['ipBlock'].get('cidr')}")
    return out


def networkpolicy(obj: Obj, now: float, **_: Any) -> str:
    block = Block()
    _meta(block, obj)
    spec = obj.get("spec") or {}
    selected = labels((spec.get("podSelector") or {}).get("matchLabels"))
    block.add("PodSelector", selected if selected != NONE else "<none> (all pods in the namespace)")
    types = spec.get("policyTypes") or ["Ingress"]
    for direction, key, peer_key in (("Ingress", "ingress", "from"), ("Egress", "egress", "to")):
        if direction not in types:
            block.add(f"{direction}", "not affected")
            continue
        rules = spec.get(key) or []
        if not rules:
            block.add(direction, f"<none> (selected pods are isolated for {direction.lower()} connectivity)")
            continue
        block.add(f"Allowing {direction.lower()} traffic")
        for rule in rules:
            ports = ", ".join(f"{p.get('port', '<any>')}/{p.get('protocol', 'TCP')}" for p in rule.get("ports") or [])
            block.add("Ports", ports or "<any> (traffic allowed to all ports)", 1)
            peers = _peers(rule.get(peer_key) or [])
            block.add("From" if peer_key == "from" else "To",
                      "; ".join(peers) if peers else "<any> (traffic not restricted by source)", 1)
    block.add("Policy Types", ", ".join(types))
    return str(block)


def _quota_table(quota: Obj) -> str:
    hard = (quota.get("status") or {}).get("hard") or (quota.get("spec") or {}).get("hard") or {}
    used = (quota.get("status") or {}).get("used") or {}
    return table(["Resource", "Used", "Hard"], [[k, used.get(k, "0"), v] for k, v in sorted(hard.items())])


def resourcequota(obj: Obj, now: float, **_: Any) -> str:
    block = Block()
    _meta(block, obj)
    block.line(_quota_table(obj))
    return str(block)


def horizontalpodautoscaler(obj: Obj, now: float, **_: Any) -> str:
    """As `kubectl describe hpa`: the metric against its target, the bounds, the scale and the conditions (their
    messages say why it cannot scale)."""
    block = Block()
    meta = _meta(block, obj)
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    ref = spec.get("scaleTargetRef") or {}
    block.add("Reference", f"{ref.get('kind', '')}/{ref.get('name', '')}")
    block.add("Age", age(meta.get("creationTimestamp"), now))
    block.add("Metrics", "( current / target )")
    current = status.get("currentMetrics") or []
    for i, metric in enumerate(spec.get("metrics") or []):
        source = metric.get("resource") or {}
        target = source.get("target") or {}
        now_value = ((current[i] if i < len(current) else {}).get("resource") or {}).get("current") or {}
        if target.get("averageValue") is not None:
            block.add(f"resource {source.get('name')} on pods", f"{now_value.get('averageValue', '<unknown>')} / "
                                                                f"{target['averageValue']}", 1)
        else:
            used = now_value.get("averageUtilization")
            shown = f"{used}% ({now_value.get('averageValue')})" if used is not None else "<unknown>"
            block.add(f"resource {source.get('name')} on pods (as a percentage of request)",
                      f"{shown} / {target.get('averageUtilization')}%", 1)
    block.add("Min replicas", spec.get("minReplicas", 1))
    block.add("Max replicas", spec.get("maxReplicas", ""))
    block.add(f"{ref.get('kind', '')} pods", f"{status.get('currentReplicas', 0)} current / "
                                             f"{status.get('desiredReplicas', 0)} desired")
    _conditions(block, obj, ("type", "status", "reason", "message"))
    return str(block)


def job(obj: Obj, now: float, **_: Any) -> str:
    block = Block()
    meta = _meta(block, obj, template=(obj.get("spec") or {}).get("template") or {})
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    owners = meta.get("ownerReferences") or []
    if owners:
        block.add("Controlled By", f"{owners[0].get('kind')}/{owners[0].get('name')}")
    block.add("Parallelism", spec.get("parallelism", 1))
    block.add("Completions", spec.get("completions", NONE))
    block.add("Backoff Limit", spec.get("backoffLimit", 6))
    block.add("Start Time", status.get("startTime") or NONE)
    if status.get("completionTime"):
        block.add("Completed At", status["completionTime"])
    block.add("Pods Statuses", f"{status.get('active', 0)} Active / {status.get('succeeded', 0)} Succeeded / "
                               f"{status.get('failed', 0)} Failed")
    _pod_template(block, spec.get("template") or {})
    _conditions(block, obj, ("type", "status", "reason", "message"))
    return str(block)


def cronjob(obj: Obj, now: float, **_: Any) -> str:
    block = Block()
    _meta(block, obj)
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    block.add("Schedule", spec.get("schedule", ""))
    block.add("Concurrency Policy", spec.get("concurrencyPolicy", "Allow"))
    block.add("Suspend", str(bool(spec.get("suspend"))))
    block.add("Last Schedule Time", status.get("lastScheduleTime") or NONE)
    block.add("Last Successful Time", status.get("lastSuccessfulTime") or NONE)
    block.add("Active Jobs", ", ".join(a.get("name", "") for a in status.get("active") or []) or NONE)
    _pod_template(block, ((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {})
    return str(block)


DESCRIBERS: dict[str, Callable[..., str]] = {
    "pod": pod, "deployment": deployment, "replicaset": replicaset, "service": service, "endpoints": endpoints,
    "node": node, "namespace": namespace, "configmap": configmap, "secret": secret,
    "networkpolicy": networkpolicy, "resourcequota": resourcequota,
    "horizontalpodautoscaler": horizontalpodautoscaler, "job": job, "cronjob": cronjob,
    "persistentvolumeclaim": persistentvolumeclaim,
}
