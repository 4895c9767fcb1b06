"""Which model version serves a new incident: the rollout's routing table, else the registry's production version
(see agent_sre.rollout.routing)."""

from __future__ import annotations

from temporalio import activity

from agent_sre.models.incident import Incident
from agent_sre.models.remediation import PolicyRef
from agent_sre.registry import Registry
from agent_sre.rollout.routing import route


class RoutingActivities:
    """Built once per worker with the registry, whose store and bucket hold the routing table."""

    def __init__(self, registry: Registry) -> None:
        self._registry = registry

    @activity.defn
    def route_model(self, incident: Incident) -> PolicyRef:
        versions = self._registry
        return route(versions.client, versions.bucket, versions, incident)
