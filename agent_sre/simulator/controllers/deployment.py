"""The deployment controller (pkg/controller/deployment): syncDeployment - a new ReplicaSet per pod template,
rolling or recreating within the strategy's bounds, proportional scaling, revision history - and the status
syncRolloutStatus reports, Progressing and its deadline included. The arithmetic is `kube/deployments.py`."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from agent_sre.kube import deployments
from agent_sre.simulator import kubelet
from agent_sre.simulator.cluster import Obj, clone
from agent_sre.simulator.controllers.context import Pass
from agent_sre.simulator.controllers.state import safe_encode, stable_uid
from agent_sre.simulator.kubelet import INF

REVISION = deployments.REVISION
HASH_LABEL = "pod-template-hash"


def _max_revision(sets: list[Obj]) -> int:
    return max((int((r["metadata"].get("annotations") or {}).get(REVISION, "0")) for r in sets), default=0)


class _Conditions:
    """A status's conditions, changed as SetDeploymentCondition does: the same status and reason leave a condition
    alone; a new reason keeps its lastTransitionTime; a changed condition moves to the end of the list."""

    def __init__(self, items: list[Obj], now: float) -> None:
        self.items, self.stamp = [dict(c) for c in items], kubelet.stamp(now)

    def get(self, kind: str) -> Obj | None:
        return next((c for c in self.items if c.get("type") == kind), None)

    def remove(self, kind: str) -> None:
        self.items = [c for c in self.items if c.get("type") != kind]

    def put(self, condition: Obj) -> None:
        self.remove(condition["type"])
        self.items.append(condition)

    def set(self, kind: str, status: str, reason: str, message: str, at: float | None = None) -> None:
        current = self.get(kind)
        if current is not None and current.get("status") == status and current.get("reason") == reason:
            return
        self.renew(kind, status, reason, message, at)

    def renew(self, kind: str, status: str, reason: str, message: str, at: float | None = None) -> None:
        """Record the condition as of now (or `at`), even with an unchanged reason (Progressing renews on each
        progress)."""
        current = self.get(kind)
        stamp = self.stamp if at is None else kubelet.stamp(at)
        since = current["lastTransitionTime"] if current is not None and current.get("status") == status else stamp
        self.put({"type": kind, "status": status, "lastUpdateTime": stamp, "lastTransitionTime": since,
                  "reason": reason, "message": message})


def _template_hash(p: Pass, dep: Obj) -> str:
    key = (dep["metadata"]["uid"], dep["metadata"].get("generation", 1))
    value = p.st.hashes.get(key)
    if value is None:
        template = dep["spec"]["template"]
        text = json.dumps(template, sort_keys=True, separators=(",", ":"))
        value = p.st.hashes[key] = safe_encode(hashlib.blake2b(text.encode(), digest_size=16).digest(), 10)
    return value


def _figures(p: Pass, rs: Obj) -> deployments.ReplicaSetFigures:
    meta = rs["metadata"]
    most = (meta.get("annotations") or {}).get(deployments.MAX_REPLICAS, "")
    return deployments.ReplicaSetFigures(meta["name"], rs["spec"].get("replicas", 0), p.available(rs),
                                         (meta.get("creationTimestamp", ""), meta["name"]),
                                         int(most) if most.isdigit() else None)


def _replica_annotations(dep: Obj) -> dict[str, str]:
    spec = dep["spec"]
    replicas = spec.get("replicas", 1)
    return {deployments.DESIRED_REPLICAS: str(replicas),
            deployments.MAX_REPLICAS: str(replicas + deployments.max_surge(spec))}


def _copied_annotations(dep: Obj) -> dict[str, str]:
    """The deployment's annotations its new ReplicaSet carries (the change-cause, for rollout history)."""
    return {k: v for k, v in (dep["metadata"].get("annotations") or {}).items()
            if k not in deployments.NOT_COPIED}


