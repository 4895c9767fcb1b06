"""Alertmanager webhook receiver (`agent-sre alerts serve`): firing alerts start remediations, resolved ones
signal them.

Every alert of a delivery is validated before any workflow starts, so a bad delivery starts nothing. Alertmanager
retries a delivery that got a 5xx; because a remediation's workflow id derives from the alert's fingerprint, a
redelivery attaches to the workflows the first attempt started instead of starting them twice.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, Counter, generate_latest
from pydantic import ValidationError
from temporalio.client import Client

from agent_sre.config import Settings
from agent_sre.models.alert import Alert, AlertHandling, AlertmanagerWebhook, AlertReceipt, WebhookReply
from agent_sre.models.incident import Incident
from agent_sre.temporal import connect, signal_alert_resolved, start_incident
from agent_sre.validation import explain

log = logging.getLogger(__name__)

ROLLOUT_LABEL = "agent_sre_rollout"

ALERTS_RECEIVED = Counter("agent_sre_alerts_received", "Alerts received from Alertmanager, by what was done with them",
                          ["status", "handling"])
DELIVERIES_REJECTED = Counter("agent_sre_alert_deliveries_rejected", "Webhook deliveries refused before any alert "
                              "was handled", ["reason"])

CLIENT = web.AppKey("client", Client)
SETTINGS = web.AppKey("settings", Settings)
TOKEN = web.AppKey("token", str)


def create_app(client: Client, settings: Settings, token: str | None = None) -> web.Application:
    """The receiver as an aiohttp application. `token` None (or empty) turns authentication off."""
    app = web.Application()
    app[CLIENT], app[SETTINGS], app[TOKEN] = client, settings, token or ""
    app.add_routes([web.post("/alerts", receive_alerts), web.get("/healthz", healthz), web.get("/metrics", metrics)])
    return app


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def metrics(request: web.Request) -> web.Response:
    return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})


async def receive_alerts(request: web.Request) -> web.Response:
    if not _authorized(request, request.app[TOKEN]):
        DELIVERIES_REJECTED.labels("unauthorized").inc()
        return _reply(WebhookReply(error="missing or wrong bearer token"), 401,
                      headers={"WWW-Authenticate": 'Bearer realm="agent-sre alerts"'})
    try:
        webhook = AlertmanagerWebhook.model_validate_json(await request.read())
        plan = plan_delivery(webhook)
    except ValueError as e:  # pydantic's ValidationError is a ValueError
        DELIVERIES_REJECTED.labels("malformed").inc()
        return _reply(WebhookReply(error=f"malformed Alertmanager webhook, nothing was started: {_reason(e)}"), 400)

    client, settings = request.app[CLIENT], request.app[SETTINGS]
    reply = WebhookReply()
    try:
        for alert, incident in plan:
            receipt = await handle_alert(client, settings, alert, incident)
            ALERTS_RECEIVED.labels(alert.status, receipt.handling).inc()
            reply.receipts.append(receipt)
    except Exception as e:  # Temporal unreachable or refusing: ask Alertmanager to retry the whole delivery
        log.exception("could not hand alerts to Temporal")
        reply.error = f"Temporal did not accept the alerts ({type(e).__name__}: {e}); Alertmanager will retry"
        return _reply(reply, 503)
    return _reply(reply, 200)


def plan_delivery(webhook: AlertmanagerWebhook) -> list[tuple[Alert, Incident | None]]:
    """Each alert with the incident it becomes (None: a rollout alert, handled elsewhere).

    Raises ValueError naming every alert that cannot become an incident, before anything has been started.
    """
    plan: list[tuple[Alert, Incident | None]] = []
    problems: list[str] = []
    for i, alert in enumerate(webhook.alerts):
        if ROLLOUT_LABEL in alert.labels:
            plan.append((alert, None))
            continue
        try:
            plan.append((alert, Incident.from_alert(alert)))
        except ValueError as e:
            problems.append(f"alerts[{i}] ({alert.labels.get('alertname', '?')}): {_reason(e)}")
    if problems:
        raise ValueError("; ".join(problems))
    return plan


async def handle_alert(client: Client, settings: Settings, alert: Alert, incident: Incident | None) -> AlertReceipt:
    if incident is None:
        return route_rollout_alert(alert)
    if alert.status == "firing":
        started = await start_incident(client, incident, settings=settings)
        return _receipt(alert, "attached" if started.attached else "started", workflow_id=started.workflow_id)
    workflow_id = await signal_alert_resolved(client, alert)
    if workflow_id is None:
        return _receipt(alert, "not_running", workflow_id=incident.workflow_id,
                        detail="no remediation is running for this alert")
    return _receipt(alert, "signalled", workflow_id=workflow_id)


def route_rollout_alert(alert: Alert) -> AlertReceipt:
    """Alerts about a model rollout belong to the rollout workflow, which a later issue adds; until then they
    are acknowledged (so Alertmanager does not retry them forever) and reported as not handled."""
    return _receipt(alert, "unsupported", code=501,
                    detail=f"no rollout workflow yet: alerts labelled {ROLLOUT_LABEL} are not handled")


def _receipt(alert: Alert, handling: AlertHandling, **details: Any) -> AlertReceipt:
    return AlertReceipt(alertname=alert.labels.get("alertname", ""), fingerprint=alert.stable_fingerprint(),
                        status=alert.status, handling=handling, **details)


def _authorized(request: web.Request, token: str) -> bool:
    if not token:
        return True
    scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(credentials.strip().encode(), token.encode())


def _reason(e: ValueError) -> str:
    return explain(e, root="body") if isinstance(e, ValidationError) else str(e)


def _reply(reply: WebhookReply, status: int, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(text=reply.model_dump_json(exclude_none=True), status=status,
                        content_type="application/json", headers=headers)


async def serve(settings: Settings, host: str, port: int, token: str | None) -> None:
    """Run the receiver until cancelled."""
    client = await connect(settings)
    runner = web.AppRunner(create_app(client, settings, token))
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
        log.info("alert receiver listening on http://%s:%d/alerts", host, port)
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
