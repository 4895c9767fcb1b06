"""Observability: OpenTelemetry traces and Prometheus metrics.

Tracing: `temporal.connect()` puts Temporal's tracing interceptor on every client, and workers built from that
client inherit it; the tool and policy activities add a span per call with its attributes. `setup_tracing()`
decides where the spans go (Settings.otel_exporter).

Metrics are recorded on the worker by `MetricsInterceptor`, from activity results rather than workflow code:
workflow code replays, activities complete once. An incident counts as finished when its reward is computed,
the one step every remediation runs exactly once (storing the trajectory is optional).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIServer

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter, SpanExportResult
from prometheus_client import Counter, Histogram, start_http_server
from temporalio import activity, client, worker

from agent_sre.config import Settings
from agent_sre.models.remediation import PolicyRequest, RewardRequest
from agent_sre.models.reward import RewardRecord
from agent_sre.models.trajectory import Trajectory
from agent_sre.rewards.base import EpisodeFacts

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


def span_exporter(settings: Settings) -> SpanExporter | None:
    """The exporter Settings.otel_exporter names; None for "none"."""
    match settings.otel_exporter:
        case "console":
            return ConsoleSpanExporter()
        case "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            endpoint = settings.otel_endpoint.rstrip("/")
            return OTLPSpanExporter(endpoint=endpoint if endpoint.endswith("/v1/traces") else f"{endpoint}/v1/traces")
        case "file":
            return JsonLinesSpanExporter(settings.data_dir / "traces.jsonl")
        case _:
            return None


def setup_tracing(settings: Settings, service_name: str = "agent-sre") -> SpanProcessor | None:
    """Send this process's spans to the configured exporter. Returns the processor (flush it before reading a
    file export), or None when tracing is off. The process keeps one tracer provider; calling this again adds
    an exporter to it rather than replacing it, since OpenTelemetry allows setting the provider only once."""
    exporter = span_exporter(settings)
    if exporter is None:
        return None
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        trace.set_tracer_provider(provider)
    processor = BatchSpanProcessor(exporter)
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