def _create_replicaset(p: Pass, dep: Obj, pod_hash: str, olds: list[Obj]) -> Obj:
    meta, spec = dep["metadata"], dep["spec"]
    template = clone(spec["template"])
    template.setdefault("metadata", {}).setdefault("labels", {})[HASH_LABEL] = pod_hash
    selector = clone(spec["selector"])
    selector.setdefault("matchLabels", {})[HASH_LABEL] = pod_hash
    name = f"{meta['name']}-{pod_hash}"
    empty = deployments.ReplicaSetFigures(name, 0, 0, ("", name))
    replicas = deployments.new_replicas(spec, [_figures(p, r) for r in olds], empty)
    annotations = {**_copied_annotations(dep), REVISION: str(_max_revision(olds) + 1),
                   **_replica_annotations(dep)}
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
          "metadata": {"name": name, "namespace": meta["namespace"],
                       "uid": stable_uid(meta["namespace"], "rs", name),
                       "labels": dict(template["metadata"]["labels"]), "annotations": annotations,
                       "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": meta["name"],
                                            "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}]},
          "spec": {"replicas": replicas, "minReadySeconds": spec.get("minReadySeconds", 0),
                   "selector": selector, "template": template},
          "status": {"replicas": 0, "observedGeneration": 1}}
    rs = p.store("replicasets.apps", rs)
    p.created[meta["uid"]] = name
    if replicas:
        p.event(dep, "ScalingReplicaSet", f"Scaled up replica set {name} to {replicas}",
                    component="deployment-controller")
    return rs


def _sync_new_replicaset(p: Pass, dep: Obj, rs: Obj, olds: list[Obj]) -> Obj:
    """An existing new ReplicaSet takes the deployment's annotations and minReadySeconds, and becomes the newest
    revision again after a rollback, remembering the revisions it had (revision-history)."""
    meta = rs["metadata"]
    annotations = dict(meta.get("annotations") or {})
    annotations.update(_copied_annotations(dep))
    revision, newest = annotations.get(REVISION, ""), _max_revision(olds) + 1
    if int(revision or 0) < newest:
        annotations[REVISION] = str(newest)
        if revision:
            history = annotations.get(deployments.REVISION_HISTORY)
            annotations[deployments.REVISION_HISTORY] = f"{history},{revision}" if history else revision
    min_ready = dep["spec"].get("minReadySeconds", 0)
    if annotations == meta.get("annotations") and rs["spec"].get("minReadySeconds", 0) == min_ready:
        return rs
    return p.write("replicasets.apps", {**rs, "metadata": {**meta, "annotations": annotations},
                                            "spec": {**rs["spec"], "minReadySeconds": min_ready}})


def _scale(p: Pass, dep: Obj, rs: Obj, replicas: int) -> Obj:
    """Resize a ReplicaSet, stamping the deployment's size on it (what tells a later scaling event apart)."""
    old = rs["spec"].get("replicas", 0)
    annotations = {**(rs["metadata"].get("annotations") or {}), **_replica_annotations(dep)}
    if old == replicas and annotations == rs["metadata"].get("annotations"):
        return rs
    rs = p.write("replicasets.apps", {**rs, "metadata": {**rs["metadata"], "annotations": annotations},
                                          "spec": {**rs["spec"], "replicas": replicas}})
    if old != replicas:
        p.event(dep, "ScalingReplicaSet", f"Scaled {'up' if replicas > old else 'down'} replica set "
                    f"{rs['metadata']['name']} to {replicas} from {old}", component="deployment-controller")
    return rs


def sync(p: Pass, dep: Obj) -> bool:
    """One sync of the deployment controller (syncDeployment); True when it changed a ReplicaSet. Skipped while
    the deployment, its ReplicaSets and their available pods are as they were when it last changed nothing."""
    meta = dep["metadata"]
    owned = p.owned_replicasets(meta["uid"])
    inputs = (meta.get("resourceVersion"), tuple((r["metadata"].get("resourceVersion"), p.available(r),
                                                   len(p.pods_of(r))) for r in owned))
    if p.st.settled.get(("deployment", meta["uid"])) == inputs:
        return False
    if _sync_now(p, dep, owned):
        return True
    p.st.settled[("deployment", meta["uid"])] = inputs
    return False


