"""An official `kubernetes` ApiClient that calls the simulator's router directly instead of going over HTTP.

Only the REST layer is swapped: serialization, typed models, `ApiException`s and watches are the client's own,
so tool code cannot tell it apart from a real cluster, and training episodes skip the sockets. A JSON body is
encoded only when the client reads it; a response's `document` gives readers that take plain documents the
simulator's own objects without the JSON round trip (`kube.client.decoded`; over HTTP it decodes the body), and
urllib3's `response.json()` gives them a copy of their own, again without the round trip.
"""

from __future__ import annotations

import inspect
import io
import json
from collections.abc import Iterator
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, urlsplit

import urllib3
from kubernetes import client
from kubernetes.client import rest
from urllib3 import HTTPHeaderDict

from agent_sre.simulator import api
from agent_sre.simulator.simulator import Simulator

IN_PROCESS_HOST = "http://simulator.in-process"
STREAMED = ("watch", "follow")  # query flags of requests whose body clients read as a stream
REASONS = {status.value: status.phrase for status in HTTPStatus}


def _encode(body: Any, content_type: str) -> bytes:
    if body is None:
        return b""
    if isinstance(body, bytes):
        return body
    if isinstance(body, str) and "json" not in content_type:
        return body.encode()
    return json.dumps(body).encode()


class _Body(io.BytesIO):
    """A response body that reports itself closed once fully read, as a socket-backed one does (urllib3's
    `stream()`, used by watches, reads until the body says it is closed). A JSON document is encoded on the first
    read, under the simulator's lock: it holds the store's own objects, which requests on other threads change."""

    def __init__(self, payload: bytes | api.Json, simulator: Simulator) -> None:
        super().__init__(payload if isinstance(payload, bytes) else b"")
        self._pending = payload if isinstance(payload, api.Json) else None
        self._simulator = simulator

    def _fill(self) -> None:
        if self._pending is not None:
            with self._simulator.lock:
                self.write(self._pending.encode())
            self.seek(0)
            self._pending = None

    def read(self, size: int | None = -1) -> bytes:
        self._fill()
        return super().read(size)

    def read1(self, size: int | None = -1) -> bytes:
        self._fill()
        return super().read1(size)

    def isclosed(self) -> bool:
        return self._pending is None and self.tell() >= len(self.getbuffer())


class StreamedResponse(urllib3.HTTPResponse):
    """urllib3's own response, for what clients read as a stream (watches, followed logs)."""

    def __init__(self, payload: bytes | api.Json, headers: dict[str, str], status: int, simulator: Simulator) -> None:
        super().__init__(body=_Body(payload, simulator), headers=headers, status=status,
                         reason=REASONS.get(status, ""), preload_content=False, decode_content=False)
        self.document = payload if isinstance(payload, api.Json) else None


class InProcessResponse:
    """The part of urllib3's HTTPResponse that the client and its callers use (status, headers, data, read,
    stream), without its set-up cost, which exceeds serving a small request. The JSON body is encoded on first
    read, under the simulator's lock: the document holds the store's own objects."""

    def __init__(self, payload: bytes | api.Json, headers: dict[str, str], status: int, simulator: Simulator) -> None:
        self.status, self.reason, self.headers = status, REASONS.get(status, ""), HTTPHeaderDict()
        for name, value in headers.items():  # cheaper than HTTPHeaderDict(headers)
            self.headers[name] = value
        self.document = payload if isinstance(payload, api.Json) else None
        self._data = payload if isinstance(payload, bytes) else None
        self._simulator = simulator

    @property
    def data(self) -> bytes:
        if self._data is None:
            assert self.document is not None
            with self._simulator.lock:
                self._data = self.document.encode()
        return self._data

    def read(self, amt: int | None = None, decode_content: bool | None = None, cache_content: bool = False) -> bytes:
        return self.data

    def stream(self, amt: int | None = 2 ** 16, decode_content: bool | None = None) -> Iterator[bytes]:
        data = self.data
        step = amt or len(data) or 1
        yield from (data[i:i + step] for i in range(0, len(data), step))

    def json(self) -> Any:
        """urllib3's decoded body: here a copy of the document, so the caller may change it."""
        if self.document is None:
            return json.loads(self.data)
        with self._simulator.lock:
            return self.document.copy()

    def getheaders(self) -> HTTPHeaderDict:
        return self.headers

    def getheader(self, name: str, default: str | None = None) -> str | None:
        return self.headers.get(name, default)

    def isclosed(self) -> bool:
        return True

    @property
    def closed(self) -> bool:
        return True

    def release_conn(self) -> None:
        """Nothing to release: there is no connection."""

    def close(self) -> None:
        """Nothing to close: the body is in memory."""


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
        path, _, query = url.partition("?")
        if path.startswith(IN_PROCESS_HOST):
            path = path[len(IN_PROCESS_HOST):]
        else:
            path = urlsplit(url).path
        params = parse_qs(query, keep_blank_values=True) if query else {}
        status, resp_headers, payload = api.serve(self.simulator, method.upper(), path, params, headers,
                                                  _encode(body, content_type))
        streamed = bool(params) and any((params.get(flag) or [""])[-1].lower() in ("true", "1") for flag in STREAMED)
        response = (StreamedResponse if streamed else InProcessResponse)(payload, resp_headers, status,
                                                                         self.simulator)
        return rest.RESTResponse(response)

    def close(self) -> None:
        """Nothing to release: there is no connection pool."""


def in_process_api_client(simulator: Simulator, env: str) -> client.ApiClient:
    """An ApiClient for environment `env` of `simulator`, usable with CoreV1Api, AppsV1Api, CustomObjectsApi..."""
    if "query_params" in inspect.signature(rest.RESTClientObject.request).parameters:
        raise RuntimeError("the in-process transport needs kubernetes>=37 (the REST layer it replaces changed in "
                           "37.0; this client still passes query_params to it)")
    simulator.env(env)  # fail now, with the list of known environments, rather than on the first call
    configuration = client.Configuration(host=f"{IN_PROCESS_HOST}/envs/{env}")
    configuration.client_side_validation = False  # the simulator validates what it is sent, as the apiserver does
    api_client = client.ApiClient(configuration)
    api_client.rest_client = InProcessRESTClient(simulator)  # type: ignore[assignment]  # duck-typed: request()
    return api_client
