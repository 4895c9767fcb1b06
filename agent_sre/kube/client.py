"""The tools' only door to the cluster: the official client, addressed by the tools' kind names.

Reads are GETs of API paths sent with the client's own configuration (`kubeget`), logs included; writes use its
typed APIs. Responses are read raw (`_preload_content=False`) and decoded by urllib3's `response.json()`: the tools
render plain dicts, and skipping the client's model classes makes calls far cheaper (listing the shop's pods in-process:
about 2 ms typed, 0.1-0.2 ms raw). In-process, `json()` copies the simulator's document instead of encoding and
decoding it (see `simulator.transport`), so tools may treat what they read as their own. Every mutating request passes
`guardrails.check_write` here, after the tool's own checks, and then the rules on its effect (`write_rules`, judged
on the server's dry run of the same request), so no code path can write outside the rules.
"""

from __future__ import annotations

import builtins
import json
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

from kubernetes.client import ApiClient, AppsV1Api, CoreV1Api, CustomObjectsApi, NetworkingV1Api
from kubernetes.client.exceptions import ApiException

from agent_sre import kubeget
from agent_sre.tools import guardrails, write_rules
from agent_sre.tools.write_rules import Surroundings, WriteRules

Obj = dict[str, Any]

IDEMPOTENCY_HEADER = "X-Idempotency-Key"
CONTENT_TYPES = {
    "strategic": "application/strategic-merge-patch+json",
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
}


@dataclass(frozen=True)
class Kind:
    """How one kind of the tool vocabulary maps onto the client: `<verb>_namespaced_<method>` on `api`."""

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


CHAOS_GROUP, CHAOS_VERSION = "chaos-mesh.org", "v1alpha1"
API_PREFIXES = {"core": "/api/v1", "apps": "/apis/apps/v1", "networking": "/apis/networking.k8s.io/v1"}


def _chaos(plural: str, display: str) -> Kind:
    return Kind("custom", plural, f"{display}.{CHAOS_GROUP}", group=CHAOS_GROUP, version=CHAOS_VERSION)


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
    "endpoints": Kind("core", "endpoints", "endpoints", plural="endpoints"),
    "namespace": Kind("core", "namespace", "namespace", namespaced=False, plural="namespaces"),
    "event": Kind("core", "event", "event", plural="events"),
    "PodChaos": _chaos("podchaos", "podchaos"),
    "StressChaos": _chaos("stresschaos", "stresschaos"),
    "NetworkChaos": _chaos("networkchaos", "networkchaos"),
    "HTTPChaos": _chaos("httpchaos", "httpchaos"),
    "Schedule": _chaos("schedules", "schedule"),
}


