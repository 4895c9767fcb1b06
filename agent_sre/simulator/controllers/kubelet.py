"""The kubelets: each bound pod is synced (`simulator/kubelet.py`: containers started, probed, restarted with
back-off) and its status written; a pod running quietly and untouched is skipped."""

from __future__ import annotations

from functools import partial

from agent_sre.simulator import kubelet
from agent_sre.simulator.controllers.context import Pass
from agent_sre.simulator.kubelet import INF, PodState


def reconcile(p: Pass) -> None:
    for pod in p.pods():
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        if key in p.synced or not pod["spec"].get("nodeName"):
            continue
        p.synced.add(key)
        ps = p.st.pods.get(key)
        if ps is None:  # bound by someone else (a pod created with nodeName): the kubelet starts it now
            node = p.c.get("nodes", "", pod["spec"]["nodeName"])
            if node is None:
                continue
            ps = p.st.pods[key] = PodState(node=node["metadata"]["name"], ip=p.pod_ip(node), host_ip="",
                                              scheduled_at=p.now)
        effects = p.effects.get(key)
        if effects is None and ps.quiet_rv == meta.get("resourceVersion"):
            continue  # running, ready and untouched since the last pass: nothing about it can have changed
        status, ready, nxt, display = kubelet.sync_pod(pod, ps, partial(p.view, key[0]), p.now,
                                                       p.kubelet_event,
                                                       pod_failure=effects is not None and effects.failure,
                                                       reread=p.full)
        p.later(nxt)
        p.later(display, display=True)
        if pod.get("status") != status:
            pod = p.write("pods", {**pod, "status": status})
        quiet = ready and effects is None and nxt == INF and display == INF and all(
            r.outcome.kind in ("run", "complete") for r in ps.runs.values())
        ps.quiet_rv = pod["metadata"].get("resourceVersion") if quiet else None
