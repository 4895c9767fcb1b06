"""The policy activity: one decision per call, on the `agent-policy` queue (inference can scale on its own)."""

from __future__ import annotations

from pathlib import Path

from temporalio import activity

from agent_sre import spans
from agent_sre.config import get_settings
from agent_sre.models.policy import PolicyDecision
from agent_sre.models.remediation import PolicyName, PolicyRequest
from agent_sre.policy.base import Policy
from agent_sre.policy.expert import ExpertPolicy
from agent_sre.policy.llm import LLMPolicy
from agent_sre.policy.runbook import RunbookPolicy
from agent_sre.policy.scripted import ScriptedPolicy
from agent_sre.registry import Registry


def registered_model_dir(version: str) -> Path:
    """A registered LLM version by name: the model registry's verified download cache."""
    return Registry.from_settings(get_settings()).local_path(version)


POLICIES: dict[PolicyName, Policy] = {"runbook": RunbookPolicy(), "expert": ExpertPolicy(), "scripted": ScriptedPolicy(),
                                      "llm": LLMPolicy(registry=registered_model_dir)}


@activity.defn
def decide_next_action(req: PolicyRequest) -> PolicyDecision:
    policy = POLICIES.get(req.policy.name)
    if policy is None:
        raise ValueError(f"policy {req.policy.name!r} is not served by this worker (serves: {', '.join(POLICIES)})")
    with spans.tracer.start_as_current_span(f"chat {req.policy.version}",
                                            attributes=spans.decision_request_attributes(req)) as span:
        decision = policy.decide(req.policy, req.trajectory)
        span.set_attributes(spans.decision_attributes(decision))
    return decision
