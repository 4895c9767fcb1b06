"""The tool activity (queue `agent-tools`): guardrails, idempotency and rendering live in `agent_sre.tools`; the
scope (which namespaces, which cluster) comes from this worker's settings, whatever the invocation says."""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError

from agent_sre import spans
from agent_sre.config import Settings
from agent_sre.models.tools import ToolInvocation, ToolResult
from agent_sre.scope import ForeignCluster, out_of_scope, worker_cluster
from agent_sre.tools.executor import execute_invocation


class ToolActivities:
    """Built once per worker with its settings: the scope and the write rules are the worker's."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings

    @activity.defn
    def run_tool(self, invocation: ToolInvocation) -> ToolResult:
        """The span covers the scope check too: a call out of scope fails its tool span (status ERROR, the
        exception recorded) as well as the activity."""
        with spans.tracer.start_as_current_span(f"execute_tool {invocation.call.tool}",
                                                attributes=spans.tool_attributes(invocation)) as span:
            result = execute_invocation(in_scope(invocation, self._settings), attempt=activity.info().attempt,
                                        settings=self._settings)
            spans.record_tool_result(span, result)
        return result


def in_scope(invocation: ToolInvocation, settings: Settings) -> ToolInvocation:
    """The invocation on the worker's own cluster, in an allowed namespace; anything else fails the activity for
    good (a retry cannot change the configuration)."""
    try:
        cluster = worker_cluster(invocation.kubeconfig, settings)
    except ForeignCluster as e:
        raise ApplicationError(str(e), type="KubeconfigError", non_retryable=True) from e
    if (why := out_of_scope(invocation.namespace, settings)) is not None:
        raise ApplicationError(why, type="OutOfScope", non_retryable=True)
    return invocation.model_copy(update={"kubeconfig": cluster})
