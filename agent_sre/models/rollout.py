"""Model rollouts: the plan (an explicit list of steps, like Argo Rollouts), the routing table it drives, the
analysis that gates each traffic increase, and the workflow's live status."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from agent_sre.models.registry import VERSION_PATTERN
from agent_sre.models.remediation import PolicyRef

_DURATION_RE = re.compile(r"^(?:(?P<d>\d+)d)?(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?:(?P<s>\d+)s)?$")


def _duration(value: Any) -> Any:
    """"7d", "4h", "1h30m", "90s" as well as what pydantic takes for a timedelta (ISO 8601, seconds)."""
    if isinstance(value, str) and value and (m := _DURATION_RE.match(value.strip())) and any(m.groups()):
        return timedelta(days=int(m["d"] or 0), hours=int(m["h"] or 0), minutes=int(m["m"] or 0),
                         seconds=int(m["s"] or 0))
    return value


def format_duration(value: timedelta) -> str:
    """The inverse of the short form: 7d, 1h30m, 45s."""
    seconds = int(value.total_seconds())
    parts = [(seconds // 86400, "d"), (seconds % 86400 // 3600, "h"), (seconds % 3600 // 60, "m"), (seconds % 60, "s")]
    return "".join(f"{n}{unit}" for n, unit in parts if n) or "0s"


def _positive(value: timedelta) -> timedelta:
    if value <= timedelta(0):
        raise ValueError("must be longer than zero")
    return value


Duration = Annotated[timedelta, BeforeValidator(_duration), AfterValidator(_positive)]
Version = Annotated[str, Field(pattern=VERSION_PATTERN)]


# --- the plan ---------------------------------------------------------------------------------------------------

class _Step(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AbTestStep(_Step):
    """Split traffic for `duration`, then analyse; the step passes only when the analysis does."""

    kind: Literal["ab_test"] = "ab_test"
    weight: float = Field(default=50.0, gt=0, lt=100, description="% of new incidents to the candidate")
    duration: Duration
    min_samples: int | None = Field(default=None, ge=1, description="incidents per arm; default: the plan's")


class SetWeightStep(_Step):
    kind: Literal["set_weight"] = "set_weight"
    weight: float = Field(gt=0, le=100, description="% of new incidents to the candidate")


class BakeStep(_Step):
    """Hold the current weight for `duration`, with guardrails checked throughout."""

    kind: Literal["bake"] = "bake"
    duration: Duration


class AnalyzeStep(_Step):
    """Compare candidate and baseline on the incidents since the weight last changed."""

    kind: Literal["analyze"] = "analyze"
    min_samples: int | None = Field(default=None, ge=1, description="incidents per arm; default: the plan's")


class PauseStep(_Step):
    """Wait for a human: `resume` or `promote` goes on."""

    kind: Literal["pause"] = "pause"
    reason: str = "the plan waits for a human"


_SCALAR_FIELD = {"set_weight": "weight", "bake": "duration", "pause": "reason", "analyze": "min_samples"}


def _compact_step(value: Any) -> Any:
    """Also accept the short YAML forms `analyze`, `pause`, `set_weight: 10`, `bake: 7d`, `ab_test: {...}`."""
    if isinstance(value, str):
        return {"kind": value}
    if isinstance(value, dict) and "kind" not in value and len(value) == 1:
        ((kind, arg),) = value.items()
        if arg is None:
            return {"kind": kind}
        if isinstance(arg, dict):
            return {"kind": kind, **arg}
        return {"kind": kind, _SCALAR_FIELD.get(kind, "value"): arg}  # an unknown kind fails on its tag
    return value


PlanStep = Annotated[AbTestStep | SetWeightStep | BakeStep | AnalyzeStep | PauseStep,
                     Field(discriminator="kind"), BeforeValidator(_compact_step)]


class AnalysisConfig(BaseModel):
    """How candidate and baseline are compared. Margins are how much worse the candidate may be and still pass."""

    model_config = ConfigDict(extra="forbid")

    alpha: float = Field(default=0.05, gt=0, lt=0.5, description="significance level of every test")
    min_samples: int = Field(default=30, ge=1, description="incidents per arm; fewer is inconclusive, not a verdict")
    min_ttm_samples: int = Field(default=10, ge=1, description="resolved incidents per arm for time-to-mitigate")
    success_margin: float = Field(default=0.10, ge=0, le=1)
    false_positive_margin: float = Field(default=0.10, ge=0, le=1)
    harmful_margin: float = Field(default=0.05, ge=0, le=1)
    ttm_tolerance: float = Field(default=0.20, ge=0, description="candidate's median may be this fraction slower")
    max_extensions: int = Field(default=3, ge=0, description="inconclusive: extend this often, then pause")
    extension: Duration = Field(default=timedelta(days=1))


class GuardrailConfig(BaseModel):
    """Checked every `interval` while the candidate serves traffic, over the incidents of the last `lookback`."""

    model_config = ConfigDict(extra="forbid")

    interval: Duration = Field(default=timedelta(hours=1))
    lookback: Duration = Field(default=timedelta(hours=24))
    min_incidents: int = Field(default=10, ge=1, description="fewer in the lookback: no judgement yet")
    max_harmful_rate: float = Field(default=0.20, ge=0, le=1, description="share of incidents made worse")
    min_success_rate: float | None = Field(default=None, ge=0, le=1)

    @model_validator(mode="after")
    def _windows(self) -> GuardrailConfig:
        if self.lookback < self.interval:
            raise ValueError("lookback must be at least the check interval, or incidents fall between checks")
        return self


class RolloutPlan(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "custom"
    steps: list[PlanStep] = Field(min_length=1)
    analysis: AnalysisConfig = Field(default_factory=AnalysisConfig)
    guardrails: GuardrailConfig = Field(default_factory=GuardrailConfig)

    @model_validator(mode="after")
    def _coherent(self) -> RolloutPlan:
        """Refuse plans that could not mean what they say, before anything starts."""
        weight = 0.0
        analysed = False
        previous: str | None = None
        for number, step in enumerate(self.steps, start=1):
            where = f"step {number} ({step.kind})"
            if step.kind in ("bake", "analyze") and weight == 0:
                raise ValueError(f"{where} comes before any step gives the candidate traffic (set_weight or ab_test)")
            if step.kind in ("set_weight", "ab_test"):
                weight = step.weight
            if step.kind in ("analyze", "ab_test"):
                if weight == 100:
                    raise ValueError(f"{where}: at weight 100 the baseline serves nothing to compare against")
                analysed = True
            if step.kind == "analyze" and previous == "set_weight":
                raise ValueError(f"{where} right after set_weight would see no incidents yet: bake first")
            previous = step.kind
        if not analysed:
            raise ValueError("the plan never analyses the candidate (add analyze or ab_test): a rollout must not "
                             "promote without evidence")
        return self


def describe_step(step: PlanStep) -> str:
    """One line for the UI, the CLI and the decision history."""
    if step.kind == "ab_test":
        return f"A/B test {step.weight:g}% for {format_duration(step.duration)}"
    if step.kind == "set_weight":
        return f"set weight {step.weight:g}%"
    if step.kind == "bake":
        return f"bake {format_duration(step.duration)}"
    if step.kind == "pause":
        return f"pause ({step.reason})"
    return step.kind


# --- routing ----------------------------------------------------------------------------------------------------

class RoutingTable(BaseModel):
    """routing.v1: the traffic split the routing activity applies to every new incident. Written only by the
    rollout workflow. Without a candidate, incidents go to the registry's production version."""

    schema_version: Literal["routing.v1"] = "routing.v1"
    baseline: PolicyRef
    candidate: PolicyRef | None = None
    weight: float = Field(default=0.0, ge=0, le=100, description="% of new incidents to the candidate")
    rollout_id: str | None = None
    reason: str = ""
    updated_at: datetime

    @model_validator(mode="after")
    def _split(self) -> RoutingTable:
        if self.candidate is None and self.weight != 0:
            raise ValueError("a weight without a candidate")
        return self


