"""Connecting to Temporal and starting our workflows: the SDK entry point other teams' code can use too."""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass, replace
from typing import Any, Literal

from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, DefaultFailureConverterWithEncodedAttributes
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from agent_sre.codec import payload_codec
from agent_sre.config import Settings, get_settings
from agent_sre.models.incident import Incident
from agent_sre.models.remediation import PolicyRef, RemediationRequest, TaskQueues
from agent_sre.stack.temporal import SEARCH_ATTRIBUTES
from agent_sre.workflows.incident import IncidentRemediationWorkflow


def data_converter(settings: Settings) -> DataConverter:
    """The pydantic data converter; with a payload key configured, every payload sealed by the codec, and failure
    messages and stack traces moved into the (sealed) encoded attributes: an activity's error can quote a secret."""
    codec = payload_codec(settings)
    if codec is None:
        return pydantic_data_converter
    return replace(pydantic_data_converter, payload_codec=codec,
                   failure_converter_class=DefaultFailureConverterWithEncodedAttributes)


async def connect(settings: Settings | None = None) -> Client:
    """A client with our data converter (`data_converter`) and the OpenTelemetry tracing interceptor. Workers
    built on it use its converter, so they seal and open payloads with the same keys."""
    settings = settings or get_settings()
    return await Client.connect(settings.temporal_address, namespace=settings.temporal_namespace,
                                data_converter=data_converter(settings), interceptors=[TracingInterceptor()])


async def unregistered_search_attributes(client: Client) -> dict[str, str]:
    """Our custom search attributes (name: type) that the client's namespace lacks.

    A workflow that sets an unregistered attribute fails its workflow task and retries it until someone registers
    the attribute: every remediation would stall there."""
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=client.namespace))
    return {key: kind for key, kind in SEARCH_ATTRIBUTES.items() if key not in listed.custom_attributes}


def task_queues(settings: Settings) -> TaskQueues:
    return TaskQueues(tools=settings.queue_tools, policy=settings.queue_policy, tool_execution=settings.tool_execution)


StartHandling = Literal["started", "attached", "finished"]


@dataclass(frozen=True)
class StartedIncident:
    handle: WorkflowHandle[Any, Any]
    # started: a new remediation. attached: one for this firing was running; it got the alerts. finished: one for
    # this firing has finished; nothing was started.
    handling: StartHandling = "started"

    @property
    def attached(self) -> bool:
        """A remediation for this firing already existed; the caller got that one."""
        return self.handling != "started"

    @property
    def workflow_id(self) -> str:
        return self.handle.id


async def start_incident(client: Client, incident: Incident, *, policy: PolicyRef | None = None,
                         settings: Settings | None = None, **request: Any) -> StartedIncident:
    """Start a remediation, or attach to the one of the same firing episode (`Incident.workflow_id`).

    A running one gets the incident's alerts (`alerts_fired`); a finished one is left finished and nothing starts:
    Alertmanager re-sends a firing alert every `repeat_interval`, and a second remediation of a problem the first
    fixed can only undo or ratchet the fix. A new firing (a new `startsAt`) is a new id, a new incident.
    An escalation is POSTed to `settings.escalation_url` unless the request names its own. In the namespaces of
    `settings.auto_approve_namespaces` high-risk writes run without waiting for a human.
    """
    settings = settings or get_settings()
    request.setdefault("escalation_url", settings.escalation_url)
    if incident.namespace in settings.auto_approve_namespaces:
        incident = incident.model_copy(update={"limits": incident.limits.model_copy(
            update={"approve_high_risk": "auto"})})
    req = RemediationRequest(incident=incident, policy=policy, queues=task_queues(settings), **request)
    try:
        handle = await client.start_workflow(
            IncidentRemediationWorkflow.run, req, id=incident.workflow_id, task_queue=settings.queue_agent,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL, id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE)
        return StartedIncident(handle)
    except WorkflowAlreadyStartedError:
        handle = client.get_workflow_handle_for(IncidentRemediationWorkflow.run, incident.workflow_id)
    running = await _if_running(handle.signal(IncidentRemediationWorkflow.alerts_fired, incident.all_alerts))
    return StartedIncident(handle, "attached" if running else "finished")


async def _if_running(signalling: Awaitable[None]) -> bool:
    """Whether the workflow was running to receive the signal (a closed one answers NOT_FOUND)."""
    try:
        await signalling
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return True


async def signal_alert_resolved(client: Client, incident: Incident) -> str | None:
    """Tell the running remediation of this incident that its alerts stopped firing. Returns its workflow id, if
    one was running."""
    handle = client.get_workflow_handle(incident.workflow_id)
    return handle.id if await _if_running(handle.signal(IncidentRemediationWorkflow.alert_resolved)) else None
