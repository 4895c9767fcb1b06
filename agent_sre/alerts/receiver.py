"""Alertmanager webhook receiver (`agent-sre alerts serve`): firing alerts start remediations, resolved ones
signal them, and alerts labelled `agent_sre_rollout` roll the running model rollout back.

A delivery is one Alertmanager group (`groupKey`): its alerts in one namespace are one incident, named after the
firing episode (fingerprint and `startsAt`) of the first of them to fire. So a re-sent notification, a retried
delivery, or the same group with one alert more, names the incident already there: a running one gets the
alerts, a finished one is acknowledged (`finished`) and nothing starts. Every alert of a delivery is validated
before any workflow starts, so a bad delivery starts nothing.

An alert whose namespace is outside `AGENT_SRE_ALLOWED_NAMESPACES`, or one beyond the remediations a delivery
(`alerts_max_starts_per_delivery`) or a minute (`alerts_max_starts_per_minute`) may start, is acknowledged and
recorded (a receipt, a log line, the `agent_sre_alerts_received` counter) but not acted on.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, Counter, generate_latest
from pydantic import ValidationError
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from agent_sre.alerts.ratelimit import TokenBucket
from agent_sre.config import Settings
from agent_sre.models.alert import Alert, AlertHandling, AlertmanagerWebhook, AlertReceipt, WebhookReply
from agent_sre.models.incident import Incident
from agent_sre.models.rollout import FINISHED, RolloutStatus
from agent_sre.redaction import redact_data
from agent_sre.rollout.client import ROLLOUT_WORKFLOW_ID
from agent_sre.scope import out_of_scope
from agent_sre.spans import starting
from agent_sre.temporal import StartHandling, signal_alert_resolved, start_incident
from agent_sre.validation import explain
from agent_sre.workflows.rollout import ModelRolloutWorkflow

log = logging.getLogger(__name__)

ROLLOUT_LABEL = "agent_sre_rollout"
ANY_ROLLOUT = "current"
QUERY_TIMEOUT = timedelta(seconds=5)  # no worker answering: 503, and Alertmanager retries

ALERTS_RECEIVED = Counter("agent_sre_alerts_received", "Alerts received from Alertmanager, by what was done with them",
                          ["status", "handling"])
DELIVERIES_REJECTED = Counter("agent_sre_alert_deliveries_rejected", "Webhook deliveries refused before any alert "
                              "was handled", ["reason"])

CLIENT = web.AppKey("client", Client)
SETTINGS = web.AppKey("settings", Settings)
TOKEN = web.AppKey("token", str)
STARTS = web.AppKey("starts", TokenBucket)


def create_app(client: Client, settings: Settings, token: str | None = None) -> web.Application:
    """The receiver as an aiohttp application. `token` None (or empty) turns authentication off."""
    app = web.Application()
    app[CLIENT], app[SETTINGS], app[TOKEN] = client, settings, token or ""
    app[STARTS] = TokenBucket(settings.alerts_max_starts_per_minute)
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
    except web.HTTPRequestEntityTooLarge as e:
        DELIVERIES_REJECTED.labels("too_large").inc()
        return _reply(WebhookReply(error=f"{e.text}; nothing was started"), 413)
    except ValueError as e:  # pydantic's ValidationError is a ValueError
        DELIVERIES_REJECTED.labels("malformed").inc()
        return _reply(WebhookReply(error=f"malformed Alertmanager webhook, nothing was started: {_reason(e)}"), 400)

    client, settings = request.app[CLIENT], request.app[SETTINGS]
    starts = DeliveryStarts(request.app[STARTS], settings.alerts_max_starts_per_delivery)
    receipts: dict[int, AlertReceipt] = {}
    error = None
    try:
        for unit in plan:
            handled = await handle_unit(client, settings, unit, starts)
            for i, alert, receipt in zip(unit.positions, unit.alerts, handled, strict=True):
                _record(alert, receipt)
                receipts[i] = receipt
    except Exception as e:  # Temporal unreachable or refusing: ask Alertmanager to retry the whole delivery
        log.exception("could not hand alerts to Temporal")
        error = f"Temporal did not accept the alerts ({type(e).__name__}: {e}); Alertmanager will retry"
    reply = WebhookReply(receipts=[receipts[i] for i in sorted(receipts)], error=error)
    return _reply(reply, 200 if error is None else 503)


@dataclass(frozen=True)
class Unit:
    """What one delivery's alerts become: a rollout alert alone (`incident` None), or an incident of the
    delivery's alerts in one namespace. `positions`: where its alerts are in the delivery."""

    positions: list[int]
    alerts: list[Alert]
    incident: Incident | None