class KubeError(Exception):
    """An error answer from the API server, with its HTTP status and the server's own message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message

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
        return cls(status, reason, message or f"HTTP {status} {reason}")

    def __str__(self) -> str:
        return f"Error from server ({self.reason}): {self.message}"


class Kube:
    """Typed-API calls for one incident: reads anywhere, writes only as `guardrails.check_write` allows."""

    def __init__(self, api: ApiClient, incident_namespace: str, approved: bool = False,
                 rules: WriteRules | None = None) -> None:
        self.incident_namespace = incident_namespace
        self.approved = approved  # high-risk writes go ahead (a human, or the incident's limits, approved them)
        self.rules = rules or WriteRules()
        self._api = api
        self._apis: dict[str, Any] = {"core": CoreV1Api(api), "apps": AppsV1Api(api),
                                      "networking": NetworkingV1Api(api), "custom": CustomObjectsApi(api)}
        self.server_time: float | None = None  # from the last response's Date header: ages use the server's clock
        self._date: str | None = None

    # --- plumbing --------------------------------------------------------------------------------------------
    def _call(self, kind: Kind, verb: str, name: str | None, namespace: str, *extra: Any, **kwargs: Any) -> Any:
        """`verb` (read/list/patch/delete) on `kind`, with the positional arguments in the client's order."""
        api = self._apis[kind.api]
        named = (name,) if name is not None else ()
        if kind.api == "custom":
            method = getattr(api, f"{'get' if verb == 'read' else verb}_namespaced_custom_object")
            args = (kind.group, kind.version, namespace, kind.method, *named, *extra)
        else:
            method = getattr(api, f"{verb}_namespaced_{kind.method}" if kind.namespaced else f"{verb}_{kind.method}")
            args = (*named, *((namespace,) if kind.namespaced else ()), *extra)
        return self._raw(method, *args, **kwargs)

    def _read(self, kind: Kind, namespace: str | None, name: str | None = None,
              query: tuple[tuple[str, Any], ...] = ()) -> Any:
        """The raw response of a read (`kubeget`: as the typed API sends it, without its per-call validation);
        `namespace` None reads across all namespaces (a cluster-scoped kind has none)."""
        namespace = namespace if kind.namespaced else None
        params = {k: v for k, v in (("namespace", namespace), ("name", name)) if v is not None}
        return self._answer(lambda: kubeget.get(self._api, kind.path(namespace, name), query, **params))

    def _raw(self, method: Any, *args: Any, **kwargs: Any) -> Any:
        """The raw urllib3 response (`.json()`, `.data`) of a successful typed-API request."""
        return self._answer(lambda: method(*args, _preload_content=False, **kwargs))

    def _answer(self, send: Any) -> Any:
        try:
            response = send()
        except ApiException as exc:
            raise KubeError.from_api_exception(exc) from None
        date = response.headers.get("Date")
        if date and date != self._date:  # one-second resolution: most responses repeat the previous one
            self._date = date
            try:
                self.server_time = parsedate_to_datetime(date).timestamp()
            except (TypeError, ValueError):
                pass
        return response

    # --- reads -----------------------------------------------------------------------------------------------
    def get(self, kind: str, name: str, namespace: str | None = None) -> Obj:
        return self._read(KINDS[kind], namespace or self.incident_namespace, name).json()

    def list(self, kind: str, namespace: str | None = None, label_selector: str | None = None,
             field_selector: str | None = None, all_namespaces: bool = False) -> list[Obj]:
        query = tuple((key, value) for key, value in (("fieldSelector", field_selector),
                                                      ("labelSelector", label_selector)) if value)
        response = self._read(KINDS[kind], None if all_namespaces else namespace or self.incident_namespace,
                              query=query)
        return response.json().get("items") or []

    def logs(self, pod: str, namespace: str, container: str | None, tail: int, previous: bool) -> str:
        query = (*((("container", container),) if container else ()), *((("previous", True),) if previous else ()),
                 ("tailLines", tail))  # the typed read_namespaced_pod_log's order
        response = self._answer(lambda: kubeget.get(self._api, "/api/v1/namespaces/{namespace}/pods/{name}/log",
                                                    query, namespace=namespace, name=pod))
        return response.data.decode("utf-8", "replace")

    def metrics(self, kind: str, namespace: str) -> builtins.list[Obj]:  # `list` here is Kube.list
        """`metrics.k8s.io` usage: `kind` is "pods" (in `namespace`) or "nodes"."""
        metrics = Kind("custom", kind, f"{kind}.metrics.k8s.io", group="metrics.k8s.io", version="v1beta1")
        return self._read(metrics, None if kind == "nodes" else namespace).json().get("items") or []

    # --- writes (always in the incident's namespace, always through the guardrail) -------------------------
    # The key also travels as a header: a real apiserver ignores it, the simulator's audit log records it
    # (a delete leaves no annotation behind to read it from).
    def patch(self, kind: str, name: str, body: Any, patch_type: str, idempotency_key: str) -> Obj:
        guardrails.check_write("patch", kind, name, self.incident_namespace, body)

        def send(**dry_run: str) -> Obj:
            return self._call(KINDS[kind], "patch", name, self.incident_namespace, body, **dry_run,
                              _content_type=CONTENT_TYPES[patch_type],
                              _headers={IDEMPOTENCY_HEADER: idempotency_key}).json()

        self._judge(kind, self.get(kind, name), send(dry_run="All"))
        return send()

    def delete(self, kind: str, name: str, idempotency_key: str) -> None:
        guardrails.check_write("delete", kind, name, self.incident_namespace, None)
        self._judge(kind, self.get(kind, name), None)
        self._call(KINDS[kind], "delete", name, self.incident_namespace,
                   _headers={IDEMPOTENCY_HEADER: idempotency_key})

    def _judge(self, kind: str, before: Obj, after: Obj | None) -> None:
        """Raise `Refusal` for a write the rules forbid, `NeedsApproval` for a high-risk one not yet approved."""
        findings = write_rules.judge(kind, before, after, self._surroundings(kind, before, after), self.rules)
        guardrails.enforce(findings, self.approved)

    def _surroundings(self, kind: str, before: Obj, after: Obj | None) -> Surroundings:
        """What the rules must know of the namespace: for a new pod template, the images, services and revisions
        it may use; for a service, the ports of the pods it selects. Nothing is read for other writes."""
        namespace = self.incident_namespace
        template = (after or {}).get("spec", {}).get("template")
        if kind == "service" and after is not None:
            selector = (after.get("spec") or {}).get("selector") or {}
            ports = {port[key] for spec in self._pod_specs(self.list("deployment"), selector)
                     for container in write_rules.containers(spec).values() for port in container.get("ports") or []
                     for key in ("containerPort", "name") if key in port}
            return Surroundings(namespace=namespace, container_ports=frozenset(ports))
        if kind != "deployment" or template is None or template == before.get("spec", {}).get("template"):
            return Surroundings(namespace=namespace)
        replicasets = self.list("replicaset")
        uid = before["metadata"].get("uid")
        revisions = tuple(rs["spec"]["template"] for rs in replicasets
                          if any(o.get("uid") == uid for o in rs["metadata"].get("ownerReferences") or []))
        images = {container["image"] for spec in self._pod_specs([*self.list("deployment"), *replicasets])
                  for container in write_rules.containers(spec).values() if container.get("image")}
        return Surroundings(namespace=namespace, image_sources=frozenset(map(write_rules.image_source, images)),
                            services=frozenset(s["metadata"]["name"] for s in self.list("service")),
                            revisions=revisions)

    @staticmethod
    def _pod_specs(owners: builtins.list[Obj], selector: dict[str, str] | None = None) -> builtins.list[Obj]:
        """The pod specs of deployments' or replica sets' templates, only those whose labels `selector` matches
        when one is given (an empty selector matches none)."""
        templates = [(o.get("spec") or {}).get("template") or {} for o in owners]
        return [t.get("spec") or {} for t in templates if selector is None or selector and
                selector.items() <= ((t.get("metadata") or {}).get("labels") or {}).items()]
