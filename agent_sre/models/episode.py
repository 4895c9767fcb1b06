"""Simulated episodes: a scenario injected into an isolated simulator environment, then remediated."""

from __future__ import annotations

from pydantic import BaseModel, Field

from agent_sre.models.alert import Alert
from agent_sre.models.incident import RemediationLimits
from agent_sre.models.remediation import IncidentOutcome, PolicyRef, TaskQueues
from agent_sre.models.reward import RewardConfig
from agent_sre.models.scenario import Scenario
from agent_sre.models.verdict import HealthSnapshot


class SimEnvironment(BaseModel):
    name: str
    server: str = Field(description="Kubernetes API URL of this isolated environment")


class EpisodeRequest(BaseModel):
    scenario: Scenario
    policy: PolicyRef | None = Field(default_factory=PolicyRef,
                                    description="None: the routing activity decides, as for a real incident")
    limits: RemediationLimits = Field(default_factory=lambda: RemediationLimits(settle_s=2.0, deadline_s=600.0))
    reward: RewardConfig = Field(default_factory=RewardConfig)
    with_user_report: bool = Field(default=True, description="a simulated user also describes the symptom")
    queues: TaskQueues = Field(default_factory=TaskQueues)


class InjectRequest(BaseModel):
    environment: str = Field(description="the name of the environment to create for the scenario")
    scenario: Scenario


class InjectedFault(BaseModel):
    environment: SimEnvironment
    alert: Alert
    health: HealthSnapshot | None = Field(
        default=None, description="the namespace when the alert fired: the remediation's baseline "
                                  "(None from workers that predate it: the remediation then takes its own)")
    settle_s: float | None = Field(
        default=None, description="the scenario's own settle window (`Scenario.settle_s`, simulated seconds) in "
                                  "the real seconds of the remediation's timers at this environment's speed; None: "
                                  "the scenario asks for none, or the environment's clock does not run by itself")


class EpisodeResult(BaseModel):
    scenario: str
    fault: str
    environment: str
    outcome: IncidentOutcome
    generated_tokens: int | None = Field(default=None, description="tokens a language model generated in the "
                                         "episode (in-process evaluation); None for rule-based policies and for "
                                         "episodes run through Temporal")


class OutcomeStats(BaseModel):
    """Aggregate figures for a group of episodes (one fault type, or all)."""

    group: str
    episodes: int
    success_rate: float
    mean_time_to_mitigate_s: float | None
    mean_steps: float
    false_positive_rate: float
    escalation_rate: float = Field(default=0.0, description="handed to a human as not fixed (0 in figures recorded "
                                                            "before the agent could escalate)")
    write_rate: float | None = Field(default=None, description="episodes with at least one write: tells an agent "
                                                               "that fixed nothing apart from one that did nothing "
                                                               "(None in figures recorded before it was counted)")
    harmful_rate: float
    invalid_action_rate: float
    mean_reward: float
