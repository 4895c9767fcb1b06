"""The scheduler's filters and the ResourceQuota admission check, with the messages the real ones write.

Before any node is looked at, the VolumeBinding plugin's PreFilter fails a pod whose claims are missing or unbound
(`claim_rejection`). Otherwise each node is rejected by the first filter plugin that fails it, in the default
profile's order (NodeUnschedulable, TaintToleration, NodeAffinity, NodeResourcesFit), and the reasons are counted
into "0/3 nodes are available: ..." exactly like `FitError`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from agent_sre.kube.quantity import quantity
from agent_sre.simulator.cluster import Obj

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"
GiB, MiB = 1024 ** 3, 1024 ** 2


def pod_requests(spec: Obj) -> dict[str, float]:
    """A pod's effective requests and limits (cores and bytes): sum of app containers, max with init containers."""
    totals = {"requests.cpu": 0.0, "requests.memory": 0.0, "limits.cpu": 0.0, "limits.memory": 0.0}
    for container in spec.get("containers") or []:
        res = container.get("resources") or {}
        for kind in ("requests", "limits"):
            values = res.get(kind) or {}
            for r in ("cpu", "memory"):
                value = values.get(r, (res.get("limits") or {}).get(r) if kind == "requests" else None)
                if value is not None:
                    totals[f"{kind}.{r}"] += quantity(value)
    for container in spec.get("initContainers") or []:
        res = container.get("resources") or {}
        for kind in ("requests", "limits"):
            for r, value in (res.get(kind) or {}).items():
                key = f"{kind}.{r}"
                if key in totals:
                    totals[key] = max(totals[key], quantity(value))
    return totals


def _missing_requests(spec: Obj) -> set[str]:
    """Quota-tracked resources some container does not declare (the quota then refuses the pod)."""
    missing = set()
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        res = container.get("resources") or {}
        for kind in ("requests", "limits"):
            for r in ("cpu", "memory"):
                declared = (res.get(kind) or {}).get(r) or (kind == "requests" and (res.get("limits") or {}).get(r))
                if not declared:
                    missing.add(f"{kind}.{r}")
    return missing


# --- scheduling -------------------------------------------------------------------------------------------------

@dataclass
class NodeLoad:
    """What is already placed on a node: summed requests and pod count."""

    cpu: float = 0.0
    memory: float = 0.0
    pods: int = 0


def _tolerates(pod_spec: Obj, taint: Obj) -> bool:
    for tol in pod_spec.get("tolerations") or []:
        if tol.get("effect") and tol["effect"] != taint.get("effect"):
            continue
        if tol.get("operator") == "Exists" and (not tol.get("key") or tol["key"] == taint.get("key")):
            return True
        if tol.get("key") == taint.get("key") and tol.get("value", "") == taint.get("value", ""):
            return True
    return False


def _expression_matches(expr: Obj, labels: Mapping[str, str]) -> bool:
    key, op, values = expr.get("key", ""), expr.get("operator"), expr.get("values") or []
    if op == "In":
        return labels.get(key) in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt") and key in labels and values:
        try:
            left, right = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return left > right if op == "Gt" else left < right
    return False


