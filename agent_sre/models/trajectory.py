"""trajectory.v1: one remediation episode, exactly as the policy experienced it, ready to become training data."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from agent_sre.models.endings import Termination
from agent_sre.models.incident import Incident
from agent_sre.models.policy import ChatMessage, PolicyDecision
from agent_sre.models.reward import HumanFeedback, RewardRecord
from agent_sre.models.tools import ToolCall, ToolResult
from agent_sre.models.verdict import Verdict

# The actions that end an episode: `finish` presents the agent's work as done (a claimed fix, when it wrote),
# `escalate` hands the incident to a human as not fixed, so it claims nothing.
ENDINGS: dict[str, Termination] = {"finish": "finished", "escalate": "escalated"}


class Step(BaseModel):
    index: int
    decision: PolicyDecision
    result: ToolResult | None = Field(default=None, description="None for invalid actions and for the endings "
                                      "(finish, escalate)")
    at: datetime

    @property
    def action(self) -> ToolCall | None:
        return self.decision.action


class Trajectory(BaseModel):
    schema_version: Literal["trajectory.v1"] = "trajectory.v1"
    incident: Incident
    workflow_id: str
    run_id: str
    policy: str
    model_version: str
    conversation: list[ChatMessage] = Field(default_factory=list)
    steps: list[Step] = Field(default_factory=list)
    termination: Termination | None = None
    diagnosis: str | None = None
    summary: str | None = None
    verdict: Verdict | None = None
    alert_resolved: bool = Field(default=False, description="Alertmanager reported the alert resolved (signal)")
    reward: RewardRecord | None = None
    feedback: list[HumanFeedback] = Field(default_factory=list)
    started_at: datetime
    mitigated_at: datetime | None = Field(default=None, description="when the agent stopped acting")
    ended_at: datetime | None = None

    def for_policy(self) -> Trajectory:
        """The trajectory as a policy reads it, sent with every decision: each step's decision without its copy of
        what the conversation already holds (`new_messages`, `completion`) and without the tokens training needs.
        Every request carries every earlier step, so an episode's requests grow with the square of its steps, and
        a model's are in its history: this keeps them about a third smaller. The workflow keeps the whole."""
        return self.model_copy(update={"steps": [step.model_copy(update={"decision": step.decision.model_copy(
            update={"new_messages": [], "completion": "", "completion_token_ids": None, "completion_logprobs": None})})
            for step in self.steps]})

    def end(self, action: ToolCall) -> Termination | None:
        """Record `action` as the episode's end if it is one of the ENDINGS; None (and nothing recorded) if not."""
        termination = ENDINGS.get(action.tool)
        if termination is not None:
            self.diagnosis = str(action.args.get("diagnosis", ""))
            self.summary = str(action.args.get("summary", ""))
            self.termination = termination
        return termination

    @property
    def writes(self) -> list[Step]:
        from agent_sre.models.tools import TOOL_SPECS

        return [s for s in self.steps if s.result is not None and s.result.ok and s.action is not None
                and TOOL_SPECS[s.action.tool].write]

    @property
    def time_to_mitigate_s(self) -> float | None:
        """From the start until the agent stopped acting (the settle window excluded), if the verdict is resolved."""
        if self.verdict is None or self.verdict.outcome != "resolved" or self.mitigated_at is None:
            return None
        return (self.mitigated_at - self.started_at).total_seconds()
