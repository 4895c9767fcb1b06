"""Continuous learning: what a scheduled cycle is asked to do (learning.input.v1), the learning stream's state in
the object store (learning.state.v1: the watermark and which episodes were learnt from), and one record per cycle
(learning.cycle.v1: the data it used, what it trained, how it was judged, the rollout it started)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agent_sre.models.endings import Outcome
from agent_sre.models.registry import DataItem
from agent_sre.models.reward import RewardConfig
from agent_sre.models.rollout import Duration, RolloutPlan, RolloutRequest
from agent_sre.models.training import EvalReport, GateDecision, RejectedEpisode, TrainingRequest, TrainingStatus

NAME_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"


def default_training() -> TrainingRequest:
    """Off-policy RL on the logged episodes, whichever version served them (docs/continuous-learning.md)."""
    return TrainingRequest(algorithm="offpolicy", base="base", requested_by="continuous-learning")


class LearningConfig(BaseModel):
    """A learning stream: where its state lives, how each cycle trains, and when a cycle has too little to learn."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(default="continuous-learning", pattern=NAME_PATTERN,
                      description="the stream: its schedule's id, and its state and records under learning/<name>/")
    training: TrainingRequest = Field(default_factory=default_training,
                                      description="each cycle's training.request.v1 without its data and version: "
                                                  "algorithm, hyperparameters, compute, evaluation and gate")
    from_production: bool = Field(default=True, description="train from the production version when it is a "
                                                            "model; from the template's base otherwise")
    min_episodes: int = Field(default=20, ge=1, description="fewer usable new episodes: the cycle is skipped and "
                                                            "the data waits for the next one")
    settle_s: float = Field(default=60.0, ge=0, description="objects written this close to the cutoff wait for "
                                                            "the next cycle (a write in flight at the cutoff)")
    late_days: int = Field(default=2, ge=0, description="also list date partitions this many days before the "
                                                        "watermark: an episode is stored under the day it started")
    replay: bool = Field(default=True, description="GRPO trains on the production incidents the simulator can "
                                                   "re-create (otherwise on the template's scenarios)")
    replay_eval_share: float = Field(default=0.2, ge=0, lt=1,
                                     description="share of the re-creatable incidents (by scenario) kept out of "
                                                 "training to evaluate candidate and production offline")
    replay_eval_limit: int = Field(default=20, ge=1, description="at most this many scenarios in that evaluation")
    reward: RewardConfig = Field(default_factory=RewardConfig, description="rewards are recomputed with late "
                                                                           "human feedback folded in")
    rollout_plan: RolloutPlan | None = Field(default=None, description="roll out a candidate that passes every "
                                                                       "gate; None: leave it for an operator")
    rollout_queue: str = Field(default="agent", min_length=1, description="the task queue of ModelRolloutWorkflow")
    rollout_workflow_id: str = Field(default="model-rollout", min_length=1)
    start_at: datetime | None = Field(default=None, description="the first cycle learns from objects written after "
                                                                "this; None: from everything stored")

    @model_validator(mode="after")
    def _cycle_chooses_the_data(self) -> LearningConfig:
        """The template may filter by policy and model version; which objects and scenarios is the cycle's choice."""
        t, wanted = self.training, self.training.data.trajectories
        chosen = [name for name, value in (("version", t.version), ("data.trajectories.since", wanted.since),
                                           ("data.trajectories.limit", wanted.limit),
                                           ("data.trajectories.objects", wanted.objects)) if value]
        if self.replay and t.data.simulated.scenarios:
            chosen.append("data.simulated.scenarios (with replay on)")
        if chosen:
            raise ValueError(f"the training template sets {', '.join(chosen)}; each cycle chooses its own version "
                             "name and data")
        return self


