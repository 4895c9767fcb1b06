"""The observer: the namespace's health before the agent acts, and the verdict after the settle window."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TypeVar

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

T = TypeVar("T")


def _cluster(incident: Incident) -> ApiClient:
    """The incident's cluster, if it is the worker's own (`scope.worker_cluster`). A kubeconfig that is missing,
    unusable or another cluster's will not mend on a retry: fail at once."""
    try:
        return api_client(worker_cluster(incident.kubeconfig, get_settings()))
    except KubeconfigError as e:
        raise ApplicationError(str(e), type="KubeconfigError", non_retryable=True) from e


def _read(incident: Incident, read: Callable[[ApiClient], T]) -> T:
    """`read` the incident's cluster. A 404 (its namespace deleted) or a 410 (its simulator environment gone with
    a restart) will not mend on a retry: fail at once, saying which."""
    try:
        return read(_cluster(incident))
    except ApiException as e:
        if e.status in (404, 410):
            raise ApplicationError(f"namespace {incident.namespace!r} is not in the incident's cluster (any more): "
                                   f"{_message(e)}", type="NamespaceNotFound", non_retryable=True) from e
        raise


def _message(e: ApiException) -> str:
    """The API server's own words (its Status' message), else the HTTP reason."""
    try:
        return str(json.loads(e.body or "")["message"])
    except (TypeError, ValueError, KeyError):
        return str(e.reason)


@activity.defn
def snapshot_cluster(incident: Incident) -> HealthSnapshot:
    """The baseline. A namespace that does not exist is a bad incident, not a passing fault: fail, don't retry."""
    app = incident.scenario.app if incident.scenario else None
    return _read(incident, lambda cluster: oracle.snapshot(cluster, incident.namespace, app))


@activity.defn
def observe(req: ObserveRequest) -> Verdict:
    return _read(req.incident, lambda cluster: oracle.observe_incident(cluster, req.incident, req.baseline,
                                                                       req.termination, req.writes))
