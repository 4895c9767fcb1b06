"""Training configs and results, and the training cycle's messages (training.request.v1, training.status.v1)."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator

from agent_sre.models.episode import OutcomeStats
from agent_sre.models.registry import VERSION_PATTERN, DataItem, FileEntry, Stage
from agent_sre.models.reward import RewardFunctionName

Precision = Literal["auto", "fp32", "bf16"]
PRECISION_HELP = ("training arithmetic: bf16 autocast over fp32 weights, fp32, or auto (bf16 on a GPU that computes "
                  "it natively, fp32 on a CPU)")
SIMULATED_MAX_ACTIONS = 12
"""Actions per simulated episode, for every policy alike: the runbook's expert episodes (the SFT data), GRPO's
rollouts and the held-out evaluation. The runbook's longest episode takes 10 (seven reads, the fix, its check, the
finish), so a model taught by it keeps two actions for a slip; with 10 it ran out in half the held-out scenarios
(docs/benchmarks.md). An incident that starts with several services unhealthy gets
SIMULATED_ACTIONS_PER_EXTRA_SERVICE (10) more for each after the first (`simulated_max_actions`). Production incidents
get `RemediationLimits.max_steps` (15)."""
MAX_SIMULATED_ACTIONS = 100  # what `RemediationLimits.max_steps` allows
SIMULATED_ACTIONS_PER_EXTRA_SERVICE = 10
"""Actions a simulated episode gains for each service after the first that is unhealthy when the alert fires. After a
fix checks out the policies list the pods again and mend the next failing service (the deployment, pod, logs and
history read again, the fix, its check): the expert's longest two-service episode takes 20 actions, 8 more than its
longest one-service episode, so a model taught by it keeps two for a slip, as SIMULATED_MAX_ACTIONS leaves
(bench/policies.py)."""


def simulated_max_actions(unhealthy_services: int, base: int = SIMULATED_MAX_ACTIONS,
                          per_extra_service: int = SIMULATED_ACTIONS_PER_EXTRA_SERVICE) -> int:
    """The action budget of one simulated episode: `base`, plus `per_extra_service` for each service after the first
    that is unhealthy when the alert fires, at most `MAX_SIMULATED_ACTIONS`.

    The budget is the environment's time box, like an on-call's, and is sized by what the namespace shows rather than
    by the scenario's number of faults: the unhealthy services are what any dashboard (or `list_pods` and
    `get_endpoints`) shows at the alert, so a policy that reads its budget learns nothing its tools would not tell it,
    and a real incident could be sized the same way. On every scenario of the catalog and both evaluation suites the
    two counts agree (a fault's callers stay healthy in the observer's eyes); a fault that brings down several
    services only gets more room."""
    if unhealthy_services < 0 or base < 1 or per_extra_service < 0:
        raise ValueError(f"need unhealthy_services >= 0, base >= 1, per_extra_service >= 0; got {unhealthy_services}, "
                         f"{base}, {per_extra_service}")
    return min(base + per_extra_service * max(unhealthy_services - 1, 0), max(base, MAX_SIMULATED_ACTIONS))

MAX_ACTION_TOKENS = 96
"""Tokens a model may generate for one action in simulated episodes (GRPO's rollouts, the held-out evaluation). The
runbook's longest action, an escalation that names the fault and the failed fix, takes 63 SmolLM2 tokens and its end
token one more: all of the 64 that `bench/training.py` used to allow, so a student copying it for a longer name would
be cut off mid-JSON, an invalid action. A tool call that ends sooner costs nothing for the room."""


class SFTConfig(BaseModel):
    """Supervised fine-tuning on expert episodes. Defaults fit a CPU run of minutes for the 135M model."""

    model_config = ConfigDict(extra="forbid")

    expert_policies: list[str] = Field(default_factory=lambda: ["runbook"], min_length=1,
                                       description="whose cleanly resolved or honestly escalated episodes are "
                                                   "expert data")
    max_steps: int = Field(default=30, ge=1)
    learning_rate: float = Field(default=5e-5, gt=0)
    lr_scheduler: Literal["constant", "linear", "cosine"] = "linear"
    warmup_steps: int = Field(default=0, ge=0)
    weight_decay: float = Field(default=0.0, ge=0)
    batch_size: int = Field(default=1, ge=1, description="conversations per device per step")
    gradient_accumulation_steps: int = Field(default=1, ge=1)
    max_length: int = Field(default=4096, ge=64, description="tokens per conversation; longer ones lose their end "
                                                             "(simulator episodes of the runbook: 3,000-4,600)")
    activation_checkpointing: bool = Field(default=False, description="trade compute for memory (big models)")
    lora_r: int | None = Field(default=None, ge=1, description="train LoRA adapters of this rank (merged on save)")
    lora_alpha: int = Field(default=16, ge=1)
    device: str = Field(default="auto", description="auto (a GPU when there is one) or cpu")
    precision: Precision = Field(default="auto", description=PRECISION_HELP)
    seed: int = 0
    logging_steps: int = Field(default=1, ge=1)


class SFTResult(BaseModel):
    output_dir: str = Field(description="the trained model directory: safetensors weights + tokenizer")
    adapter_dir: str | None = Field(default=None, description="with lora_r: the LoRA adapter alone (peft format)")
    base_model: str
    examples: int = Field(description="distinct expert conversations trained on")
    truncated: int = Field(description="conversations longer than max_length, whose later turns were cut off")
    steps: int
    losses: list[float] = Field(description="training loss at each logged step")
    train_runtime_s: float
    train_tokens: int = Field(description="tokens the model read (padding excluded)")
    bf16: bool | None = Field(default=None, description="trained with bf16 autocast (None: not recorded)")
    device: str | None = Field(default=None, description="trained on: a GPU's product name, or cpu (None: not "
                                                         "recorded)")


class GRPOTrainingConfig(BaseModel):
    """Stage-1 RL on simulated incidents. Defaults fit a CPU run of minutes for the 135M model."""

    model_config = ConfigDict(extra="forbid")

    max_steps: int = Field(default=4, ge=1)
    group_size: int = Field(default=4, ge=2, description="rollouts of the same scenario and seed per group")
    groups_per_step: int = Field(default=1, ge=1)
    learning_rate: float = Field(default=1e-6, gt=0)
    beta: float = Field(default=0.04, ge=0, description="KL penalty to the reference (initial) model")
    epsilon: float = Field(default=0.2, gt=0, description="clip range of the importance ratio")
    scale_rewards: Literal["group", "batch", "none"] = Field(
        default="batch", description="advantage = return - its group's mean, divided by the group's standard "
                                     "deviation, the batch's, or nothing (docs/training-cycle.md)")
    temperature: float = Field(default=1.0, gt=0)
    max_new_tokens: int = Field(default=MAX_ACTION_TOKENS, ge=8, description="per turn: a tool call is short")
    max_turns: int = Field(default=SIMULATED_MAX_ACTIONS, ge=1, description="actions per episode of one unhealthy "
                                                                           "service (or none)")
    extra_turns_per_service: int = Field(default=SIMULATED_ACTIONS_PER_EXTRA_SERVICE, ge=0,
                                         description="more actions for each further service unhealthy at the alert "
                                                     "(simulated_max_actions)")
    step_cost_s: float = Field(default=3.0, ge=0, description="simulated seconds each action takes")
    reward_function: Literal["sre", "outcome", "weighted"] = "sre"
    curriculum: bool = Field(default=True, description="sample fault families neither solved nor hopeless")
    curriculum_floor: float = Field(default=0.1, gt=0, le=1, description="least sampling weight of a family")
    mask_penalised_turns: bool = Field(
        default=False, description="in a rollout that beat its group's mean return, leave the turns with a negative "
                                   "step reward (invalid, refused, failed or repeated actions) out of the loss, so a "
                                   "good episode does not reinforce its bad actions; a rollout below the mean still "
                                   "pushes them down")
    probe_scenarios: int = Field(
        default=0, ge=0, description="training scenarios, one fault family after another, played greedily before "
                                     "the first step and every `probe_every` steps: a learning curve that the "
                                     "curriculum's choice of scenarios does not move (0: no probe)")
    probe_every: int = Field(default=1, ge=1, description="optimizer steps between probes (and after the last)")
    device: str = "auto"
    precision: Precision = Field(default="auto", description=PRECISION_HELP)
    seed: int = 0


class GRPOStepStats(BaseModel):
    step: int
    mean_group_reward: float
    success_rate: float
    invalid_rate: float
    generated_tokens: int
    sequence_tokens: int = Field(default=0, description="prompt + completion tokens the update reads")
    rollout_s: float


class GRPOProbe(BaseModel):
    """The policy after `step` optimizer steps, played greedily on the fixed probe scenarios."""

    step: int
    success_rate: float
    mean_return: float = Field(description="outcome reward + per-step shaping, as GRPO's episode return")
    episodes: int


class GRPOResult(BaseModel):
    output_dir: str
    base_model: str
    steps: list[GRPOStepStats] = Field(description="the learning curve: one row per rollout batch this process played")
    logged_rewards: dict[int, float] = Field(
        default_factory=dict, description="mean episode return per optimizer step as the trainer logged it, every "
                                          "step of the run including those before a resume (from its checkpoint)")
    train_runtime_s: float
    generated_tokens: int
    losses: list[float] = Field(default_factory=list)
    probes: list[GRPOProbe] = Field(default_factory=list, description="the probe curve, every step of the run "
                                                                      "including those before a resume")
    bf16: bool | None = Field(default=None, description="trained with bf16 autocast (None: not recorded)")
    device: str | None = Field(default=None, description="trained on: a GPU's product name, or cpu (None: not "
                                                         "recorded)")


class OffPolicyConfig(BaseModel):
    """Off-policy RL on logged episodes: a production incident happens once, so it cannot be re-sampled in groups
    as GRPO needs (docs/continuous-learning.md). Defaults fit a CPU run of minutes for the 135M model."""

    model_config = ConfigDict(extra="forbid")

    method: Literal["awpg", "kto"] = Field(
        default="awpg", description="awpg: advantage-weighted policy gradient with truncated importance ratios "
                                    "against the logged logprobs; kto: TRL's KTO on desirable/undesirable turns")
    max_steps: int = Field(default=20, ge=1)
    batch_size: int = Field(default=4, ge=2, description="episodes (awpg) or turns (kto) per device per step")
    gradient_accumulation_steps: int = Field(default=1, ge=1)
    learning_rate: float = Field(default=1e-6, gt=0)
    beta: float = Field(default=0.1, ge=0, description="tie to the starting model: the KL penalty's weight (awpg), "
                                                       "KTO's beta (kto)")
    reward_function: RewardFunctionName = Field(default="sre", description="returns are recomputed with it, so "
                                                                           "episodes scored at different times compare")
    baseline: Literal["fault_class", "global"] = Field(
        default="fault_class", description="an episode is compared with the other episodes of its fault class (the "
                                           "alert's name when unknown), or with all other episodes")
    min_class_episodes: int = Field(default=2, ge=2, description="a class with fewer episodes uses the global baseline")
    scale_advantages: bool = Field(default=True, description="divide advantages by the returns' standard deviation")
    class_weights: Literal["none", "balanced"] = Field(
        default="none", description="balanced: every fault class weighs the same in the update, whatever its number "
                                    "of episodes (advantages times episodes / (classes × the class's episodes))")
    negative_advantages: Literal["keep", "drop"] = Field(
        default="keep", description="drop: an episode worse than its baseline gets advantage 0, so nothing is pushed "
                                    "down and the update imitates the better episodes, weighted by advantage")
    rehearsal_advantage: float = Field(default=1.0, gt=0, description="the advantage of every rehearsed expert "
                                                                     "episode (data.rehearsal), in the units of "
                                                                     "the new episodes' scaled advantages")
    ratio_min: float = Field(default=0.0, ge=0, le=1, description="awpg: importance ratios are truncated to "
                                                                  "[ratio_min, ratio_max]")
    ratio_max: float = Field(default=3.0, ge=1, description="awpg: see ratio_min (1 and 1: no correction)")
    missing_logprobs: Literal["on_policy", "exclude"] = Field(
        default="on_policy", description="awpg, for actions logged without logprobs (the runbook, an endpoint "
                                         "without them): importance ratio 1, or leave their episodes out")
    temperature: float = Field(default=1.0, gt=0, description="awpg: the temperature the behaviour policy sampled "
                                                              "at (its logged logprobs are under it)")
    max_length: int = Field(default=4096, ge=64, description="tokens per episode (awpg) or turn (kto); longer ones "
                                                             "lose their end")
    device: str = Field(default="auto", description="auto (a GPU when there is one) or cpu")
    precision: Precision = Field(default="auto", description=PRECISION_HELP)
    seed: int = 0


class OffPolicyStepStats(BaseModel):
    step: int
    episodes: int
    mean_return: float
    importance_ratio_mean: float | None = Field(default=None, description="current/behaviour policy probability "
                                                                          "over the tokens with a logged logprob, "
                                                                          "before truncation")
    clipped_fraction: float = Field(description="of those tokens, how many had their ratio truncated")
    scored_tokens: int = Field(description="model tokens with a logged logprob")
    trained_tokens: int = Field(description="model tokens (tool outputs excluded)")
    sequence_tokens: int = Field(default=0, description="prompt, model and tool-output tokens of the batch (padding "
                                                        "excluded): what each forward pass reads")


class OffPolicyResult(BaseModel):
    output_dir: str
    base_model: str
    method: Literal["awpg", "kto"]
    episodes: int = Field(description="logged episodes learnt from")
    skipped: dict[str, int] = Field(default_factory=dict, description="episodes left out, by reason")
    classes: dict[str, int] = Field(description="episodes per baseline class")
    examples: int = Field(description="awpg: episodes; kto: turns")
    desirable: int = Field(default=0, description="kto: turns to make likelier")
    undesirable: int = Field(default=0, description="kto: turns to make less likely")
    truncated: int = Field(description="examples longer than max_length, whose end was cut off")
    steps: int
    losses: list[float] = Field(description="training loss at each logged step")
    step_stats: list[OffPolicyStepStats] = Field(default_factory=list, description="awpg: one row per batch")
    train_runtime_s: float
    train_tokens: int = Field(description="tokens of the examples trained on, padding excluded (awpg: with the tool "
                                          "outputs, which TRL's token count leaves out)")


# --- the training cycle: training.request.v1 in, training.status.v1 out -----------------------------------------

Algorithm = Literal["sft", "grpo", "sft+grpo", "offpolicy", "offpolicy+grpo"]
TrainingStage = Literal["sft", "grpo", "offpolicy"]
Compute = Literal["cpu", "gpu1", "multigpu-fsdp", "multigpu-deepspeed"]
TrainingPhase = Literal["collecting", "training", "evaluating", "gating", "registered", "archived", "stopped"]


class TrajectoryFilter(BaseModel):
    """Which stored episodes (trajectory store) SFT and off-policy RL may learn from; the expert filter of
    `SFTConfig` applies after."""

    model_config = ConfigDict(extra="forbid")

    since: date | None = Field(default=None, description="episodes started on or after this UTC date")
    written_until: AwareDatetime | None = Field(
        default=None, description="episodes stored at or before this instant, when listing (a learning cycle's "
                                  "window end: a retried or backfilled cycle reads what its own time saw)")
    model_versions: list[str] = Field(default_factory=list, description="served by these versions; empty: any")
    policies: list[str] = Field(default_factory=list, description="acted by these policies; empty: any")
    limit: int | None = Field(default=None, ge=1, description="at most this many accepted episodes (oldest first)")
    objects: list[str] = Field(default_factory=list, description="read exactly these object keys instead of listing "
                                                                 "the trajectory store (a learning cycle's dataset)")
    resolved_only: bool = Field(default=False, description="only episodes that finished on their own without an "
                                                           "invalid action and that the observer judged resolved "
                                                           "without a false positive (an expert's demonstrations)")
    per_fault_class: int | None = Field(default=None, ge=1, description="at most this many accepted episodes of "
                                                                        "each fault class (the alert's name when "
                                                                        "unknown), the first ones read")
    exclude_scenarios: list[str] = Field(default_factory=list, description="leave out the episodes of these "
                                                                       "simulated scenarios (a learning cycle's "
                                                                       "production gate re-creates them)")


class SimulatedData(BaseModel):
    """GRPO's data is generated: rollouts on simulated faults from these scenarios."""

    model_config = ConfigDict(extra="forbid")

    scenarios: str | None = Field(default=None, description="scenario file or directory; None: the training catalog")


class DataSelection(BaseModel):
    model_config = ConfigDict(extra="forbid")

    trajectories: TrajectoryFilter = Field(default_factory=TrajectoryFilter, description="for SFT and off-policy RL")
    rehearsal: TrajectoryFilter | None = Field(
        default=None, description="off-policy RL: expert episodes imitated alongside the new ones at a fixed "
                                  "advantage (OffPolicyConfig.rehearsal_advantage), so that fault types the new "
                                  "episodes lack are not forgotten; only resolved_only episodes, none of the new ones, "
                                  "none of the evaluation suite's scenarios")
    simulated: SimulatedData = Field(default_factory=SimulatedData, description="for GRPO")


class GateTolerances(BaseModel):
    """How much worse than its parent (absolute rates, 0-1) a candidate may be and still register."""

    model_config = ConfigDict(extra="forbid")

    success_rate: float = Field(default=0.0, ge=0, le=1, description="success it may lose")
    false_positive_rate: float = Field(default=0.0, ge=0, le=1, description="false positives it may add")
    harmful_rate: float = Field(default=0.0, ge=0, le=1, description="harmful outcomes it may add")
    invalid_action_rate: float = Field(default=0.0, ge=0, le=1, description="invalid actions it may add")


class EvaluationConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    suite: str | None = Field(default=None, description="scenario file or directory; None: the held-out suite")
    limit: int | None = Field(default=None, ge=1, description="only N scenarios of the suite, taken across its "
                                                               "fault types (one of each before a second of any)")
    max_turns: int = Field(default=SIMULATED_MAX_ACTIONS, ge=1, description="actions per episode of one unhealthy "
                                                                           "service (or none)")
    extra_turns_per_service: int = Field(default=SIMULATED_ACTIONS_PER_EXTRA_SERVICE, ge=0,
                                         description="more actions for each further service unhealthy at the alert "
                                                     "(simulated_max_actions)")
    max_new_tokens: int = Field(default=MAX_ACTION_TOKENS, ge=8)
    batch: int = Field(default=16, ge=1, description="episodes per forward pass")
    tolerances: GateTolerances = Field(default_factory=GateTolerances)


class TrainingRequest(BaseModel):
    """training.request.v1: what to train, from what, on which data and compute, and how to judge the result."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal["training.request.v1"] = "training.request.v1"
    algorithm: Algorithm
    base: str = Field(pattern=VERSION_PATTERN, description="a registered LLM version, or 'base' (converted SmolLM2)")
    version: str | None = Field(default=None, pattern=VERSION_PATTERN,
                                description="the candidate's version name; None: derived from the workflow id")
    data: DataSelection = Field(default_factory=DataSelection)
    sft: SFTConfig | None = Field(default=None, description="SFT hyperparameters (defaults when the algorithm has SFT)")
    grpo: GRPOTrainingConfig | None = Field(default=None, description="GRPO hyperparameters (likewise)")
    offpolicy: OffPolicyConfig | None = Field(default=None, description="off-policy RL hyperparameters (likewise)")
    compute: Compute = Field(default="cpu", description="the accelerate config: infra/accelerate/<compute>.yaml")
    checkpoint_steps: int = Field(default=10, ge=1, description="save (and upload) a checkpoint every N steps")
    time_limit_h: float = Field(default=24.0, gt=0, description="the training activity's start-to-close timeout")
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    requested_by: str = Field(default="agent-sre", min_length=1)
    reason: str = ""

    @model_validator(mode="after")
    def _stage_configs(self) -> TrainingRequest:
        """Each stage of the algorithm gets its config (defaults when left out); a config for a stage the
        algorithm does not run is a mistake worth reporting, not ignoring."""
        stages = self.stages
        for stage, config_type in (("sft", SFTConfig), ("grpo", GRPOTrainingConfig), ("offpolicy", OffPolicyConfig)):
            if stage in stages and getattr(self, stage) is None:
                setattr(self, stage, config_type())
            elif stage not in stages and getattr(self, stage) is not None:
                raise ValueError(f"a {stage} config was given but algorithm {self.algorithm!r} has no {stage} stage")
        if (rehearsal := self.data.rehearsal) is not None:
            if "offpolicy" not in stages:
                raise ValueError(f"data.rehearsal is for off-policy RL; algorithm {self.algorithm!r} has no offpolicy "
                                 "stage")
            if not rehearsal.resolved_only:
                raise ValueError("data.rehearsal imitates its episodes, so it must set resolved_only: true")
        return self

    @property
    def stages(self) -> list[TrainingStage]:
        return self.algorithm.split("+")  # type: ignore[return-value]

    @property
    def needs_episodes(self) -> bool:
        """SFT and off-policy RL learn from stored episodes; GRPO generates its own."""
        return "sft" in self.stages or "offpolicy" in self.stages


class RejectedEpisode(BaseModel):
    key: str = Field(description="object key of the stored episode")
    line: int = Field(description="line in the object (JSON lines), from 1")
    episode: str | None = Field(default=None, description="incident id / run id, when the line parsed")
    reasons: list[str]


class DataManifest(BaseModel):
    """The validated training data: the objects used, pinned by hash, and what was left out and why."""

    items: list[DataItem] = Field(default_factory=list, description="stored objects holding accepted episodes")
    episodes: int = Field(default=0, description="accepted episodes")
    expert_episodes: int = Field(default=0, description="accepted episodes SFT imitates (see SFTConfig)")
    rehearsal: DataManifest | None = Field(default=None, description="the rehearsed expert episodes "
                                                                     "(data.rehearsal), validated alike")

    @property
    def learnt_from(self) -> list[DataItem]:
        """Every object the version learns from: the episodes' and the rehearsed ones' (its lineage)."""
        return self.items + (self.rehearsal.items if self.rehearsal else [])
    rejected: list[RejectedEpisode] = Field(default_factory=list, description="the first 100 rejections")
    counts: dict[str, int] = Field(default_factory=dict, description="read, accepted, and rejections by reason")
    scenarios: list[str] = Field(default_factory=list, description="GRPO's scenario names")


class TrainingMetrics(BaseModel):
    """The latest figures of a training run (what the activity heartbeats and `progress` shows)."""

    stage: TrainingStage
    step: int = 0
    max_steps: int | None = None
    loss: float | None = None
    reward: float | None = None
    kl: float | None = None
    at: datetime


class TrainingProgress(BaseModel):
    """One line of the training process's progress file (JSON lines)."""

    event: Literal["log", "checkpoint", "stage_done", "done"]
    metrics: TrainingMetrics | None = None
    path: str | None = Field(default=None, description="checkpoint: its directory; stage_done: the stage's model")
    sft: SFTResult | None = None
    grpo: GRPOResult | None = None
    offpolicy: OffPolicyResult | None = None


class StoredDir(BaseModel):
    """A directory uploaded to the object store (checkpoint or stage model), with its files' hashes."""

    prefix: str
    files: list[FileEntry]


class StoredStage(BaseModel):
    model: StoredDir
    sft: SFTResult | None = None
    grpo: GRPOResult | None = None
    offpolicy: OffPolicyResult | None = None


class TrainHeartbeat(BaseModel):
    """Heartbeat details of `train_policy`: enough for a retried attempt to resume where the last one stopped."""

    metrics: TrainingMetrics | None = None
    checkpoint: StoredDir | None = Field(default=None, description="latest checkpoint of the unfinished stage")
    finished: dict[TrainingStage, StoredStage] = Field(default_factory=dict)
    pid: int | None = Field(default=None, description="the training process (group leader), for operators")


class TrainJob(BaseModel):
    request: TrainingRequest
    data: DataManifest
    version: str = Field(pattern=VERSION_PATTERN)
    progress_to: str | None = Field(default=None, description="workflow id to send progress signals to")


class TrainedModel(BaseModel):
    version: str
    parent: str | None = Field(description="None when trained from the unregistered 'base' model")
    launcher: str = Field(description="how the training process was started (accelerate, or why not)")
    resumed_from: str | None = Field(default=None, description="object prefix of the checkpoint resumed from")
    sft: SFTResult | None = None
    grpo: GRPOResult | None = None
    offpolicy: OffPolicyResult | None = None
    metrics: TrainingMetrics | None = None


class EvalRequest(BaseModel):
    version: str
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    store: bool = Field(default=True, description="store the results with the version (registered versions)")


class EvalReport(BaseModel):
    version: str
    suite: str = Field(description="suite id: directory name + fingerprint of its scenarios and settings")
    scenarios: int
    rows: list[OutcomeStats]
    stored: bool = Field(description="stored with the version in the registry")
    reused: bool = Field(default=False, description="read from the registry instead of evaluated again")

    @property
    def overall(self) -> OutcomeStats:
        return next(r for r in self.rows if r.group == "all")


class GateRequest(BaseModel):
    candidate: EvalReport
    parent: EvalReport
    tolerances: GateTolerances
    by: str


class GateDecision(BaseModel):
    passed: bool
    reasons: list[str]
    stage: Stage = Field(description="the candidate's stage after the gate")


class ArchiveRequest(BaseModel):
    """Archive a candidate that a stopped or failed cycle registered but never judged. Only the version trained
    for `training_request` is touched: a name taken by another training is left alone."""

    version: str
    training_request: dict[str, Any]
    by: str
    reason: str


class TrainingStatus(BaseModel):
    """training.status.v1: where a training cycle stands, and at the end, what came of it."""

    schema_version: Literal["training.status.v1"] = "training.status.v1"
    workflow_id: str
    phase: TrainingPhase
    algorithm: Algorithm
    base: str
    candidate: str | None = None
    data: DataManifest | None = None
    metrics: TrainingMetrics | None = None
    trained: TrainedModel | None = None
    evaluation: list[EvalReport] = Field(default_factory=list, description="candidate and parent on the suite")
    gate: GateDecision | None = None
    registered: bool = Field(default=False, description="the candidate is registered and passed the gate")
    stop_reason: str | None = None
