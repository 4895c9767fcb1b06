"""POSTing an event to a webhook (chat, paging), for the announcements workflows make."""

from __future__ import annotations

import json
import urllib.request
from datetime import timedelta
from typing import Any

from temporalio.common import RetryPolicy

WEBHOOK_TIMEOUT_S = 10.0
NOTIFY_RETRY = RetryPolicy(initial_interval=timedelta(seconds=2), maximum_attempts=3)  # then the workflow goes on


def post_json(url: str, payload: dict[str, Any]) -> int:
    """POST `payload` as JSON; returns the HTTP status. Errors (refused, 4xx/5xx, timeout) raise."""
    request = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=WEBHOOK_TIMEOUT_S) as response:
        return int(response.status)