# --- analysis ---------------------------------------------------------------------------------------------------

Judgement = Literal["pass", "fail", "inconclusive"]
Metric = Literal["success_rate", "time_to_mitigate", "false_positive_rate", "harmful_rate"]


class ArmSummary(BaseModel):
    version: str
    incidents: int
    resolved: int
    false_positives: int
    harmful: int
    median_ttm_s: float | None

    @property
    def success_rate(self) -> float | None:
        return self.resolved / self.incidents if self.incidents else None


class MetricResult(BaseModel):
    metric: Metric
    judgement: Judgement
    candidate: float | None
    baseline: float | None
    test: str
    p_value: float | None = None
    detail: str


class AnalysisRequest(BaseModel):
    candidate: str
    baseline: str
    window_start: datetime
    window_end: datetime
    config: AnalysisConfig
    min_samples: int = Field(ge=1)


class AnalysisResult(BaseModel):
    judgement: Judgement
    reasons: list[str]
    candidate: ArmSummary
    baseline: ArmSummary
    metrics: list[MetricResult]
    window_start: datetime
    window_end: datetime


class GuardrailRequest(BaseModel):
    candidate: str
    since: datetime
    until: datetime
    config: GuardrailConfig


class GuardrailResult(BaseModel):
    breached: bool
    reason: str
    incidents: int
    harmful: int
    resolved: int
    checked_at: datetime


