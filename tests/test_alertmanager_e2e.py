"""A real Alertmanager delivers to our receiver: an alert posted to its API starts a remediation, and resolving it
signals that remediation. Needs Debian's `prometheus-alertmanager` (apt-get install -y prometheus-alertmanager)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
import yaml
from aiohttp import web
from isolated_workers import running_workers, terminate_running
from temporalio.client import Client
from temporalio.service import RPCError

from agent_sre.alerts.receiver import create_app
from agent_sre.config import Settings
from agent_sre.models.alert import Alert
from agent_sre.stack.ports import pick_free_ports
from agent_sre.temporal import connect
from agent_sre.workflows.incident import IncidentRemediationWorkflow

ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
TOKEN = "e2e-token-41d9"

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    ALERTMANAGER is None, reason="Alertmanager is not installed: apt-get install -y prometheus-alertmanager")]


def alertmanager_config(receiver_url: str, token: str) -> dict[str, Any]:
    """Deliver at once (no grouping delay), resend resolved alerts, authenticate with a bearer token."""
    return {
        "route": {"receiver": "agent-sre", "group_by": ["alertname", "namespace"], "group_wait": "0s",
                  "group_interval": "1s", "repeat_interval": "1h"},
        "receivers": [{"name": "agent-sre", "webhook_configs": [{
            "url": receiver_url, "send_resolved": True,
            "http_config": {"authorization": {"type": "Bearer", "credentials": token}}}]}],
    }


@pytest.fixture
def alertmanager(tmp_path: Path, receiver_port: int) -> Iterator[str]:
    config = tmp_path / "alertmanager.yml"
    config.write_text(yaml.safe_dump(alertmanager_config(f"http://127.0.0.1:{receiver_port}/alerts", TOKEN)))
    [port] = pick_free_ports(1, "127.0.0.1")
    log = (tmp_path / "alertmanager.log").open("w")
    assert ALERTMANAGER is not None
    proc = subprocess.Popen([ALERTMANAGER, f"--config.file={config}", f"--storage.path={tmp_path / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


@pytest.fixture
def receiver_port() -> int:
    return pick_free_ports(1, "127.0.0.1")[0]


@pytest_asyncio.fixture(loop_scope="session")
async def receiver(stack: Settings, receiver_port: int) -> AsyncIterator[tuple[Client, Settings]]:
    """Our receiver on a real port, with workers on their own queues."""
    client = await connect(stack)
    async with running_workers(client, stack) as settings:
        runner = web.AppRunner(create_app(client, settings, TOKEN))
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", receiver_port).start()
        try:
            yield client, settings
        finally:
            await runner.cleanup()


async def wait_ready(http: aiohttp.ClientSession, url: str, timeout_s: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        try:
            async with http.get(f"{url}/-/ready") as resp:
                if resp.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"Alertmanager at {url} did not become ready in {timeout_s:.0f}s")
        await asyncio.sleep(0.2)


async def post_alert(http: aiohttp.ClientSession, url: str, labels: dict[str, str], ends_at: datetime | None) -> None:
    now = datetime.now(UTC)
    body = [{"labels": labels, "annotations": {"summary": "cart is crash looping"},
             "startsAt": (now - timedelta(minutes=1)).isoformat(),
             "endsAt": (ends_at or now + timedelta(hours=1)).isoformat(),
             "generatorURL": "http://prometheus.example/graph"}]
    async with http.post(f"{url}/api/v2/alerts", json=body) as resp:
        assert resp.status == 200, await resp.text()


async def poll(fetch: Any, timeout_s: float = 60.0) -> Any:
    """Call `fetch` until it returns something truthy (Alertmanager delivers asynchronously)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        value = await fetch()
        if value:
            return value
        await asyncio.sleep(0.25)
    pytest.fail(f"nothing after {timeout_s:.0f}s")


async def test_alertmanager_delivers_firing_and_resolved(receiver: tuple[Client, Settings], alertmanager: str) -> None:
    client, _ = receiver
    namespace = "shop"  # exists in the simulator's default environment; a unique label keeps the alert this test's
    run = uuid.uuid4().hex[:8]
    labels = {"alertname": "KubePodCrashLooping", "namespace": namespace, "service": "cart", "severity": "page",
              "test_run": run}
    workflow_id = ""
    async with aiohttp.ClientSession() as http:
        await wait_ready(http, alertmanager)
        await post_alert(http, alertmanager, labels, ends_at=None)

        async def episode() -> str | None:
            """The alert's firing episode as Alertmanager holds it: its fingerprint and startsAt."""
            async with http.get(f"{alertmanager}/api/v2/alerts", params={"filter": f'test_run="{run}"'}) as r:
                alerts = await r.json()
            if not alerts:
                return None
            held = alerts[0]  # the API's alert: its status is an object, not the webhook's word
            return Alert(labels=held["labels"], fingerprint=held["fingerprint"], startsAt=held["startsAt"]).episode_id()

        workflow_id = f"incident-{namespace}-{await poll(episode)}"
        handle = client.get_workflow_handle(workflow_id)

        async def started() -> bool:
            try:
                return (await handle.describe()).workflow_type == "IncidentRemediationWorkflow"
            except RPCError:
                return False

        try:
            await poll(started)  # the receiver got Alertmanager's webhook and started the remediation

            await post_alert(http, alertmanager, labels, ends_at=datetime.now(UTC))  # the alert stops firing

            async def resolved() -> bool:
                return (await handle.query(IncidentRemediationWorkflow.status)).alert_resolved

            await poll(resolved)
        finally:
            await terminate_running(client, [workflow_id])
