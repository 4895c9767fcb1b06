"""The one door to a cluster: the official client, addressed by kind names, for the tools, the faults and the oracle.

Reads are GETs of API paths sent with the client's own configuration (`rest.get`), logs included; writes use its
typed APIs. Responses are read raw (`_preload_content=False`) and decoded as plain dicts: skipping the client's
model classes makes calls far cheaper (listing the shop's pods in-process: about 2 ms typed, 0.1-0.2 ms raw). A
reader chooses what a read gives it: by default a copy of its own (urllib3's `response.json()`, which in-process
copies the simulator's document instead of encoding and decoding it), or with `shared` the document itself
(`decoded`: in-process the simulator's own objects, so read-only), and with `memo` each read once for the life of
the client (one judgement of the oracle reads each list once, however many checks look at it). Every answer's
Date header sets `server_time`, so ages and stamps follow the server's clock (the simulator's is simulated).

Writes by kind name (`patch`, `delete`) pass the caller's `WriteGuard`, if it gives one: the tools give theirs
(the guardrails on the request, then the write rules on its effect, judged on the server's dry run of the same
request), so no tool can write outside the rules. Fault injection, which breaks things on purpose, gives none.
Failures raise `KubeError`, an `ApiException` with the server's own message.
"""

from __future__ import annotations

import base64
import builtins
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from kubernetes.client import (
    ApiClient,
    AppsV1Api,
    AutoscalingV2Api,
    BatchV1Api,
    CoreV1Api,
    CustomObjectsApi,
    NetworkingV1Api,
)
from kubernetes.client.exceptions import ApiException

from agent_sre.kube import chaosmesh, rest
from agent_sre.kube.times import http_date, rfc3339

Obj = dict[str, Any]
Query = tuple[tuple[str, Any], ...]

IDEMPOTENCY_HEADER = "X-Idempotency-Key"
CHANGE_CAUSE = "kubernetes.io/change-cause"
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"
CONTENT_TYPES = {
    "strategic": "application/strategic-merge-patch+json",
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
}


@dataclass(frozen=True)
class Kind:
    """How one kind of the vocabulary maps onto the client: `<verb>_namespaced_<method>` on `api`."""

    api: str  # "core" | "apps" | "networking" | "custom"
    method: str  # typed-API suffix (`config_map`), or the plural of a custom resource
    display: str  # as kubectl prints it: "deployment.apps"
    namespaced: bool = True
    group: str = ""
    version: str = ""
    plural: str = ""  # the resource in API paths (a custom resource's is its `method`)

    def path(self, namespace: str | None, name: str | None) -> str:
        """The API path of the kind (in `namespace`, or across all), or of one object, with `{placeholders}`."""
        prefix = f"/apis/{self.group}/{self.version}" if self.api == "custom" else API_PREFIXES[self.api]
        return (prefix + ("/namespaces/{namespace}" if namespace is not None else "") + f"/{self.plural or self.method}"
                + ("/{name}" if name is not None else ""))


API_PREFIXES = {"core": "/api/v1", "apps": "/apis/apps/v1", "networking": "/apis/networking.k8s.io/v1",
                "autoscaling": "/apis/autoscaling/v2", "batch": "/apis/batch/v1"}


def _chaos(kind: str) -> Kind:
    return Kind("custom", chaosmesh.PLURALS[kind], f"{kind.lower()}.{chaosmesh.GROUP}", group=chaosmesh.GROUP,
                version=chaosmesh.VERSION)


KINDS: dict[str, Kind] = {
    "pod": Kind("core", "pod", "pod", plural="pods"),
    "deployment": Kind("apps", "deployment", "deployment.apps", plural="deployments"),
    "replicaset": Kind("apps", "replica_set", "replicaset.apps", plural="replicasets"),
    "service": Kind("core", "service", "service", plural="services"),
    "node": Kind("core", "node", "node", namespaced=False, plural="nodes"),
    "configmap": Kind("core", "config_map", "configmap", plural="configmaps"),
    "secret": Kind("core", "secret", "secret", plural="secrets"),
    "networkpolicy": Kind("networking", "network_policy", "networkpolicy.networking.k8s.io",
                          plural="networkpolicies"),
    "resourcequota": Kind("core", "resource_quota", "resourcequota", plural="resourcequotas"),
    "persistentvolumeclaim": Kind("core", "persistent_volume_claim", "persistentvolumeclaim",
                                  plural="persistentvolumeclaims"),
    "endpoints": Kind("core", "endpoints", "endpoints", plural="endpoints"),
    "namespace": Kind("core", "namespace", "namespace", namespaced=False, plural="namespaces"),
    "event": Kind("core", "event", "event", plural="events"),
    "horizontalpodautoscaler": Kind("autoscaling", "horizontal_pod_autoscaler",
                                    "horizontalpodautoscaler.autoscaling", plural="horizontalpodautoscalers"),
    "job": Kind("batch", "job", "job.batch", plural="jobs"),
    "cronjob": Kind("batch", "cron_job", "cronjob.batch", plural="cronjobs"),
    **{kind: _chaos(kind) for kind in chaosmesh.PLURALS},
}


