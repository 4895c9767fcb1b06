"""Paging a human when the agent escalates: the notice POSTed to the request's webhook."""

from __future__ import annotations

from temporalio import activity

from agent_sre.models.remediation import EscalationNotice
from agent_sre.webhooks import post_json


@activity.defn
def notify_escalation(url: str, notice: EscalationNotice) -> int:
    """POST the notice; returns the HTTP status. Errors raise, so Temporal retries them."""
    return post_json(url, notice.model_dump(mode="json"))
