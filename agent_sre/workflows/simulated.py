"""SimulatedIncidentWorkflow: a training/evaluation episode.

    create environment + inject scenario + wait for its alert ─▶ remediate (child workflow) ─▶ clean up
"""

from __future__ import annotations

import hashlib
import re

from temporalio import workflow

from agent_sre.activities.simulation import SimulationActivities
from agent_sre.models.episode import EpisodeRequest, EpisodeResult, InjectRequest
from agent_sre.models.incident import Incident
from agent_sre.models.remediation import RemediationRequest
from agent_sre.workflows import BAD_INPUT
from agent_sre.workflows.incident import IncidentRemediationWorkflow, near_cluster, search_attributes
from agent_sre.workflows.options import ENVIRONMENT_SETUP_TIMEOUT, QUICK_TIMEOUT


def environment_name(workflow_id: str) -> str:
    """The episode's simulator environment: a DNS label derived from the workflow id, so that every attempt to
    create it, and the clean-up, name the same one."""
    readable = re.sub(r"[^a-z0-9-]+", "-", workflow_id.lower())[:40].strip("-")
    return f"{readable}-{hashlib.sha256(workflow_id.encode()).hexdigest()[:12]}"


@workflow.defn(name="SimulatedIncidentWorkflow", sandboxed=False, failure_exception_types=BAD_INPUT)
class SimulatedIncidentWorkflow:
    @workflow.run
    async def run(self, req: EpisodeRequest) -> EpisodeResult:
        scenario = req.scenario
        environment = environment_name(workflow.info().workflow_id)
        try:
            injected = await near_cluster(req.queues, SimulationActivities.create_and_inject,
                                          InjectRequest(environment=environment, scenario=scenario),
                                          timeout=ENVIRONMENT_SETUP_TIMEOUT, heartbeat_timeout=QUICK_TIMEOUT)
            incident = Incident(
                id=f"{workflow.info().workflow_id}", source="simulation", alert=injected.alert,
                report=scenario.symptom if req.with_user_report and scenario.symptom else None,
                namespace=scenario.namespace, kubeconfig=injected.environment.server, scenario=scenario,
                limits=req.limits.settling(injected.settle_s).model_copy(  # nobody is there to approve
                    update={"approve_high_risk": "auto"}))
            outcome = await workflow.execute_child_workflow(
                IncidentRemediationWorkflow.run,
                RemediationRequest(incident=incident, policy=req.policy, reward=req.reward, queues=req.queues,
                                   baseline=injected.health),
                id=f"{workflow.info().workflow_id}-remediation",
                search_attributes=search_attributes(incident, req.policy))  # the child need not upsert them
        finally:
            await near_cluster(req.queues, SimulationActivities.delete_environment, environment)
        return EpisodeResult(scenario=scenario.name, fault=scenario.fault, environment=environment, outcome=outcome)
