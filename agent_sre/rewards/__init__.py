"""Rewards for remediation episodes: an episode total with its breakdown, and per-step shaping rewards.

`compute_reward(trajectory, config)` is the entry point; `RewardConfig.function` picks a registered
`RewardFunction` ("sre", "outcome", "weighted"; see `functions.py` for the exact formulas). A new function is
one class decorated with `@register` (and its name added to `RewardFunctionName`).
"""

from agent_sre.rewards import functions as _functions  # noqa: F401  (registers the functions)
from agent_sre.rewards.base import (
    REWARD_FUNCTIONS,
    EpisodeFacts,
    RewardError,
    RewardFunction,
    compute_reward,
    register,
)
from agent_sre.rewards.steps import step_rewards

__all__ = ["REWARD_FUNCTIONS", "EpisodeFacts", "RewardError", "RewardFunction", "compute_reward", "register",
           "step_rewards"]
