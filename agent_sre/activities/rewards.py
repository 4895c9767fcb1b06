"""The reward activity: scores a judged episode. Pure computation, so it is deterministic and retry-safe."""

from __future__ import annotations

from temporalio import activity

from agent_sre import rewards
from agent_sre.models.remediation import RewardRequest
from agent_sre.models.reward import RewardRecord


@activity.defn
def compute_reward(req: RewardRequest) -> RewardRecord:
    return rewards.compute_reward(req.trajectory, req.config)
