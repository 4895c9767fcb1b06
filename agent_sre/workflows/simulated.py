"""SimulatedIncidentWorkflow: a training/evaluation episode.

    create environment ─▶ inject scenario ─▶ wait for its alert ─▶ remediate (child workflow) ─▶ clean up
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agent_sre.activities import simulation
    from agent_sre.models.episode import EpisodeRequest, EpisodeResult, InjectRequest, SimEnvironment
    from agent_sre.models.incident import Incident
    from agent_sre.models.remediation import RemediationRequest
    from agent_sre.workflows.incident import IncidentRemediationWorkflow

QUICK = timedelta(seconds=30)


@workflow.defn(name="SimulatedIncidentWorkflow")
class SimulatedIncidentWorkflow:
    @workflow.run
    async def run(self, req: EpisodeRequest) -> EpisodeResult:
        scenario = req.scenario
        tools_queue = req.queues.tools
        env: SimEnvironment = await workflow.execute_activity(
            simulation.create_environment, scenario, start_to_close_timeout=QUICK, task_queue=tools_queue)
        try:
            injected = await workflow.execute_activity(
                simulation.inject_and_wait_for_alert, InjectRequest(environment=env, scenario=scenario),
                start_to_close_timeout=timedelta(minutes=2), heartbeat_timeout=QUICK, task_queue=tools_queue)
            incident = Incident(
                id=f"{workflow.info().workflow_id}", source="simulation", alert=injected.alert,
                report=scenario.symptom if req.with_user_report and scenario.symptom else None,
                namespace=scenario.namespace, kubeconfig=env.server, scenario=scenario, limits=req.limits)
            outcome = await workflow.execute_child_workflow(
                IncidentRemediationWorkflow.run,
                RemediationRequest(incident=incident, policy=req.policy, reward=req.reward, queues=req.queues),
                id=f"{workflow.info().workflow_id}-remediation")
        finally:
            await workflow.execute_activity(simulation.delete_environment, env, start_to_close_timeout=QUICK,
                                            task_queue=tools_queue)
        return EpisodeResult(scenario=scenario.name, fault=scenario.fault, environment=env.name, outcome=outcome)
