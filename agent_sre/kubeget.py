"""A GET of a Kubernetes API path, sent by the official client's own machinery, for readers that take raw JSON.

`ApiClient.param_serialize` and `call_api` serialize, authenticate and send the request as the typed methods do
(`CoreV1Api.list_namespaced_pod(..., _preload_content=False)`), and a failure raises the same `ApiException`,
but without the typed methods' per-call argument validation, which costs more than an in-process read itself.
The oracle (`faults.k8s`) and the tools (`tools.kube`) read this way, from a real cluster and the simulator alike.
"""

from __future__ import annotations

from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException


def get(api: ApiClient, path: str, query: tuple[tuple[str, Any], ...] = (), **path_params: str) -> Any:
    """The raw urllib3 response (`.json()`, `.data`, `.headers`) of GET `path`, its `{placeholders}` filled from
    `path_params` (quoted as the typed API quotes them)."""
    request = api.param_serialize(method="GET", resource_path=path, path_params=path_params, query_params=list(query),
                                  header_params={"Accept": "application/json"}, auth_settings=["BearerToken"])
    response = api.call_api(*request)
    if not 200 <= response.status <= 299:  # as the typed API fails a raw read
        response.read()
        raise ApiException.from_response(http_resp=response, body=None, data=None)
    return response.response
