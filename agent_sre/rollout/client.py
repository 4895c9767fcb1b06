"""Starting a rollout and reaching the running one: the entry points for the CLI, the alert receiver and tests.

One rollout at a time per Temporal namespace (it is the routing table's one writer), under a fixed workflow id.
"""

from __future__ import annotations

from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from agent_sre.config import Settings
from agent_sre.models.rollout import RolloutRequest, RolloutResult
from agent_sre.registry import Registry, RegistryError
from agent_sre.workflows.rollout import ModelRolloutWorkflow

ROLLOUT_WORKFLOW_ID = "model-rollout"


class RolloutRunningError(RuntimeError):
    """Another rollout holds the routing table."""


def preflight(registry: Registry, candidate: str, baseline: str | None) -> str:
    """Check the registry before anything starts; returns the baseline (default: the production version)."""
    version = registry.get(candidate)
    if version.stage != "candidate":
        raise RegistryError(f"{candidate} is {version.stage}: only a candidate can be rolled out")
    production = registry.production().version
    if baseline is not None and baseline != production:
        registry.get(baseline)  # an unknown version gets the clearer error
        raise RegistryError(f"the baseline must be the production version {production}, not {baseline}: a "
                            "successful rollout replaces production")
    running = registry.index().in_stage("canary")
    if running:
        raise RolloutRunningError(f"a rollout of {running[0]} is running (see `agent-sre rollout status`)")
    return production


async def start_rollout(client: Client, request: RolloutRequest, settings: Settings,
                        workflow_id: str = ROLLOUT_WORKFLOW_ID) -> WorkflowHandle[ModelRolloutWorkflow, RolloutResult]:
    try:
        return await client.start_workflow(
            ModelRolloutWorkflow.run, request, id=workflow_id, task_queue=settings.queue_agent,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL, id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            static_summary=f"rollout {request.candidate} against {request.baseline}, plan {request.plan.name}")
    except WorkflowAlreadyStartedError as exc:
        raise RolloutRunningError(f"a rollout is already running as {workflow_id} "
                                  "(see `agent-sre rollout status`)") from exc