class KubeError(ApiException):
    """An error answer from the API server: its HTTP status, reason and own message (and the raw body, for callers
    that read an `ApiException`'s)."""

    def __init__(self, status: int, reason: str, message: str, body: str | None = None) -> None:
        super().__init__(status=status, reason=reason)
        self.body, self.message = body, message

    @classmethod
    def from_api_exception(cls, exc: ApiException) -> KubeError:
        status, reason, message = int(exc.status or 0), str(exc.reason or "Error"), ""
        try:
            body = json.loads(exc.body or "")
            if isinstance(body, dict):
                message = str(body.get("message") or "")
                reason = str(body.get("reason") or reason)
        except ValueError:
            message = (exc.body or "").strip()[:500]
        return cls(status, reason, message or f"HTTP {status} {reason}", exc.body)

    def __str__(self) -> str:
        return f"Error from server ({self.reason}): {self.message}"


class WriteGuard(Protocol):
    """What a write by kind name must pass: the request first, then its effect (before and after a dry run, or
    None for a delete). Raising refuses the write."""

    def check(self, verb: str, kind: str, name: str, namespace: str, body: Any) -> None: ...

    def judge(self, kube: Kube, kind: str, before: Obj, after: Obj | None) -> None: ...


class RawResponse(Protocol):
    """A call's undecoded answer (`_preload_content=False`): urllib3's response, or the in-process transport's."""

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def data(self) -> bytes: ...

    def json(self) -> Any: ...


def decoded(response: Any) -> Any:
    """The JSON document of a raw response: the in-process transport's own document as it answered (`.document`:
    shared, so treat it as read-only), or the decoded body otherwise."""
    document = getattr(response, "document", None)
    if document is not None:
        return document.doc
    return json.loads(response.data or b"null")


