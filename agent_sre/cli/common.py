"""What the CLI areas share: a console that prints only printable text, one-line errors and a connected client."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text

if TYPE_CHECKING:  # the commands import these when they run: `--help` stays quick (bench/cli_startup.py)
    from temporalio.client import Client

    from agent_sre.config import Settings
    from agent_sre.models.remediation import PolicyRef

# C0 and C1 controls but newline and tab, DEL, and the bidirectional overrides that reorder what a line shows.
UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """`text` with its control characters written out (`\\x1b`): workflow ids, alert labels and messages come from
    whoever sent them, and raw escape sequences would drive the terminal (clear it, rewrite lines, set its title)."""
    return UNPRINTABLE.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", text)


class SafeConsole(Console):
    """A rich Console that passes every string it renders (messages, table cells, titles) through `printable`."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(printable(text), **kwargs)


errors = SafeConsole()


def fail(message: str) -> NoReturn:
    errors.print(f"[red]error:[/] {escape(message)}")
    raise typer.Exit(1)


def log_to_file(settings: Settings, name: str) -> Path:
    """Send this process's logging, and Python's warnings (a dependency's FutureWarning), to <data dir>/logs/<name>
    .log: a command that prints its own progress (the demo, the drill) keeps the terminal to that, and the log has
    the rest, a rollback's structured line included. Returns the file."""
    import logging

    path = settings.data_dir / "logs" / f"{name}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        handlers=[logging.FileHandler(path)], force=True)
    logging.captureWarnings(True)
    return path


def get_settings() -> Settings:
    """The settings (`agent_sre.config.get_settings`), imported when a command runs; tests replace this one."""
    from agent_sre import config

    return config.get_settings()


POLICY_HELP = "runbook, or a registered model version (`agent-sre models list`), served by its own policy"


def policy_ref(policy: str) -> PolicyRef:
    """The policy a `--policy` option names: the runbook, or a registered version (an unknown one is a usage error
    that lists the registered ones)."""
    from agent_sre.models.remediation import PolicyRef
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
    from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
    from temporalio.service import RPCError, RPCStatusCode

    from agent_sre.temporal import connect

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
    from temporalio.service import RPCError, RPCStatusCode

    from agent_sre.telemetry import setup_tracing

    settings = get_settings()
    setup_tracing(settings, service_name="agent-sre-cli")  # what the command starts joins its trace

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
    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    polled = await client.workflow_service.describe_task_queue(DescribeTaskQueueRequest(
        namespace=client.namespace, task_queue=TaskQueue(name=task_queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW))
    if polled.pollers:
        return None
    return f"no worker polls its task queue {task_queue!r}: start one (`agent-sre worker`)"