def _sync_now(p: Pass, dep: Obj, owned: list[Obj]) -> bool:
    before = p.c.revision
    spec = dep["spec"]
    pod_hash = _template_hash(p, dep)
    new = next((r for r in owned if (r["metadata"].get("labels") or {}).get(HASH_LABEL) == pod_hash), None)
    olds = [r for r in owned if r is not new]
    if new is not None:
        new = _sync_new_replicaset(p, dep, new, olds)
    recreate = (spec.get("strategy") or {}).get("type") == "Recreate"
    if spec.get("paused") or _scaling_event(dep, [new, *olds]):
        _scale_to_size(p, dep, new, olds)
    elif recreate:
        _recreate(p, dep, new, olds, pod_hash)
    else:
        _roll(p, dep, new, olds, pod_hash)
    _sync_revision(p, dep, pod_hash)
    return p.c.revision != before


def _sync_revision(p: Pass, dep: Obj, pod_hash: str) -> None:
    """The deployment's revision annotation follows its new ReplicaSet's."""
    rs = p.c.get("replicasets.apps", dep["metadata"]["namespace"], f"{dep['metadata']['name']}-{pod_hash}")
    revision = ((rs or {}).get("metadata", {}).get("annotations") or {}).get(REVISION)
    annotations = dep["metadata"].get("annotations") or {}
    if revision is not None and annotations.get(REVISION) != revision:
        p.write("deployments.apps", {**dep, "metadata": {**dep["metadata"],
                                                             "annotations": {**annotations, REVISION: revision}}})


def _scaling_event(dep: Obj, sets: list[Obj | None]) -> bool:
    """The deployment was resized since its active ReplicaSets were last stamped (isScalingEvent)."""
    size = str(dep["spec"].get("replicas", 1))
    for rs in sets:
        if rs is not None and rs["spec"].get("replicas", 0) > 0:
            desired = (rs["metadata"].get("annotations") or {}).get(deployments.DESIRED_REPLICAS)
            if desired is not None and desired != size:
                return True
    return False


def _scale_to_size(p: Pass, dep: Obj, new: Obj | None, olds: list[Obj]) -> None:
    """A scaling event (or a paused deployment): the one active set takes the new size; mid-rollout, every
    active set grows or shrinks in proportion (`scale` upstream)."""
    spec = dep["spec"]
    replicas = spec.get("replicas", 1)
    newest_first = sorted(olds, key=lambda r: (r["metadata"].get("creationTimestamp", ""), r["metadata"]["name"]),
                          reverse=True)
    active = [r for r in [*newest_first, new] if r is not None and r["spec"].get("replicas", 0) > 0]
    if len(active) <= 1:
        target = active[0] if active else new if new is not None else next(iter(newest_first), None)
        if target is not None:
            _scale(p, dep, target, replicas)
        return
    if new is not None and new["spec"].get("replicas", 0) == replicas and p.available(new) == replicas:
        for old in active:
            if old is not new:
                _scale(p, dep, old, 0)
        return
    if (spec.get("strategy") or {}).get("type") == "Recreate":
        return
    sizes = deployments.proportional(spec, [_figures(p, r) for r in active],
                                     (dep.get("status") or {}).get("replicas", 0))
    for rs in active:
        _scale(p, dep, rs, sizes.get(rs["metadata"]["name"], rs["spec"].get("replicas", 0)))


def _roll(p: Pass, dep: Obj, new: Obj | None, olds: list[Obj], pod_hash: str) -> None:
    """RollingUpdate (rolloutRolling): grow the new set within maxSurge, then shrink old sets within
    maxUnavailable; one step per sync, as the controller returns after each change."""
    spec = dep["spec"]
    replicas = spec.get("replicas", 1)
    if new is None:
        new = _create_replicaset(p, dep, pod_hash, olds)
    size = new["spec"].get("replicas", 0)
    if size > replicas:
        _scale(p, dep, new, replicas)
        return
    if size < replicas:
        grown = deployments.new_replicas(spec, [_figures(p, r) for r in [new, *olds]], _figures(p, new))
        if grown != size:
            _scale(p, dep, new, grown)
            return
    sizes = deployments.scale_down_olds(spec, _figures(p, new), [_figures(p, r) for r in olds])
    for old in olds:
        if old["metadata"]["name"] in sizes:
            _scale(p, dep, old, sizes[old["metadata"]["name"]])
    if not sizes and deployments.complete(spec, dep.get("status") or {}, dep["metadata"].get("generation", 1)):
        _prune_history(p, olds, spec.get("revisionHistoryLimit", 10))


