"""How the LLM policy samples: one config for the local backend and an OpenAI-compatible endpoint alike."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SamplingConfig(BaseModel):
    """Sampling for one policy call. Temperature 0 is greedy decoding. RL rollouts sample at temperature 1 with
    top_p 1, so the recorded logprobs are the policy's own distribution. `constrained`: decode under the action
    grammar (`policy.llm.constraint`), so that every answer is a tool call that parses against the tool schemas
    (or is cut off at `max_new_tokens`)."""

    model_config = ConfigDict(frozen=True)

    temperature: float = Field(default=1.0, ge=0.0, le=5.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    max_new_tokens: int = Field(default=256, ge=1, le=8192,
                                description="a tool call is short; a longer answer is cut off and is invalid")
    constrained: bool = Field(default=True, description="only tokens that keep the answer a valid tool call")
