"""What our spans say, in OpenTelemetry's semantic conventions, so that a tracing backend groups and labels them
without configuration: Kubernetes names (`k8s.*`), GenAI inference spans for policy decisions (`chat {model}`)
and GenAI tool spans for tool calls (`execute_tool {tool}`). The workflow id goes under the key Temporal's tracing
interceptor gives its own spans (`temporalWorkflowID`), so that one search finds every span of an incident.
Attributes of our own are under `agent_sre.`. Where the spans go is `agent_sre.telemetry`'s business.

The GenAI conventions are still in development; these are the names of the current ones
(open-telemetry/semantic-conventions-genai), where `gen_ai.provider.name` has replaced `gen_ai.system`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from agent_sre.models.incident import Incident
from agent_sre.models.policy import PolicyDecision
from agent_sre.models.remediation import PolicyRequest
from agent_sre.models.tools import ToolInvocation, ToolResult
from agent_sre.redaction import redact

tracer = trace.get_tracer("agent_sre")

Attributes = dict[str, AttributeValue]

K8S_NAMESPACE = "k8s.namespace.name"
K8S_DEPLOYMENT = "k8s.deployment.name"
WORKFLOW_ID = "temporalWorkflowID"
ERROR_TYPE = "error.type"
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
TOOL_NAME = "gen_ai.tool.name"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_CALL_ID = "gen_ai.tool.call.id"
MAX_DESCRIPTION = 200  # a status description is a summary; the step itself is in the stored trajectory


def incident_attributes(incident: Incident) -> Attributes:
    """Where the incident is, and which remediation handles it."""
    attributes: Attributes = {K8S_NAMESPACE: incident.namespace, WORKFLOW_ID: incident.workflow_id,
                              "agent_sre.incident.source": incident.source}
    if incident.alert is not None and (deployment := incident.alert.labels.get("deployment")):
        attributes[K8S_DEPLOYMENT] = deployment
    return attributes


@contextmanager
def starting(name: str, incident: Incident) -> Iterator[Span]:
    """The span a starter (the alert receiver, the CLI) opens around starting an incident's workflow. Temporal's
    tracing interceptor puts the current span into the start request's headers, and the workers build the
    workflow's and every activity's spans under it: the incident is one trace, rooted here."""
    with tracer.start_as_current_span(name, attributes=incident_attributes(incident)) as span:
        yield span


def decision_request_attributes(request: PolicyRequest) -> Attributes:
    """A policy decision as a GenAI inference: the policy is the provider, its version the model (the runbook's
    too: one kind of span for every decision, whichever policy makes it)."""
    return {OPERATION: "chat", PROVIDER: request.policy.name, REQUEST_MODEL: request.policy.version,
            K8S_NAMESPACE: request.trajectory.incident.namespace, "agent_sre.step": len(request.trajectory.steps)}


def decision_attributes(decision: PolicyDecision) -> Attributes:
    """What came back. An invalid action is no error of the decision: the model is told on its next turn."""
    attributes: Attributes = {RESPONSE_MODEL: decision.model_version, "agent_sre.decision.valid": decision.action
                              is not None}
    if decision.action is not None:
        attributes["agent_sre.decision.tool"] = decision.action.tool
    tokens = decision.completion_token_ids or decision.completion_logprobs  # one logprob per sampled token
    if tokens is not None:
        attributes[OUTPUT_TOKENS] = len(tokens)
    return attributes


def tool_attributes(invocation: ToolInvocation) -> Attributes:
    """A tool call as a GenAI tool execution; its id is the call's idempotency key (the same on retries)."""
    call = invocation.call
    attributes: Attributes = {OPERATION: "execute_tool", TOOL_NAME: call.tool, TOOL_TYPE: "function",
                              TOOL_CALL_ID: invocation.idempotency_key, K8S_NAMESPACE: invocation.namespace}
    if isinstance(deployment := call.args.get("deployment"), str):
        attributes[K8S_DEPLOYMENT] = deployment
    return attributes


def record_tool_result(span: Span, result: ToolResult) -> None:
    """A refused or failed call is an error of the tool's span (status ERROR, `error.type` refused or tool_error,
    the error as description), as a failed client call is: the operation the span describes did not happen. The
    agent reads the error and goes on, so the activity and the workflow stay OK. A write held for a human's
    approval has not failed: it runs once approved."""
    span.set_attributes({"agent_sre.tool.refused": result.refused,
                         "agent_sre.tool.idempotent_replay": result.idempotent_replay,
                         "agent_sre.tool.needs_approval": result.needs_approval is not None})
    if result.ok or result.needs_approval is not None:
        return
    span.set_attribute(ERROR_TYPE, "refused" if result.refused else "tool_error")
    span.set_status(Status(StatusCode.ERROR, redact(result.error or result.output)[:MAX_DESCRIPTION]))