def plan_delivery(webhook: AlertmanagerWebhook) -> list[Unit]:
    """The delivery's units, in the order of their first alerts.

    Raises ValueError naming every alert that cannot become an incident (or names no rollout), before anything
    has been started.
    """
    rollouts: list[Unit] = []
    by_namespace: dict[str, list[tuple[int, Alert]]] = {}
    problems: list[str] = []
    for i, alert in enumerate(webhook.alerts):
        if ROLLOUT_LABEL in alert.labels:
            if not alert.labels[ROLLOUT_LABEL].strip():
                problems.append(f"alerts[{i}] ({alert.labels.get('alertname', '?')}): label {ROLLOUT_LABEL} is "
                                f"empty; use '{ANY_ROLLOUT}' or the candidate version (or rollout id) it is about")
            rollouts.append(Unit([i], [alert], None))
            continue
        try:
            by_namespace.setdefault(Incident.from_alert(alert).namespace, []).append((i, alert))
        except ValueError as e:
            problems.append(f"alerts[{i}] ({alert.labels.get('alertname', '?')}): {_reason(e)}")
    if problems:
        raise ValueError("; ".join(problems))
    incidents = [Unit([i for i, _ in group], [a for _, a in group], Incident.from_alerts([a for _, a in group]))
                 for group in by_namespace.values()]
    return sorted(rollouts + incidents, key=lambda unit: unit.positions[0])


class DeliveryStarts:
    """The remediations one delivery may still start: at most `cap`, each also a token of the receiver's bucket."""

    def __init__(self, bucket: TokenBucket, cap: int) -> None:
        self.bucket, self.left = bucket, cap

    def take(self) -> str | None:
        """Why no remediation may start now, or None after taking one start."""
        if self.left <= 0:
            return "this delivery started as many remediations as one may (AGENT_SRE_ALERTS_MAX_STARTS_PER_DELIVERY)"
        if not self.bucket.take():
            return "remediations are being started faster than AGENT_SRE_ALERTS_MAX_STARTS_PER_MINUTE allows"
        self.left -= 1
        return None

    def give_back(self) -> None:
        """A start that attached to a running remediation started nothing."""
        self.left += 1
        self.bucket.give_back()


async def handle_unit(client: Client, settings: Settings, unit: Unit, starts: DeliveryStarts) -> list[AlertReceipt]:
    """A receipt for each alert of the unit, in its order."""
    incident = unit.incident
    if incident is None:
        return [await roll_back_rollout(client, alert) for alert in unit.alerts]
    if (why := out_of_scope(incident.namespace, settings)) is not None:
        return [_not_acted_on(alert, "out_of_scope", 403, f"{why}; not acted on") for alert in unit.alerts]
    if all(alert.status == "resolved" for alert in unit.alerts):
        workflow_id = await signal_alert_resolved(client, incident)
        if workflow_id is None:
            return [_receipt(alert, "not_running", workflow_id=incident.workflow_id,
                             detail="no remediation is running for this alert") for alert in unit.alerts]
        return [_receipt(alert, "signalled", workflow_id=workflow_id) for alert in unit.alerts]
    if (why := starts.take()) is not None:
        return [_not_acted_on(alert, "rate_limited", 429, f"{why}; not acted on (Alertmanager resends it)")
                for alert in unit.alerts]
    with starting("alert received", incident) as span:
        started = await start_incident(client, incident, settings=settings)
        span.set_attribute("agent_sre.alert.handling", started.handling)  # a re-sent alert starts nothing
    if started.attached:
        starts.give_back()
    detail = FINISHED_DETAIL if started.handling == "finished" else ""
    return [_receipt(alert, _handling(alert, started.handling), workflow_id=started.workflow_id, detail=detail)
            for alert in unit.alerts]


