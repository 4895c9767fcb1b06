"""A rollback, announced three ways: a Prometheus counter (alert on any increase), one structured log line (for
log search), and an optional webhook POST of the event (chat, paging). The line and the POST are redacted: a
rollback's reason quotes what the analysis saw."""

from __future__ import annotations

import json
import logging
from typing import Any

from prometheus_client import Counter

from agent_sre.models.rollout import RollbackEvent
from agent_sre.redaction import redact_data
from agent_sre.webhooks import post_json

log = logging.getLogger("agent_sre.rollout")

ROLLBACKS = Counter("agent_sre_model_rollbacks", "Model rollouts rolled back, by candidate and trigger "
                    "(analysis, guardrail, signal)", ["candidate", "trigger"])


def _payload(event: RollbackEvent) -> dict[str, Any]:
    payload: dict[str, Any] = redact_data({"event": "model_rollback",
                                           **event.model_dump(mode="json", exclude={"notify_url"})})
    return payload


def record_rollback(event: RollbackEvent) -> str:
    """Count and log the rollback; returns the log line."""
    ROLLBACKS.labels(event.candidate, event.trigger).inc()
    line = json.dumps(_payload(event))
    log.warning(line)
    return line


def post_webhook(url: str, event: RollbackEvent) -> int:
    """POST the event as JSON; returns the HTTP status. Errors (refused, 4xx/5xx, timeout) raise."""
    return post_json(url, _payload(event))
