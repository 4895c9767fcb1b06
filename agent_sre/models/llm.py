"""How the LLM policy samples: one config for the local backend and an OpenAI-compatible endpoint alike."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SamplingConfig(BaseModel):
    """Sampling for one policy call. Temperature 0 is greedy decoding. RL rollouts sample at temperature 1 with
    top_p 1, so the recorded logprobs are the policy's own distribution."""

    model_config = ConfigDict(frozen=True)

    temperature: float = Field(default=1.0, ge=0.0, le=5.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    max_new_tokens: int = Field(default=256, ge=1, le=8192,
                                description="a tool call is short; a longer answer is cut off and is invalid")
