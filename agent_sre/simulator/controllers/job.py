"""The job controller (batch/v1), for NonIndexed jobs: pods from the template, at most `parallelism` at a time and
no more than the completions still missing; each pod that ends Succeeded counts towards `completions`, each that
ends Failed towards `backoffLimit` (default 6). Past the limit the job fails (FailureTarget, then Failed:
BackoffLimitExceeded, "Job has reached the specified backoff limit") and its running pods are deleted; with every
completion it completes (SuccessCriteriaMet, then Complete). Status: active, ready, succeeded, failed, startTime,
completionTime, terminating, as the controller writes them; events SuccessfulCreate, SuccessfulDelete, Completed,
BackoffLimitExceeded. A suspended job keeps no pods. Back-off delays between retries are not modelled: a failed
pod is replaced on the next pass.
"""

from __future__ import annotations

import copy

from agent_sre.simulator import kubelet
from agent_sre.simulator.cluster import Obj
from agent_sre.simulator.controllers.context import Pass
from agent_sre.simulator.controllers.state import owner_uid, stable_suffix, stable_uid

RESOURCE = "jobs.batch"
COMPONENT = "job-controller"


def _finished(job: Obj) -> bool:
    return any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or [])


def reconcile(p: Pass) -> bool:
    """Sync every unfinished job; True when pods were created or deleted (the scheduler and kubelet go again)."""
    changed = False
    for job in p.c.list(RESOURCE):
        if not _finished(job):
            changed |= _sync(p, job)
    return changed


def _condition(kind: str, reason: str, message: str, now: float) -> Obj:
    stamp = kubelet.stamp(now)
    return {"type": kind, "status": "True", "lastProbeTime": stamp, "lastTransitionTime": stamp, "reason": reason,
            "message": message}


def _sync(p: Pass, job: Obj) -> bool:
    meta, spec = job["metadata"], job.get("spec") or {}
    ns, uid = meta["namespace"], meta["uid"]
    status = dict(job.get("status") or {})
    pods = [pod for pod in p.c.list("pods", ns) if owner_uid(pod) == uid]
    phases = [(pod.get("status") or {}).get("phase") for pod in pods]
    succeeded, failed = phases.count("Succeeded"), phases.count("Failed")
    active = [pod for pod, phase in zip(pods, phases, strict=True) if phase not in ("Succeeded", "Failed")]
    completions = spec.get("completions")
    wanted_done = completions if completions is not None else 1
    changed = False
    conditions = list(status.get("conditions") or [])
    if failed > spec.get("backoffLimit", 6):
        for pod in active:
            p.delete_pod(pod)
            p.event(job, "SuccessfulDelete", f"Deleted pod: {pod['metadata']['name']}", component=COMPONENT)
        active, changed = [], bool(active)
        message = "Job has reached the specified backoff limit"
        conditions += [_condition("FailureTarget", "BackoffLimitExceeded", message, p.now),
                       _condition("Failed", "BackoffLimitExceeded", message, p.now)]
        p.event(job, "BackoffLimitExceeded", message, "Warning", component=COMPONENT)
    elif succeeded >= wanted_done:
        for pod in active:
            p.delete_pod(pod)
        active = []
        conditions += [_condition("SuccessCriteriaMet", "CompletionsReached", "Reached expected number of "
                                  "succeeded pods", p.now),
                       _condition("Complete", "CompletionsReached", "Reached expected number of succeeded pods",
                                  p.now)]
        status["completionTime"] = kubelet.stamp(p.now)
        p.event(job, "Completed", "Job completed", component=COMPONENT)
    elif spec.get("suspend"):
        for pod in active:
            p.delete_pod(pod)
        active, changed = [], bool(active)
    else:
        missing = min(spec.get("parallelism", 1), wanted_done - succeeded) - len(active)
        for _ in range(max(0, missing)):
            active.append(_create_pod(p, job))
            changed = True
    if not spec.get("suspend"):
        status.setdefault("startTime", kubelet.stamp(p.now))
    status.update(active=len(active), succeeded=succeeded, failed=failed, terminating=0,
                  ready=sum(1 for pod in active if p.st.pods.get((ns, pod["metadata"]["name"])) is not None
                            and p.st.pods[(ns, pod["metadata"]["name"])].ready),
                  uncountedTerminatedPods={})
    if conditions:
        status["conditions"] = conditions
    for key in ("active", "succeeded", "failed"):
        if not status[key]:
            del status[key]
    if status != (job.get("status") or {}):
        p.write(RESOURCE, {**job, "status": status})
    return changed


def _create_pod(p: Pass, job: Obj) -> Obj:
    meta = job["metadata"]
    ns = meta["namespace"]
    count = p.st.pod_counter.get(meta["uid"], 0)
    p.st.pod_counter[meta["uid"]] = count + 1
    name = f"{meta['name']}-{stable_suffix(meta['uid'], count)}"
    template = copy.deepcopy((job.get("spec") or {}).get("template") or {})
    pod: Obj = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "uid": stable_uid(ns, name, meta["uid"]),
                     "labels": dict((template.get("metadata") or {}).get("labels") or {}),
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"],
                                          "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}]},
        "spec": template.get("spec") or {},
        "status": {"phase": "Pending", "qosClass": kubelet.qos_class(template.get("spec") or {})},
    }
    created = p.store("pods", pod)
    p.event(job, "SuccessfulCreate", f"Created pod: {name}", component=COMPONENT)
    return created
