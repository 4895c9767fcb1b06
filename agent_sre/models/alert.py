"""Alerts as Alertmanager sends them (webhook payload version 4)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class Alert(BaseModel):
    model_config = ConfigDict(extra="ignore")

    status: Literal["firing", "resolved"] = "firing"
    labels: dict[str, str]
    annotations: dict[str, str] = Field(default_factory=dict)
    startsAt: datetime | None = None
    endsAt: datetime | None = None
    generatorURL: str = ""
    fingerprint: str = ""

    def stable_fingerprint(self) -> str:
        """Alertmanager's fingerprint when present, else a hash of the sorted labels (the same identity)."""
        if self.fingerprint:
            return self.fingerprint
        canon = ",".join(f"{k}={v}" for k, v in sorted(self.labels.items()))
        return hashlib.sha256(canon.encode()).hexdigest()[:16]

    def episode_id(self) -> str:
        """One firing of this alert: its fingerprint and `startsAt`. Alertmanager re-sends a firing alert (every
        `repeat_interval`, and when a delivery is retried) with the same `startsAt`; a new firing after `resolved`
        has a new one. Whole seconds: Alertmanager's API and its webhook write the same start to different
        precisions, and one alert cannot resolve and fire again within a second. Without `startsAt` the
        fingerprint alone."""
        if self.startsAt is None:
            return self.stable_fingerprint()
        at = self.startsAt.astimezone(UTC) if self.startsAt.tzinfo else self.startsAt
        return f"{self.stable_fingerprint()}-{at:%Y%m%dT%H%M%SZ}"

    def first_key(self) -> tuple[datetime, str]:
        """Orders a group's alerts: the first to fire leads it (its episode names the incident)."""
        at = self.startsAt or datetime.min.replace(tzinfo=UTC)
        return (at if at.tzinfo else at.replace(tzinfo=UTC)), self.stable_fingerprint()


class AlertmanagerWebhook(BaseModel):
    """The body Alertmanager POSTs to a webhook receiver."""

    model_config = ConfigDict(extra="ignore")

    version: Literal["4"]
    groupKey: str
    truncatedAlerts: int = 0
    status: Literal["firing", "resolved"]
    receiver: str
    groupLabels: dict[str, str] = Field(default_factory=dict)
    commonLabels: dict[str, str] = Field(default_factory=dict)
    commonAnnotations: dict[str, str] = Field(default_factory=dict)
    externalURL: str = ""
    alerts: list[Alert] = Field(min_length=1)


AlertHandling = Literal["started", "attached", "finished", "signalled", "not_running", "rollback_signalled",
                        "no_rollout_running", "ignored", "out_of_scope", "rate_limited"]


class AlertReceipt(BaseModel):
    """What the webhook receiver did with one alert, so Alertmanager's logs and a human can tell."""

    alertname: str
    fingerprint: str
    status: Literal["firing", "resolved"]
    handling: AlertHandling
    workflow_id: str | None = None
    code: int = Field(default=200, description="HTTP-style status of this alert alone (202: rollback signalled, "
                                                "403: its namespace is outside the agent's scope, 404: the rollout "
                                                "it names is not running, 429: rate-limited)")
    detail: str = ""


class WebhookReply(BaseModel):
    """The receiver's answer to one delivery: a receipt per alert, in the order they came."""

    receipts: list[AlertReceipt] = Field(default_factory=list)
    error: str | None = None
