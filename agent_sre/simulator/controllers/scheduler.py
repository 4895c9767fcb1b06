"""The scheduler: binds each pending pod to a node that fits it (`simulator/scheduling.py`), or reports why none
does and retries."""

from __future__ import annotations

from collections import defaultdict
from functools import partial

from agent_sre.simulator import kubelet, scheduling
from agent_sre.simulator.controllers.context import Pass
from agent_sre.simulator.kubelet import PodState

SCHEDULE_RETRY_S = 60.0  # the scheduler retries an unschedulable pod


def reconcile(p: Pass) -> None:
    pending = [pod for pod in p.pods() if not pod["spec"].get("nodeName")]
    if not pending:
        return
    nodes = sorted(p.c.list("nodes"), key=lambda n: n["metadata"]["name"])
    loads: dict[str, scheduling.NodeLoad] = defaultdict(scheduling.NodeLoad)
    for pod in p.pods():
        node = pod["spec"].get("nodeName")
        if node:
            req = scheduling.pod_requests(pod["spec"])
            load = loads[node]
            load.cpu += req["requests.cpu"]
            load.memory += req["requests.memory"]
            load.pods += 1
    for pod in pending:
        meta = pod["metadata"]
        refused = scheduling.claim_rejection(pod["spec"], partial(p.c.get, "persistentvolumeclaims", meta["namespace"]))
        node, message = (None, scheduling.prefilter_failure(refused, len(nodes))) if refused else \
            scheduling.schedule(pod["spec"], nodes, loads)
        key = (meta["namespace"], meta["name"])
        if node is None:
            since = p.st.first_failure.setdefault((meta["uid"], "FailedScheduling"), p.now)
            status = {"phase": "Pending", "qosClass": kubelet.qos_class(pod["spec"]), "conditions": [
                {"type": "PodScheduled", "status": "False", "lastProbeTime": None,
                 "lastTransitionTime": kubelet.stamp(since), "reason": "Unschedulable", "message": message}]}
            if pod.get("status") != status:
                p.write("pods", {**pod, "status": status})
            attempts = 1 + int((p.now - since + kubelet.TIME_EPSILON_S) // SCHEDULE_RETRY_S)
            p.event(pod, "FailedScheduling", message, "Warning", component="default-scheduler",
                        count=attempts)
            p.later(since + attempts * SCHEDULE_RETRY_S, display=True)
            continue
        p.st.first_failure.pop((meta["uid"], "FailedScheduling"), None)
        req = scheduling.pod_requests(pod["spec"])
        loads[node].cpu += req["requests.cpu"]
        loads[node].memory += req["requests.memory"]
        loads[node].pods += 1
        node_obj = next(n for n in nodes if n["metadata"]["name"] == node)
        p.st.pods[key] = PodState(node=node, ip=p.pod_ip(node_obj), host_ip=next(
            (a["address"] for a in (node_obj.get("status") or {}).get("addresses") or []
             if a.get("type") == "InternalIP"), ""), scheduled_at=p.now)
        p.write("pods", {**pod, "spec": {**pod["spec"], "nodeName": node}})
        p.event(pod, "Scheduled", f"Successfully assigned {meta['namespace']}/{meta['name']} to {node}",
                    component="default-scheduler")
