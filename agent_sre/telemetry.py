"""Observability: OpenTelemetry traces and Prometheus metrics.

Tracing: `temporal.connect()` puts Temporal's tracing interceptor on every client, and workers built from that
client inherit it; the starters (the alert receiver, the CLI) open a span around starting an incident, and the
tool and policy activities add a span per call (`agent_sre.spans`: what the spans say). `setup_tracing()` decides
where the spans go: our settings (AGENT_SRE_OTEL_EXPORTER, AGENT_SRE_OTEL_ENDPOINT) first, then OpenTelemetry's
standard variables (OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_*, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES).

Metrics are recorded on the worker by `MetricsInterceptor`, from activity results rather than workflow code:
workflow code replays, activities complete once. An incident counts as finished when its reward is computed,
the one step every remediation runs exactly once (storing the trajectory is optional).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIServer

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, OTELResourceDetector, Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, SynchronousMultiSpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter, SpanExportResult
from prometheus_client import Counter, Histogram, start_http_server
from temporalio import activity, client, worker

from agent_sre.config import Settings
from agent_sre.models.remediation import PolicyRequest, RewardRequest
from agent_sre.models.reward import RewardRecord
from agent_sre.models.trajectory import Trajectory
from agent_sre.rewards.base import EpisodeFacts

log = logging.getLogger(__name__)

# --- traces -----------------------------------------------------------------------------------------------------

class JsonLinesSpanExporter(SpanExporter):
    """Appends each finished span to a file as one JSON object per line: traces without a collector."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(span.to_json(indent=None) + "\n" for span in spans)
        with self._lock, self.path.open("a", encoding="utf-8") as f:
            f.write(lines)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


OTLP_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def exporter_names(settings: Settings) -> list[str]:
    """Which exporters to use: AGENT_SRE_OTEL_EXPORTER; else OTEL_TRACES_EXPORTER (a comma-separated list); else
    otlp when an OTLP endpoint is set (ours or OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT); else none. Not the SDK's
    default (otlp): the dev stack runs no collector, and a process would keep failing to reach one."""
    if settings.otel_exporter is not None:
        return [settings.otel_exporter]
    if listed := os.environ.get("OTEL_TRACES_EXPORTER", "").strip():
        return [name.strip() for name in listed.split(",") if name.strip()]
    if settings.otel_endpoint or any(os.environ.get(name) for name in OTLP_ENDPOINT_VARIABLES):
        return ["otlp"]
    return []


def span_exporter(name: str, settings: Settings) -> SpanExporter | None:
    """The exporter `name` names; None for "none", and for a name we do not know (logged: OTEL_TRACES_EXPORTER may
    name exporters of other setups, jaeger or zipkin, that a typo in our own setting cannot)."""
    match name:
        case "console":
            return ConsoleSpanExporter()
        case "otlp":
            return otlp_exporter(settings.otel_endpoint)
        case "file":
            return JsonLinesSpanExporter(settings.data_dir / "traces.jsonl")
        case "none":
            return None
        case _:
            log.warning("OTEL_TRACES_EXPORTER names %r, which is not one of otlp, console, file, none: ignored", name)
            return None


