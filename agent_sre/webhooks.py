"""POSTing an event to a webhook (chat, paging), for the announcements workflows make.

Every webhook body leaves the process through `post_json`, so it is redacted here: a chat channel is read by many
more people than the cluster's Secrets are, and a page quotes what the agent saw.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from agent_sre.redaction import redact_data

WEBHOOK_TIMEOUT_S = 10.0


def post_json(url: str, payload: dict[str, Any]) -> int:
    """POST `payload` as JSON, redacted (`redact_data`); returns the HTTP status. Errors (refused, 4xx/5xx, timeout)
    raise."""
    request = urllib.request.Request(url, data=json.dumps(redact_data(payload)).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=WEBHOOK_TIMEOUT_S) as response:
        return int(response.status)