def _recreate(p: Pass, dep: Obj, new: Obj | None, olds: list[Obj], pod_hash: str) -> None:
    """Recreate (rolloutRecreate): every old pod goes before the new ReplicaSet gets any."""
    spec = dep["spec"]
    active = [r for r in olds if r["spec"].get("replicas", 0) > 0]
    if active:
        for old in active:
            _scale(p, dep, old, 0)
        return
    if any(p.pods_of(r) for r in olds):
        return
    if new is None:
        new = _create_replicaset(p, dep, pod_hash, olds)
    _scale(p, dep, new, spec.get("replicas", 1))
    if deployments.complete(spec, dep.get("status") or {}, dep["metadata"].get("generation", 1)):
        _prune_history(p, olds, spec.get("revisionHistoryLimit", 10))


def _prune_history(p: Pass, olds: list[Obj], limit: int) -> None:
    """Old ReplicaSets beyond `revisionHistoryLimit` are deleted, lowest revision first, if scaled to zero and
    without pods (cleanupDeployment)."""
    by_revision = sorted(olds, key=lambda r: int((r["metadata"].get("annotations") or {}).get(REVISION, "0")))
    for rs in by_revision[:max(0, len(olds) - limit)]:
        if rs["spec"].get("replicas") or p.pods_of(rs):
            continue
        p.remove("replicasets.apps", rs)


def status(p: Pass) -> None:
    """Each deployment's status as syncRolloutStatus computes it: counts summed over its ReplicaSets, Available
    against `replicas - maxUnavailable`, Progressing renewed on progress and timed out after
    progressDeadlineSeconds without any, and the ReplicaSets' ReplicaFailure."""
    for dep in p.c.list("deployments.apps"):
        meta = dep["metadata"]
        uid = meta["uid"]
        settled = p.st.settled.get(("deployment-status", uid))
        if settled is not None and uid not in p.created and p.now < settled[1] and \
                (not p.everything and uid not in p.touched
                 or settled[0] == _status_inputs(p, dep)):  # untouched: its inputs are as they settled
            p.later(settled[1], display=True)
            continue
        owned = p.owned_replicasets(uid)
        wake = _status_of(p, dep, owned)
        dep = p.c.get("deployments.apps", meta["namespace"], meta["name"]) or dep
        p.st.settled[("deployment-status", uid)] = (_status_inputs(p, dep), wake)


def _status_inputs(p: Pass, dep: Obj) -> tuple[Any, ...]:
    """What a deployment's status follows from: its own version and its ReplicaSets'."""
    return (dep["metadata"].get("resourceVersion"),
            tuple(r["metadata"].get("resourceVersion") for r in p.owned_replicasets(dep["metadata"]["uid"])))


