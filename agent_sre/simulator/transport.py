"""An official `kubernetes` ApiClient that calls the simulator's router directly instead of going over HTTP.

Only the REST layer is swapped: serialization, typed models, `ApiException`s and watches are the client's own,
so tool code cannot tell it apart from a real cluster, and training episodes skip the sockets.
"""

from __future__ import annotations

import inspect
import io
import json
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, urlsplit

import urllib3
from kubernetes import client
from kubernetes.client import rest

from agent_sre.simulator import api
from agent_sre.simulator.simulator import Simulator

IN_PROCESS_HOST = "http://simulator.in-process"


def _encode(body: Any, content_type: str) -> bytes:
    if body is None:
        return b""
    if isinstance(body, bytes):
        return body
    if isinstance(body, str) and "json" not in content_type:
        return body.encode()
    return json.dumps(body).encode()


class _Body(io.BytesIO):
    """A response body that reports itself closed once fully read, as a socket-backed one does: urllib3's
    `stream()` (used by watches) reads until the body says it is closed."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self._length = len(data)

    def isclosed(self) -> bool:
        return self.tell() >= self._length


class InProcessRESTClient:
    """Drop-in for `kubernetes.client.rest.RESTClientObject`: same `request` signature and response type."""

    def __init__(self, simulator: Simulator) -> None:
        self.simulator = simulator

    def request(self, method: str, url: str, headers: dict[str, str] | None = None, body: Any = None,
                post_params: Any = None, _request_timeout: Any = None) -> rest.RESTResponse:
        if post_params and body:
            raise client.ApiValueError("body parameter cannot be used with post_params parameter.")
        headers = dict(headers or {})
        content_type = headers.get("Content-Type", "")
        if content_type == "application/json-patch+json" and not isinstance(body, list):
            # The real client sends object patches for built-in APIs as strategic merge patches.
            headers["Content-Type"] = content_type = "application/strategic-merge-patch+json"
        parts = urlsplit(url)
        status, resp_headers, data = api.handle(self.simulator, method.upper(), parts.path,
                                                parse_qs(parts.query, keep_blank_values=True), headers,
                                                _encode(body, content_type))
        raw = urllib3.HTTPResponse(body=_Body(data), headers=resp_headers, status=status,
                                   reason=HTTPStatus(status).phrase, preload_content=False, decode_content=False)
        return rest.RESTResponse(raw)

    def close(self) -> None:
        """Nothing to release: there is no connection pool."""


def in_process_api_client(simulator: Simulator, env: str) -> client.ApiClient:
    """An ApiClient for environment `env` of `simulator`, usable with CoreV1Api, AppsV1Api, CustomObjectsApi..."""
    if "query_params" in inspect.signature(rest.RESTClientObject.request).parameters:
        raise RuntimeError("the in-process transport needs kubernetes>=37 (the REST layer it replaces changed in "
                           "37.0; this client still passes query_params to it)")
    simulator.env(env)  # fail now, with the list of known environments, rather than on the first call
    configuration = client.Configuration(host=f"{IN_PROCESS_HOST}/envs/{env}")
    api_client = client.ApiClient(configuration)
    api_client.rest_client = InProcessRESTClient(simulator)
    return api_client
