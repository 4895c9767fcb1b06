"""The ReplicaSet controller (pkg/controller/replicaset): as many pods as the set wants, created within the
namespace's quotas (refusals retried), the surplus deleted worst first, and the set's status."""

from __future__ import annotations

from functools import partial
from typing import Any

from agent_sre.simulator import kubelet, scheduling
from agent_sre.simulator.cluster import Obj, clone
from agent_sre.simulator.controllers.context import Pass
from agent_sre.simulator.controllers.state import stable_suffix, stable_uid

CREATE_RETRY_S = 30.0  # the ReplicaSet controller retries a pod the quota refused


def sync(p: Pass, rs: Obj) -> bool:
    pods = p.pods_of(rs)
    desired = rs["spec"].get("replicas", 0)
    if len(pods) == desired:
        p.st.first_failure.pop((rs["metadata"]["uid"], "FailedCreate"), None)
        return False
    if len(pods) > desired:
        for pod in sorted(pods, key=partial(_deletion_rank, p))[:len(pods) - desired]:
            p.delete_pod(pod)
            p.event(rs, "SuccessfulDelete", f"Deleted pod: {pod['metadata']['name']}",
                        component="replicaset-controller")
        return True
    ns = rs["metadata"]["namespace"]
    quotas = p.c.list("resourcequotas", ns)
    created = False
    for _ in range(desired - len(pods)):
        pod = _new_pod(p, rs)
        if quotas:
            used = scheduling.quota_usage(live["spec"] for live in p.pods(ns))
            rejection = scheduling.quota_rejection(quotas, pod["spec"], used)
            if rejection is not None:
                key = (rs["metadata"]["uid"], "FailedCreate")
                since = p.st.first_failure.setdefault(key, p.now)
                retries = 1 + int((p.now - since + kubelet.TIME_EPSILON_S) // CREATE_RETRY_S)
                p.event(rs, "FailedCreate", f'Error creating: pods "{pod["metadata"]["name"]}" is '
                            f"forbidden: {rejection}", "Warning", component="replicaset-controller",
                            count=retries)
                p.later(since + retries * CREATE_RETRY_S, display=True)
                break
        p.st.pod_counter[rs["metadata"]["uid"]] = p.st.pod_counter.get(rs["metadata"]["uid"], 0) + 1
        p.store("pods", pod)
        p.event(rs, "SuccessfulCreate", f"Created pod: {pod['metadata']['name']}",
                    component="replicaset-controller")
        created = True
    return created


def _deletion_rank(p: Pass, pod: Obj) -> tuple[Any, ...]:
    """The ReplicaSet controller removes unscheduled, then not-ready, then newer pods first."""
    ps = p.st.pods.get((pod["metadata"]["namespace"], pod["metadata"]["name"]))
    scheduled = bool(pod["spec"].get("nodeName"))
    ready = ps is not None and ps.ready
    restarts = sum(c.get("restartCount", 0) for c in (pod.get("status") or {}).get("containerStatuses") or [])
    return (scheduled, ready, -restarts, -(ps.scheduled_at if ps else p.now), pod["metadata"]["name"])


def _new_pod(p: Pass, rs: Obj) -> Obj:
    meta = rs["metadata"]
    n = p.st.pod_counter.get(meta["uid"], 0)
    instance = p.c.model.get("apps", {}).get(meta["namespace"])
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


def status(p: Pass) -> None:
    for rs in p.c.list("replicasets.apps"):
        if not p.everything and rs["metadata"]["uid"] not in p.touched:
            continue
        pods = p.pods_of(rs)
        ready = sum(1 for pod in pods if p.st.pods.get((pod["metadata"]["namespace"], pod["metadata"]["name"]))
                    and p.st.pods[(pod["metadata"]["namespace"], pod["metadata"]["name"])].ready)
        status: Obj = {"replicas": len(pods), "fullyLabeledReplicas": len(pods), "readyReplicas": ready,
                       "availableReplicas": p.available(rs),
                       "observedGeneration": rs["metadata"].get("generation", 1)}
        failure = p.st.first_failure.get((rs["metadata"]["uid"], "FailedCreate"))
        if failure is not None:
            status["conditions"] = [{"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
                                     "lastTransitionTime": kubelet.stamp(failure),
                                     "message": _last_event_message(p, rs, "FailedCreate")}]
        for key in ("readyReplicas", "availableReplicas"):
            if not status[key]:
                del status[key]
        if rs.get("status") != status:
            p.write("replicasets.apps", {**rs, "status": status})


def _last_event_message(p: Pass, obj: Obj, reason: str) -> str:
    ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    events = [e for e in p.c.list("events", ns) if e.get("reason") == reason
              and e.get("involvedObject", {}).get("name") == name]
    return max(events, key=lambda e: e.get("lastTimestamp", ""))["message"] if events else ""