def otlp_exporter(endpoint: str | None) -> SpanExporter:
    """OTLP over HTTP to AGENT_SRE_OTEL_ENDPOINT, a base URL (/v1/traces is appended), when set. Otherwise the
    exporter reads the standard variables itself: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is, else
    OTEL_EXPORTER_OTLP_ENDPOINT plus /v1/traces, else http://localhost:4318/v1/traces; and their headers,
    timeout and certificate variables in every case."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    if not endpoint:
        return OTLPSpanExporter()
    endpoint = endpoint.rstrip("/")
    return OTLPSpanExporter(endpoint=endpoint if endpoint.endswith("/v1/traces") else f"{endpoint}/v1/traces")


def tracing_resource(service_name: str) -> Resource:
    """OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME (read by the SDK), with `service_name` (the process's role:
    agent-sre-worker, agent-sre-alerts, agent-sre-cli) where they name no service."""
    named = SERVICE_NAME in OTELResourceDetector().detect().attributes
    return Resource.create({} if named else {SERVICE_NAME: service_name})


def setup_tracing(settings: Settings, service_name: str = "agent-sre") -> SpanProcessor | None:
    """Send this process's spans to the configured exporters (`exporter_names`). Returns their processor (flush it
    before reading a file export), or None when nothing is exported.

    The process keeps one tracer provider, installed even when nothing is exported: a starter that exports nothing
    still gives the workflow it starts a trace context, so that the workers' spans of one incident share one trace
    (without one, every activity's span is a trace of its own). Calling this again adds exporters to the provider
    rather than replacing it, since OpenTelemetry allows setting the provider only once."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider(resource=tracing_resource(service_name))
        trace.set_tracer_provider(provider)
    exporters = [e for name in exporter_names(settings) if (e := span_exporter(name, settings)) is not None]
    if not exporters:
        return None
    processor = SynchronousMultiSpanProcessor()
    for exporter in exporters:
        processor.add_span_processor(BatchSpanProcessor(exporter))
    provider.add_span_processor(processor)
    return processor


def shutdown_tracing() -> None:
    """Export the spans still queued, as the tracer provider's exit hook would (for a process that skips it)."""
    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        provider.shutdown()


# --- metrics ----------------------------------------------------------------------------------------------------

INCIDENTS_STARTED = Counter("agent_sre_incidents_started", "Remediations that reached their first policy "
                            "decision", ["model_version"])
INCIDENTS_FINISHED = Counter("agent_sre_incidents_finished", "Remediations judged and rewarded",
                             ["outcome", "model_version"])
TIME_TO_MITIGATE = Histogram("agent_sre_time_to_mitigate_seconds", "From the start of a resolved incident until the "
                             "agent stopped acting", buckets=(5, 10, 30, 60, 120, 300, 600, 900, 1800, 3600))
FALSE_POSITIVES = Counter("agent_sre_false_positives", "Incidents where the agent acted on a false alarm or "
                          "claimed a fix the observer rejected")
ESCALATIONS = Counter("agent_sre_escalations", "Incidents the agent handed to a human as not fixed", ["model_version"])
REFUSED_ACTIONS = Counter("agent_sre_refused_actions", "Actions stopped by a guardrail or a human")
REWARD = Histogram("agent_sre_reward", "Episode reward, by reward function and model version",
                   ["function", "model_version"],
                   buckets=(-10, -5, -2, -1, -0.5, 0, 0.25, 0.5, 0.75, 1, 2, 5, 10, 15, 20))


def start_metrics_server(port: int, addr: str = "127.0.0.1") -> WSGIServer:
    """Serve /metrics from a daemon thread; on the loopback unless told otherwise (AGENT_SRE_METRICS_HOST), since
    the metrics name models, namespaces and outcomes. Returns the server (`shutdown()` stops it)."""
    server, _thread = start_http_server(port, addr)
    return server


def record_started(request: PolicyRequest) -> None:
    if not request.trajectory.steps:
        INCIDENTS_STARTED.labels(request.policy.version).inc()


def record_finished(trajectory: Trajectory, reward: RewardRecord) -> None:
    episode = EpisodeFacts.of(trajectory)  # the reward functions' own reading of the episode, so the numbers agree
    INCIDENTS_FINISHED.labels(episode.outcome, trajectory.model_version).inc()
    REWARD.labels(reward.function, trajectory.model_version).observe(reward.total)
    if episode.time_to_mitigate_s is not None:
        TIME_TO_MITIGATE.observe(episode.time_to_mitigate_s)
    if episode.false_positive:
        FALSE_POSITIVES.inc()
    if episode.escalated:
        ESCALATIONS.labels(trajectory.model_version).inc()
    if episode.refused:
        REFUSED_ACTIONS.inc(episode.refused)


class MetricsInterceptor(client.Interceptor, worker.Interceptor):
    """Records incident metrics from the results of the activities that carry them.

    A client interceptor too, so a worker built from a client that has it picks it up (Temporal copies a
    client's worker interceptors onto its workers): see `instrument()`.
    """

    def intercept_activity(self, next: worker.ActivityInboundInterceptor) -> worker.ActivityInboundInterceptor:
        return _MetricsActivityInbound(next)


# The activities whose results carry the metrics (a test checks that workers register them under these names).
POLICY_ACTIVITY, REWARD_ACTIVITY = "decide_next_action", "compute_reward"


class _MetricsActivityInbound(worker.ActivityInboundInterceptor):
    async def execute_activity(self, input: worker.ExecuteActivityInput) -> Any:
        name = activity.info().activity_type
        result = await super().execute_activity(input)
        if name == POLICY_ACTIVITY:
            record_started(input.args[0])
        elif name == REWARD_ACTIVITY:
            request: RewardRequest = input.args[0]
            record_finished(request.trajectory, result)
        return result


def instrument(temporal_client: client.Client) -> client.Client:
    """The same connection with `MetricsInterceptor` added, for building workers."""
    config = temporal_client.config()
    config["interceptors"] = [*config["interceptors"], MetricsInterceptor()]
    return client.Client(**config)
