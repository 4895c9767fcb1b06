"""The few Kubernetes operations fault injection needs, over the official client only.

Nothing here depends on the simulator: the same calls break (and repair) a real cluster running the demo apps
and Chaos Mesh. Reads are GETs of API paths through the client's own machinery (`kubeget`), decoded from raw
JSON, which is several times cheaper than the client's model classes and keeps objects as plain dicts. Through
the in-process transport they are the simulator's documents themselves (`transport.decoded`), so every object
read here is read-only.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from kubernetes.client import ApiClient, AppsV1Api, CoreV1Api, CustomObjectsApi, NetworkingV1Api
from kubernetes.client.exceptions import ApiException

from agent_sre import kubeget
from agent_sre.simulator.transport import decoded

Obj = dict[str, Any]
CHAOS_GROUP, CHAOS_VERSION = "chaos-mesh.org", "v1alpha1"
CHAOS_PLURALS = {"PodChaos": "podchaos", "NetworkChaos": "networkchaos", "StressChaos": "stresschaos",
                 "HTTPChaos": "httpchaos", "Schedule": "schedules"}
CONTENT_TYPES = {"strategic": "application/strategic-merge-patch+json", "merge": "application/merge-patch+json",
                 "json": "application/json-patch+json"}
CHANGE_CAUSE = "kubernetes.io/change-cause"
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"


class K8s:
    """Kubernetes API calls in one namespace's terms (plus nodes), returning plain dicts.

    With `memo`, reads are remembered for the life of the object: one judgement of the oracle reads each list
    once, however many checks look at it (a request costs far more than the lookup).
    """

    def __init__(self, api: ApiClient, memo: bool = False) -> None:
        self.api = api
        self.core, self.apps = CoreV1Api(api), AppsV1Api(api)
        self.net, self.custom = NetworkingV1Api(api), CustomObjectsApi(api)
        self.server_time: float | None = None
        self._date: str | None = None  # the Date header server_time was parsed from
        self._memo: dict[tuple[Any, ...], Any] | None = {} if memo else None

    def _get(self, path: str, query: tuple[tuple[str, Any], ...] = (), **path_params: str) -> Any:
        """GET `path` (its `{placeholders}` filled from `path_params`) as the typed API sends it; with `memo`,
        each read once."""
        key = (path, query, tuple(path_params.items()))
        if self._memo is not None and key in self._memo:
            return self._memo[key]
        document = self._decoded(kubeget.get(self.api, path, query, **path_params))
        if self._memo is not None:
            self._memo[key] = document
        return document

    def _raw(self, method: Any, *args: Any, **kwargs: Any) -> Any:
        """A typed-API call (the writes), decoded."""
        return self._decoded(method(*args, _preload_content=False, **kwargs))

    def _decoded(self, response: Any) -> Any:
        date = response.headers.get("Date") if response.headers else None
        if date and date != self._date:
            try:
                self.server_time, self._date = parsedate_to_datetime(date).timestamp(), date
            except (TypeError, ValueError):
                pass
        return decoded(response)  # read-only: in-process, these are the simulator's own objects

    def now_rfc3339(self) -> str:
        """The cluster's clock (the simulator runs on simulated time), as kubectl stamps a restart."""
        if self.server_time is None:
            self._get("/api/v1/nodes", (("limit", 1),))
        return datetime.fromtimestamp(self.server_time or datetime.now(UTC).timestamp(), UTC).strftime(
            "%Y-%m-%dT%H:%M:%SZ")

    # --- reads ---------------------------------------------------------------------------------------------------
    def deployment(self, ns: str, name: str) -> Obj:
        return self._get("/apis/apps/v1/namespaces/{namespace}/deployments/{name}", namespace=ns, name=name)

    def deployments(self, ns: str) -> list[Obj]:
        return self._get("/apis/apps/v1/namespaces/{namespace}/deployments", namespace=ns)["items"]

    def service(self, ns: str, name: str) -> Obj:
        return self._get("/api/v1/namespaces/{namespace}/services/{name}", namespace=ns, name=name)

    def services(self, ns: str) -> list[Obj]:
        return self._get("/api/v1/namespaces/{namespace}/services", namespace=ns)["items"]

    def endpoints(self, ns: str) -> list[Obj]:
        return self._get("/api/v1/namespaces/{namespace}/endpoints", namespace=ns)["items"]

    def pods(self, ns: str, selector: str | None = None) -> list[Obj]:
        query = (("labelSelector", selector),) if selector else ()
        return self._get("/api/v1/namespaces/{namespace}/pods", query, namespace=ns)["items"]

    def secrets(self, ns: str) -> list[Obj]:
        return self._get("/api/v1/namespaces/{namespace}/secrets", namespace=ns)["items"]

    def secret_value(self, ns: str, name: str, key: str) -> str | None:
        try:
            data = self._get("/api/v1/namespaces/{namespace}/secrets/{name}", namespace=ns, name=name).get(
                "data") or {}
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return base64.b64decode(data[key]).decode("utf-8", "replace") if key in data else None

    def configmaps(self, ns: str) -> list[Obj]:
        return self._get("/api/v1/namespaces/{namespace}/configmaps", namespace=ns)["items"]

    def configmap(self, ns: str, name: str) -> Obj | None:
        try:
            return self._get("/api/v1/namespaces/{namespace}/configmaps/{name}", namespace=ns, name=name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def quotas(self, ns: str) -> list[Obj]:
        return self._get("/api/v1/namespaces/{namespace}/resourcequotas", namespace=ns)["items"]

    def pvcs(self, ns: str) -> list[Obj]:
        return self._get("/api/v1/namespaces/{namespace}/persistentvolumeclaims", namespace=ns)["items"]

    def network_policies(self, ns: str) -> list[Obj]:
        return self._get("/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies", namespace=ns)["items"]

    def nodes(self, selector: str | None = None) -> list[Obj]:
        return self._get("/api/v1/nodes", (("labelSelector", selector),) if selector else ())["items"]

    def namespace(self, ns: str) -> Obj:
        return self._get("/api/v1/namespaces/{name}", name=ns)

    def chaos(self, ns: str) -> list[Obj]:
        """Every Chaos Mesh experiment and schedule in the namespace (none when Chaos Mesh is not installed)."""
        items: list[Obj] = []
        for plural in CHAOS_PLURALS.values():
            try:
                items.extend(self._get("/apis/{group}/{version}/namespaces/{namespace}/{plural}", group=CHAOS_GROUP,
                                       version=CHAOS_VERSION, namespace=ns, plural=plural)["items"])
            except ApiException as exc:
                if exc.status != 404:
                    raise
        return items

    # --- writes --------------------------------------------------------------------------------------------------
    def patch_deployment(self, ns: str, name: str, body: Any, patch_type: str = "strategic",
                         cause: str | None = None) -> Obj:
        """Patch a deployment; a template change is a normal rollout (a new revision), annotated with its cause in
        the same request, as `kubectl set image --record` does (annotating first would stamp the cause on the
        current revision too: the controller copies a deployment's annotations to its newest ReplicaSet)."""
        if cause is not None:
            if patch_type == "json":
                raise ValueError("a change-cause goes with an object patch, not a JSON patch")
            metadata = dict(body.get("metadata") or {})
            metadata["annotations"] = {**(metadata.get("annotations") or {}), CHANGE_CAUSE: cause}
            body = {**body, "metadata": metadata}
        return self._raw(self.apps.patch_namespaced_deployment, name, ns, body,
                         _content_type=CONTENT_TYPES[patch_type])

    def patch_container(self, ns: str, deployment: str, container: str, fields: Obj, cause: str | None = None,
                        group: str = "containers") -> Obj:
        body = {"spec": {"template": {"spec": {group: [{"name": container, **fields}]}}}}
        return self.patch_deployment(ns, deployment, body, "strategic", cause)

    def rollout_restart(self, ns: str, name: str) -> Obj:
        body = {"spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: self.now_rfc3339()}}}}}
        return self.patch_deployment(ns, name, body, "strategic")

    def scale(self, ns: str, name: str, replicas: int) -> Obj:
        return self._raw(self.apps.patch_namespaced_deployment_scale, name, ns, {"spec": {"replicas": replicas}},
                         _content_type=CONTENT_TYPES["merge"])

    def patch_service(self, ns: str, name: str, body: Any, patch_type: str = "merge") -> Obj:
        return self._raw(self.core.patch_namespaced_service, name, ns, body, _content_type=CONTENT_TYPES[patch_type])

    def set_secret_key(self, ns: str, name: str, key: str, value: str) -> Obj:
        encoded = base64.b64encode(value.encode()).decode()
        return self._raw(self.core.patch_namespaced_secret, name, ns, {"data": {key: encoded}},
                         _content_type=CONTENT_TYPES["merge"])

    def set_configmap_key(self, ns: str, name: str, key: str, value: str) -> Obj:
        return self._raw(self.core.patch_namespaced_config_map, name, ns, {"data": {key: value}},
                         _content_type=CONTENT_TYPES["merge"])

    def set_quota(self, ns: str, name: str, hard: dict[str, str]) -> Obj:
        return self._raw(self.core.patch_namespaced_resource_quota, name, ns, {"spec": {"hard": hard}},
                         _content_type=CONTENT_TYPES["merge"])

    def cordon(self, node: str, cordoned: bool) -> Obj:
        return self._raw(self.core.patch_node, node, {"spec": {"unschedulable": True if cordoned else None}},
                         _content_type=CONTENT_TYPES["merge"])

    def delete_pod(self, ns: str, name: str) -> None:
        self._ignore_missing(self.core.delete_namespaced_pod, name, ns)

    def create_network_policy(self, ns: str, body: Obj) -> Obj:
        return self._raw(self.net.create_namespaced_network_policy, ns, body)

    def delete_network_policy(self, ns: str, name: str) -> None:
        self._ignore_missing(self.net.delete_namespaced_network_policy, name, ns)

    def create_chaos(self, ns: str, kind: str, body: Obj) -> Obj:
        body = {"apiVersion": f"{CHAOS_GROUP}/{CHAOS_VERSION}", "kind": kind, **body}
        return self._raw(self.custom.create_namespaced_custom_object, CHAOS_GROUP, CHAOS_VERSION, ns,
                         CHAOS_PLURALS[kind], body)

    def delete_chaos(self, ns: str, kind: str, name: str) -> None:
        self._ignore_missing(self.custom.delete_namespaced_custom_object, CHAOS_GROUP, CHAOS_VERSION, ns,
                             CHAOS_PLURALS[kind], name)

    def _ignore_missing(self, method: Any, *args: Any) -> None:
        """Deletes are idempotent here: clearing a fault twice, or one that was already fixed, is fine."""
        try:
            self._raw(method, *args)
        except ApiException as exc:
            if exc.status != 404:
                raise