def _status_of(p: Pass, dep: Obj, owned: list[Obj]) -> float:
    """Write one deployment's status; returns when it changes next by itself (its progress deadline)."""
    meta, spec = dep["metadata"], dep["spec"]
    generation = meta.get("generation", 1)
    name = f"{meta['name']}-{_template_hash(p, dep)}"
    new = next((r for r in owned if r["metadata"]["name"] == name), None)
    replicas = spec.get("replicas", 1)

    def total(key: str, sets: list[Obj]) -> int:
        return sum((r.get("status") or {}).get(key, 0) for r in sets)

    available = total("availableReplicas", owned)
    status: Obj = {"observedGeneration": generation, "replicas": total("replicas", owned),
                   "updatedReplicas": total("replicas", [new] if new else []),
                   "readyReplicas": total("readyReplicas", owned), "availableReplicas": available,
                   "unavailableReplicas": max(0, sum(r["spec"].get("replicas", 0) for r in owned) - available)}
    old = dep.get("status") or {}
    conditions = _Conditions(old.get("conditions") or [], p.now)
    if available >= replicas - deployments.max_unavailable(spec):
        conditions.set("Available", "True", "MinimumReplicasAvailable", "Deployment has minimum availability.")
    else:
        conditions.set("Available", "False", "MinimumReplicasUnavailable",
                       "Deployment does not have minimum availability.")
    wake = INF
    if spec.get("progressDeadlineSeconds") is not None:
        wake = _progressing(p, dep, conditions, old, status, new)
    else:
        conditions.remove("Progressing")
    failures = [c for r in ([new] if new else []) or owned for c in (r.get("status") or {}).get("conditions")
                or [] if c.get("type") == "ReplicaFailure"]
    failures = failures or [c for r in owned for c in (r.get("status") or {}).get("conditions") or []
                            if c.get("type") == "ReplicaFailure"]
    if failures:
        conditions.put({**failures[0], "lastUpdateTime": failures[0].get("lastTransitionTime")})
    else:
        conditions.remove("ReplicaFailure")
    status["conditions"] = conditions.items
    for key in ("replicas", "updatedReplicas", "readyReplicas", "availableReplicas", "unavailableReplicas"):
        if not status[key]:
            del status[key]
    if old != status:
        p.write("deployments.apps", {**dep, "status": status})
    return wake


def _progressing(p: Pass, dep: Obj, conditions: _Conditions, old: Obj, status: Obj, new: Obj | None) -> float:
    """Update the Progressing condition as syncRolloutStatus does; returns the progress deadline while it is
    pending, counted from the condition's last update (DeploymentTimedOut)."""
    meta, spec = dep["metadata"], dep["spec"]
    uid = meta["uid"]
    current = conditions.get("Progressing")
    if spec.get("paused"):
        if (current or {}).get("reason") != "DeploymentPaused":
            conditions.set("Progressing", "Unknown", "DeploymentPaused", "Deployment is paused")
        return INF
    if (current or {}).get("reason") == "DeploymentPaused":  # the deadline counts from the resume
        conditions.set("Progressing", "Unknown", "DeploymentResumed", "Deployment is resumed")
        p.st.progress[uid] = p.now
    subject = f'ReplicaSet "{new["metadata"]["name"]}"' if new else f'Deployment "{meta["name"]}"'
    if uid in p.created:
        conditions.set("Progressing", "True", "NewReplicaSetCreated", f'Created new replica set "{p.created[uid]}"')
        p.st.progress[uid] = p.now
    current = conditions.get("Progressing")
    if status["replicas"] == status["updatedReplicas"] and (current or {}).get("reason") == "NewReplicaSetAvailable":
        return INF
    if deployments.complete(spec, status, meta.get("generation", 1)):
        conditions.set("Progressing", "True", "NewReplicaSetAvailable", f"{subject} has successfully progressed.")
        return INF
    if deployments.progressed({**old, "updatedReplicas": 0} if uid in p.created else old, status):
        conditions.renew("Progressing", "True", "ReplicaSetUpdated", f"{subject} is progressing.")
        p.st.progress[uid] = p.now
    elif (conditions.get("Progressing") or {}).get("reason") in ("NewReplicaSetAvailable",
                                                                  "ProgressDeadlineExceeded"):
        return INF  # DeploymentTimedOut: a finished rollout never times out (nor a rollback before it progresses)
    deadline: float = p.st.progress.setdefault(uid, p.now) + spec["progressDeadlineSeconds"]
    if p.now + kubelet.TIME_EPSILON_S >= deadline:  # stamped when it timed out, however late we look
        conditions.set("Progressing", "False", "ProgressDeadlineExceeded", f"{subject} has timed out progressing.",
                       at=deadline)
        return INF
    p.later(deadline, display=True)
    return deadline
