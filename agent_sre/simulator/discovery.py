"""Discovery documents (`/version`, `/api`, `/apis`, group/version resource lists), built once from the table.

kubectl and the Python client resolve `deploy`, `podchaos` or `top` through these, so they list exactly what the
router serves: the resource table plus the derived read-only resources (metrics, endpoint slices).
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from agent_sre.simulator.derived import DERIVED
from agent_sre.simulator.resources import RESOURCE_TYPES, ResourceType

KUBE_VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.0-agent-sre-sim", "gitCommit": "agent-sre",
                "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.23.0",
                "compiler": "gc", "platform": "linux/amd64"}
# Resources `kubectl get all` expands to (the apiserver's "all" category).
ALL_CATEGORY = frozenset({"pods", "services", "deployments.apps", "replicasets.apps", "jobs.batch", "cronjobs.batch",
                          "horizontalpodautoscalers.autoscaling"})
SUBRESOURCE_VERBS = {"log": ["get"], "status": ["get", "patch", "update"], "scale": ["get", "patch", "update"]}


def _singular(kind: str) -> str:
    return kind.lower()


def _resource_entries(rt: ResourceType) -> list[dict[str, Any]]:
    entry: dict[str, Any] = {"name": rt.plural, "singularName": _singular(rt.kind), "namespaced": rt.namespaced,
                             "kind": rt.kind, "verbs": sorted(rt.verbs + ("deletecollection",))}
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.key in ALL_CATEGORY:
        entry["categories"] = ["all"]
    out = [entry]
    for sub in rt.subresources:
        sub_entry: dict[str, Any] = {"name": f"{rt.plural}/{sub}", "singularName": "", "namespaced": rt.namespaced,
                                     "kind": rt.kind, "verbs": SUBRESOURCE_VERBS[sub]}
        if sub == "scale":
            sub_entry.update(group="autoscaling", version="v1", kind="Scale")
        out.append(sub_entry)
    return out


def _derived_entries(group: str) -> list[dict[str, Any]]:
    return [{"name": d.plural, "singularName": "", "namespaced": d.namespaced, "kind": d.kind,
             "verbs": ["get", "list"]} for d in DERIVED if d.group == group]


def group_versions() -> dict[str, str]:
    """Every served API group (core excluded) and its one version."""
    groups = {rt.group: rt.version for rt in RESOURCE_TYPES if rt.group}
    groups.update({d.group: d.version for d in DERIVED})
    return groups


def _dump(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


@lru_cache
def documents() -> dict[str, bytes]:
    """Path -> serialized discovery document, for every discovery path the router answers."""
    docs: dict[str, dict[str, Any]] = {
        "/version": KUBE_VERSION,
        "/api": {"kind": "APIVersions", "versions": ["v1"],
                 "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}]},
    }
    core = [e for rt in RESOURCE_TYPES if not rt.group for e in _resource_entries(rt)]
    docs["/api/v1"] = {"kind": "APIResourceList", "groupVersion": "v1", "resources": core}
    groups = []
    for group, version in group_versions().items():
        gv = {"groupVersion": f"{group}/{version}", "version": version}
        api_group = {"name": group, "versions": [gv], "preferredVersion": gv}
        groups.append(api_group)
        docs[f"/apis/{group}"] = {"kind": "APIGroup", "apiVersion": "v1", **api_group}
        resources = [e for rt in RESOURCE_TYPES if rt.group == group for e in _resource_entries(rt)]
        resources += _derived_entries(group)
        docs[f"/apis/{group}/{version}"] = {"kind": "APIResourceList", "apiVersion": "v1",
                                            "groupVersion": f"{group}/{version}", "resources": resources}
    docs["/apis"] = {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
    docs.update(_openapi_v3())
    docs["/"] = {"paths": sorted(docs)}
    return {path: _dump(doc) for path, doc in docs.items()}


def _openapi_v3() -> dict[str, dict[str, Any]]:
    """Just enough OpenAPI v3 for kubectl to see that writes accept `fieldValidation`, so `kubectl create -f`
    and `apply -f` validate server-side instead of downloading full schemas the simulator does not have."""
    by_gv: dict[str, list[ResourceType]] = {}
    for rt in RESOURCE_TYPES:
        by_gv.setdefault(f"api/{rt.version}" if not rt.group else f"apis/{rt.group}/{rt.version}", []).append(rt)
    field_validation = {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True}}
    docs: dict[str, dict[str, Any]] = {}
    for gv_path, rts in by_gv.items():
        paths = {}
        for rt in rts:
            scope = f"/{gv_path}/namespaces/{{namespace}}" if rt.namespaced else f"/{gv_path}"
            gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
            paths[f"{scope}/{rt.plural}/{{name}}"] = {"patch": {
                "operationId": f"patch{rt.kind}", "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": gvk, "parameters": [field_validation],
                "responses": {"200": {"description": "OK"}}}}
        docs[f"/openapi/v3/{gv_path}"] = {"openapi": "3.0.0", "info": {"title": "Kubernetes (simulated)",
                                                                      "version": KUBE_VERSION["gitVersion"]},
                                          "paths": paths}
    docs["/openapi/v3"] = {"paths": {gv_path: {"serverRelativeURL": f"/openapi/v3/{gv_path}"}
                                     for gv_path in by_gv}}
    return docs
