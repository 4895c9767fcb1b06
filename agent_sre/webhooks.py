"""POSTing an event to a webhook (chat, paging), for the announcements workflows make.

Every webhook body leaves the process through `post_json`, so it is redacted here: a chat channel is read by many
more people than the cluster's Secrets are, and a page quotes what the agent saw.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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


@contextmanager
def receiving(path: str = "/hook") -> Iterator[tuple[str, list[bytes]]]:
    """A local webhook endpoint on a free port that keeps every body POSTed to it: what a chat or paging channel
    would be sent, for checking it (tests, the planted-secrets benchmark). Yields its URL and the bodies."""
    bodies: list[bytes] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *_: object) -> None:  # quiet: the bodies are the record
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}{path}", bodies
    finally:
        server.shutdown()
