"""Training configs and results (SFT warm start; GRPO to follow)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class SFTConfig(BaseModel):
    """Supervised fine-tuning on expert episodes. Defaults fit a CPU run of minutes for the 135M model."""

    model_config = ConfigDict(extra="forbid")

    expert_policies: list[str] = Field(default_factory=lambda: ["runbook"], min_length=1,
                                       description="whose resolved episodes are expert data")
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
    seed: int = 0
    logging_steps: int = Field(default=1, ge=1)


class SFTResult(BaseModel):
    output_dir: str = Field(description="the trained model directory: safetensors weights + tokenizer")
    base_model: str
    examples: int = Field(description="distinct expert conversations trained on")
    truncated: int = Field(description="conversations longer than max_length, whose later turns were cut off")
    steps: int
    losses: list[float] = Field(description="training loss at each logged step")
    train_runtime_s: float
    train_tokens: int = Field(description="tokens the model read (padding excluded)")


class GRPOTrainingConfig(BaseModel):
    """Stage-1 RL on simulated incidents. Defaults fit a CPU run of minutes for the 135M model."""

    model_config = ConfigDict(extra="forbid")

    max_steps: int = Field(default=4, ge=1)
    group_size: int = Field(default=4, ge=2, description="rollouts of the same scenario and seed per group")
    groups_per_step: int = Field(default=1, ge=1)
    learning_rate: float = Field(default=1e-6, gt=0)
    beta: float = Field(default=0.04, ge=0, description="KL penalty to the reference (initial) model")
    epsilon: float = Field(default=0.2, gt=0, description="clip range of the importance ratio")
    temperature: float = Field(default=1.0, gt=0)
    max_new_tokens: int = Field(default=96, ge=8, description="per turn: a tool call is short")
    max_turns: int = Field(default=8, ge=1, description="actions per episode")
    step_cost_s: float = Field(default=3.0, ge=0, description="simulated seconds each action takes")
    reward_function: Literal["sre", "outcome", "weighted"] = "sre"
    curriculum: bool = Field(default=True, description="sample fault families neither solved nor hopeless")
    curriculum_floor: float = Field(default=0.1, gt=0, le=1, description="least sampling weight of a family")
    device: str = "auto"
    seed: int = 0


class GRPOStepStats(BaseModel):
    step: int
    mean_group_reward: float
    success_rate: float
    invalid_rate: float
    generated_tokens: int
    rollout_s: float


class GRPOResult(BaseModel):
    output_dir: str
    base_model: str
    steps: list[GRPOStepStats] = Field(description="the learning curve: one row per rollout batch")
    train_runtime_s: float
    generated_tokens: int
    losses: list[float] = Field(default_factory=list)
