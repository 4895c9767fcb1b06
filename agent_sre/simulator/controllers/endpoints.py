"""The endpoints controller: each Service's Endpoints from the pods its selector picks, ready and not, per
resolved port set; a Service is looked at again only when it, its Endpoints or pods it may select changed."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from agent_sre.simulator.cluster import Obj
from agent_sre.simulator.controllers.context import Pass
from agent_sre.simulator.controllers.state import stable_uid


def _by_label(p: Pass, ns: str, key: str) -> dict[str, list[Obj]]:
    out: dict[str, list[Obj]] = defaultdict(list)
    for pod in p.pods(ns):
        value = (pod["metadata"].get("labels") or {}).get(key)
        if value is not None:
            out[value].append(pod)
    return out


def reconcile(p: Pass) -> None:
    """The endpoints controller, per Service, skipped while the Service, its Endpoints and the readiness,
    placement and labels of the pods it may select are as they were last time."""
    services: dict[str, list[Obj]] = defaultdict(list)
    for svc in p.c.list("services"):
        services[svc["metadata"]["namespace"]].append(svc)
    if p.signal_inputs:  # an API request may have deleted a Service (or written an Endpoints)
        for ep in p.c.list("endpoints"):
            if p.c.get("services", ep["metadata"]["namespace"], ep["metadata"]["name"]) is None:
                p.c.delete("endpoints", ep["metadata"]["namespace"], ep["metadata"]["name"])
    for ns, items in services.items():
        if not p.everything and ns not in p.touched_ns:
            continue  # no API write of it, its Services or Endpoints, and none of its pods changed: as it was
        by_app = _by_label(p, ns, "app")
        every_service = p.everything or ns in p.written_ns
        for svc in items:
            selector = (svc.get("spec") or {}).get("selector") or {}
            if not every_service and "app" in selector and (ns, selector["app"]) not in p.touched_apps:
                continue  # none of the pods it may select changed (nor it, nor its Endpoints): as it was
            key = ("endpoints", ns, svc["metadata"]["name"])
            if p.st.settled.get(key) == _inputs(p, svc, by_app):
                continue
            _endpoints_of(p, svc, by_app)
            p.st.settled[key] = _inputs(p, svc, by_app)


def _candidates(p: Pass, svc: Obj, by_app: dict[str, list[Obj]]) -> list[Obj]:
    """The pods a Service's selector may select: those of its app, or all of its namespace's."""
    selector = (svc.get("spec") or {}).get("selector") or {}
    return by_app.get(selector["app"], []) if "app" in selector else p.pods(svc["metadata"]["namespace"])


def _inputs(p: Pass, svc: Obj, by_app: dict[str, list[Obj]]) -> tuple[Any, ...]:
    meta = svc["metadata"]
    ns = meta["namespace"]
    pods = []
    for pod in _candidates(p, svc, by_app):
        ps = p.st.pods.get((ns, pod["metadata"]["name"]))
        pods.append((pod["metadata"]["name"], pod["spec"].get("nodeName"), ps.ready if ps else None,
                     pod["metadata"].get("labels")))
    endpoints = p.c.get("endpoints", ns, meta["name"])
    return meta.get("resourceVersion"), tuple(pods), endpoints and endpoints["metadata"].get("resourceVersion")


def _endpoints_of(p: Pass, svc: Obj, by_app: dict[str, list[Obj]]) -> None:
    meta, spec = svc["metadata"], svc.get("spec") or {}
    selector = spec.get("selector")
    if not selector:
        return
    ns = meta["namespace"]
    groups: dict[tuple[tuple[str, int, str], ...], dict[str, list[Obj]]] = {}
    for pod in _candidates(p, svc, by_app):
        ps = p.st.pods.get((ns, pod["metadata"]["name"]))
        if ps is None or not pod["spec"].get("nodeName"):
            continue
        labels = pod["metadata"].get("labels") or {}
        if any(labels.get(k) != v for k, v in selector.items()):
            continue
        ports = _resolve_ports(spec.get("ports") or [], pod)
        if ports is None:
            continue
        address = {"ip": ps.ip, "nodeName": ps.node, "targetRef": {
            "kind": "Pod", "namespace": ns, "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}}
        group = groups.setdefault(ports, {"addresses": [], "notReadyAddresses": []})
        group["addresses" if ps.ready else "notReadyAddresses"].append(address)
    subsets = []
    for ports, group in sorted(groups.items()):
        subset: Obj = {k: sorted(v, key=lambda a: a["ip"]) for k, v in group.items() if v}
        subset["ports"] = [{"name": n, "port": p, "protocol": proto} if n else {"port": p, "protocol": proto}
                           for n, p, proto in ports]
        subsets.append(subset)
    existing = p.c.get("endpoints", ns, meta["name"])
    body: Obj = {"apiVersion": "v1", "kind": "Endpoints",
                 "metadata": {"name": meta["name"], "namespace": ns, "labels": dict(meta.get("labels") or {})}}
    if subsets:
        body["subsets"] = subsets
    if existing is None:
        body["metadata"]["uid"] = stable_uid(ns, "endpoints", meta["name"])
        p.store("endpoints", body)
        p.endpoints_changed = True
    elif existing.get("subsets") != body.get("subsets"):
        body["metadata"] = {**existing["metadata"], "labels": body["metadata"]["labels"]}
        p.write("endpoints", body)
        p.endpoints_changed = True


def _resolve_ports(ports: list[Obj], pod: Obj) -> tuple[tuple[str, int, str], ...] | None:
    """The endpoint ports for a pod: a named targetPort the pod does not declare leaves the pod out."""
    named: dict[str, Any] = {p["name"]: p.get("containerPort") for c in pod["spec"].get("containers") or []
             for p in c.get("ports") or [] if p.get("name")}
    out = []
    for port in ports:
        target: Any = port.get("targetPort", port.get("port"))
        if isinstance(target, str) and not target.isdigit():
            if target not in named:
                return None
            target = named[target]
        out.append((port.get("name", ""), int(target), port.get("protocol", "TCP")))
    return tuple(out)
