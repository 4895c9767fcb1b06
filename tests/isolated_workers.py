"""Workers on task queues of their own, for tests that run remediations against the session's Temporal server.

Unique queues keep each test's workflows away from every other test's workers (and leftovers of a test away
from the next one); the returned settings name those queues, so whatever starts a workflow with them (the alert
receiver, `start_incident`, the `temporal` CLI) lands on these workers.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterable
from contextlib import AsyncExitStack, asynccontextmanager

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from agent_sre.config import Settings
from agent_sre.workers.main import build_workers


def isolated_queues(settings: Settings) -> Settings:
    uid = uuid.uuid4().hex[:8]
    return settings.model_copy(update={"queue_agent": f"agent-{uid}", "queue_tools": f"agent-tools-{uid}",
                                       "queue_policy": f"agent-policy-{uid}", "queue_training": f"training-{uid}"})


@asynccontextmanager
async def running_workers(client: Client, settings: Settings) -> AsyncIterator[Settings]:
    """Run every queue's worker until the block ends; yields the settings naming their queues."""
    isolated = isolated_queues(settings)
    async with serving(client, isolated):
        yield isolated


@asynccontextmanager
async def serving(client: Client, settings: Settings) -> AsyncIterator[None]:
    """Workers on exactly the queues `settings` names (from `isolated_queues`), until the block ends."""
    async with AsyncExitStack() as stack:
        for worker in build_workers(client, settings):
            await stack.enter_async_context(worker)
        yield


async def terminate_running(client: Client, workflow_ids: Iterable[str]) -> None:
    """Stop what a test left running, so the session's server is not busy with it afterwards."""
    for workflow_id in set(workflow_ids):
        handle = client.get_workflow_handle(workflow_id)
        try:
            if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                await handle.terminate(reason="test finished")
        except RPCError:
            pass  # never started, or already gone