class LearningCycleInput(BaseModel):
    """learning.input.v1: the argument of every ContinuousLearningWorkflow run (stored in its Schedule)."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal["learning.input.v1"] = "learning.input.v1"
    config: LearningConfig = Field(default_factory=LearningConfig)
    cutoff: datetime | None = Field(default=None, description="learn from objects written up to this time; None: "
                                                              "the run's scheduled time (or its start)")


# --- the stream's state ---------------------------------------------------------------------------------------------

class Watermark(BaseModel):
    through: datetime = Field(description="every trajectory object last modified up to here has been considered")
    cycle_id: str = Field(description="the cycle that moved it here")
    committed_at: datetime


class CycleClaim(BaseModel):
    """The running cycle of a stream: one at a time, whatever started it (schedule, backfill, trigger)."""

    cycle_id: str
    workflow_id: str
    run_id: str
    since: datetime


class LearningState(BaseModel):
    """learning.state.v1: one object per stream, changed only by compare-and-swap."""

    schema_version: Literal["learning.state.v1"] = "learning.state.v1"
    name: str = Field(pattern=NAME_PATTERN)
    watermark: Watermark | None = None
    learnt: dict[str, dict[str, str]] = Field(
        default_factory=dict, description="start date (UTC) → episode id (incident/run) → the cycle that learnt "
                                          "from it; dates older than the listing window are dropped")
    claim: CycleClaim | None = None
    committed_cycles: int = 0


# --- one cycle ------------------------------------------------------------------------------------------------------

class QuarantinedObject(BaseModel):
    key: str = Field(description="the trajectory object, left where it is")
    copy_key: str = Field(description="its copy under learning/<name>/quarantine/, beside <copy_key>.reason.json")
    sha256: str
    bytes: int
    reasons: list[str]


class ReplaySet(BaseModel):
    """Production incidents re-created in the simulator: GRPO's scenarios and the offline production evaluation."""

    train: list[str] = Field(default_factory=list, description="scenario names GRPO trains on")
    evaluate: list[str] = Field(default_factory=list, description="scenario names kept out to evaluate on")
    train_file: str | None = Field(default=None, description="the scenario file (on the training workers)")
    evaluate_file: str | None = None
    stored: list[DataItem] = Field(default_factory=list, description="both files, kept with the cycle's record")
    not_replayable: dict[str, int] = Field(default_factory=dict, description="episodes left out, by reason")


class CycleData(BaseModel):
    """What a cycle read and kept: the source objects pinned by hash, what was refused and why."""

    window_start: datetime | None = Field(description="the previous watermark (exclusive); None: the beginning")
    window_end: datetime = Field(description="this cycle's watermark if it commits: the cutoff less settle_s")
    listed: int = Field(default=0, description="trajectory objects in the listed date partitions")
    new_objects: int = Field(default=0, description="of those, last modified inside the window")
    source_objects: int = Field(default=0, description="objects holding the accepted episodes")
    sources: DataItem | None = Field(default=None, description="their keys and hashes (a JSON list of data items "
                                                               "beside the dataset), stored when the cycle trains")
    episodes: int = Field(default=0, description="accepted: valid, complete, new")
    usable: int = Field(default=0, description="accepted episodes the algorithm's stages can learn from")
    nothing_to_learn: str | None = Field(default=None, description="why the algorithm can learn nothing from them")
    counts: dict[str, int] = Field(default_factory=dict, description="read, accepted, and refusals by reason")
    rejected: list[RejectedEpisode] = Field(default_factory=list, description="the first 100 refused episodes")
    quarantined: list[QuarantinedObject] = Field(default_factory=list, description="the first 100 (all are under "
                                                                                   "learning/<name>/quarantine/)")
    late_feedback: int = Field(default=0, description="episodes whose reward took in feedback stored after them")
    dataset: DataItem | None = Field(default=None, description="the accepted episodes as trained on: redacted, "
                                                               "rewards recomputed (JSON lines)")
    replay: ReplaySet = Field(default_factory=ReplaySet)

    @property
    def dataset_key(self) -> str | None:
        return self.dataset.uri.split("/", 3)[3] if self.dataset is not None else None


CycleStatus = Literal["running", "skipped", "registered", "rejected", "failed"]


class RolloutStarted(BaseModel):
    workflow_id: str
    first_execution_run_id: str | None
    request: RolloutRequest


