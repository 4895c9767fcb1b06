"""The Alertmanager webhook receiver against a real Temporal server and a running worker."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer
from isolated_workers import isolated_queues, running_workers, serving, terminate_running
from prometheus_client import REGISTRY
from store_fixtures import settings_with_own_bucket
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError, RPCStatusCode

from agent_sre.alerts.receiver import ROLLOUT_LABEL, create_app
from agent_sre.config import Settings
from agent_sre.models.alert import Alert
from agent_sre.models.rollout import (
    AnalyzeStep,
    BakeStep,
    GuardrailConfig,
    RolloutPlan,
    RolloutRequest,
    RolloutResult,
    SetWeightStep,
)
from agent_sre.policy.conversation import incident_message
from agent_sre.registry import Registry
from agent_sre.rollout.client import ROLLOUT_WORKFLOW_ID, start_rollout
from agent_sre.rollout.routing import read_table
from agent_sre.stack.ports import pick_free_ports
from agent_sre.temporal import connect
from agent_sre.workflows.incident import IncidentRemediationWorkflow
from agent_sre.workflows.rollout import ModelRolloutWorkflow

TOKEN = "test-token-7f3a"


@dataclass
class Receiver:
    http: TestClient
    temporal: Client
    settings: Settings
    started: list[str] = field(default_factory=list)

    async def post(self, body: Any, token: str | None = TOKEN, raw: bytes | None = None) -> tuple[int, dict]:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        data = raw if raw is not None else json.dumps(body).encode()
        resp = await self.http.post("/alerts", data=data, headers={**headers, "Content-Type": "application/json"})
        reply = await resp.json()
        self.started += [r["workflow_id"] for r in reply.get("receipts", []) if r.get("workflow_id")]
        return resp.status, reply


@pytest_asyncio.fixture(loop_scope="session")
async def receiver(stack: Settings) -> AsyncIterator[Receiver]:
    """The receiver and workers for what it starts; with the S3 store, so a started incident routes at once
    instead of retrying against a missing store (worker shutdown waits out those retries)."""
    async with receiving(stack) as r:
        yield r


@pytest_asyncio.fixture(loop_scope="session")
async def own_bucket_receiver(stack: Settings) -> AsyncIterator[Receiver]:
    """As `receiver`, with a registry and routing table of its own: its workers' activities are built with the
    settings that name the fresh bucket."""
    with settings_with_own_bucket(stack, "alerts-rollout") as own:
        async with receiving(stack.model_copy(update={"s3_bucket": own.s3_bucket})) as r:
            yield r


@asynccontextmanager
async def receiving(stack: Settings) -> AsyncIterator[Receiver]:
    client = await connect(stack)
    async with running_workers(client, stack) as settings:
        settings = settings.model_copy(update={"allowed_namespaces": (*settings.allowed_namespaces, "alerts-*")})
        async with TestClient(TestServer(create_app(client, settings, TOKEN))) as http:
            r = Receiver(http, client, settings)
            try:
                yield r
            finally:
                await terminate_running(client, r.started)


def alert(namespace: str | None = None, status: str = "firing", **labels: str) -> dict[str, Any]:
    """An alert as Alertmanager sends it; a fresh namespace per call keeps workflow ids unique across tests."""
    ns = namespace or f"alerts-{uuid.uuid4().hex[:8]}"
    return {"status": status, "labels": {"alertname": "KubePodCrashLooping", "namespace": ns, "service": "cart",
                                         **labels},
            "annotations": {"summary": "cart is crash looping"}, "startsAt": "2025-01-01T00:00:00Z",
            "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "http://prometheus/graph", "fingerprint": ""}


def webhook(*alerts: dict[str, Any], status: str = "firing") -> dict[str, Any]:
    return {"version": "4", "groupKey": '{}:{alertname="KubePodCrashLooping"}', "truncatedAlerts": 0,
            "status": status, "receiver": "agent-sre", "groupLabels": {"alertname": "KubePodCrashLooping"},
            "commonLabels": {}, "commonAnnotations": {}, "externalURL": "http://alertmanager:9093",
            "alerts": list(alerts)}


async def exists(client: Client, workflow_id: str) -> bool:
    try:
        await client.get_workflow_handle(workflow_id).describe()
    except RPCError as e:
        assert e.status == RPCStatusCode.NOT_FOUND, e
        return False
    return True


def received(status: str, handling: str) -> float:
    return REGISTRY.get_sample_value("agent_sre_alerts_received_total",
                                     {"status": status, "handling": handling}) or 0.0


async def test_healthz_needs_no_token(receiver: Receiver) -> None:
    resp = await receiver.http.get("/healthz")
    assert resp.status == 200
    assert await resp.json() == {"status": "ok"}


@pytest.mark.parametrize("authorization", [None, "Bearer wrong-token", f"Basic {TOKEN}", "Bearer", TOKEN])
async def test_missing_or_wrong_token_is_401_and_starts_nothing(receiver: Receiver, authorization: str | None) -> None:
    body = webhook(alert())
    headers = {"Authorization": authorization} if authorization is not None else {}
    resp = await receiver.http.post("/alerts", json=body, headers=headers)
    assert resp.status == 401
    assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    assert "bearer token" in (await resp.json())["error"]
    assert not await exists(receiver.temporal, _workflow_id(body["alerts"][0]))


def _episode(a: dict[str, Any]) -> str:
    return Alert.model_validate(a).episode_id()


def _workflow_id(a: dict[str, Any]) -> str:
    return f"incident-{a['labels']['namespace']}-{_episode(a)}"


MALFORMED: dict[str, tuple[bytes, str]] = {
    "not json": (b"{this is not json", "Invalid JSON"),
    "wrong version": (json.dumps({**webhook(alert()), "version": "3"}).encode(), "version"),
    "no alerts": (json.dumps(webhook()).encode(), "alerts"),
    "alert without labels": (json.dumps(webhook({"status": "firing"})).encode(), "alerts.0.labels"),
    "unknown alert status": (json.dumps(webhook(alert(status="pending"))).encode(), "alerts.0.status"),
    "fingerprint too long for a workflow id": (json.dumps(webhook({**alert(), "fingerprint": "f" * 2000})).encode(),
                                               "Temporal allows 1000"),
}


@pytest.mark.parametrize("case", MALFORMED)
async def test_malformed_body_is_400_with_the_reason(receiver: Receiver, case: str) -> None:
    raw, reason = MALFORMED[case]
    status, reply = await receiver.post(None, raw=raw)
    assert status == 400
    assert reason in reply["error"]
    assert "nothing was started" in reply["error"]
    assert "receipts" not in reply or reply["receipts"] == []


async def test_a_body_over_the_size_limit_is_413_in_the_same_shape(receiver: Receiver) -> None:
    status, reply = await receiver.post(None, raw=b"{" + b" " * 2_000_000 + b"}")
    assert status == 413
    assert "Maximum request body size" in reply["error"] and "nothing was started" in reply["error"]


async def test_one_bad_alert_rejects_the_whole_delivery_before_anything_starts(receiver: Receiver) -> None:
    good = alert()
    no_namespace = alert()
    del no_namespace["labels"]["namespace"]
    bad_namespace = alert(namespace="Not_A_Namespace")
    status, reply = await receiver.post(webhook(good, no_namespace, bad_namespace))
    assert status == 400
    assert "alerts[1] (KubePodCrashLooping): alert KubePodCrashLooping has no 'namespace' label" in reply["error"]
    assert "alerts[2]" in reply["error"] and "namespace" in reply["error"]
    # The valid alert came first, and still nothing was started.
    assert not await exists(receiver.temporal, _workflow_id(good))


async def test_firing_starts_then_attaches_and_resolved_signals(receiver: Receiver) -> None:
    a = alert()
    before_started, before_attached = received("firing", "started"), received("firing", "attached")

    status, reply = await receiver.post(webhook(a))
    assert status == 200, reply
    [first] = reply["receipts"]
    assert first["handling"] == "started"
    assert first["workflow_id"] == _workflow_id(a)
    handle = receiver.temporal.get_workflow_handle(first["workflow_id"])
    desc = await handle.describe()
    assert desc.workflow_type == "IncidentRemediationWorkflow"
    assert desc.task_queue == receiver.settings.queue_agent

    status, reply = await receiver.post(webhook(a))  # Alertmanager re-sends the same firing alert
    assert status == 200, reply
    assert reply["receipts"][0]["handling"] == "attached"
    assert reply["receipts"][0]["workflow_id"] == first["workflow_id"]
    assert (await handle.describe()).run_id == desc.run_id  # still the one run
    assert received("firing", "started") == before_started + 1
    assert received("firing", "attached") == before_attached + 1

    status, reply = await receiver.post(webhook(alert(a["labels"]["namespace"], status="resolved"), status="resolved"))
    assert status == 200, reply
    assert reply["receipts"][0] == {**reply["receipts"][0], "handling": "signalled",
                                    "workflow_id": first["workflow_id"], "status": "resolved"}
    st = await _eventually(lambda: handle.query(IncidentRemediationWorkflow.status),
                           lambda s: s.alert_resolved)
    assert st.incident_id == _episode(a)


async def test_alerts_of_a_delivery_in_two_namespaces_are_two_incidents(receiver: Receiver) -> None:
    a, b = alert(), alert()
    status, reply = await receiver.post(webhook(a, b))
    assert status == 200, reply
    assert [r["handling"] for r in reply["receipts"]] == ["started", "started"]
    assert len({r["workflow_id"] for r in reply["receipts"]}) == 2
    for r in reply["receipts"]:
        assert await exists(receiver.temporal, r["workflow_id"])


async def test_a_resent_firing_after_its_remediation_finished_starts_nothing(receiver: Receiver) -> None:
    """Alertmanager re-sends a firing alert every repeat_interval: the remediation of that firing has run."""
    a = alert()
    status, reply = await receiver.post(webhook(a))
    assert status == 200 and reply["receipts"][0]["handling"] == "started", reply
    handle = receiver.temporal.get_workflow_handle(_workflow_id(a))
    first_run = (await handle.describe()).run_id
    with suppress(RPCError):  # the fixture's workers may have ended it already: ended either way
        await handle.terminate(reason="finished, as far as this test goes")

    status, reply = await receiver.post(webhook(a))
    assert status == 200, reply
    [again] = reply["receipts"]
    assert again == {**again, "handling": "finished", "workflow_id": _workflow_id(a)}
    assert "a new firing (a new startsAt) starts a new one" in again["detail"]
    described = await handle.describe()
    assert described.run_id == first_run and described.status != WorkflowExecutionStatus.RUNNING


async def test_a_new_firing_of_the_same_alert_starts_a_new_remediation(receiver: Receiver) -> None:
    a = alert()
    status, reply = await receiver.post(webhook(a))
    assert status == 200 and reply["receipts"][0]["handling"] == "started", reply
    refired = {**a, "startsAt": "2025-01-01T06:00:00Z"}  # resolved in between; Alertmanager's new episode
    status, reply = await receiver.post(webhook(refired))
    assert status == 200, reply
    assert reply["receipts"][0]["handling"] == "started"
    assert reply["receipts"][0]["workflow_id"] == _workflow_id(refired) != _workflow_id(a)
    assert await exists(receiver.temporal, _workflow_id(a)) and await exists(receiver.temporal, _workflow_id(refired))


async def test_a_group_is_one_incident_and_a_later_delivery_attaches_its_new_alert(receiver: Receiver) -> None:
    """Three alerts of one group (one database down) are one incident, led by the first to fire; the group's next
    delivery, with a fourth alert, reaches that incident. No worker serves it until both deliveries are in, so it
    is still running when the second comes (in this test's cluster its namespace does not exist: it would fail)."""
    namespace = f"alerts-{uuid.uuid4().hex[:8]}"
    db = {**alert(namespace, alertname="PostgresDown", service="postgres"), "startsAt": "2024-12-31T23:58:00Z"}
    errors = [alert(namespace, alertname="HighErrorRate", service=s) for s in ("cart", "checkout")]
    late = alert(namespace, alertname="HighErrorRate", service="payment")
    unserved = isolated_queues(receiver.settings)
    async with TestClient(TestServer(create_app(receiver.temporal, unserved, TOKEN))) as http:
        group = Receiver(http, receiver.temporal, unserved)
        try:
            status, reply = await group.post(webhook(*errors, db))
            assert status == 200, reply
            assert {r["workflow_id"] for r in reply["receipts"]} == {_workflow_id(db)}
            assert [r["handling"] for r in reply["receipts"]] == ["started"] * 3
            status, reply = await group.post(webhook(*errors, db, late))
            assert status == 200, reply
            assert {r["workflow_id"] for r in reply["receipts"]} == {_workflow_id(db)}
            assert [r["handling"] for r in reply["receipts"]] == ["attached"] * 4
            async with serving(receiver.temporal, unserved):
                handle = receiver.temporal.get_workflow_handle(_workflow_id(db))
                incident = await handle.query(IncidentRemediationWorkflow.incident)
        finally:
            await terminate_running(receiver.temporal, group.started)
    assert incident.id == _episode(db) and incident.alert is not None and incident.alert.labels["service"] == "postgres"
    services = [a.labels["service"] for a in incident.alerts]  # the group's by when they fired, then the newcomer
    assert services[0] == "postgres" and set(services[1:3]) == {"cart", "checkout"} and services[3] == "payment"
    assert "4 alerts of one group" in incident_message(incident)


HOUR = timedelta(hours=1)
ROLLOUT_PLAN = RolloutPlan(name="receiver-test",
                           steps=[SetWeightStep(weight=50), BakeStep(duration=HOUR), AnalyzeStep()],
                           guardrails=GuardrailConfig(interval=HOUR, lookback=HOUR))


def rollout_alert(target: str, status: str = "firing") -> dict[str, Any]:
    """What the shipped success-rate rule sends: no namespace (not an incident), the version in the label."""
    a = alert(status=status, alertname="AgentSreModelSuccessRateDropped", **{ROLLOUT_LABEL: target})
    for label in ("namespace", "service"):
        del a["labels"][label]
    a["annotations"] = {"summary": f"{target} resolves 20% of incidents, the best other version 80%"}
    return a


async def baking_rollout(receiver: Receiver, registry: Registry, candidate: str) -> WorkflowHandle:
    registry.register(candidate, policy="runbook", by="test", reason="receiver test")
    request = RolloutRequest(candidate=candidate, baseline="runbook-v1", plan=ROLLOUT_PLAN, requested_by="test")
    handle = await start_rollout(receiver.temporal, request, receiver.settings)
    receiver.started.append(handle.id)
    await _eventually(lambda: handle.query(ModelRolloutWorkflow.status),
                      lambda st: st.step is not None and st.step.kind == "bake")
    return handle


async def test_a_rollout_alert_rolls_back_only_the_rollout_it_names(own_bucket_receiver: Receiver) -> None:
    receiver = own_bucket_receiver
    registry = Registry.from_settings(receiver.settings)
    handle = await baking_rollout(receiver, registry, "runbook-v2")

    # A late alert about another version (an earlier rollout's candidate) leaves this rollout alone.
    status, reply = await receiver.post(webhook(rollout_alert("runbook-v0")))
    assert status == 200, reply
    [late] = reply["receipts"]
    assert late["handling"] == "no_rollout_running" and late["code"] == 404
    assert "the running one is of runbook-v2" in late["detail"]
    # A resolved rollout alert undoes nothing.
    status, reply = await receiver.post(webhook(rollout_alert("runbook-v2", status="resolved"), status="resolved"))
    assert status == 200 and reply["receipts"][0]["handling"] == "ignored", reply
    assert (await handle.query(ModelRolloutWorkflow.status)).phase == "running"

    before = received("firing", "rollback_signalled")
    incident = alert()
    status, reply = await receiver.post(webhook(rollout_alert("runbook-v2"), incident))
    assert status == 200, reply
    first, second = reply["receipts"]
    reason = "alert AgentSreModelSuccessRateDropped firing: runbook-v2 resolves 20% of incidents, the best other " \
             "version 80%"
    assert first == {**first, "handling": "rollback_signalled", "code": 202, "workflow_id": ROLLOUT_WORKFLOW_ID,
                     "detail": reason}
    assert second["handling"] == "started"  # the incident alert of the same delivery is handled as always
    result: RolloutResult = await asyncio.wait_for(handle.result(), timeout=60)
    assert result.outcome == "rolled_back" and result.reason == reason
    assert any(d.action == "rollback requested" and d.by == "signal" for d in result.decisions)
    table = read_table(registry.client, receiver.settings.s3_bucket)
    assert table is not None and table.candidate is None and table.weight == 0
    assert registry.get("runbook-v2").stage == "rolled_back"
    assert received("firing", "rollback_signalled") == before + 1

    # Nothing runs any more: even `current` finds no rollout to roll back.
    status, reply = await receiver.post(webhook(rollout_alert("current")))
    assert status == 200, reply
    assert reply["receipts"][0]["handling"] == "no_rollout_running" and reply["receipts"][0]["code"] == 404


async def test_a_rollout_alert_must_name_a_rollout(receiver: Receiver) -> None:
    status, reply = await receiver.post(webhook(rollout_alert(" ")))
    assert status == 400
    assert "label agent_sre_rollout is empty; use 'current' or the candidate version" in reply["error"]


async def test_metrics_endpoint_counts_alerts(receiver: Receiver) -> None:
    await receiver.post(webhook(alert()))
    await receiver.post(webhook(alert()), token="wrong")
    resp = await receiver.http.get("/metrics")
    assert resp.status == 200
    text = await resp.text()
    assert 'agent_sre_alerts_received_total{handling="started",status="firing"}' in text
    assert 'agent_sre_alert_deliveries_rejected_total{reason="unauthorized"}' in text


async def _eventually(fetch: Any, ok: Any, timeout_s: float = 60.0) -> Any:
    """Poll until `ok(value)`: a signal is delivered to the workflow on its next workflow task."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        value = await fetch()
        if ok(value) or asyncio.get_running_loop().time() > deadline:
            assert ok(value), value
            return value
        await asyncio.sleep(0.1)


async def test_temporal_unreachable_is_503_so_alertmanager_retries(temporal_server: Settings) -> None:
    [port] = pick_free_ports(1, "127.0.0.1")  # nothing listens there
    down = await Client.connect(f"127.0.0.1:{port}", lazy=True, data_converter=pydantic_data_converter)
    async with TestClient(TestServer(create_app(down, temporal_server, TOKEN))) as http:
        resp = await http.post("/alerts", json=webhook(alert("shop")), headers={"Authorization": f"Bearer {TOKEN}"})
        reply = await resp.json()
    assert resp.status == 503, reply
    assert "Temporal did not accept the alerts" in reply["error"] and "Alertmanager will retry" in reply["error"]


async def test_alerts_serve_command(temporal_server: Settings, tmp_path: Path) -> None:
    """`agent-sre alerts serve` as a process: it answers health checks and enforces its token."""
    [port] = pick_free_ports(1, "127.0.0.1")
    log = tmp_path / "alerts.log"
    proc = subprocess.Popen([sys.executable, "-m", "agent_sre.cli", "alerts", "serve", "--port", str(port),
                             "--token", TOKEN], stdout=log.open("wb"), stderr=subprocess.STDOUT)
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:
            # Readiness, not a guess: importing the CLI alone takes seconds on a busy machine, so wait for the
            # health check for up to two minutes, failing at once if the process has already died.
            deadline = time.monotonic() + 120
            while True:
                try:
                    async with http.get("/healthz") as resp:
                        assert resp.status == 200
                        break
                except aiohttp.ClientConnectionError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        pytest.fail(f"the receiver did not come up:\n{log.read_text()}")
                    await asyncio.sleep(0.1)
            async with http.post("/alerts", json=webhook(alert()), headers={"Authorization": "Bearer no"}) as resp:
                assert resp.status == 401
            async with http.post("/alerts", data=b"[]", headers={"Authorization": f"Bearer {TOKEN}"}) as resp:
                assert resp.status == 400
    finally:
        proc.terminate()
        proc.wait(10)
    assert f"alert receiver on http://127.0.0.1:{port}/alerts" in log.read_text()


async def test_an_alert_outside_the_allowed_namespaces_is_acknowledged_and_not_acted_on(receiver: Receiver) -> None:
    before = received("firing", "out_of_scope")
    system, allowed = alert("kube-system"), alert()
    status, reply = await receiver.post(webhook(system, allowed))
    assert status == 200
    refused, started = reply["receipts"]
    assert refused["handling"] == "out_of_scope" and refused["code"] == 403
    assert "namespace 'kube-system' is outside the agent's scope" in refused["detail"]
    assert not await exists(receiver.temporal, _workflow_id(system))
    assert started["handling"] == "started"
    assert received("firing", "out_of_scope") == before + 1


async def test_every_alert_received_is_one_structured_log_line_with_what_was_done(
        receiver: Receiver, caplog: pytest.LogCaptureFixture) -> None:
    system, allowed = alert("kube-system"), alert()
    with caplog.at_level(logging.INFO, logger="agent_sre.alerts.receiver"):
        _, reply = await receiver.post(webhook(system, allowed))
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.getMessage().startswith('{"event": "alert_')]
    assert [(line["namespace"], line["handling"], line["workflow_id"]) for line in lines] == [
        ("kube-system", "out_of_scope", None), (allowed["labels"]["namespace"], "started",
                                                reply["receipts"][1]["workflow_id"])]
    assert [r.levelname for r in caplog.records if r.getMessage().startswith('{"event"')] == ["WARNING", "INFO"]


async def test_a_delivery_of_300_alerts_starts_at_most_the_cap(receiver: Receiver) -> None:
    """The rest are acknowledged as rate-limited, each with its receipt; a later delivery within the minute
    finds the token bucket spent."""
    settings = receiver.settings.model_copy(update={"alerts_max_starts_per_delivery": 3,
                                                    "alerts_max_starts_per_minute": 4})
    namespace = f"alerts-{uuid.uuid4().hex[:8]}"
    async with TestClient(TestServer(create_app(receiver.temporal, settings, TOKEN))) as http:
        capped = Receiver(http, receiver.temporal, settings)
        try:
            status, reply = await capped.post(webhook(*(alert(f"{namespace}-{i}") for i in range(300))))
            assert status == 200
            handled = [r["handling"] for r in reply["receipts"]]
            assert handled.count("started") == 3 and handled.count("rate_limited") == 297
            assert "AGENT_SRE_ALERTS_MAX_STARTS_PER_DELIVERY" in reply["receipts"][-1]["detail"]
            status, reply = await capped.post(webhook(alert(f"{namespace}-late-1"), alert(f"{namespace}-late-2")))
            assert [r["handling"] for r in reply["receipts"]] == ["started", "rate_limited"]
            assert "AGENT_SRE_ALERTS_MAX_STARTS_PER_MINUTE" in reply["receipts"][1]["detail"]
        finally:
            await terminate_running(receiver.temporal, capped.started)
