"""reward.v1: a reward with its breakdown, as stored beside a trajectory; feedback.v1: a rating that came late."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

RewardFunctionName = Literal["sre", "outcome", "weighted"]


class HumanFeedback(BaseModel):
    rating: int = Field(ge=-1, le=1, description="-1 bad, 0 neutral, +1 good")
    comment: str = Field(default="", max_length=4000)
    author: str = Field(default="", max_length=200)
    at: datetime | None = None


class RewardConfig(BaseModel):
    function: RewardFunctionName = "sre"
    # Step-level shaping for credit assignment (added to the step's own reward, not to the episode total), in the
    # SRE formula's points; a function on another scale multiplies them by its `step_scale` (rewards/base.py).
    tool_error_penalty: float = -0.1
    refused_penalty: float = -0.5
    invalid_penalty: float = -0.5
    repeated_call_penalty: float = -0.2


class RewardRecord(BaseModel):
    schema_version: Literal["reward.v1"] = "reward.v1"
    incident_id: str
    model_version: str
    function: RewardFunctionName
    total: float
    components: dict[str, float]
    step_rewards: list[float] = Field(description="per-step shaping rewards, one per trajectory step")
    feedback: list[HumanFeedback] = Field(default_factory=list)


class LateFeedback(BaseModel):
    """A human rating given after an incident's feedback window closed, stored beside its trajectory (one object
    per rating, so concurrent ratings never overwrite each other); learning cycles fold it into the reward."""

    schema_version: Literal["feedback.v1"] = "feedback.v1"
    incident_id: str
    workflow_id: str
    run_id: str
    trajectory_key: str
    feedback: HumanFeedback
