"""The resource quota controller: each quota's usage, recounted when it or its namespace's live pods change."""

from __future__ import annotations

from agent_sre.simulator import scheduling
from agent_sre.simulator.controllers.context import Pass


def reconcile(p: Pass) -> None:
    """Usage against each quota, recounted when the quota or the namespace's live pods change."""
    for quota in p.c.list("resourcequotas"):
        ns = quota["metadata"]["namespace"]
        if not p.everything and ns not in p.touched_ns:
            continue  # no API write of it and none of its namespace's pods changed: as it settled
        pods = p.pods(ns)
        key, uids = ("quota", f"{ns}/{quota['metadata']['name']}"), tuple(pod["metadata"]["uid"] for pod in pods)
        if p.st.settled.get(key) == (quota["metadata"].get("resourceVersion"), uids):
            continue
        hard = (quota.get("spec") or {}).get("hard") or {}
        used = scheduling.quota_usage(pod["spec"] for pod in pods)
        status = {"hard": dict(hard), "used": {r: scheduling.format_quantity(r, used.get(r, 0.0)) for r in hard}}
        if quota.get("status") != status:
            quota = p.write("resourcequotas", {**quota, "status": status})
        p.st.settled[key] = (quota["metadata"].get("resourceVersion"), uids)
