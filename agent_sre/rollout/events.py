"""A rollback, announced three ways: a Prometheus counter (alert on any increase), one structured log line (for
log search), and an optional webhook POST of the event (chat, paging)."""

from __future__ import annotations

import json
import logging
import urllib.request

from prometheus_client import Counter

from agent_sre.models.rollout import RollbackEvent

log = logging.getLogger("agent_sre.rollout")

ROLLBACKS = Counter("agent_sre_model_rollbacks", "Model rollouts rolled back, by candidate and trigger "
                    "(analysis, guardrail, signal)", ["candidate", "trigger"])
WEBHOOK_TIMEOUT_S = 10.0


def _payload(event: RollbackEvent) -> str:
    return json.dumps({"event": "model_rollback", **event.model_dump(mode="json", exclude={"notify_url"})})


def record_rollback(event: RollbackEvent) -> str:
    """Count and log the rollback; returns the log line."""
    ROLLBACKS.labels(event.candidate, event.trigger).inc()
    line = _payload(event)
    log.warning(line)
    return line


def post_webhook(url: str, event: RollbackEvent) -> int:
    """POST the event as JSON; returns the HTTP status. Errors (refused, 4xx/5xx, timeout) raise."""
    request = urllib.request.Request(url, data=_payload(event).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=WEBHOOK_TIMEOUT_S) as response:
        return int(response.status)
