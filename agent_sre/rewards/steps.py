"""Per-step shaping rewards for credit assignment.

The episode reward says how the incident ended; these say which steps were wasted or wrong, so a policy
gradient does not credit a refused or repeated call with the success of the episode around it. Each step gets
the sum of the penalties that apply to it (from `RewardConfig`), 0.0 when none does:

- invalid action (the completion was not a tool call, or named an unknown tool, or had arguments the tool's
  schema rejects): `invalid_penalty`, and nothing else for what the tool layer then answered;
- a valid call refused by a guardrail or a human: `refused_penalty`;
- a valid call that ran and failed: `tool_error_penalty`;
- the same call (tool and arguments) returned the same result as an earlier step — it could teach the agent
  nothing new: `repeated_call_penalty` (on top of any of the above; the first occurrence is not penalised).

The penalties are in the SRE formula's points; the reward functions on a smaller scale pass their `step_scale`
(outcome: 0.1, weighted: 0.05 — the SRE formula spans about 23 points, theirs 2 and 1). The shaping rewards are not
part of the episode total (see `RewardConfig`).
"""

from __future__ import annotations

import json

from pydantic import ValidationError

from agent_sre.models.reward import RewardConfig
from agent_sre.models.tools import ToolCall, ToolResult
from agent_sre.models.trajectory import Step, Trajectory


def _call_signature(call: ToolCall, result: ToolResult) -> str:
    """Identity of a call and what it returned (timings and replay flags are not what the agent saw)."""
    return json.dumps([call.tool, call.args, result.ok, result.refused, result.error, result.output],
                      sort_keys=True, default=str)


def is_invalid(step: Step) -> bool:
    if step.action is None or step.decision.invalid_reason is not None:
        return True
    try:
        step.action.validate_args()
    except (KeyError, ValidationError):
        return True
    return False


def step_rewards(t: Trajectory, config: RewardConfig, scale: float = 1.0) -> list[float]:
    """One shaping reward per step of `t`, in order, the penalties multiplied by `scale`."""
    seen: set[str] = set()
    rewards: list[float] = []
    for step in t.steps:
        reward = 0.0
        result = step.result
        if is_invalid(step):
            reward += config.invalid_penalty
        elif result is not None and result.refused:
            reward += config.refused_penalty
        elif result is not None and not result.ok:
            reward += config.tool_error_penalty
        if step.action is not None and result is not None:
            signature = _call_signature(step.action, result)
            if signature in seen:
                reward += config.repeated_call_penalty
            seen.add(signature)
        rewards.append(round(reward * scale, 6))
    return rewards
