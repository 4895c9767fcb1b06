"""Read-only APIs computed from stored state rather than stored themselves.

- metrics.k8s.io/v1beta1 PodMetrics and NodeMetrics, from the workload model's usage figures
  (`cluster.model["usage"]`, `cluster.model["node_usage"]`), for `kubectl top`;
- discovery.k8s.io/v1 EndpointSlices, mirrored from Endpoints as the EndpointSlice controller does, because
  `kubectl describe service` reads slices, not Endpoints.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from agent_sre.kube.times import rfc3339
from agent_sre.simulator.cluster import Cluster, Obj

METRICS_GROUP = "metrics.k8s.io"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"

Builder = Callable[[Cluster, "str | None"], list[Obj]]


@dataclass(frozen=True)
class DerivedResource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    error_name: str  # how the apiserver names the resource in "not found" messages
    build: Builder  # (cluster, namespace or None for all) -> items

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}"


def _usage(cpu_millicores: float, memory_bytes: float) -> dict[str, str]:
    return {"cpu": f"{round(cpu_millicores)}m", "memory": f"{round(memory_bytes / 1024)}Ki"}


def pod_metrics(cluster: Cluster, namespace: str | None) -> list[Obj]:
    """One PodMetrics per pod with usage figures; pods without figures are left out, as metrics-server does."""
    usage: dict[tuple[str, str], dict[str, tuple[float, float]]] = cluster.model.get("usage", {})
    now = rfc3339(cluster.clock.now())
    items = []
    for pod in cluster.list("pods", namespace):
        meta = pod["metadata"]
        figures = usage.get((meta["namespace"], meta["name"]))
        if figures is None:
            continue
        items.append({"kind": "PodMetrics", "apiVersion": f"{METRICS_GROUP}/v1beta1",
                      "metadata": {"name": meta["name"], "namespace": meta["namespace"],
                                   "labels": meta.get("labels") or {}, "creationTimestamp": now},
                      "timestamp": now, "window": "30s",
                      "containers": [{"name": c, "usage": _usage(cpu, mem)} for c, (cpu, mem) in figures.items()]})
    return items


def node_metrics(cluster: Cluster, namespace: str | None) -> list[Obj]:
    usage: dict[str, tuple[float, float]] = cluster.model.get("node_usage", {})
    now = rfc3339(cluster.clock.now())
    items = []
    for node in cluster.list("nodes"):
        name = node["metadata"]["name"]
        if name in usage:
            items.append({"kind": "NodeMetrics", "apiVersion": f"{METRICS_GROUP}/v1beta1",
                          "metadata": {"name": name, "labels": node["metadata"].get("labels") or {},
                                       "creationTimestamp": now},
                          "timestamp": now, "window": "30s", "usage": _usage(*usage[name])})
    return items


def _slice_endpoints(addresses: list[Obj], ready: bool) -> list[Obj]:
    out = []
    for address in addresses:
        endpoint: Obj = {"addresses": [address.get("ip", "")],
                         "conditions": {"ready": ready, "serving": ready, "terminating": False}}
        for field in ("targetRef", "nodeName", "hostname"):
            if address.get(field):
                endpoint[field] = address[field]
        out.append(endpoint)
    return out


def endpoint_slices(cluster: Cluster, namespace: str | None) -> list[Obj]:
    """One slice per Endpoints subset, named and labelled as the EndpointSlice controller would."""
    items = []
    for ep in cluster.list("endpoints", namespace):
        meta = ep["metadata"]
        for i, subset in enumerate(ep.get("subsets") or [{}]):
            items.append({
                "kind": "EndpointSlice", "apiVersion": "discovery.k8s.io/v1",
                "metadata": {"name": f"{meta['name']}-{i}", "namespace": meta["namespace"],
                             "uid": f"{meta['uid']}-{i}", "resourceVersion": meta.get("resourceVersion", ""),
                             "creationTimestamp": meta.get("creationTimestamp"),
                             "labels": {SERVICE_NAME_LABEL: meta["name"],
                                        "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}},
                "addressType": "IPv4",
                "endpoints": _slice_endpoints(subset.get("addresses") or [], True)
                + _slice_endpoints(subset.get("notReadyAddresses") or [], False),
                "ports": [{k: p[k] for k in ("name", "port", "protocol", "appProtocol") if k in p}
                          for p in subset.get("ports") or []],
            })
    return items


DERIVED: tuple[DerivedResource, ...] = (
    DerivedResource(METRICS_GROUP, "v1beta1", "pods", "PodMetrics", True, "podmetrics.metrics.k8s.io", pod_metrics),
    DerivedResource(METRICS_GROUP, "v1beta1", "nodes", "NodeMetrics", False, "nodemetrics.metrics.k8s.io",
                    node_metrics),
    DerivedResource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", True,
                    "endpointslices.discovery.k8s.io", endpoint_slices),
)
BY_PATH: dict[tuple[str, str, str], DerivedResource] = {(d.group, d.version, d.plural): d for d in DERIVED}
