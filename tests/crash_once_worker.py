"""`agent-sre worker` that dies (os._exit) right after its first local `get_events` tool call has run: a crash after
a local activity's effects, before the workflow task that would record its result completes.

    python tests/crash_once_worker.py MARKER   (queues and endpoints from the AGENT_SRE_* environment)
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio import client as temporal_client
from temporalio import worker as temporal_worker
from temporalio.contrib.pydantic import pydantic_data_converter

from agent_sre.config import get_settings
from agent_sre.models.tools import ToolInvocation
from agent_sre.workers.main import run_workers

CRASH_EXIT_CODE = 17


class CrashAfterLocalRead(temporal_client.Interceptor, temporal_worker.Interceptor):
    """A client interceptor that is also a worker interceptor reaches every worker built on the client."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def intercept_activity(self, next: temporal_worker.ActivityInboundInterceptor,
                           ) -> temporal_worker.ActivityInboundInterceptor:
        return _CrashAfter(next, self.marker)


class _CrashAfter(temporal_worker.ActivityInboundInterceptor):
    def __init__(self, next: temporal_worker.ActivityInboundInterceptor, marker: Path) -> None:
        super().__init__(next)
        self.marker = marker

    async def execute_activity(self, input: temporal_worker.ExecuteActivityInput) -> Any:
        result = await super().execute_activity(input)
        call = input.args[0].call if input.args and isinstance(input.args[0], ToolInvocation) else None
        if activity.info().is_local and call is not None and call.tool == "get_events" and not self.marker.exists():
            self.marker.write_text(activity.info().workflow_id or "")
            os._exit(CRASH_EXIT_CODE)  # no clean-up, no completion sent: as if the machine went away
        return result


async def main(marker: Path) -> None:
    settings = get_settings()
    client = await temporal_client.Client.connect(settings.temporal_address, namespace=settings.temporal_namespace,
                                                  data_converter=pydantic_data_converter,
                                                  interceptors=[CrashAfterLocalRead(marker)])
    print("worker on every queue", flush=True)
    await run_workers(client, settings)


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
