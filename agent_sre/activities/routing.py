"""Which model version serves a new incident: the rollout's routing table, else the registry's production version
(see agent_sre.rollout.routing)."""

from __future__ import annotations

from temporalio import activity

from agent_sre.config import get_settings
from agent_sre.models.incident import Incident
from agent_sre.models.remediation import PolicyRef
from agent_sre.registry import Registry
from agent_sre.rollout.routing import route

ROUTE_TIMEOUT_S = 5.0


@activity.defn
def route_model(incident: Incident) -> PolicyRef:
    settings = get_settings()
    # Fail fast: Temporal's retry policy owns the backoff, so a store outage shows as activity attempts.
    registry = Registry.from_settings(settings, timeout_s=ROUTE_TIMEOUT_S)
    return route(registry.client, settings.s3_bucket, registry, incident)
