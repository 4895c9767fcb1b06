"""The resource types the simulator serves: one table drives discovery, routing and storage keys."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property


@dataclass(frozen=True)
class ResourceType:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ("create", "delete", "get", "list", "patch", "update", "watch")

    @cached_property  # looked up on every request
    def key(self) -> str:
        """Storage key, as kubectl names a resource: `pods`, `deployments.apps`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @cached_property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


CHAOS_GROUP = "chaos-mesh.org"

RESOURCE_TYPES: tuple[ResourceType, ...] = (
    ResourceType("", "v1", "namespaces", "Namespace", namespaced=False, short_names=("ns",)),
    ResourceType("", "v1", "nodes", "Node", namespaced=False, short_names=("no",), subresources=("status",)),
    ResourceType("", "v1", "pods", "Pod", short_names=("po",), subresources=("log", "status")),
    ResourceType("", "v1", "services", "Service", short_names=("svc",)),
    ResourceType("", "v1", "endpoints", "Endpoints", short_names=("ep",)),
    ResourceType("", "v1", "events", "Event", short_names=("ev",)),
    ResourceType("", "v1", "configmaps", "ConfigMap", short_names=("cm",)),
    ResourceType("", "v1", "secrets", "Secret"),
    ResourceType("", "v1", "resourcequotas", "ResourceQuota", short_names=("quota",)),
    ResourceType("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", short_names=("pvc",)),
    ResourceType("apps", "v1", "deployments", "Deployment", short_names=("deploy",), subresources=("scale", "status")),
    ResourceType("apps", "v1", "replicasets", "ReplicaSet", short_names=("rs",), subresources=("scale", "status")),
    ResourceType("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", short_names=("netpol",)),
    ResourceType("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", short_names=("hpa",),
                 subresources=("status",)),
    ResourceType("batch", "v1", "jobs", "Job", subresources=("status",)),
    ResourceType("batch", "v1", "cronjobs", "CronJob", short_names=("cj",), subresources=("status",)),
    ResourceType(CHAOS_GROUP, "v1alpha1", "podchaos", "PodChaos"),
    ResourceType(CHAOS_GROUP, "v1alpha1", "stresschaos", "StressChaos"),
    ResourceType(CHAOS_GROUP, "v1alpha1", "networkchaos", "NetworkChaos"),
    ResourceType(CHAOS_GROUP, "v1alpha1", "httpchaos", "HTTPChaos"),
    ResourceType(CHAOS_GROUP, "v1alpha1", "dnschaos", "DNSChaos"),
    ResourceType(CHAOS_GROUP, "v1alpha1", "iochaos", "IOChaos"),
    ResourceType(CHAOS_GROUP, "v1alpha1", "schedules", "Schedule"),
)

BY_KEY: dict[str, ResourceType] = {rt.key: rt for rt in RESOURCE_TYPES}
BY_KIND: dict[str, ResourceType] = {rt.kind: rt for rt in RESOURCE_TYPES}
CHAOS_KINDS: tuple[str, ...] = tuple(rt.kind for rt in RESOURCE_TYPES
                                     if rt.group == CHAOS_GROUP and rt.kind != "Schedule")
