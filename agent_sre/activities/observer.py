"""The observer: the namespace's health before the agent acts, and the verdict after the settle window."""

from __future__ import annotations

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from temporalio import activity
from temporalio.exceptions import ApplicationError

from agent_sre.config import get_settings
from agent_sre.faults import oracle
from agent_sre.models.incident import Incident
from agent_sre.models.remediation import ObserveRequest
from agent_sre.models.verdict import HealthSnapshot, Verdict
from agent_sre.scope import worker_cluster
from agent_sre.tools.client import KubeconfigError, api_client


def _cluster(incident: Incident) -> ApiClient:
    """The incident's cluster, if it is the worker's own (`scope.worker_cluster`). A kubeconfig that is missing,
    unusable or another cluster's will not mend on a retry: fail at once."""
    try:
        return api_client(worker_cluster(incident.kubeconfig, get_settings()))
    except KubeconfigError as e:
        raise ApplicationError(str(e), type="KubeconfigError", non_retryable=True) from e


@activity.defn
def snapshot_cluster(incident: Incident) -> HealthSnapshot:
    """The baseline. A namespace that does not exist is a bad incident, not a passing fault: fail, don't retry."""
    app = incident.scenario.app if incident.scenario else None
    try:
        return oracle.snapshot(_cluster(incident), incident.namespace, app)
    except ApiException as e:
        if e.status == 404:
            raise ApplicationError(f"namespace {incident.namespace!r} not found in the cluster: {e.reason}",
                                   type="NamespaceNotFound", non_retryable=True) from e
        raise


@activity.defn
def observe(req: ObserveRequest) -> Verdict:
    return oracle.observe_incident(_cluster(req.incident), req.incident, req.baseline, req.termination, req.writes)