FINISHED_DETAIL = "the remediation of this firing has finished; a new firing (a new startsAt) starts a new one"


def _handling(alert: Alert, started: StartHandling) -> AlertHandling:
    """A resolved alert among firing ones was handed to the incident with them: signalled, if it runs."""
    if alert.status == "firing":
        return started
    return "not_running" if started == "finished" else "signalled"


async def roll_back_rollout(client: Client, alert: Alert) -> AlertReceipt:
    """A firing rollout alert sends `rollback(reason)` to the running rollout.

    The label's value says which rollout: `current` is whichever runs; a candidate version (or a rollout id)
    only that one, so that a late alert about an earlier rollout cannot roll back the next. A resolved alert
    changes nothing: a rollback is never undone by an alert.
    """
    target = alert.labels[ROLLOUT_LABEL].strip()
    if alert.status == "resolved":
        return _receipt(alert, "ignored", workflow_id=ROLLOUT_WORKFLOW_ID,
                        detail="a resolved rollout alert changes nothing: rollbacks are not undone by alerts")
    if target != ANY_ROLLOUT:
        running = await _running_rollout(client)
        if running is None or target not in (running.candidate, running.rollout_id):
            now = f"the running one is of {running.candidate}" if running else "none is running"
            return _receipt(alert, "no_rollout_running", code=404,
                            detail=f"no rollout of {target} is running ({now}); nothing was signalled")
    reason = rollback_reason(alert)
    try:
        await client.get_workflow_handle(ROLLOUT_WORKFLOW_ID).signal(ModelRolloutWorkflow.rollback, reason)
    except RPCError as e:
        if e.status != RPCStatusCode.NOT_FOUND:  # no such workflow, or it has already completed
            raise
        return _receipt(alert, "no_rollout_running", code=404, detail="no rollout is running; nothing was signalled")
    return _receipt(alert, "rollback_signalled", code=202, workflow_id=ROLLOUT_WORKFLOW_ID, detail=reason)


async def _running_rollout(client: Client) -> RolloutStatus | None:
    try:
        status = await client.get_workflow_handle(ROLLOUT_WORKFLOW_ID).query(ModelRolloutWorkflow.status,
                                                                             rpc_timeout=QUERY_TIMEOUT)
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    return None if status.phase in FINISHED else status


def rollback_reason(alert: Alert) -> str:
    """What the rollout records and announces: the alert's name and summary."""
    name = alert.labels.get("alertname", "unnamed alert")
    summary = alert.annotations.get("summary") or alert.annotations.get("description")
    return f"alert {name} firing" + (f": {summary}" if summary else "")


def _not_acted_on(alert: Alert, handling: AlertHandling, code: int, detail: str) -> AlertReceipt:
    """An alert acknowledged and recorded (`_record`), but not acted on."""
    return _receipt(alert, handling, code=code, detail=detail)


def _record(alert: Alert, receipt: AlertReceipt) -> None:
    """One count and one structured log line (JSON) per alert received, saying what was done with it: an on-call
    can grep which alert started or attached which incident, and why one was not acted on (a warning)."""
    ALERTS_RECEIVED.labels(receipt.status, receipt.handling).inc()
    line = {"event": "alert_received", "namespace": alert.labels.get("namespace"), **receipt.model_dump(mode="json")}
    log.log(logging.WARNING if receipt.code >= 400 else logging.INFO, json.dumps(redact_data(line)))


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


async def serve(client: Client, settings: Settings, host: str, port: int, token: str | None) -> None:
    """Run the receiver until cancelled, on a client the caller connected (and reported failing to connect)."""
    runner = web.AppRunner(create_app(client, settings, token))
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
        log.info("alert receiver listening on http://%s:%d/alerts", host, port)
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
