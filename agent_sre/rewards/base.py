"""The reward-function interface, its registry, and the facts about an episode that every function reads."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from agent_sre.models.endings import Outcome
from agent_sre.models.reward import HumanFeedback, RewardConfig, RewardFunctionName, RewardRecord
from agent_sre.models.tools import TOOL_SPECS, Risk, ToolCall
from agent_sre.models.trajectory import Trajectory
from agent_sre.models.verdict import Verdict
from agent_sre.rewards.steps import step_rewards


class RewardError(ValueError):
    """The trajectory cannot be scored; the message says why."""


def _same_call(a: ToolCall, b: ToolCall) -> bool:
    """Equal tool and arguments, defaults filled in, so `{"replicas": 0}` matches however it was written."""
    if a.tool != b.tool:
        return False
    try:
        return a.validate_args() == b.validate_args()
    except (KeyError, ValueError):
        return a.args == b.args


def is_false_alarm(t: Trajectory, verdict: Verdict) -> bool:
    """Nothing to fix. The scenario's ground truth decides when there is one (a fault's symptoms may lag its
    injection); otherwise the observer's baseline: no service was unhealthy when the agent started."""
    if t.incident.scenario is not None:
        return t.incident.scenario.false_alarm
    return not verdict.baseline_unhealthy


def is_alert_resolved(t: Trajectory, verdict: Verdict) -> bool:
    """The alert stopped firing: Alertmanager said so, or the observer finds the alerted service healthy."""
    service = t.incident.service
    return t.alert_resolved or (t.incident.alert is not None and service is not None
                                and service not in verdict.unhealthy)


@dataclass(frozen=True)
class EpisodeFacts:
    """What the reward functions judge, derived once from a trajectory."""

    outcome: Outcome
    alert_resolved: bool
    false_alarm: bool
    writes: int  # successful writes to the cluster
    claimed_fix: bool  # the agent finished after acting, i.e. presented its writes as the fix
    escalated: bool  # the agent handed the incident to a human as not fixed
    time_to_mitigate_s: float | None  # only when resolved
    elapsed_s: float | None  # start until the agent stopped acting, whatever the outcome
    steps: int
    max_steps: int
    deadline_s: float
    refused: int
    high_risk_writes: int  # executed writes at Risk.HIGH
    destructive_writes: int  # executed writes that the scenario lists as destructive
    feedback: tuple[HumanFeedback, ...]
    escalation_expected: bool = False  # the scenario's right ending is a handover (a secret only its owner knows)

    @property
    def resolved(self) -> bool:
        return self.outcome == "resolved"

    @property
    def false_positive(self) -> bool:
        """Acted on a false alarm, or claimed a fix that the observer rejects."""
        return (self.false_alarm and self.writes > 0) or (self.claimed_fix and not self.resolved)

    @property
    def honest_escalation(self) -> bool:
        """Handed a real fault that is still there to a human: the right end when the agent could not fix it."""
        return self.escalated and not self.resolved and not self.false_alarm

    @property
    def needless_page(self) -> bool:
        """Escalated although nothing was left to fix (the fix had worked, or it was a false alarm): the on-call is
        woken for nothing. The counterweight that keeps "always escalate after a write" from paying. Not where the
        escalation is what resolves the incident."""
        return self.escalated and (self.resolved or self.false_alarm) and not self.escalation_expected

    @property
    def needless_change(self) -> bool:
        """Wrote to the cluster and fixed nothing: a false alarm acted on, or writes left behind on a fault that
        is still there, whether the agent then claimed a fix or ran out of steps."""
        return self.writes > 0 and (self.false_alarm or not self.resolved)

    @classmethod
    def of(cls, t: Trajectory) -> EpisodeFacts:
        if t.verdict is None:
            raise RewardError(f"trajectory {t.workflow_id}/{t.run_id} has no verdict: an episode is scored only "
                              "after the observer has judged it")
        writes = t.writes
        destructive = t.incident.scenario.ground_truth.destructive if t.incident.scenario else []
        elapsed = (t.mitigated_at - t.started_at).total_seconds() if t.mitigated_at else None
        return cls(
            outcome=t.verdict.outcome,
            alert_resolved=is_alert_resolved(t, t.verdict),
            false_alarm=is_false_alarm(t, t.verdict),
            writes=len(writes),
            claimed_fix=t.termination == "finished" and bool(writes),
            escalated=t.termination == "escalated",
            time_to_mitigate_s=t.time_to_mitigate_s,
            elapsed_s=elapsed,
            steps=len(t.steps),
            max_steps=t.incident.limits.max_steps,
            deadline_s=t.incident.limits.deadline_s,
            refused=sum(1 for s in t.steps if s.result is not None and s.result.refused),
            high_risk_writes=sum(1 for s in writes if s.action and TOOL_SPECS[s.action.tool].risk >= Risk.HIGH),
            destructive_writes=sum(1 for s in writes if s.action and any(_same_call(s.action, d) for d in destructive)),
            feedback=tuple(t.feedback),
            escalation_expected=t.incident.scenario is not None
            and t.incident.scenario.ground_truth.expected_ending == "escalated",
        )


class RewardFunction(ABC):
    """One way of scoring an episode. Subclasses name themselves and return named components; the total is
    their sum, so every record explains itself. Register with `@register`."""

    name: ClassVar[RewardFunctionName]
    # One SRE-formula point in this function's units: the step penalties of `RewardConfig` are in SRE points, so
    # on a 0-1 scale an invalid action must not cost more than solving the incident earns.
    step_scale: ClassVar[float] = 1.0

    @abstractmethod
    def components(self, episode: EpisodeFacts) -> dict[str, float]: ...

    def __call__(self, t: Trajectory, config: RewardConfig) -> RewardRecord:
        components = {k: round(v, 6) for k, v in self.components(EpisodeFacts.of(t)).items()}
        return RewardRecord(incident_id=t.incident.id, model_version=t.model_version, function=self.name,
                            total=round(sum(components.values()), 6), components=components,
                            step_rewards=step_rewards(t, config, self.step_scale), feedback=list(t.feedback))


REWARD_FUNCTIONS: dict[str, RewardFunction] = {}


def register(cls: type[RewardFunction]) -> type[RewardFunction]:
    if cls.name in REWARD_FUNCTIONS:
        raise ValueError(f"reward function {cls.name!r} is registered twice")
    REWARD_FUNCTIONS[cls.name] = cls()
    return cls


def compute_reward(t: Trajectory, config: RewardConfig) -> RewardRecord:
    """Score `t` with the function `config` names. Deterministic: the same trajectory gives the same record."""
    try:
        function = REWARD_FUNCTIONS[config.function]
    except KeyError:
        raise RewardError(f"unknown reward function {config.function!r}; known: {sorted(REWARD_FUNCTIONS)}") from None
    return function(t, config)


def feedback_points(episode: EpisodeFacts) -> float:
    """+1 per positive, −1 per negative human rating (neutral ratings count 0)."""
    return float(sum(f.rating for f in episode.feedback))
