"""A GET of a Kubernetes API path, sent with the official client's own configuration, for readers that take raw JSON.

The request is what the typed methods send (`CoreV1Api.list_namespaced_pod(..., _preload_content=False)`): the
client's host, default headers and cookie, its authentication (`update_params_for_auth`, which refreshes an
expiring token), path parameters quoted and the query encoded as `ApiClient.param_serialize` does, sent through
`call_api`; a failure raises the same `ApiException`. It skips the typed methods' per-call argument validation and
`param_serialize`'s generic sanitising of every parameter (here only strings and numbers), which together cost
more than an in-process read itself. The one client (`kube.client`) reads this way, for the oracle and the tools, from a
real cluster and the simulator alike.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any
from urllib.parse import quote

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

AUTH = ["BearerToken"]  # what every typed method of the Kubernetes API authenticates with


def get(api: ApiClient, path: str, query: tuple[tuple[str, Any], ...] = (), **path_params: str) -> Any:
    """The raw urllib3 response (`.json()`, `.data`, `.headers`) of GET `path`, its `{placeholders}` filled from
    `path_params` (quoted as the typed API quotes them)."""
    config = api.configuration
    for name, value in path_params.items():
        path = path.replace(f"{{{name}}}", _quoted(str(value), config.safe_chars_for_path_param))
    headers = {"Accept": "application/json", **api.default_headers}
    if api.cookie:
        headers["Cookie"] = api.cookie
    queries = list(query)
    api.update_params_for_auth(headers, queries, AUTH, path, "GET", None)
    url = config.host + path
    if queries:
        url += "?" + api.parameters_to_url_query(queries, None)
    response = api.call_api("GET", url, headers)
    if not 200 <= response.status <= 299:  # as the typed API fails a raw read
        response.read()
        raise ApiException.from_response(http_resp=response, body=None, data=None)
    return response.response


@lru_cache(maxsize=4096)
def _quoted(value: str, safe: str) -> str:
    """A path parameter quoted as the typed API quotes it (the same few names, namespaces and kinds recur)."""
    return quote(value, safe=safe)
