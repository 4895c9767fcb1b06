"""`agent-sre worker`: a worker process with tracing and a Prometheus endpoint."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from agent_sre.config import Settings


def worker(
    queue: list[str] = typer.Option(None, "--queue", "-q",
                                    help="task queue to serve (repeatable); default: every queue"),
    metrics_port: int = typer.Option(None, "--metrics-port", min=0, max=65535,
                                     help="Prometheus /metrics port (default: settings.metrics_port; 0 = off)"),
    kubeconfig: str = typer.Option(None, "--kubeconfig", help="the cluster this worker's tools and observer act "
                                   "on, as kubectl takes it (a path or a list) (default: KUBECONFIG, else the "
                                   "embedded simulator)"),
    context: str = typer.Option(None, "--context", help="the kubeconfig's context (default: "
                                "AGENT_SRE_KUBE_CONTEXT, else its current-context)"),
) -> None:
    """Run workflows and activities: the agent loop, tools, policy inference."""
    from agent_sre.cli.common import connect_or_fail
    from agent_sre.config import get_settings
    from agent_sre.storage import store_status
    from agent_sre.telemetry import instrument, setup_tracing, shutdown_tracing, start_metrics_server
    from agent_sre.temporal import unregistered_search_attributes
    from agent_sre.workers.main import queue_contents, run_workers

    settings = _with_cluster(get_settings(), kubeconfig, context)
    known = set(queue_contents(settings))
    unknown = sorted(set(queue or ()) - known)
    if unknown:
        raise typer.BadParameter(f"unknown task queue(s) {unknown}; known: {sorted(known)}", param_hint="--queue")
    setup_tracing(settings, service_name="agent-sre-worker")
    port = settings.metrics_port if metrics_port is None else metrics_port
    if port:
        try:
            start_metrics_server(port, settings.metrics_host)
        except OSError as e:
            raise typer.BadParameter(
                f"cannot serve metrics on port {port} of {settings.metrics_host}: {e}",
                param_hint="AGENT_SRE_METRICS_PORT" if metrics_port is None else "--metrics-port") from None

    async def serve() -> None:
        client = instrument(await connect_or_fail(settings))
        if missing := await unregistered_search_attributes(client):
            namespace = settings.temporal_namespace
            typer.echo(f"error: namespace {namespace!r} lacks search attributes our workflows set (a remediation "
                       "would stall at its first upsert); register them once:", err=True)
            for key, kind in missing.items():
                typer.echo(f"  temporal operator search-attribute create --namespace {namespace} --name {key} "
                           f"--type {kind}", err=True)
            raise typer.Exit(1)
        answers, detail = await asyncio.to_thread(store_status, settings)
        if not answers:
            typer.echo(f"warning: the object store at {settings.s3_endpoint} does not answer ({detail}); incidents "
                       "will wait in their `storing` phase, retrying, until it does", err=True)
        await run_workers(client, settings, queue or None, ready=lambda: typer.echo(
            f"worker on {', '.join(queue or sorted(known))} · Temporal {settings.temporal_address}"
            + (f" · metrics http://{settings.metrics_host}:{port}/metrics" if port else "")))

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass
    # The workers have stopped. Leave without the interpreter's finalization, during which the Temporal runtime's
    # native threads may still call into Python: that aborted 1 or 2 of every 8 clean stops (SIGABRT,
    # "PyGILState_Release"). Spans are exported first, as the exit hook that this skips would.
    shutdown_tracing()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _with_cluster(settings: Settings, kubeconfig: str | None, context: str | None) -> Settings:
    """The settings with the cluster of `--kubeconfig`/`--context`, checked now: a context the kubeconfig does not
    define is one clear error at start-up, not a failure of the first incident's first look at the cluster."""
    from agent_sre.cli.common import fail
    from agent_sre.tools.client import KubeconfigError, api_client

    chosen = {"kubeconfig": Path(kubeconfig) if kubeconfig else None, "kube_context": context}
    if not any(chosen.values()):
        return settings
    settings = settings.model_copy(update={key: value for key, value in chosen.items() if value})
    try:
        api_client(settings=settings)
    except KubeconfigError as e:
        fail(str(e))
    return settings
