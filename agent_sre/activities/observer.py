"""The observer: the namespace's health before the agent acts, and the verdict after the settle window."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TypeVar

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from temporalio import activity
from temporalio.exceptions import ApplicationError

from agent_sre.config import Settings
from agent_sre.faults import oracle
from agent_sre.models.incident import Incident
from agent_sre.models.remediation import ObserveRequest
from agent_sre.models.verdict import HealthSnapshot, Verdict
from agent_sre.scope import worker_cluster
from agent_sre.tools.client import KubeconfigError, api_client

T = TypeVar("T")


def _message(e: ApiException) -> str:
    """The API server's own words (its Status' message), else the HTTP reason."""
    try:
        return str(json.loads(e.body or "")["message"])
    except (TypeError, ValueError, KeyError):
        return str(e.reason)


class ObserverActivities:
    """Built once per worker with its settings: they say which cluster is the worker's own."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings

    def _cluster(self, incident: Incident) -> ApiClient:
        """The incident's cluster, if it is the worker's own (`scope.worker_cluster`). A kubeconfig that is
        missing, unusable or another cluster's will not mend on a retry: fail at once."""
        try:
            return api_client(worker_cluster(incident.kubeconfig, self._settings), settings=self._settings)
        except KubeconfigError as e:
            raise ApplicationError(str(e), type="KubeconfigError", non_retryable=True) from e

    def _read(self, incident: Incident, read: Callable[[ApiClient], T]) -> T:
        """`read` the incident's cluster. A 404 (its namespace deleted) or a 410 (its simulator environment gone
        with a restart) will not mend on a retry: fail at once, saying which."""
        try:
            return read(self._cluster(incident))
        except ApiException as e:
            if e.status in (404, 410):
                raise ApplicationError(f"namespace {incident.namespace!r} is not in the incident's cluster (any "
                                       f"more): {_message(e)}", type="NamespaceNotFound", non_retryable=True) from e
            raise

    @activity.defn
    def snapshot_cluster(self, incident: Incident) -> HealthSnapshot:
        """The baseline. A namespace that does not exist is a bad incident, not a passing fault: fail, don't
        retry."""
        app, neighbours = (incident.scenario.app, incident.scenario.neighbours) if incident.scenario else (None, [])
        return self._read(incident, lambda cluster: oracle.snapshot(cluster, incident.namespace, app, neighbours))

    @activity.defn
    def observe(self, req: ObserveRequest) -> Verdict:
        """The verdict now, and how long fresh containers' liveness probes have yet to act (the workflow judges
        again after that)."""
        def judge(cluster: ApiClient) -> Verdict:
            pending = oracle.liveness_wait_s(cluster, req.incident.namespace)
            verdict = oracle.observe_incident(cluster, req.incident, req.baseline, req.termination, req.writes)
            return verdict.model_copy(update={"probes_pending_s": max(pending, 0.0)})
        return self._read(req.incident, judge)
