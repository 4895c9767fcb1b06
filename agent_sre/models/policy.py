"""What a policy returns for one step: the action plus everything RL needs to learn from it later."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from agent_sre.models.tools import ToolCall


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant", "tool"]
    content: str


class PolicyDecision(BaseModel):
    """One policy call. `new_messages` + `completion` extend the trajectory's conversation, so the exact prompt
    the model saw at this step is the conversation up to here: nothing is re-rendered at training time."""

    action: ToolCall | None = Field(description="None when the completion was not a valid action")
    invalid_reason: str | None = None
    completion: str = ""
    new_messages: list[ChatMessage] = Field(default_factory=list)
    completion_token_ids: list[int] | None = None
    completion_logprobs: list[float] | None = None
    model_version: str
    latency_ms: float = 0.0
