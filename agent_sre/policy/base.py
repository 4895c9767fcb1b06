"""The policy interface: one decision per call, from the trajectory so far."""

from __future__ import annotations

import time
from typing import Protocol

from agent_sre.models.policy import PolicyDecision
from agent_sre.models.remediation import PolicyRef
from agent_sre.models.tools import ToolCall
from agent_sre.models.trajectory import Trajectory
from agent_sre.policy.conversation import parse_action, pending_messages, render_action


class Policy(Protocol):
    def decide(self, ref: PolicyRef, trajectory: Trajectory) -> PolicyDecision: ...


class ActionPolicy:
    """Base for policies that choose a ToolCall directly (runbook, scripted): they still speak the shared
    conversation format, so their trajectories are training data exactly like a language model's."""

    def choose(self, ref: PolicyRef, trajectory: Trajectory) -> ToolCall:
        raise NotImplementedError

    def decide(self, ref: PolicyRef, trajectory: Trajectory) -> PolicyDecision:
        started = time.perf_counter()
        completion = render_action(self.choose(ref, trajectory))
        action, invalid = parse_action(completion)  # the same strict gate a language model's answer goes through
        return PolicyDecision(action=action, invalid_reason=invalid, completion=completion,
                              new_messages=pending_messages(trajectory), model_version=ref.version,
                              latency_ms=(time.perf_counter() - started) * 1000)