class Kube:
    """Calls in `namespace`'s terms (unless one is given), plus the cluster-scoped kinds, returning plain dicts."""

    def __init__(self, api: ApiClient, namespace: str = "", guard: WriteGuard | None = None, shared: bool = False,
                 memo: bool = False) -> None:
        self.namespace = namespace
        self.guard = guard
        self.api = api
        self._apis: dict[str, Any] = {"core": CoreV1Api(api), "apps": AppsV1Api(api),
                                      "networking": NetworkingV1Api(api), "custom": CustomObjectsApi(api),
                                      "autoscaling": AutoscalingV2Api(api), "batch": BatchV1Api(api)}
        self._shared = shared
        self._memo: dict[tuple[Any, ...], Obj] | None = {} if memo else None
        self.server_time: float | None = None  # from the last answer's Date header: the server's clock
        self._date: str | None = None

    # --- plumbing --------------------------------------------------------------------------------------------
    def _call(self, kind: Kind, verb: str, name: str | None, namespace: str, *extra: Any,
              **kwargs: Any) -> RawResponse:
        """`verb` (read/list/patch/delete/create) on `kind`, with the positional arguments in the client's order;
        the raw response."""
        api = self._apis[kind.api]
        named = (name,) if name is not None else ()
        if kind.api == "custom":
            method = getattr(api, f"{'get' if verb == 'read' else verb}_namespaced_custom_object")
            args = (kind.group, kind.version, namespace, kind.method, *named, *extra)
        else:
            method = getattr(api, f"{verb}_namespaced_{kind.method}" if kind.namespaced else f"{verb}_{kind.method}")
            args = (*named, *((namespace,) if kind.namespaced else ()), *extra)
        return self._answer(lambda: method(*args, _preload_content=False, **kwargs))

    def _answer(self, send: Callable[[], RawResponse]) -> RawResponse:
        """Send; keep the server's clock from the answer; raise `KubeError` for an error answer."""
        try:
            response = send()
        except ApiException as exc:
            raise KubeError.from_api_exception(exc) from None
        date = response.headers.get("Date") if response.headers else None
        if date and date != self._date:  # one-second resolution: most answers repeat the previous one
            self._date = date
            self.server_time = http_date(date) or self.server_time
        return response

    def _document(self, response: RawResponse, shared: bool = False) -> Obj:
        # a read or write answers an object
        document: Obj = decoded(response) if shared or self._shared else response.json()
        return document

    def _read(self, kind: Kind, namespace: str | None, name: str | None = None, query: Query = (),
              shared: bool = False) -> Obj:
        """The document of a read (`rest.get`: as the typed API sends it, without its per-call validation);
        `namespace` None reads across all namespaces (a cluster-scoped kind has none); `shared`: as with a shared
        client, for this read."""
        namespace = namespace if kind.namespaced else None
        memo, key = self._memo, (kind, namespace, name, query, shared)
        if memo is not None and key in memo:
            return memo[key]
        params = {k: v for k, v in (("namespace", namespace), ("name", name)) if v is not None}
        document = self._document(self._answer(lambda: rest.get(self.api, kind.path(namespace, name), query,
                                                                 **params)), shared)
        if memo is not None:
            memo[key] = document
        return document

    # --- reads -----------------------------------------------------------------------------------------------
    def get(self, kind: str, name: str, namespace: str | None = None) -> Obj:
        return self._read(KINDS[kind], namespace or self.namespace, name)

    def find(self, kind: str, name: str, namespace: str | None = None) -> Obj | None:
        """`get`, or None when there is no such object."""
        try:
            return self.get(kind, name, namespace)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, kind: str, namespace: str | None = None, label_selector: str | None = None,
             field_selector: str | None = None, all_namespaces: bool = False, shared: bool = False) -> list[Obj]:
        """`shared`: the items may be the server's own (as with a shared client), for a caller that only reads them
        (in-process this skips copying them)."""
        query = tuple((key, value) for key, value in (("fieldSelector", field_selector),
                                                      ("labelSelector", label_selector)) if value)
        document = self._read(KINDS[kind], None if all_namespaces else namespace or self.namespace, query=query,
                              shared=shared)
        return document.get("items") or []

    def chaos(self, namespace: str) -> builtins.list[Obj]:  # `list` here is Kube.list
        """Every Chaos Mesh experiment and schedule in the namespace (none when Chaos Mesh is not installed)."""
        items: builtins.list[Obj] = []
        for kind in chaosmesh.PLURALS:
            try:
                items.extend(self.list(kind, namespace))
            except KubeError as exc:
                if exc.status != 404:
                    raise
        return items

    def secret_value(self, namespace: str, name: str, key: str) -> str | None:
        data = (self.find("secret", name, namespace) or {}).get("data") or {}
        return base64.b64decode(data[key]).decode("utf-8", "replace") if key in data else None

    def logs(self, pod: str, namespace: str, container: str | None, tail: int, previous: bool) -> str:
        query = (*((("container", container),) if container else ()), *((("previous", True),) if previous else ()),
                 ("tailLines", tail))  # the typed read_namespaced_pod_log's order
        response = self._answer(lambda: rest.get(self.api, "/api/v1/namespaces/{namespace}/pods/{name}/log",
                                                 query, namespace=namespace, name=pod))
        return response.data.decode("utf-8", "replace")

    def proxy_get(self, namespace: str, pod: str, port: int, path: str, query: Query = ()) -> str:
        """GET `path` of the pod's program on `port`, through the API server's proxy (what a client of the service
        would send): its answer's body."""
        response = self._answer(lambda: rest.get(self.api, "/api/v1/namespaces/{namespace}/pods/{name}/proxy" + path,
                                                 query, namespace=namespace, name=f"{pod}:{port}"))
        return response.data.decode("utf-8", "replace")

    def metrics(self, kind: str, namespace: str) -> builtins.list[Obj]:
        """`metrics.k8s.io` usage: `kind` is "pods" (in `namespace`) or "nodes"."""
        metrics = Kind("custom", kind, f"{kind}.metrics.k8s.io", group="metrics.k8s.io", version="v1beta1")
        return self._read(metrics, None if kind == "nodes" else namespace).get("items") or []

    def now_rfc3339(self) -> str:
        """The cluster's clock (the simulator runs on simulated time), as kubectl stamps a restart."""
        if self.server_time is None:
            self._answer(lambda: rest.get(self.api, "/api/v1/nodes", (("limit", 1),)))
        return rfc3339(int(self.server_time or datetime.now(UTC).timestamp()))

    # --- writes by kind name (in the client's namespace, through the guard) --------------------------------
    # The key also travels as a header: a real apiserver ignores it, the simulator's audit log records it
    # (a delete leaves no annotation behind to read it from).
    def patch(self, kind: str, name: str, body: Any, patch_type: str, idempotency_key: str) -> Obj:
        if self.guard is not None:
            self.guard.check("patch", kind, name, self.namespace, body)

        def send(**dry_run: str) -> Obj:
            patched: Obj = self._call(KINDS[kind], "patch", name, self.namespace, body, **dry_run,
                                      _content_type=CONTENT_TYPES[patch_type],
                                      _headers={IDEMPOTENCY_HEADER: idempotency_key}).json()
            return patched

        if self.guard is not None:
            self.guard.judge(self, kind, self.get(kind, name), send(dry_run="All"))
        return send()

    def delete(self, kind: str, name: str, idempotency_key: str) -> None:
        if self.guard is not None:
            self.guard.check("delete", kind, name, self.namespace, None)
            self.guard.judge(self, kind, self.get(kind, name), None)
        self._call(KINDS[kind], "delete", name, self.namespace, _headers={IDEMPOTENCY_HEADER: idempotency_key})

    # --- typed writes (fault injection: any namespace, no guard) -------------------------------------------
    def _write(self, kind: str, verb: str, name: str | None, namespace: str, *body: Any,
               patch_type: str | None = None) -> Obj:
        content = {"_content_type": CONTENT_TYPES[patch_type]} if patch_type else {}
        return self._document(self._call(KINDS[kind], verb, name, namespace, *body, **content))

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
        return self._write("deployment", "patch", name, ns, body, patch_type=patch_type)

    def patch_container(self, ns: str, deployment: str, container: str, fields: Obj, cause: str | None = None,
                        group: str = "containers") -> Obj:
        body = {"spec": {"template": {"spec": {group: [{"name": container, **fields}]}}}}
        return self.patch_deployment(ns, deployment, body, "strategic", cause)

    def rollout_restart(self, ns: str, name: str) -> Obj:
        body = {"spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: self.now_rfc3339()}}}}}
        return self.patch_deployment(ns, name, body, "strategic")

    def scale(self, ns: str, name: str, replicas: int) -> Obj:
        return self._document(self._answer(lambda: self._apis["apps"].patch_namespaced_deployment_scale(
            name, ns, {"spec": {"replicas": replicas}}, _content_type=CONTENT_TYPES["merge"],
            _preload_content=False)))

    def patch_service(self, ns: str, name: str, body: Any, patch_type: str = "merge") -> Obj:
        return self._write("service", "patch", name, ns, body, patch_type=patch_type)

    def set_secret_key(self, ns: str, name: str, key: str, value: str) -> Obj:
        encoded = base64.b64encode(value.encode()).decode()
        return self._write("secret", "patch", name, ns, {"data": {key: encoded}}, patch_type="merge")

    def set_configmap_key(self, ns: str, name: str, key: str, value: str) -> Obj:
        return self._write("configmap", "patch", name, ns, {"data": {key: value}}, patch_type="merge")

    def set_quota(self, ns: str, name: str, hard: dict[str, str]) -> Obj:
        return self._write("resourcequota", "patch", name, ns, {"spec": {"hard": hard}}, patch_type="merge")

    def cordon(self, node: str, cordoned: bool) -> Obj:
        return self._write("node", "patch", node, "", {"spec": {"unschedulable": True if cordoned else None}},
                           patch_type="merge")

    def create_network_policy(self, ns: str, body: Obj) -> Obj:
        return self._write("networkpolicy", "create", None, ns, body)

    def create(self, kind: str, ns: str, body: Obj) -> Obj:
        """Create an object of a vocabulary kind (a cluster-scoped one when `ns` is empty)."""
        return self._write(kind, "create", None, ns, body)

    def create_event(self, ns: str, body: Obj) -> Obj:
        return self._write("event", "create", None, ns, body)

    def create_chaos(self, ns: str, kind: str, body: Obj) -> Obj:
        body = {"apiVersion": f"{chaosmesh.GROUP}/{chaosmesh.VERSION}", "kind": kind, **body}
        return self._write(kind, "create", None, ns, body)

    def remove(self, kind: str, ns: str, name: str) -> None:
        """Delete if present: clearing a fault twice, or one that was already fixed, is fine."""
        try:
            self._call(KINDS[kind], "delete", name, ns)
        except KubeError as exc:
            if exc.status != 404:
                raise
