"""The health oracle ("observer"): after a settle window, is the incident resolved, unresolved, or worse?

Worse means more unhealthy services than at the baseline, or an object that existed at the baseline (a
deployment, service, config map, secret, PVC, quota or node) is gone. Resolved means every service of the app is
healthy (see `health.py`) and the fault's own check passes (the secret matches the database again, the node is
uncordoned, nothing was changed for a false alarm). Everything is read through the Kubernetes API, so the oracle
judges the simulator and a real cluster alike.

Given how the agent ended (`termination`, `writes`), the fault's `ending_check` is judged too: a false alarm's
cluster is healthy whatever an agent that never writes does, so it is resolved only when the agent finished, with
no write, rather than ran out of steps or paged a human. Without them (a baseline check, a request from before the
field) the cluster alone decides.
"""

from __future__ import annotations

from collections.abc import Callable

from kubernetes.client import ApiClient

from agent_sre.apps.catalog import APPS, PART_OF, AppSpec, get_app
from agent_sre.faults import get_fault
from agent_sre.faults.health import fingerprints, inventory, service_health
from agent_sre.kube.client import Kube
from agent_sre.models.incident import Incident
from agent_sre.models.scenario import Scenario
from agent_sre.models.trajectory import Termination
from agent_sre.models.verdict import HealthSnapshot, Outcome, Verdict


def snapshot(api_client: ApiClient, namespace: str, app: str | None = None) -> HealthSnapshot:
    """The baseline, taken right after injection (or after the settle window that lets the fault develop).
    `app` defaults to the namespace's `app.kubernetes.io/part-of` label, which installing an app sets; a
    namespace of no known app is judged on its own deployments' specs."""
    k8s = Kube(api_client, shared=True, memo=True)
    if app is None:
        app = (k8s.get("namespace", namespace)["metadata"].get("labels") or {}).get(PART_OF)
    unhealthy = service_health(k8s, APPS.get(app or ""), namespace)
    return HealthSnapshot(namespace=namespace, unhealthy=unhealthy, resources=inventory(k8s, namespace),
                          fingerprints=fingerprints(k8s, namespace))


def observe(api_client: ApiClient, scenario: Scenario, baseline: HealthSnapshot,
            termination: Termination | None = None, writes: int = 0) -> Verdict:
    """Judge the cluster now against the baseline, with the scenario's fault-specific check, and, when
    `termination` says how the agent ended (after `writes` successful writes), the fault's check of that ending."""
    k8s = Kube(api_client, shared=True, memo=True)
    fault = get_fault(scenario.fault)

    def specific() -> list[str]:
        reasons = fault.check(k8s, fault.context_of(scenario), baseline)
        return reasons if termination is None else [*reasons, *fault.ending_check(termination, writes)]

    return _judge(k8s, get_app(scenario.app), scenario.namespace, baseline, specific)


def observe_incident(api_client: ApiClient, incident: Incident, baseline: HealthSnapshot,
                     termination: Termination | None = None, writes: int = 0) -> Verdict:
    """`observe` for any incident: a simulated one has its scenario; a real one is judged on service health,
    with the app's expectations when the namespace belongs to a known app."""
    if incident.scenario is not None:
        return observe(api_client, incident.scenario, baseline, termination, writes)
    k8s = Kube(api_client, shared=True, memo=True)
    part_of = (k8s.get("namespace", incident.namespace)["metadata"].get("labels") or {}).get(PART_OF)
    return _judge(k8s, APPS.get(part_of or ""), incident.namespace, baseline, list)


def _judge(k8s: Kube, app: AppSpec | None, namespace: str, baseline: HealthSnapshot,
           specific_check: Callable[[], list[str]]) -> Verdict:
    unhealthy = service_health(k8s, app, namespace)
    resources = inventory(k8s, namespace)
    deleted = sorted(set(baseline.resources) - set(resources))
    specific = specific_check()
    reasons = [f"{ref} was deleted" for ref in deleted]
    reasons += [f"{service}: {why}" for service, whys in sorted(unhealthy.items()) for why in whys]
    reasons += specific
    outcome: Outcome
    if deleted or len(unhealthy) > len(baseline.unhealthy):
        outcome = "worse"
        reasons.insert(0, f"{len(unhealthy)} unhealthy services now, {len(baseline.unhealthy)} at the baseline"
                       if len(unhealthy) > len(baseline.unhealthy) else "objects were deleted")
    elif unhealthy or specific:
        outcome = "unresolved"
    else:
        outcome = "resolved"
        reasons = ["every service is healthy"]
    return Verdict(outcome=outcome, reasons=reasons, unhealthy=unhealthy,
                   baseline_unhealthy=sorted(baseline.unhealthy), deleted=deleted)
