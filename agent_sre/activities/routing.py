"""Which model version serves a new incident. The rollout workflow will own the traffic split; until a split is
configured every incident goes to the production policy."""

from __future__ import annotations

from temporalio import activity

from agent_sre.models.incident import Incident
from agent_sre.models.remediation import PolicyRef


@activity.defn
def route_model(incident: Incident) -> PolicyRef:
    return PolicyRef()
