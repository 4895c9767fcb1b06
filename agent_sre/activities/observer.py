"""The observer: the namespace's health before the agent acts, and the verdict after the settle window."""

from __future__ import annotations

from temporalio import activity

from agent_sre.faults import oracle
from agent_sre.models.incident import Incident
from agent_sre.models.remediation import ObserveRequest
from agent_sre.models.verdict import HealthSnapshot, Verdict
from agent_sre.tools.client import api_client


@activity.defn
def snapshot_cluster(incident: Incident) -> HealthSnapshot:
    app = incident.scenario.app if incident.scenario else None
    return oracle.snapshot(api_client(incident.kubeconfig), incident.namespace, app)


@activity.defn
def observe(req: ObserveRequest) -> Verdict:
    return oracle.observe_incident(api_client(req.incident.kubeconfig), req.incident, req.baseline)
