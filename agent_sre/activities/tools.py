"""The tool activity (queue `agent-tools`): guardrails, idempotency and rendering live in `agent_sre.tools`."""

from __future__ import annotations

from opentelemetry import trace
from temporalio import activity

from agent_sre.models.tools import ToolInvocation, ToolResult
from agent_sre.tools.executor import execute_invocation

tracer = trace.get_tracer("agent_sre.tools")


@activity.defn
def run_tool(invocation: ToolInvocation) -> ToolResult:
    with tracer.start_as_current_span(f"tool {invocation.call.tool}") as span:
        result = execute_invocation(invocation, attempt=activity.info().attempt)
        span.set_attributes({"tool": invocation.call.tool, "namespace": invocation.namespace, "ok": result.ok,
                             "refused": result.refused, "idempotent_replay": result.idempotent_replay,
                             "duration_ms": result.duration_ms})
    return result
