"""A policy that replays a fixed list of actions (tests, demos of guardrails), then finishes."""

from __future__ import annotations

from agent_sre.models.remediation import PolicyRef
from agent_sre.models.tools import ToolCall
from agent_sre.models.trajectory import Trajectory
from agent_sre.policy.base import ActionPolicy

DONE = ToolCall(tool="finish", args={"diagnosis": "scripted run complete", "summary": "replayed the script"})


class ScriptedPolicy(ActionPolicy):
    def choose(self, ref: PolicyRef, trajectory: Trajectory) -> ToolCall:
        script = ref.script or []
        step = len(trajectory.steps)
        return script[step] if step < len(script) else DONE
