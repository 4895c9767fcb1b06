"""The node lifecycle controller: the unschedulable taint follows `spec.unschedulable` (cordon, uncordon)."""

from __future__ import annotations

from agent_sre.simulator import kubelet, scheduling
from agent_sre.simulator.controllers.context import Pass


def reconcile(p: Pass) -> None:
    """The node lifecycle controller keeps the unschedulable taint in step with `spec.unschedulable`."""
    for node in p.c.list("nodes"):
        spec = node.get("spec") or {}
        taints = spec.get("taints") or []
        has = any(t.get("key") == scheduling.UNSCHEDULABLE_TAINT for t in taints)
        want = bool(spec.get("unschedulable"))
        if has == want:
            continue
        new = {**node, "spec": dict(spec)}
        if want:
            new["spec"]["taints"] = [*taints, {"key": scheduling.UNSCHEDULABLE_TAINT, "effect": "NoSchedule",
                                               "timeAdded": kubelet.stamp(p.now)}]
        else:
            rest = [t for t in taints if t.get("key") != scheduling.UNSCHEDULABLE_TAINT]
            if rest:
                new["spec"]["taints"] = rest
            else:
                new["spec"].pop("taints", None)
        p.write("nodes", new)
        p.event(new, "NodeNotSchedulable" if want else "NodeSchedulable",
                    f"Node {node['metadata']['name']} status is now: "
                    f"{'NodeNotSchedulable' if want else 'NodeSchedulable'}", component="kubelet")