# --- the workflow -----------------------------------------------------------------------------------------------

RolloutPhase = Literal["starting", "running", "paused", "succeeded", "rolled_back", "aborted"]
RollbackTrigger = Literal["analysis", "guardrail", "signal"]
FINISHED: tuple[RolloutPhase, ...] = ("succeeded", "rolled_back", "aborted")


class Decision(BaseModel):
    """One entry of the rollout's history: what happened and why, and who decided when it was a human."""

    at: datetime
    step: int | None = Field(description="index into the plan's steps; None once the plan is done")
    action: str
    reason: str
    by: str = "rollout"


class RolloutPolicies(BaseModel):
    """Defined before the models that hold it: a forward reference leaves them to be rebuilt on first use, which
    Temporal's workflow sandbox cannot do when it decodes an activity result (a replay fails)."""

    candidate: PolicyRef
    baseline: PolicyRef


class RolloutState(BaseModel):
    """Everything the workflow knows, carried across continue-as-new so a new run resumes mid-step."""

    rollout_id: str
    phase: RolloutPhase = "starting"
    started_at: datetime | None = None
    policies: RolloutPolicies | None = Field(default=None, description="how the two versions are served")
    step_index: int = 0
    step_started_at: datetime | None = None
    deadline: datetime | None = Field(default=None, description="end of the current wait (bake, A/B, extension)")
    extensions: int = 0
    weight: float = 0.0
    window_start: datetime | None = Field(default=None, description="when the current weight took effect")
    paused_since: datetime | None = None
    pause_reason: str | None = None
    inconclusive_pause: bool = Field(default=False, description="paused because analysis stayed inconclusive")
    next_guardrail_at: datetime | None = None
    latest_analysis: AnalysisResult | None = None
    latest_guardrail: GuardrailResult | None = None
    decisions: list[Decision] = Field(default_factory=list)
    # controls received but not acted on yet
    skip_step: bool = False
    promote_full: bool = False
    abort: bool = False
    rollback_reason: str | None = None
    rollback_trigger: RollbackTrigger | None = None
    runs: int = Field(default=1, description="workflow runs so far (continue-as-new)")


class RolloutRequest(BaseModel):
    candidate: Version
    baseline: Version
    plan: RolloutPlan
    requested_by: str = Field(min_length=1)
    reason: str = ""
    notify_url: str | None = Field(default=None, pattern=r"^https?://", description="POSTed each rollback event")
    state: RolloutState | None = Field(default=None, description="set by continue-as-new only")

    @model_validator(mode="after")
    def _two_versions(self) -> RolloutRequest:
        if self.candidate == self.baseline:
            raise ValueError("candidate and baseline are the same version")
        return self


class RolloutControl(BaseModel):
    """A human's control: who, and why (recorded in the decision history)."""

    by: str = Field(min_length=1)
    reason: str = ""


class RolloutStatus(BaseModel):
    rollout_id: str
    candidate: str
    baseline: str
    plan: str
    phase: RolloutPhase
    step_index: int
    steps: int
    step: PlanStep | None
    weight: float
    time_left_s: float | None = Field(description="until the current wait ends; frozen while paused")
    pause_reason: str | None
    latest_analysis: AnalysisResult | None
    latest_guardrail: GuardrailResult | None
    decisions: list[Decision]
    runs: int


class RolloutResult(BaseModel):
    rollout_id: str
    candidate: str
    baseline: str
    outcome: Literal["succeeded", "rolled_back", "aborted"]
    reason: str
    decisions: list[Decision]
    latest_analysis: AnalysisResult | None


StageOutcome = Literal["started", "succeeded", "rolled_back", "aborted"]


class StageUpdate(BaseModel):
    """The registry side of a rollout's start or end."""

    candidate: str
    baseline: str
    outcome: StageOutcome
    by: str
    reason: str


class RollbackEvent(BaseModel):
    rollout_id: str
    candidate: str
    baseline: str
    trigger: RollbackTrigger
    reason: str
    at: datetime
    notify_url: str | None = None
