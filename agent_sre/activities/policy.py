"""The policy activity: one decision per call, on the `agent-policy` queue (inference can scale on its own)."""

from __future__ import annotations

from collections.abc import Mapping

from temporalio import activity

from agent_sre import spans
from agent_sre.config import Settings
from agent_sre.models.policy import PolicyDecision
from agent_sre.models.remediation import PolicyName, PolicyRequest
from agent_sre.policy.base import Policy
from agent_sre.policy.expert import ExpertPolicy
from agent_sre.policy.llm import LLMPolicy
from agent_sre.policy.runbook import RunbookPolicy
from agent_sre.policy.scripted import ScriptedPolicy
from agent_sre.registry import Registry


def rule_based_policies() -> dict[PolicyName, Policy]:
    return {"runbook": RunbookPolicy(), "expert": ExpertPolicy(), "scripted": ScriptedPolicy()}


def served_policies(settings: Settings, registry: Registry) -> dict[PolicyName, Policy]:
    """Every policy a worker serves. The LLM loads nothing until it is asked; a registered version's weights come
    from `registry`'s verified download cache."""
    return {**rule_based_policies(), "llm": LLMPolicy(registry=registry.local_path, settings=settings)}


class PolicyActivities:
    """Built once per worker with the policies it serves (`served_policies`): a model stays loaded between calls."""

    def __init__(self, policies: Mapping[PolicyName, Policy]) -> None:
        self.policies = policies

    @activity.defn
    def decide_next_action(self, req: PolicyRequest) -> PolicyDecision:
        policy = self.policies.get(req.policy.name)
        if policy is None:
            raise ValueError(f"policy {req.policy.name!r} is not served by this worker (serves: "
                             f"{', '.join(self.policies)})")
        with spans.tracer.start_as_current_span(f"chat {req.policy.version}",
                                                attributes=spans.decision_request_attributes(req)) as span:
            decision = policy.decide(req.policy, req.trajectory)
            span.set_attributes(spans.decision_attributes(decision))
        return decision