def matches_node_affinity(pod_spec: Obj, node: Obj) -> bool:
    labels = node["metadata"].get("labels") or {}
    if any(labels.get(k) != v for k, v in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return True
    name = {"metadata.name": node["metadata"]["name"]}
    return any(all(_expression_matches(e, labels) for e in term.get("matchExpressions") or [])
               and all(_expression_matches(e, name) for e in term.get("matchFields") or []) for term in terms)


def _allocatable(node: Obj) -> tuple[float, float, int]:
    alloc = (node.get("status") or {}).get("allocatable") or {}
    return quantity(alloc.get("cpu", "0")), quantity(alloc.get("memory", "0")), int(quantity(alloc.get("pods", "110")))


def _node_rejections(pod_spec: Obj, requests: Mapping[str, float], node: Obj, load: NodeLoad) -> list[tuple[str, bool]]:
    """Why the node cannot take the pod: [(reason, preemption could help)], empty when it fits."""
    spec = node.get("spec") or {}
    if spec.get("unschedulable") and not _tolerates(pod_spec, {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}):
        return [("node(s) were unschedulable", False)]
    for taint in spec.get("taints") or []:
        if taint.get("key") == UNSCHEDULABLE_TAINT or taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not _tolerates(pod_spec, taint):
            return [(f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value', '')}}}", False)]
    if not matches_node_affinity(pod_spec, node):
        return [("node(s) didn't match Pod's node affinity/selector", False)]
    cpu, memory, pods = _allocatable(node)
    reasons = []
    if load.pods + 1 > pods:
        reasons.append(("Too many pods", True))
    if load.cpu + requests["requests.cpu"] > cpu + 1e-9:
        reasons.append(("Insufficient cpu", True))
    if load.memory + requests["requests.memory"] > memory:
        reasons.append(("Insufficient memory", True))
    return reasons


def claim_rejection(pod_spec: Obj, claim_of: Callable[[str], Obj | None]) -> str | None:
    """Why the VolumeBinding PreFilter turns the pod away before any node is filtered, or None: a claim it names that
    does not exist, or one still unbound (upstream pkg/scheduler/framework/plugins/volumebinding/volume_binding.go:
    `persistentvolumeclaim "X" not found`, `pod has unbound immediate PersistentVolumeClaims`; both
    UnschedulableAndUnresolvable, so preemption cannot help). `claim_of`: a claim of the pod's namespace by name."""
    unbound = False
    for volume in pod_spec.get("volumes") or []:
        name = (volume.get("persistentVolumeClaim") or {}).get("claimName")
        if name is None:
            continue
        claim = claim_of(name)
        if claim is None:
            return f'persistentvolumeclaim "{name}" not found'
        unbound = unbound or (claim.get("status") or {}).get("phase") != "Bound"
    return "pod has unbound immediate PersistentVolumeClaims" if unbound else None


def prefilter_failure(reason: str, total: int) -> str:
    """`FitError`'s message for a PreFilter verdict: one reason for every node, none of them a preemption victim's."""
    return f"0/{total} nodes are available: {reason}. preemption: 0/{total} nodes are available: {total} {NOT_HELPFUL}."


def schedule(pod_spec: Obj, nodes: Iterable[Obj], loads: Mapping[str, NodeLoad]) -> tuple[str | None, str]:
    """Pick a node (least allocated wins, ties by name) or explain, as FitError does, why none fits."""
    requests = pod_requests(pod_spec)
    reasons: Counter[str] = Counter()
    preemption: Counter[str] = Counter()
    best: tuple[float, str] | None = None
    total = 0
    for node in nodes:
        total += 1
        name = node["metadata"]["name"]
        load = loads.get(name) or NodeLoad()
        rejected = _node_rejections(pod_spec, requests, node, load)
        if rejected:
            for reason, _ in rejected:
                reasons[reason] += 1
            preemption[NO_VICTIMS if all(h for _, h in rejected) else NOT_HELPFUL] += 1
            continue
        cpu, memory, _ = _allocatable(node)
        free = ((cpu - load.cpu - requests["requests.cpu"]) / cpu if cpu else 0.0) + \
               ((memory - load.memory - requests["requests.memory"]) / memory if memory else 0.0)
        if best is None or (-free, name) < (-best[0], best[1]):
            best = (free, name)
    if best is not None:
        return best[1], ""
    if total == 0:
        return None, "no nodes available to schedule pods"
    detail = ", ".join(sorted(f"{n} {r}" for r, n in reasons.items()))
    pre = ", ".join(sorted(f"{n} {r}" for r, n in preemption.items()))
    return None, f"0/{total} nodes are available: {detail}. preemption: 0/{total} nodes are available: {pre}."


# --- ResourceQuota ----------------------------------------------------------------------------------------------

QUOTA_ALIASES = {"cpu": "requests.cpu", "memory": "requests.memory"}


def format_quantity(resource: str, value: float) -> str:
    if resource.endswith("memory"):
        if value and value % GiB == 0:
            return f"{int(value // GiB)}Gi"
        return f"{round(value / MiB)}Mi"
    if resource.endswith("cpu"):
        return str(int(value)) if abs(value - round(value)) < 1e-9 else f"{round(value * 1000)}m"
    return str(int(value))


def quota_usage(pod_specs: Iterable[Obj]) -> dict[str, float]:
    used: dict[str, float] = {"pods": 0.0}
    for spec in pod_specs:
        used["pods"] += 1
        for key, value in pod_requests(spec).items():
            used[key] = used.get(key, 0.0) + value
    used["cpu"], used["memory"] = used.get("requests.cpu", 0.0), used.get("requests.memory", 0.0)
    return used


def _listing(resources: list[str], values: Mapping[str, float]) -> str:
    return ",".join(f"{r}={format_quantity(r, values.get(r, 0.0))}" for r in resources)


def quota_rejection(quotas: Iterable[Obj], pod_spec: Obj, used: Mapping[str, float]) -> str | None:
    """The admission error for a new pod, e.g. "exceeded quota: compute, requested: pods=1, used: pods=8,
    limited: pods=8", or None when every quota admits it."""
    requests = {**pod_requests(pod_spec), "pods": 1.0}
    requests["cpu"], requests["memory"] = requests["requests.cpu"], requests["requests.memory"]
    missing = _missing_requests(pod_spec)
    for quota in quotas:
        hard = (quota.get("spec") or {}).get("hard") or {}
        name = quota["metadata"]["name"]
        unspecified = sorted(QUOTA_ALIASES.get(r, r) for r in hard if QUOTA_ALIASES.get(r, r) in missing)
        if unspecified:
            return f"failed quota: {name}: must specify {','.join(unspecified)}"
        over = [r for r in sorted(hard) if r in requests and used.get(r, 0.0) + requests[r] > quantity(hard[r]) + 1e-9]
        if over:
            return (f"exceeded quota: {name}, requested: {_listing(over, requests)}, used: {_listing(over, used)}, "
                    f"limited: {','.join(f'{r}={hard[r]}' for r in over)}")
    return None
