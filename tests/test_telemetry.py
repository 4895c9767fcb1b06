"""Traces and metrics: one incident as one trace rooted at the alert receiver, with the semantic conventions' names
and errors; the exporters and the variables that choose them; the worker's Prometheus endpoint counting an
incident exactly once."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from isolated_workers import running_workers, terminate_running
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError
from temporalio.activity import _Definition as ActivityDefinition
from trajectory_factory import escalate, make_trajectory, read, write

from agent_sre import spans, telemetry
from agent_sre.alerts.receiver import create_app
from agent_sre.config import Settings
from agent_sre.faults import oracle
from agent_sre.models.incident import Incident, RemediationLimits
from agent_sre.models.policy import PolicyDecision
from agent_sre.models.remediation import ApprovalDecision, IncidentOutcome, PolicyRef
from agent_sre.models.reward import RewardConfig
from agent_sre.models.tools import Risk, ToolCall, ToolResult, WriteAssessment
from agent_sre.rewards import compute_reward
from agent_sre.simulator.client import SimulatorClient
from agent_sre.stack.ports import pick_free_ports
from agent_sre.temporal import connect, start_incident
from agent_sre.tools.client import api_client
from agent_sre.workers.main import queue_contents
from agent_sre.workflows.incident import IncidentRemediationWorkflow

FINISH = ToolCall(tool="finish", args={"diagnosis": "telemetry test", "summary": "looked, changed nothing"})


def read_spans(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_file_exporter_writes_one_json_span_per_line(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "traces.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(telemetry.JsonLinesSpanExporter(path)))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("outer"), tracer.start_as_current_span("inner", attributes={"tool": "top"}):
        pass
    inner, outer = read_spans(path)
    assert (inner["name"], outer["name"]) == ("inner", "outer")
    assert inner["context"]["trace_id"] == outer["context"]["trace_id"]
    assert inner["parent_id"] == outer["context"]["span_id"]
    assert inner["attributes"] == {"tool": "top"}


@pytest.fixture
def no_otel_variables(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
                 *telemetry.OTLP_ENDPOINT_VARIABLES):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_exporters_follow_our_settings_then_the_standard_variables(tmp_path: Path,
                                                                   no_otel_variables: pytest.MonkeyPatch) -> None:
    def exporters(**kw: Any) -> list[Any]:
        settings = Settings(data_dir=tmp_path, **kw)
        return [telemetry.span_exporter(name, settings) for name in telemetry.exporter_names(settings)]

    assert exporters() == []  # nothing set: nothing exported (no collector to fail to reach)
    no_otel_variables.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    [otlp] = exporters()  # an endpoint alone turns OTLP on; the SDK appends the signal's path
    assert otlp._endpoint == "http://collector:4318/v1/traces"
    no_otel_variables.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://traces:4318/custom")
    assert exporters()[0]._endpoint == "http://traces:4318/custom"  # the signal's own variable, as it is
    assert exporters(otel_endpoint="http://ours:4318/")[0]._endpoint == "http://ours:4318/v1/traces"  # ours wins
    no_otel_variables.setenv("OTEL_TRACES_EXPORTER", "console, jaeger")
    console, unknown = exporters()
    assert isinstance(console, ConsoleSpanExporter) and unknown is None
    assert exporters(otel_exporter="none") == [None]  # ours overrides the standard list
    assert exporters(otel_exporter="file")[0].path == tmp_path / "traces.jsonl"
    with pytest.raises(ValidationError, match="otel_exporter"):
        Settings(otel_exporter="jaeger")


def test_the_standard_variables_name_the_service_before_the_process_does(no_otel_variables: pytest.MonkeyPatch,
                                                                         ) -> None:
    def service() -> Any:
        return telemetry.tracing_resource("agent-sre-worker").attributes["service.name"]

    no_otel_variables.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=prod")
    assert service() == "agent-sre-worker"
    assert telemetry.tracing_resource("x").attributes["deployment.environment.name"] == "prod"
    no_otel_variables.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attributes")
    assert service() == "from-attributes"
    no_otel_variables.setenv("OTEL_SERVICE_NAME", "sre-east")
    assert service() == "sre-east"


async def test_otlp_exporter_posts_spans_to_the_configured_endpoint(tmp_path: Path) -> None:
    received: list[ExportTraceServiceRequest] = []

    async def collect(request: web.Request) -> web.Response:
        assert request.headers["Content-Type"] == "application/x-protobuf"
        received.append(ExportTraceServiceRequest.FromString(await request.read()))
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/v1/traces", collect)
    runner = web.AppRunner(app)
    await runner.setup()
    [port] = pick_free_ports(1, "127.0.0.1")
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        exporter = telemetry.otlp_exporter(f"http://127.0.0.1:{port}")
        assert isinstance(exporter, OTLPSpanExporter)
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        # The exporter blocks on HTTP; run it off the loop that serves the collector.
        await asyncio.to_thread(lambda: provider.get_tracer("test").start_span("shipped").end())
    finally:
        await runner.cleanup()
    names = [s.name for r in received for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert names == ["shipped"]


def test_a_refused_or_failed_tool_call_is_an_error_of_its_span_and_a_held_write_is_not() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    results = {
        "ok": ToolResult(tool="list_pods", ok=True, output="NAME READY"),
        "refused": ToolResult(tool="scale", ok=False, refused=True, error="replicas 50 above the limit of 20",
                              output="refused: replicas 50 above the limit of 20"),
        "failed": ToolResult(tool="get_logs", ok=False, error="error: connect failed, password=hunter2", output=""),
        "held": ToolResult(tool="set_image", ok=False, refused=True, error="needs approval: a new registry",
                           output="needs approval", needs_approval=WriteAssessment(risk="high")),
    }
    for name, result in results.items():
        with provider.get_tracer("test").start_as_current_span(name) as span:
            spans.record_tool_result(span, result)
    got = {span.name: span for span in exporter.get_finished_spans()}
    assert {name: got[name].status.status_code for name in results} == {
        "ok": StatusCode.UNSET, "refused": StatusCode.ERROR, "failed": StatusCode.ERROR, "held": StatusCode.UNSET}
    assert got["refused"].status.description == "replicas 50 above the limit of 20"
    assert {name: (got[name].attributes or {}).get("error.type") for name in results} == {
        "ok": None, "refused": "refused", "failed": "tool_error", "held": None}
    assert "hunter2" not in (got["failed"].status.description or "")  # descriptions leave the process: redacted
    assert (got["held"].attributes or {})["agent_sre.tool.needs_approval"] is True


def test_a_decision_reports_its_output_tokens_when_the_policy_counts_them() -> None:
    def output_tokens(**kw: Any) -> Any:
        decision = PolicyDecision(action=ToolCall(tool="list_pods"), model_version="m-1", **kw)
        return spans.decision_attributes(decision).get("gen_ai.usage.output_tokens")

    assert output_tokens(completion_token_ids=[5, 6, 7]) == 3
    assert output_tokens(completion_logprobs=[-0.1, -0.5]) == 2  # an endpoint without token ids: one per token
    assert output_tokens() is None  # the rule-based policies generate no tokens


@pytest_asyncio.fixture(loop_scope="session")
async def post_alert(stack: Settings) -> AsyncIterator[Callable[[str], Any]]:
    """POST one firing alert in a namespace to the receiver, with workers for what it starts; returns the workflow
    id. The receiver accepts alerts-* namespaces, which the workers (the session's settings) refuse to act in."""
    client = await connect(stack)
    started: list[str] = []
    async with running_workers(client, stack) as settings:
        settings = settings.model_copy(update={"allowed_namespaces": (*settings.allowed_namespaces, "alerts-*")})
        async with TestClient(TestServer(create_app(client, settings))) as http:
            async def post(namespace: str) -> str:
                labels = {"alertname": "KubePodCrashLooping", "namespace": namespace, "deployment": "cart",
                          "test_run": uuid.uuid4().hex}  # a new fingerprint: a new incident
                alert = {"status": "firing", "labels": labels, "annotations": {}, "startsAt": "2025-01-01T00:00:00Z",
                         "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "", "fingerprint": ""}
                body = {"version": "4", "groupKey": "{}", "truncatedAlerts": 0, "status": "firing",
                        "receiver": "agent-sre", "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
                        "externalURL": "http://alertmanager:9093", "alerts": [alert]}
                resp = await http.post("/alerts", json=body)
                [receipt] = (await resp.json())["receipts"]
                assert receipt["handling"] == "started", receipt
                started.append(receipt["workflow_id"])
                return str(receipt["workflow_id"])

            try:
                yield post
            finally:
                await terminate_running(client, started)


async def spans_until(exporter: InMemorySpanExporter, done: Callable[[Sequence[ReadableSpan]], bool],
                      timeout_s: float = 60) -> Sequence[ReadableSpan]:
    deadline = time.monotonic() + timeout_s
    while not done(finished := exporter.get_finished_spans()):
        assert time.monotonic() < deadline, sorted(s.name for s in finished)
        await asyncio.sleep(0.2)
    return finished


def one_trace(finished: Sequence[ReadableSpan], workflow_id: str) -> list[ReadableSpan]:
    """The spans of the incident's trace, after checking that it is the only one: every span that names the
    workflow is in it, and it has one root, the receiver's, with every other span below it."""
    ids = {s.context.trace_id for s in finished if (s.attributes or {}).get("temporalWorkflowID") == workflow_id}
    assert len(ids) == 1, f"{len(ids)} traces for one incident"
    spans_of = [s for s in finished if s.context.trace_id in ids]
    by_id = {s.context.span_id: s for s in spans_of}
    [root] = [s for s in spans_of if s.parent is None]
    assert root.name == "alert received"
    assert all(s.parent.span_id in by_id for s in spans_of if s is not root and s.parent is not None)
    return spans_of


async def test_an_incident_is_one_trace_rooted_at_the_alert(exported: InMemorySpanExporter,
                                                            post_alert: Callable[[str], Any]) -> None:
    """The runbook on the shop namespace of the simulator's default environment (read-only: it lists the pods
    first), up to its first tool call: one trace, from the receiver through the workflow to the tool."""
    workflow_id = await post_alert("shop")
    finished = await spans_until(exported, lambda spans: any(s.name == "execute_tool list_pods" for s in spans))
    spans_of = {s.name: s for s in one_trace(finished, workflow_id)}
    assert spans_of.keys() >= {"alert received", "StartWorkflow:IncidentRemediationWorkflow",
                               "RunWorkflow:IncidentRemediationWorkflow", "RunActivity:decide_next_action",
                               "RunActivity:run_tool", "chat runbook-v1", "execute_tool list_pods"}
    assert (spans_of["alert received"].attributes or {}).items() >= {
        "k8s.namespace.name": "shop", "k8s.deployment.name": "cart", "temporalWorkflowID": workflow_id,
        "agent_sre.alert.handling": "started"}.items()
    assert (spans_of["chat runbook-v1"].attributes or {}).items() >= {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "runbook", "gen_ai.request.model": "runbook-v1",
        "gen_ai.response.model": "runbook-v1", "k8s.namespace.name": "shop"}.items()
    assert (spans_of["execute_tool list_pods"].attributes or {}).items() >= {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "list_pods", "gen_ai.tool.type": "function",
        "k8s.namespace.name": "shop"}.items()


async def test_a_failing_activity_is_an_error_in_the_incidents_trace(exported: InMemorySpanExporter,
                                                                     post_alert: Callable[[str], Any]) -> None:
    """A namespace the receiver accepts but the cluster lacks (and the workers may not act in): the first read
    of the cluster, the baseline's, fails."""
    workflow_id = await post_alert(f"alerts-{uuid.uuid4().hex[:8]}")

    def failed(span: ReadableSpan) -> bool:
        return span.name == "RunActivity:snapshot_cluster" and span.status.status_code == StatusCode.ERROR

    finished = await spans_until(exported, lambda spans: any(failed(s) for s in spans))
    [first, *_retries] = [s for s in one_trace(finished, workflow_id) if failed(s)]
    assert first.status.description and first.status.description.startswith("ApplicationError: ")
    assert [event.name for event in first.events] == ["exception"]


def test_metrics_hooks_match_registered_activity_names(settings: Settings) -> None:
    registered = {ActivityDefinition.must_from_callable(fn).name
                  for _, activities in queue_contents(settings).values() for fn in activities}
    assert {telemetry.POLICY_ACTIVITY, telemetry.REWARD_ACTIVITY} <= registered


def test_an_escalation_is_counted_by_model_version_and_is_no_false_positive() -> None:
    version = f"v-{uuid.uuid4().hex[:8]}"
    t = make_trajectory([read(), write(), escalate()], outcome="unresolved", alert_resolved=False,
                        termination="escalated", model_version=version)
    reward = compute_reward(t, RewardConfig())

    def count(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    before = count("agent_sre_escalations_total", model_version=version), count("agent_sre_false_positives_total")
    telemetry.record_finished(t, reward)
    after = count("agent_sre_escalations_total", model_version=version), count("agent_sre_false_positives_total")
    assert (after[0] - before[0], after[1] - before[1]) == (1, 0)


def sample(families: dict[str, Any], name: str, **labels: str) -> float:
    for family in families.values():
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return 0.0


def scrape(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return {f.name: f for f in text_string_to_metric_families(resp.read().decode())}


@pytest.fixture
def healthy_shop(simulator_server: Settings) -> Iterator[str]:
    """A fresh simulated environment running the shop app, once every service is healthy: a false alarm."""
    sim = SimulatorClient(simulator_server.sim_url)
    env = sim.create_env(apps=["shop"])
    try:
        client = api_client(env["server"])
        deadline = time.monotonic() + 60
        while oracle.snapshot(client, "shop", "shop").unhealthy:
            assert time.monotonic() < deadline, "the shop app did not become healthy"
            sim.advance(env["name"], 10)
        yield env["server"]
    finally:
        sim.delete_env(env["name"])


async def test_workflow_run_is_traced_and_counted_once(stack: Settings, healthy_shop: str, tmp_path: Path) -> None:
    """One incident on a healthy app: a read, a write a human rejects, a write that runs, finish. Spans land in
    the file; every counter moves by exactly what happened (acting on a false alarm is a false positive)."""
    traced = stack.model_copy(update={"otel_exporter": "file", "data_dir": tmp_path})
    processor = telemetry.setup_tracing(traced)
    assert processor is not None
    [port] = pick_free_ports(1, "127.0.0.1")
    server = await asyncio.to_thread(telemetry.start_metrics_server, port, "127.0.0.1")
    try:
        version = f"scripted-{uuid.uuid4().hex[:8]}"
        before = await asyncio.to_thread(scrape, port)
        outcome = await run_rejected_then_executed_write(traced, healthy_shop, version)
        after = await asyncio.to_thread(scrape, port)
        assert processor.force_flush(10_000)
    finally:
        server.shutdown()
        processor.shutdown()  # spans of later tests must not land in this test's file
    assert (outcome.steps, outcome.refused, outcome.writes) == (4, 1, 1)

    def delta(name: str, **labels: str) -> float:
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert delta("agent_sre_incidents_started_total", model_version=version) == 1
    assert delta("agent_sre_incidents_finished_total", model_version=version, outcome=outcome.outcome) == 1
    assert delta("agent_sre_refused_actions_total") == 1
    assert delta("agent_sre_false_positives_total") == 1
    assert delta("agent_sre_escalations_total", model_version=version) == 0  # it finished
    reward = {"function": outcome.reward.function, "model_version": version}
    assert delta("agent_sre_reward_count", **reward) == 1
    # Rewards can be negative, so the histogram has no _sum; the observation must sit in the right bucket.
    bounds = sorted(float(s.labels["le"]) for s in after["agent_sre_reward"].samples if s.name.endswith("_bucket")
                    and s.labels["model_version"] == version)
    upper = min(b for b in bounds if b >= outcome.reward.total)
    below = max((b for b in bounds if b < outcome.reward.total), default=None)
    assert delta("agent_sre_reward_bucket", le=str(upper), **reward) == 1
    if below is not None:
        assert delta("agent_sre_reward_bucket", le=str(below), **reward) == 0
    assert delta("agent_sre_time_to_mitigate_seconds_count") == (outcome.time_to_mitigate_s is not None)

    by_name: dict[str, list[dict[str, Any]]] = {}
    for span in read_spans(tmp_path / "traces.jsonl"):
        by_name.setdefault(span["name"], []).append(span)
    [start] = by_name["StartWorkflow:IncidentRemediationWorkflow"]
    trace_id = start["context"]["trace_id"]
    assert "execute_tool scale" not in by_name  # the rejected write never reached the tool activity
    run_tool_spans = {s["context"]["span_id"]: s for s in by_name["RunActivity:run_tool"]}
    for name in ("execute_tool list_pods", "execute_tool rollout_restart"):
        [tool] = by_name[name]
        assert tool["context"]["trace_id"] == trace_id
        assert tool["parent_id"] in run_tool_spans
        assert tool["status"]["status_code"] == "UNSET"
        assert tool["attributes"].items() >= {"gen_ai.operation.name": "execute_tool", "k8s.namespace.name": "shop",
                                              "gen_ai.tool.name": name.removeprefix("execute_tool "),
                                              "agent_sre.tool.refused": False}.items()
    assert by_name["execute_tool rollout_restart"][0]["attributes"]["k8s.deployment.name"] == "cart"
    decisions = [s for s in by_name[f"chat {version}"] if s["context"]["trace_id"] == trace_id]
    assert [s["attributes"]["agent_sre.step"] for s in decisions] == [0, 1, 2, 3]
    assert all(s["attributes"].items() >= {"gen_ai.provider.name": "scripted", "gen_ai.request.model": version,
                                           "k8s.namespace.name": "shop"}.items() for s in decisions)


async def run_rejected_then_executed_write(settings: Settings, kubeconfig: str, version: str) -> IncidentOutcome:
    """list_pods; scale (MEDIUM risk: waits for approval, rejected); rollout_restart (LOW: runs); finish."""
    client = telemetry.instrument(await connect(settings))
    script = [ToolCall(tool="list_pods"), ToolCall(tool="scale", args={"deployment": "cart", "replicas": 3}),
              ToolCall(tool="rollout_restart", args={"deployment": "cart"}), FINISH]
    incident = Incident(source="sdk", namespace="shop", kubeconfig=kubeconfig, report="the cart feels slow",
                        limits=RemediationLimits(settle_s=0, approval_risk=Risk.MEDIUM, approval_timeout_s=300))
    try:
        async with running_workers(client, settings) as isolated:
            started = await start_incident(client, incident, settings=isolated,
                                           policy=PolicyRef(name="scripted", version=version, script=script))
            handle = started.handle
            deadline = time.monotonic() + 120  # generous: a loaded CI machine is slow, a hang is still caught
            status = await handle.query(IncidentRemediationWorkflow.status)
            while status.pending_approval is None and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
                status = await handle.query(IncidentRemediationWorkflow.status)
            assert status.pending_approval is not None and status.pending_approval.tool == "scale", status
            await handle.signal(IncidentRemediationWorkflow.reject_action,
                                ApprovalDecision(step=1, approved=False, by="test", reason="no"))
            return IncidentOutcome.model_validate(await handle.result())
    finally:
        await terminate_running(client, [incident.workflow_id])
