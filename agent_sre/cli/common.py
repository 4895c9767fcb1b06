"""What the CLI areas that talk to Temporal share: one-line errors and a connected client."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest, DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from agent_sre.config import Settings, get_settings
from agent_sre.models.remediation import PolicyRef
from agent_sre.temporal import connect

errors = Console()


def fail(message: str) -> NoReturn:
    errors.print(f"[red]error:[/] {escape(message)}")
    raise typer.Exit(1)


POLICY_HELP = "runbook, or a registered model version (`agent-sre models list`), served by its own policy"


def policy_ref(policy: str) -> PolicyRef:
    """The policy a `--policy` option names: the runbook, or a registered version (an unknown one is a usage error
    that lists the registered ones)."""
    from agent_sre.registry import Registry, RegistryError

    if policy == "runbook":
        return PolicyRef(name="runbook")
    try:
        return Registry.from_settings(get_settings()).policy_ref(policy)
    except RegistryError as exc:
        raise typer.BadParameter(str(exc), param_hint="--policy") from None


async def connect_or_fail(settings: Settings) -> Client:
    """A client of the configured Temporal namespace; a server that cannot be reached, or that lacks the
    namespace, is a one-line error naming the setting (rather than a NOT_FOUND on the first call, worded as if a
    workflow were missing)."""
    try:
        client = await connect(settings)
    except RuntimeError as exc:
        fail(f"cannot reach Temporal at {settings.temporal_address} ({exc}); is `agent-sre dev up` running?")
    try:
        await client.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace=client.namespace))
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise
        fail(f"Temporal at {settings.temporal_address} has no namespace {client.namespace!r} "
             "(AGENT_SRE_TEMPORAL_NAMESPACE): create it (`temporal operator namespace create --namespace "
             f"{client.namespace}`) or name one it has")
    return client


def run_with_client(action: Callable[[Client, Settings], Awaitable[None]], not_found: str | None = None) -> None:
    """Connect to Temporal (`connect_or_fail`) and run `action`; Temporal's refusal is a one-line error too when
    `not_found` words its NOT_FOUND in the caller's terms. Other errors propagate for the caller to word in its
    own terms."""
    settings = get_settings()

    async def go() -> None:
        await action(await connect_or_fail(settings), settings)

    try:
        asyncio.run(go())
    except RPCError as exc:
        if not_found is None:
            raise
        fail(not_found if exc.status == RPCStatusCode.NOT_FOUND else f"Temporal refused: {exc.message}")


def no_workflow(what: str, workflow_id: str) -> str:
    """The NOT_FOUND of a command that reads a workflow, open or closed."""
    return f"no {what} {workflow_id!r}: check the id (`temporal workflow list` lists them)"


def not_running(what: str, workflow_id: str) -> str:
    """The NOT_FOUND of a command that signals or updates a workflow."""
    return f"no running {what} {workflow_id!r}: the id is wrong, or it has ended and takes no more signals"


async def unpolled(client: Client, task_queue: str) -> str | None:
    """Why a query to a running workflow on `task_queue` would go unanswered, when no worker has polled it lately
    (Temporal would only say so after its query timeout, 30 s); None when one has."""
    polled = await client.workflow_service.describe_task_queue(DescribeTaskQueueRequest(
        namespace=client.namespace, task_queue=TaskQueue(name=task_queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW))
    if polled.pollers:
        return None
    return f"no worker polls its task queue {task_queue!r}: start one (`agent-sre worker`)"
