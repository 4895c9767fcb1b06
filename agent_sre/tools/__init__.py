"""The agent's kubectl-like tools over the official `kubernetes` client: the same code for the simulator and a
real cluster. `execute(call, ctx)` is the entry point; the vocabulary is `agent_sre.models.tools.TOOL_SPECS`."""

from agent_sre.tools.context import ToolContext
from agent_sre.tools.executor import execute, execute_invocation

__all__ = ["ToolContext", "execute", "execute_invocation"]
