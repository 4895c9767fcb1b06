"""Which model version serves a new incident: the rollout's routing table, else the registry's production version
(see agent_sre.rollout.routing)."""

from __future__ import annotations

from temporalio import activity

from agent_sre.activities.rollout import registry
from agent_sre.models.incident import Incident
from agent_sre.models.remediation import PolicyRef
from agent_sre.rollout.routing import route


@activity.defn
def route_model(incident: Incident) -> PolicyRef:
    versions = registry()
    return route(versions.client, versions.bucket, versions, incident)
