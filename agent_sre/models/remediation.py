"""Inputs, outputs and live status of `IncidentRemediationWorkflow` and its activities."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from agent_sre.models.endings import Termination
from agent_sre.models.incident import Incident
from agent_sre.models.reward import RewardConfig, RewardRecord
from agent_sre.models.tools import ToolCall, WriteAssessment
from agent_sre.models.trajectory import Trajectory
from agent_sre.models.verdict import HealthSnapshot

PolicyName = Literal["runbook", "expert", "scripted", "llm"]
ToolExecution = Literal["queue", "local"]


class PolicyRef(BaseModel):
    """Which policy serves an incident. `version` names a registered model for the LLM policy."""

    name: PolicyName = "runbook"
    version: str = "runbook-v1"
    script: list[ToolCall] | None = Field(default=None, description="the actions of a scripted policy (tests)")


class TaskQueues(BaseModel):
    """Where each kind of activity runs, so tools, inference and training scale on different machines."""

    tools: str = "agent-tools"
    policy: str = "agent-policy"
    tool_execution: ToolExecution = Field(
        default="queue", description="queue: tool calls, snapshots and observations on `tools`, for workers that "
        "cannot reach the cluster. local: reads as local activities beside the workflow and writes on the workflow's "
        "own queue, for a workflow worker that reaches the cluster (the embedded stack, one worker for every queue)")


class RemediationRequest(BaseModel):
    incident: Incident
    policy: PolicyRef | None = Field(default=None, description="None: the routing activity decides")
    reward: RewardConfig = Field(default_factory=RewardConfig)
    store_trajectory: bool = True
    queues: TaskQueues = Field(default_factory=TaskQueues)
    baseline: HealthSnapshot | None = Field(
        default=None, description="the namespace when the alert fired, if whoever raised it looked (a simulated "
                                  "episode's injection does); None: the remediation takes it before acting")
    escalation_url: str | None = Field(
        default=None, pattern=r"^https?://", description="POSTed an `EscalationNotice` when the agent escalates "
                                                         "(chat, paging); None: the escalation is only recorded")


Phase = Literal["routing", "investigating", "awaiting_approval", "awaiting_lease", "settling", "observing",
                "rewarding", "awaiting_feedback", "storing", "done"]


class Waiting(BaseModel):
    """What a running remediation waits on: the `incident status` answer to "why is nothing happening?"."""

    on: str = Field(description="an activity (`activity observe`), a timer (`timer settle`) or a human")
    since: datetime
    until: datetime | None = Field(default=None, description="when the wait times out, if it does")


class RemediationStatus(BaseModel):
    incident_id: str
    phase: Phase
    model_version: str | None = None
    steps: int = 0
    last_action: str | None = None
    pending_approval: ToolCall | None = None
    pending_step: int | None = Field(default=None, description="the step an approve/reject signal must name")
    pending_assessment: WriteAssessment | None = Field(
        default=None, description="why the pending write is high-risk, when the write rules held it")
    outcome: str | None = None
    alert_resolved: bool = False
    escalation: str | None = Field(default=None, description="whether the escalation notice reached its webhook")
    waiting: Waiting | None = None


class IncidentOutcome(BaseModel):
    incident_id: str
    workflow_id: str
    outcome: Literal["resolved", "unresolved", "worse"]
    termination: str
    model_version: str
    steps: int
    writes: int
    refused: int
    invalid: int
    false_positive: bool = Field(description="acted on a false alarm, or claimed a fix the observer rejected")
    diagnosis: str | None
    summary: str | None = Field(default=None, description="what the agent did; for an escalation, what it tried")
    reward: RewardRecord
    time_to_mitigate_s: float | None
    trajectory_key: str | None = None


class EscalationNotice(BaseModel):
    """What a remediation POSTs when its agent hands the incident to a human: enough to act on without opening
    Temporal, and `text` as one line for a chat channel (Slack's incoming webhooks show that key)."""

    event: Literal["incident_escalated"] = "incident_escalated"
    text: str
    incident_id: str
    workflow_id: str
    namespace: str
    service: str | None
    alertname: str | None
    model_version: str
    diagnosis: str
    summary: str
    actions: list[str] = Field(description="the writes the agent made, as command lines; none when it only looked")
    at: datetime


class PolicyRequest(BaseModel):
    """One decision's input. The workflow sends `Trajectory.for_policy()`: a policy reads the conversation, the
    actions and the tool results, not each decision's copy of the messages."""

    policy: PolicyRef
    trajectory: Trajectory


class ObserveRequest(BaseModel):
    incident: Incident
    baseline: HealthSnapshot = Field(description="the namespace's health before the agent acted")
    termination: Termination | None = Field(default=None, description="how the agent ended; a false alarm is "
                                            "resolved only by finishing. None (older requests): the cluster decides")
    writes: int = Field(default=0, ge=0, description="the agent's successful writes to the cluster")


class RewardRequest(BaseModel):
    trajectory: Trajectory
    config: RewardConfig


class ApprovalDecision(BaseModel):
    step: int
    approved: bool
    by: str = ""
    reason: str = ""


class StoredTrajectory(BaseModel):
    key: str
    bytes: int
    written_at: datetime