class CycleRecord(BaseModel):
    """learning.cycle.v1: one cycle, as `learn status` and the drill report it. Skipped: nothing trained, the data
    waits. Registered: a candidate passed every gate (and a rollout started, when planned). Rejected: a candidate
    failed a gate and was archived. Failed: an error; nothing was committed."""

    schema_version: Literal["learning.cycle.v1"] = "learning.cycle.v1"
    name: str
    cycle_id: str
    run_id: str
    status: CycleStatus = "running"
    reason: str = ""
    cutoff: datetime
    started_at: datetime
    ended_at: datetime | None = None
    production: str | None = Field(default=None, description="the production version when the cycle began")
    base: str | None = Field(default=None, description="the version trained from")
    data: CycleData | None = None
    training: TrainingStatus | None = Field(default=None, description="the TrainingCycleWorkflow's final status")
    production_eval: list[EvalReport] = Field(default_factory=list,
                                              description="candidate and production on re-created recent incidents")
    production_gate: GateDecision | None = None
    version: str | None = Field(default=None, description="the candidate this cycle trained")
    rollout: RolloutStarted | None = None
    watermark: Watermark | None = Field(default=None, description="set when the cycle committed its data")

    @property
    def committed(self) -> bool:
        return self.watermark is not None


# --- the activities' messages ---------------------------------------------------------------------------------------

class BeginCycle(BaseModel):
    config: LearningConfig
    claim: CycleClaim


class CycleStart(BaseModel):
    skip: str | None = Field(default=None, description="why this cycle does not run (nothing claimed)")
    watermark: Watermark | None = None
    production: str
    base: str = Field(description="the version to train from")
    took_over: str | None = Field(default=None, description="a cycle that had ended without letting go of the stream")


class GatherRequest(BaseModel):
    config: LearningConfig
    cycle_id: str
    cutoff: datetime


class RolloutPrep(BaseModel):
    config: LearningConfig
    candidate: str
    cycle_id: str


class FinishRequest(BaseModel):
    record: CycleRecord
    commit: bool = Field(description="move the watermark over the cycle's data; otherwise only let go of the stream")
    late_days: int


# --- the production drill -------------------------------------------------------------------------------------------

class DrillPlan(BaseModel):
    """`agent-sre drill`: what production serves, how the mix shifts, and how much compute the drill may spend."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="the registered version put in production for the drill")
    cycles: int = Field(default=3, ge=1, description="learning cycles that train, then one window to measure")
    every: Duration = Field(default=timedelta(minutes=10), description="the learning schedule's interval")
    incidents_per_cycle: int = Field(default=20, ge=1, description="incidents served between two cycles (more "
                                                                   "while a rollout needs traffic)")
    concurrency: int = Field(default=2, ge=1)
    max_steps: int = Field(default=15, ge=1, le=100, description="actions per incident")
    mix: list[str] = Field(min_length=1, description="scenario families served before the shift")
    shifted: str = Field(description="the family the mix shifts to")
    shift_after: int = Field(default=0, ge=0, description="incidents served before the shift")
    shift_share: float = Field(default=0.5, gt=0, le=1, description="share of the shifted family afterwards")
    time_limit: Duration = Field(default=timedelta(hours=3))
    escalate: Literal["runbook"] | None = Field(
        default=None, description="who takes over an incident production leaves unhealthy (the on-call, played by "
                                  "the runbook policy): its episode of the incident is stored beside production's, "
                                  "for the cycles to learn from; None: nobody")
    learning: LearningConfig


class DrillIncident(BaseModel):
    ended_at: datetime
    scenario: str
    shifted: bool
    version: str = Field(description="the model version that served it")
    outcome: Outcome
    false_positive: bool
    time_to_mitigate_s: float | None
    escalated: Outcome | None = Field(
        default=None, description="the escalation's outcome, when production left the incident unhealthy")


class WindowStats(BaseModel):
    """Production on the incidents that ended in one window of the drill."""

    incidents: int
    shifted: int
    served_by: dict[str, int]
    shifted_success: float | None
    success: float | None
    false_positive_rate: float | None
    mean_ttm_s: float | None
    escalated: int = Field(default=0, description="incidents handed over to the escalation policy")
    escalations_resolved: int = 0


class DrillCycle(BaseModel):
    record: CycleRecord
    before: WindowStats = Field(description="production on the incidents since the previous cycle ended")
    rollout_outcome: str | None = Field(default=None, description="succeeded, rolled_back or aborted, once over")
    rollout_reason: str | None = None


class DrillReport(BaseModel):
    plan: DrillPlan
    started_at: datetime
    ended_at: datetime | None = None
    shifted_at: datetime | None = None
    cycles: list[DrillCycle] = Field(default_factory=list)
    after: WindowStats | None = Field(default=None, description="production after the last cycle's rollout")
    production_at_end: str | None = None
    notes: list[str] = Field(default_factory=list)
