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
    max_length: int = Field(default=2048, ge=64, description="tokens per conversation; longer ones lose their end")
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
    steps: int
    losses: list[float] = Field(description="training loss at each logged step")
    train_runtime_s: float
    train_tokens: int = Field(description="tokens the model read (padding excluded)")
