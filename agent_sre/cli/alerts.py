"""`agent-sre alerts serve`: the Alertmanager webhook receiver."""

from __future__ import annotations

import asyncio
import logging

import typer

app = typer.Typer(help="Alertmanager webhook receiver: firing alerts start remediations.", no_args_is_help=True)


@app.command("serve")
def serve(
    port: int | None = typer.Option(None, "--port", min=1, max=65535, help="default: settings.alerts_port (9095)"),
    host: str = typer.Option("127.0.0.1", "--host", help="address to bind; 0.0.0.0 to accept remote Alertmanagers"),
    token: str | None = typer.Option(None, "--token",
                              help="bearer token Alertmanager must send (default: settings.alerts_token)"),
) -> None:
    """Receive Alertmanager's webhook (v4) on POST /alerts; GET /healthz, GET /metrics."""
    from agent_sre.alerts.receiver import serve as serve_receiver
    from agent_sre.cli.common import connect_or_fail
    from agent_sre.config import get_settings
    from agent_sre.telemetry import setup_tracing

    settings = get_settings()
    token = token or settings.alerts_token
    port = port or settings.alerts_port
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not token:
        typer.echo("warning: no token configured (--token / AGENT_SRE_ALERTS_TOKEN); anyone who can reach "
                   "the port can start remediations and roll back model rollouts", err=True)
    setup_tracing(settings, service_name="agent-sre-alerts")

    async def go() -> None:
        client = await connect_or_fail(settings)  # a stack that is down: one line, before the address is printed
        typer.echo(f"alert receiver on http://{host}:{port}/alerts · Temporal {settings.temporal_address}")
        await serve_receiver(client, settings, host, port, token)

    try:
        asyncio.run(go())
    except KeyboardInterrupt:
        pass
