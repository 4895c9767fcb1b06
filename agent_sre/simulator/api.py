"""The Kubernetes REST API subset, as a pure function from a request to a response (no I/O).

`handle` serves the HTTP server and the in-process transport alike, so tools behave identically over both.
Paths under `/envs/E/` address environment E; bare paths address the "default" environment.
"""

from __future__ import annotations

import json
import logging
import marshal
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import formatdate
from functools import lru_cache
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import pydantic_core

from agent_sre.kube.errors import ApiError
from agent_sre.kube.selectors import LabelSelector, parse_label_selector, selector_to_string
from agent_sre.kube.times import parse_time, rfc3339
from agent_sre.simulator import admission, derived, discovery, openapi, protobuf, received, tables
from agent_sre.simulator.cluster import Cluster, Obj, clone
from agent_sre.simulator.fields import parse_field_selector
from agent_sre.simulator.patching import apply_patch
from agent_sre.simulator.resources import BY_KEY, RESOURCE_TYPES, ResourceType

if TYPE_CHECKING:
    from agent_sre.simulator.simulator import Simulator

Response = tuple[int, dict[str, str], bytes]
TimedLines = list[tuple[float, str]]  # a container log's lines, each with when it was written
LogCursor = tuple[float, int]  # the latest time among the lines read, and how many lines of that time were read
log = logging.getLogger(__name__)

IDEMPOTENCY_ANNOTATION = "agent-sre.io/idempotency-key"
IDEMPOTENCY_HEADER = "x-idempotency-key"
JSON_TYPE = "application/json"
BY_PATH: dict[tuple[str, str, str], ResourceType] = {(rt.group, rt.version, rt.plural): rt for rt in RESOURCE_TYPES}
NAMESPACE_SUBRESOURCES = ("status", "finalize")
AUDIT_DETAIL_LIMIT = 300
# The apiserver discards a submitted status on create for these types (nodes keep theirs, as kubelets rely on).
STATUS_ON_CREATE: dict[str, Obj] = {"pods": {"phase": "Pending"}, "deployments.apps": {},
                                    "replicasets.apps": {"replicas": 0}}


@lru_cache(maxsize=1024)
def _http_date(second: int) -> str:
    return formatdate(second, usegmt=True)


def _dump(doc: Any) -> bytes:
    """Compact JSON, UTF-8 (as the apiserver sends it): pydantic-core's encoder, about 3x `json.dumps` on a pod
    list, where encoding responses took about a tenth of the simulator's CPU."""
    return pydantic_core.to_json(doc)


@dataclass(frozen=True)
class Json:
    """A JSON response body not encoded yet. Over HTTP it is encoded at once; the in-process transport encodes it
    only if the client reads the bytes, and hands the document itself to readers that take it (`kube.client.decoded`),
    or a copy of it (`copy`), which saves an encode and a decode per request - most of a large list's cost. With the
    cluster's `cache`, stored objects (a list's items, or the object a GET returns) are encoded once per version and
    reused."""

    doc: Any
    cache: dict[tuple[str, str, str], tuple[Obj, str, bytes]] | None = None

    def encode(self) -> bytes:
        doc, cache = self.doc, self.cache
        if cache is None:
            return _dump(doc)
        if "items" not in doc:
            return _encoded(doc, cache)
        head = _dump({k: v for k, v in doc.items() if k != "items"})
        return head[:-1] + b',"items":[' + b",".join(_encoded(o, cache) for o in doc["items"]) + b"]}"

    def copy(self) -> Any:
        """A deep copy of the document, a few times cheaper than encoding and decoding it, and the same value
        decoding gives: the store holds only JSON types (str keys, lists, no object twice in one document)."""
        return marshal.loads(marshal.dumps(self.doc))


def _encoded(obj: Obj, cache: dict[tuple[str, str, str], tuple[Obj, str, bytes]]) -> bytes:
    """A stored pod's JSON, from the cache while it is the same object at the same resourceVersion: pods, the bulk
    of what clients read, are only ever replaced, never changed in place (an event's count is bumped in place, as
    the apiserver aggregates events; tests edit other objects in place)."""
    meta = obj["metadata"]
    if obj.get("kind") != "Pod":
        return _dump(obj)
    key, version = (obj.get("kind", ""), meta.get("namespace", ""), meta.get("name", "")), meta.get("resourceVersion")
    hit = cache.get(key)
    if hit is not None and hit[0] is obj and hit[1] == version:
        return hit[2]
    data = _dump(obj)
    cache[key] = (obj, version, data)
    return data


Reply = tuple[int, dict[str, str], "bytes | Json"]  # a response whose JSON body may still be a document


def _json(doc: Any, status: int = 200) -> Reply:
    return status, {"Content-Type": JSON_TYPE}, Json(doc)


def status_response(error: ApiError, name: str | None = None, rt: ResourceType | None = None) -> Reply:
    """A failed request as the apiserver reports it: a `Status` object with the HTTP code."""
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if rt is not None:
        details.update(kind=rt.plural, **({"group": rt.group} if rt.group else {}))
    doc = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": error.message,
           "reason": error.reason, "code": error.code}
    if error.reason == "Invalid":
        # kubectl prints only the causes of an Invalid status, so the explanation must be one.
        field, sep, detail = error.message.partition(" is invalid: ")[2].partition(": ")
        cause = {"field": field, "message": detail} if sep else {"field": "request", "message": error.message}
        details["causes"] = [cause]
    if details:
        doc["details"] = details
    return _json(doc, error.code)


ACCESS_REVIEW_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


def _not_found_path() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource")


@dataclass
class Request:
    method: str
    path: str
    query: Mapping[str, list[str]]
    headers: dict[str, str]  # lower-cased names
    body: bytes

    def arg(self, name: str, default: str | None = None) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else default

    def flag(self, name: str) -> bool:
        return (self.arg(name) or "").lower() in ("true", "1")

    def json_body(self) -> Any:
        content_type = self.headers.get("content-type", JSON_TYPE).split(";", 1)[0].strip()
        if content_type == protobuf.PROTOBUF_TYPE:
            return protobuf.decode(self.body)
        if content_type not in (JSON_TYPE, "", "*/*"):
            raise ApiError(415, "UnsupportedMediaType",
                           f"the body of the request was in an unknown format ({content_type}) - accepted media "
                           f"types include: {JSON_TYPE}, {protobuf.PROTOBUF_TYPE}")
        try:
            return json.loads(self.body or b"null")
        except ValueError as exc:
            raise ApiError(400, "BadRequest", f"error decoding request body: {exc}") from None

    def wants_table(self) -> bool:
        return any("as=Table" in part and "g=meta.k8s.io" in part
                   for part in self.headers.get("accept", "").split(","))


def is_watch(method: str, query: Mapping[str, list[str]]) -> bool:
    return method.upper() == "GET" and (query.get("watch") or [""])[-1].lower() in ("true", "1")


def watch_events(known: dict[str, Obj], snapshot: bytes) -> tuple[bytes, dict[str, Obj]]:
    """The watch events that turn `known` (uid -> object already reported) into a fresh snapshot (the body of a
    watch response from `handle`), and the new `known`. The HTTP server polls with this to keep watches open."""
    current: dict[str, Obj] = {}
    for line in snapshot.splitlines():
        obj = json.loads(line)["object"]
        current[_watched_meta(obj)["uid"]] = obj
    events = []
    for uid, obj in current.items():
        old = known.get(uid)
        if old is None:
            events.append(_dump({"type": "ADDED", "object": obj}))
        elif _watched_meta(old).get("resourceVersion") != _watched_meta(obj).get("resourceVersion"):
            events.append(_dump({"type": "MODIFIED", "object": obj}))
    events += [_dump({"type": "DELETED", "object": obj}) for uid, obj in known.items() if uid not in current]
    return b"".join(e + b"\n" for e in events), current


def _watched_meta(obj: Obj) -> Obj:
    """The metadata of a watched object, or of the one row of a Table event (`kubectl get -w`)."""
    meta: Obj = obj["rows"][0]["object"]["metadata"] if obj.get("kind") == "Table" else obj["metadata"]
    return meta


def split_env(path: str) -> tuple[str, str]:
    """`/envs/E/api/v1/pods` -> ("E", "/api/v1/pods"); any other path belongs to the "default" environment."""
    if path.startswith("/envs/"):
        env, _, rest = path[len("/envs/"):].partition("/")
        return env, "/" + rest
    return "default", path


def handle(simulator: Simulator, method: str, path: str, query: Mapping[str, list[str]],
           headers: Mapping[str, str], body: bytes) -> Response:
    """Serve one Kubernetes API request against the environment the path names."""
    with simulator.lock:  # encoded under the lock: the document holds the store's own objects
        status, response_headers, payload = serve(simulator, method, path, query, headers, body)
        return status, response_headers, payload.encode() if isinstance(payload, Json) else payload


def serve(simulator: Simulator, method: str, path: str, query: Mapping[str, list[str]],
          headers: Mapping[str, str], body: bytes) -> Reply:
    """`handle`, with a JSON body left as the document (see `Json`)."""
    env_name, k8s_path = split_env(path)
    cluster = simulator.envs.get(env_name)
    if cluster is None:
        return status_response(simulator.absence(env_name))
    req = Request(method.upper(), k8s_path, query, {k.lower(): v for k, v in headers.items()}, body)
    with simulator.lock:
        try:
            cluster.sync(writing=req.method != "GET")
            response = Router(cluster, req).dispatch()
        except ApiError as error:
            response = status_response(error)
        except Exception as exc:  # a bug, in the router or a controller: answer as the apiserver would
            log.exception("%s %s failed", method, path)
            response = status_response(ApiError(500, "InternalError", f"an error on the server ({type(exc).__name__}:"
                                                                      f" {exc}) has prevented the request from "
                                                                      "succeeding"))
        # The simulated time, so clients can compute ages ("5m ago") on the cluster's clock, not the wall clock.
        response[1]["Date"] = _http_date(int(cluster.clock.now()))
    return response


@dataclass
class Target:
    """A request's resource coordinates: type, namespace (None = all), name and subresource."""

    rt: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None

    @property
    def ns(self) -> str:
        """The storage namespace of a named object ("" for cluster-scoped types)."""
        return self.namespace or ""


class Router:
    def __init__(self, cluster: Cluster, req: Request) -> None:
        self.cluster, self.req = cluster, req

    # --- dispatch ---------------------------------------------------------------------------------------------
    def dispatch(self) -> Reply:
        path = self.req.path.rstrip("/") or "/"
        doc = openapi.document(path) if path.startswith("/openapi/v3/") else discovery.documents().get(path)
        if doc is not None:
            if self.req.method != "GET":
                raise ApiError(405, "MethodNotAllowed", f"{self.req.method} is not allowed on {path}")
            return 200, {"Content-Type": JSON_TYPE}, doc
        if path == ACCESS_REVIEW_PATH:
            return self._access_review()
        parts = [p for p in path.split("/") if p]
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) > 6 and parts[4] == "pods" and parts[6] == "proxy":
            return self._proxy(parts[3], unquote(parts[5]), "/" + "/".join(parts[7:]))
        if parts[0] == "api" and len(parts) > 2 and parts[1] == "v1":
            return self._resource("", "v1", parts[2:])
        if parts[0] == "apis" and len(parts) > 3:
            rest = parts[3:]
            plural = rest[2] if rest[0] == "namespaces" and len(rest) > 2 else rest[0]
            view = derived.BY_PATH.get((parts[1], parts[2], plural))
            if view is not None:
                return self._derived(view, rest)
            return self._resource(parts[1], parts[2], rest)
        raise _not_found_path()

    def _proxy(self, ns: str, name_port: str, path: str) -> Reply:
        """`pods/{name}[:{port}]/proxy/{path}`: the request reaches the pod's program, which logs it
        (`simulator/received.py`) and answers; a pod that is not ready refuses the connection."""
        name, _, port = name_port.partition(":")
        try:
            pod = self.cluster.must_get("pods", ns, name)
        except ApiError as error:
            return status_response(error, name, BY_KEY["pods"])
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (pod.get("status") or {}).get("conditions") or [])
        port = port or str(received.pod_port(pod) or 80)
        if not ready:
            refused = ApiError(503, "ServiceUnavailable", f"error trying to reach service: dial tcp "
                                                          f"{(pod.get('status') or {}).get('podIP', '')}:{port}: "
                                                          f"connect: connection refused")
            return status_response(refused, name, BY_KEY["pods"])
        query = "&".join(f"{k}={v}" for k, values in self.req.query.items() for v in values)
        received.record(self.cluster, ns, name, self.req.method, path + (f"?{query}" if query else ""))
        return 200, {"Content-Type": "text/plain"}, b"ok\n"

    def _target(self, group: str, version: str, rest: list[str]) -> Target:
        namespace = None
        if (len(rest) >= 3 and rest[0] == "namespaces"
                and not (group == "" and len(rest) == 3 and rest[2] in NAMESPACE_SUBRESOURCES)):
            namespace, rest = rest[1], rest[2:]
        rt = BY_PATH.get((group, version, rest[0]))
        if rt is None or len(rest) > 3 or (namespace is not None and not rt.namespaced):
            raise _not_found_path()
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub is not None and sub not in rt.subresources:
            raise _not_found_path()
        if rt.namespaced and name is not None and namespace is None:
            raise _not_found_path()
        return Target(rt, namespace, name, sub)

    def _resource(self, group: str, version: str, rest: list[str]) -> Reply:
        t = self._target(group, version, rest)
        method = self.req.method
        try:
            self._check_dry_run(t)
            if t.name is None:
                if method == "GET":
                    return self._watch(t) if self.req.flag("watch") else self._list(t)
                if method == "POST":
                    return self._create(t)
                if method == "DELETE":
                    return self._delete_collection(t)
            elif t.subresource == "log" and method == "GET":
                return self._log(t)
            elif t.subresource == "scale":
                return self._scale(t)
            elif t.subresource == "status" or t.subresource is None:
                if method == "GET":
                    return self._get(t)
                if method == "PUT":
                    return self._update(t)
                if method == "PATCH":
                    return self._patch(t)
                if method == "DELETE" and t.subresource is None:
                    return self._delete(t)
        except ApiError as error:
            return status_response(error, t.name, t.rt)
        raise ApiError(405, "MethodNotAllowed", f"the server does not allow this method on the requested "
                                                f"resource: {method} {self.req.path}")

    @property
    def dry_run(self) -> bool:
        """`dryRun=All`: the write is computed, defaulted and validated, and answered, but nothing is stored."""
        return self.req.arg("dryRun") == "All"

    def _check_dry_run(self, t: Target) -> None:
        """The apiserver's answer to a dryRun it cannot honour; the simulator honours it on writes to one object."""
        value = self.req.arg("dryRun")
        if value is None:
            return
        if value != "All":
            raise ApiError(400, "BadRequest", f'invalid dryRun value "{value}": the only accepted value is "All"')
        one = t.name is not None and t.subresource is None and self.req.method in ("PUT", "PATCH", "DELETE")
        if not (one or t.name is None and self.req.method == "POST"):
            raise ApiError(400, "BadRequest", f"dryRun is supported by the simulator only on POST, and on PUT, PATCH "
                                              f"and DELETE of one object, not on {self.req.method} {self.req.path}")

    # --- reads ------------------------------------------------------------------------------------------------
    def _rv(self) -> str:
        return str(self.cluster.revision)

    def _select(self, t: Target) -> list[Obj]:
        labels = parse_label_selector(self.req.arg("labelSelector"))
        fields = parse_field_selector(self.req.arg("fieldSelector"), t.rt.key)
        name = fields.value("metadata.name")
        if name is not None and (t.namespace is not None or not t.rt.namespaced):
            found_one = self.cluster.get(t.rt.key, t.ns, name)  # a one-object list: kubectl delete --wait
            candidates = [found_one] if found_one is not None else []
        else:
            candidates = self.cluster.list(t.rt.key, t.namespace if t.rt.namespaced else None)
        found = candidates if labels.empty and not fields.terms else \
            [o for o in candidates if _labels_match(labels, o) and fields.matches(o)]
        found.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
        return found

    def _render(self, t: Target, items: list[Obj], single: bool = False) -> Reply:
        if self.req.wants_table():
            return _json(tables.to_table(t.rt.key, items, self.cluster.clock.now(), self._rv(),
                                         self._include_object()))
        cache = self.cluster.encoded
        if single:
            return 200, {"Content-Type": JSON_TYPE}, Json(items[0], cache)
        return 200, {"Content-Type": JSON_TYPE}, Json({"kind": f"{t.rt.kind}List", "apiVersion": t.rt.group_version,
                                                       "metadata": {"resourceVersion": self._rv()}, "items": items},
                                                      cache)

    def _include_object(self) -> str:
        include = self.req.arg("includeObject", "Metadata") or "Metadata"
        if include not in ("Object", "Metadata", "None"):
            raise ApiError(400, "BadRequest", f'includeObject must be one of "Object", "Metadata", "None"; '
                                              f'got "{include}"')
        return include

    def _list(self, t: Target) -> Reply:
        return self._render(t, self._select(t))

    def _watch(self, t: Target) -> Reply:
        """The current state as ADDED events. In-process the watch ends there (clients re-list); the HTTP server
        keeps it open and streams what changes (see `watch_events`)."""
        objects = self._select(t)
        if self.req.wants_table():  # one single-row Table per event, which kubectl get -w prints as it comes
            include = self._include_object()
            if include == "None":
                raise ApiError(400, "BadRequest", "a watch of tables needs includeObject Metadata or Object")
            now, rv = self.cluster.clock.now(), self._rv()
            objects = [tables.to_table(t.rt.key, [obj], now, rv, include) for obj in objects]
        lines = [_dump({"type": "ADDED", "object": obj}) for obj in objects]
        return 200, {"Content-Type": JSON_TYPE}, b"".join(line + b"\n" for line in lines)

    def _get(self, t: Target) -> Reply:
        assert t.name is not None
        return self._render(t, [self.cluster.must_get(t.rt.key, t.ns, t.name)], single=True)

    def _log(self, t: Target) -> Reply:
        return 200, {"Content-Type": "text/plain"}, self.read_log(t).text

    def read_log(self, t: Target, after: LogCursor | None = None, remaining: int | None = None) -> LogRead:
        """A `pods/log` read as the kubelet serves it (kubernetes pkg/kubelet/kuberuntime/logs/logs.go): the last
        `tailLines` lines, less those written before `sinceSeconds`/`sinceTime`, each prefixed with its time
        (RFC3339Nano, fixed width) and a space under `timestamps`, cut at `limitBytes`. A follow's later reads pass
        `after`, the cursor of the read before, and get only the lines written since, within the bytes `remaining`.
        """
        assert t.name is not None
        pod = self.cluster.must_get("pods", t.ns, t.name)
        names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
        init_names = [c.get("name") for c in (pod.get("spec") or {}).get("initContainers") or []]
        container = self.req.arg("container")
        if container is None:
            if len(names) != 1:
                raise ApiError(400, "BadRequest", f"a container name must be specified for pod {t.name}, "
                                                  f"choose one of: [{' '.join(names)}]")
            container = names[0]
        elif container not in names + init_names:
            raise ApiError(400, "BadRequest", f"container {container} is not valid for pod {t.name}")
        entry = self.cluster.logs.get((t.ns, t.name, container))
        previous = self.req.flag("previous")
        if previous and not (entry and entry.get("previous")):
            raise ApiError(400, "BadRequest",
                           f'previous terminated container "{container}" in pod "{t.name}" not found')
        if entry is None:
            waiting = _waiting_reason(pod, container)
            if waiting:
                raise ApiError(400, "BadRequest",
                               f'container "{container}" in pod "{t.name}" is waiting to start: {waiting}')
        since = self._log_since(t.name)
        state = _container_status(pod, container) or {}
        lines = _timed(entry or {}, "previous" if previous else "current", _started(pod, state, previous))
        chosen = lines
        tail = self.req.arg("tailLines")
        if tail is not None:
            n = _non_negative_int("tailLines", tail)
            chosen = lines[-n:] if n else []
        if after is not None:
            chosen = _lines_after(lines, after)
        if since is not None:  # the kubelet skips a line written before `since`
            chosen = [(ts, line) for ts, line in chosen if ts >= since]
        stamped = self.req.flag("timestamps")
        text = "".join(f"{_nano(ts)} {line}\n" if stamped else f"{line}\n" for ts, line in chosen).encode()
        limit = self.req.arg("limitBytes")
        if after is None and limit is not None:
            remaining = _non_negative_int("limitBytes", limit)
        if remaining is not None:
            text = text[:remaining]
            remaining -= len(text)
        running = not previous and "running" in (state.get("state") or {})
        return LogRead(text, _cursor(lines, after), running, (pod["metadata"].get("uid", ""), container,
                                                               state.get("restartCount", 0)), remaining)

    def _log_since(self, name: str) -> float | None:
        """The moment a log read starts from: `sinceSeconds` before now, or `sinceTime`, at most one of them
        (kubernetes pkg/apis/core/validation ValidatePodLogOptions; the apiserver answers 422 Invalid)."""
        seconds, at = self.req.arg("sinceSeconds"), self.req.arg("sinceTime")
        if seconds is not None and at is not None:
            raise ApiError(422, "Invalid", f'PodLogOptions "{name}" is invalid: : Forbidden: at most one of '
                                           "`sinceTime` or `sinceSeconds` may be specified")
        if seconds is not None:
            try:
                n = int(seconds)
            except ValueError:
                raise ApiError(400, "BadRequest", f'sinceSeconds: invalid value "{seconds}": not an integer') from None
            if n < 1:
                raise ApiError(422, "Invalid", f'PodLogOptions "{name}" is invalid: sinceSeconds: Invalid value: '
                                               f"{n}: must be greater than 0")
            return self.cluster.clock.now() - n
        if at is not None:
            when = parse_time(at)
            if when is None:
                raise ApiError(400, "BadRequest", f'sinceTime: parsing time "{at}" as RFC 3339 failed')
            return when
        return None

    def _access_review(self) -> Reply:
        """`kubectl auth can-i`: the simulator authorizes every request (as the AlwaysAllow mode), so the answer to
        any SelfSubjectAccessReview is yes."""
        if self.req.method != "POST":
            raise ApiError(405, "MethodNotAllowed", f"{self.req.method} is not allowed on {ACCESS_REVIEW_PATH}")
        review = self.req.json_body()
        if not isinstance(review, dict) or review.get("kind") != "SelfSubjectAccessReview":
            raise ApiError(400, "BadRequest", "the body must be a SelfSubjectAccessReview")
        return _json({**review, "metadata": {}, "status": {
            "allowed": True, "reason": "the simulator authorizes every request"}}, 201)

    # --- writes -----------------------------------------------------------------------------------------------
    def _audit(self, verb: str, t: Target, obj: Obj, detail: str = "") -> None:
        key = self.req.headers.get(IDEMPOTENCY_HEADER) or \
            (obj.get("metadata", {}).get("annotations") or {}).get(IDEMPOTENCY_ANNOTATION)
        meta = obj.get("metadata", {})
        self.cluster.record_audit(verb, t.rt.key, meta.get("namespace", "") if t.rt.namespaced else "",
                                  meta.get("name", t.name or ""), key, detail[:AUDIT_DETAIL_LIMIT])

    def _body_object(self, t: Target) -> Obj:
        obj = self.req.json_body()
        if not isinstance(obj, dict):
            raise ApiError(400, "BadRequest", f"the body must be a {t.rt.kind} object")
        kind = obj.get("kind")
        if kind is not None and kind != t.rt.kind:
            raise ApiError(400, "BadRequest", f"the body is a {kind}, but the request is for a {t.rt.kind}")
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise ApiError(400, "BadRequest", "metadata must be an object")
        if t.rt.namespaced:
            if meta.get("namespace") and meta["namespace"] != t.namespace:
                raise ApiError(400, "BadRequest", "the namespace of the provided object does not match the "
                                                  "namespace sent on the request")
            meta["namespace"] = t.namespace
        else:
            meta.pop("namespace", None)
        return obj

    def _admit(self, t: Target, obj: Obj, old: Obj | None = None) -> None:
        _omit_empty_meta(obj)
        admission.apply_defaults(self.cluster, t.rt.key, obj, old)
        if old is not None:
            admission.validate_update(t.rt.key, obj, old)
        admission.validate(t.rt.key, obj)

    def _create(self, t: Target) -> Reply:
        if t.rt.namespaced and t.namespace is None:
            raise _not_found_path()
        obj = self._body_object(t)
        for server_field in ("uid", "resourceVersion", "creationTimestamp", "generation", "deletionTimestamp"):
            obj["metadata"].pop(server_field, None)
        if t.rt.key in STATUS_ON_CREATE:
            obj["status"] = clone(STATUS_ON_CREATE[t.rt.key])
        self._admit(t, obj)
        if self.dry_run:  # `kubectl diff` of a new object, `kubectl create --dry-run=server`
            return _json(self.cluster.create(t.rt.key, obj, dry_run=True), 201)
        created = self.cluster.create(t.rt.key, obj)
        self._audit("create", t, created, self.req.body.decode(errors="replace"))
        return _json(created, 201)

    def _check_identity(self, t: Target, new: Obj, old: Obj) -> None:
        meta = new.get("metadata")
        if not isinstance(meta, dict):
            raise ApiError(400, "BadRequest", "metadata must be an object")
        if meta.get("name") != t.name:
            raise ApiError(400, "BadRequest", f'the name of the object ({meta.get("name")}) does not match the '
                                              f"name on the URL ({t.name})")
        if t.rt.namespaced and meta.get("namespace") != t.namespace:
            raise ApiError(400, "BadRequest", "the namespace of the object does not match the namespace on the URL")
        rv = meta.get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            rt = t.rt
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {rt.key} "{t.name}": the object has '
                                            "been modified; please apply your changes to the latest version and try "
                                            "again")

    def _store(self, t: Target, new: Obj, old: Obj, verb: str) -> Reply:
        """Write `new` over `old`: a main-resource write keeps the old status, a /status write keeps the rest."""
        self._check_identity(t, new, old)
        if t.subresource == "status":
            status = new.get("status")
            new = clone(old)
            new["status"] = status
        elif "status" in t.rt.subresources:
            if "status" in old:
                new["status"] = clone(old["status"])
            else:
                new.pop("status", None)
        new.setdefault("apiVersion", t.rt.group_version)
        new.setdefault("kind", t.rt.kind)
        self._admit(t, new, old)
        if self.dry_run:
            return _json(_as_stored(new, old))
        stored = self.cluster.replace(t.rt.key, new)
        detail = f"{t.subresource + ' ' if t.subresource else ''}{self.req.body.decode(errors='replace')}"
        self._audit(verb, t, stored, detail)
        return _json(stored)

    def _update(self, t: Target) -> Reply:
        assert t.name is not None
        old = self.cluster.must_get(t.rt.key, t.ns, t.name)
        new = self._body_object(t)
        new["metadata"].setdefault("name", t.name)
        return self._store(t, new, old, "update")

    def _patch(self, t: Target) -> Reply:
        assert t.name is not None
        old = self.cluster.must_get(t.rt.key, t.ns, t.name)
        try:
            new = apply_patch(old, self.req.headers.get("content-type", ""), self.req.body)
        except ApiError as error:
            if error.reason == "Invalid":
                raise ApiError(422, "Invalid", f'{t.rt.kind} "{t.name}" is invalid: patch: {error.message}') from None
            raise
        if not isinstance(new, dict):
            raise ApiError(422, "Invalid", "the patch did not produce an object")
        return self._store(t, new, old, "patch")

    def _delete(self, t: Target) -> Reply:
        assert t.name is not None
        obj = self.cluster.must_get(t.rt.key, t.ns, t.name)
        self._check_preconditions(t, obj)
        if not self.dry_run:
            cascaded = self._remove(t.rt, obj, orphan=self._propagation() == "Orphan")
            self._audit("delete", t, obj, f"cascade={cascaded}" if cascaded else "")
        if t.rt.key == "pods":
            gone = clone(obj)
            gone["metadata"]["deletionTimestamp"] = rfc3339(self.cluster.clock.now())
            return _json(gone)
        return _json({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                      "details": {"name": t.name, "kind": t.rt.plural, "uid": obj["metadata"]["uid"],
                                  **({"group": t.rt.group} if t.rt.group else {})}})

    def _delete_collection(self, t: Target) -> Reply:
        if t.rt.namespaced and t.namespace is None:
            raise _not_found_path()
        items = self._select(t)
        orphan = self._propagation() == "Orphan"
        for obj in items:
            if self.cluster.get(t.rt.key, obj["metadata"].get("namespace", "") if t.rt.namespaced else "",
                                obj["metadata"]["name"]) is not None:
                self._remove(t.rt, obj, orphan)
                self._audit("delete", t, obj, "deletecollection")
        return _json({"kind": f"{t.rt.kind}List", "apiVersion": t.rt.group_version,
                      "metadata": {"resourceVersion": self._rv()}, "items": items})

    def _delete_options(self) -> dict[str, Any]:
        if not self.req.body:
            return {}
        options = self.req.json_body()
        return options if isinstance(options, dict) else {}

    def _propagation(self) -> str:
        return self.req.arg("propagationPolicy") or self._delete_options().get("propagationPolicy") or "Background"

    def _check_preconditions(self, t: Target, obj: Obj) -> None:
        pre = self._delete_options().get("preconditions") or {}
        for field in ("uid", "resourceVersion"):
            if pre.get(field) and pre[field] != obj["metadata"].get(field):
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {t.rt.key} "{t.name}": '
                                                f"Precondition failed: {field} in precondition: {pre[field]}, "
                                                f"{field} in object meta: {obj['metadata'].get(field)}")

    def _remove(self, rt: ResourceType, obj: Obj, orphan: bool) -> int:
        """Delete `obj` and, as the garbage collector would, what it owns (or a namespace's contents).
        Returns how many dependents went with it."""
        meta = obj["metadata"]
        ns = meta.get("namespace", "") if rt.namespaced else ""
        self.cluster.delete(rt.key, ns, meta["name"])
        self._forget_logs(rt, ns, meta["name"])
        if rt.key == "namespaces":
            doomed = [(r, o) for r in RESOURCE_TYPES if r.namespaced for o in self.cluster.list(r.key, meta["name"])]
        elif orphan:
            return 0
        else:
            scope = ns if rt.namespaced else None
            doomed = [(r, o) for r in RESOURCE_TYPES for o in self.cluster.list(r.key, scope if r.namespaced else None)
                      if any(ref.get("uid") == meta.get("uid") for ref in o["metadata"].get("ownerReferences") or [])]
        count = 0
        for r, dependent in doomed:
            dep_meta = dependent["metadata"]
            if self.cluster.get(r.key, dep_meta.get("namespace", "") if r.namespaced else "", dep_meta["name"]):
                count += 1 + self._remove(r, dependent, orphan=False)
        return count

    def _forget_logs(self, rt: ResourceType, ns: str, name: str) -> None:
        if rt.key == "pods":
            for key in [k for k in self.cluster.logs if k[0] == ns and k[1] == name]:
                del self.cluster.logs[key]

    # --- scale subresource ------------------------------------------------------------------------------------
    def _scale_of(self, obj: Obj) -> Obj:
        meta = obj["metadata"]
        return {"kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                             if k in meta},
                "spec": {"replicas": (obj.get("spec") or {}).get("replicas", 1)},
                "status": {"replicas": (obj.get("status") or {}).get("replicas", 0),
                           "selector": selector_to_string((obj.get("spec") or {}).get("selector"))}}

    def _scale(self, t: Target) -> Reply:
        assert t.name is not None
        obj = self.cluster.must_get(t.rt.key, t.ns, t.name)
        scale = self._scale_of(obj)
        method = self.req.method
        if method == "GET":
            return _json(scale)
        if method == "PATCH":
            wanted = apply_patch(scale, self.req.headers.get("content-type", ""), self.req.body)
        elif method == "PUT":
            wanted = self.req.json_body()
        else:
            raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed on {t.rt.plural}/scale")
        if not isinstance(wanted, dict):
            raise ApiError(400, "BadRequest", "the body must be a Scale object")
        replicas = (wanted.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise ApiError(422, "Invalid", f'Scale.autoscaling "{t.name}" is invalid: spec.replicas: Invalid value: '
                                           f"{replicas!r}: must be greater than or equal to 0")
        rv = (wanted.get("metadata") or {}).get("resourceVersion")
        if rv and rv != obj["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {t.rt.key} "{t.name}": the object '
                                            "has been modified; please apply your changes to the latest version and "
                                            "try again")
        new = clone(obj)
        new["spec"]["replicas"] = replicas
        stored = self.cluster.replace(t.rt.key, new)
        self._audit("patch" if method == "PATCH" else "update", t, stored, f"scale replicas={replicas}")
        return _json(self._scale_of(stored))

    # --- derived, read-only resources (metrics, endpoint slices) ----------------------------------------------
    def _derived(self, d: derived.DerivedResource, rest: list[str]) -> Reply:
        if self.req.method != "GET":
            raise ApiError(405, "MethodNotAllowed", f"{d.group_version} {d.plural} are read-only")
        namespace = rest[1] if rest[0] == "namespaces" else None
        rest = rest[2:] if rest[0] == "namespaces" else rest
        if len(rest) > 2 or (namespace is not None and not d.namespaced):
            raise _not_found_path()
        name = rest[1] if len(rest) > 1 else None
        if name is not None and d.namespaced and namespace is None:
            raise _not_found_path()
        labels = parse_label_selector(self.req.arg("labelSelector"))
        fields = parse_field_selector(self.req.arg("fieldSelector"), f"{d.plural}.{d.group}")
        items = [o for o in d.build(self.cluster, namespace) if (name is None or o["metadata"]["name"] == name)
                 and _labels_match(labels, o) and fields.matches(o)]
        items.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
        if name is None:
            return _json({"kind": f"{d.kind}List", "apiVersion": d.group_version,
                          "metadata": {"resourceVersion": self._rv()}, "items": items})
        if not items:
            raise ApiError(404, "NotFound", f'{d.error_name} "{name}" not found')
        return _json(items[0])


@dataclass(frozen=True)
class LogRead:
    """One read of a container's log: the text to send, where a follow goes on from, whether the container is
    running (a follow ends when it is not, as the kubelet's does), which run of which container it is (a restart
    is another container: its log is not followed on) and the bytes left under `limitBytes` (None: no limit)."""

    text: bytes
    cursor: LogCursor
    running: bool
    instance: tuple[str, str, int]
    remaining: int | None


LOG_PATH = re.compile(r"^/api/v1/namespaces/[^/]+/pods/[^/]+/log/?$")


def is_log_follow(method: str, path: str, query: Mapping[str, list[str]]) -> bool:
    """A `kubectl logs -f` request: GET of a pod's log with `follow`."""
    return (method.upper() == "GET" and (query.get("follow") or [""])[-1].lower() in ("true", "1")
            and LOG_PATH.match(split_env(path)[1]) is not None)


class LogFollow:
    """A followed log (`follow=true`) over HTTP: `first` is the response to send at once (the lines so far, or
    the error), then each `more()` gives the lines written since the look before, and whether to go on: the
    stream ends when the container stops running (at once for one that is not running), when it is restarted
    or its pod goes, or when `limitBytes` is reached. In-process a followed log is only its first response, as
    a watch is only its first events."""

    def __init__(self, simulator: Simulator, path: str, query: Mapping[str, list[str]],
                 headers: Mapping[str, str]) -> None:
        self.simulator = simulator
        self.env, k8s_path = split_env(path)
        self.req = Request("GET", k8s_path, query, {k.lower(): v for k, v in headers.items()}, b"")
        self.last: LogRead | None = None
        self.first = self._first()

    def _read(self) -> LogRead:
        """Under the simulator's lock."""
        cluster = self.simulator.envs.get(self.env)
        if cluster is None:
            raise self.simulator.absence(self.env)
        cluster.sync()
        router = Router(cluster, self.req)
        target = router._target("", "v1", [p for p in self.req.path.split("/") if p][2:])
        if self.last is None:
            return router.read_log(target)
        return router.read_log(target, self.last.cursor, self.last.remaining)

    def _first(self) -> Response:
        with self.simulator.lock:
            cluster = self.simulator.envs.get(self.env)
            try:
                self.last = self._read()
                reply: Reply = 200, {"Content-Type": "text/plain"}, self.last.text
            except ApiError as error:
                reply = status_response(error)
            status, headers, payload = reply
            if cluster is not None:
                headers["Date"] = _http_date(int(cluster.clock.now()))
            return status, headers, payload.encode() if isinstance(payload, Json) else payload

    @property
    def done(self) -> bool:
        last = self.last
        return last is None or not last.running or last.remaining == 0

    def more(self) -> tuple[bytes, bool]:
        """The lines written since the last look, and whether the stream goes on."""
        if self.done:
            return b"", False
        before = self.last
        assert before is not None
        with self.simulator.lock:
            try:
                read = self._read()
            except ApiError:  # the pod or its environment is gone
                return b"", False
        if read.instance != before.instance:  # another run of the container: the one followed has ended
            return b"", False
        self.last = read
        return read.text, not self.done


def _timed(entry: Mapping[str, list[str]], key: str, written_at: float) -> TimedLines:
    """Log `key` of a container with when each line was written: a rendered log knows (`LazyLog.timed`); lines set
    as they are (a one-off job's output, tests) count as written when the container started."""
    timed = getattr(entry, "timed", None)
    if timed is not None:
        return list(timed(key))
    return [(written_at, line) for line in entry.get(key) or []]


def _container_status(pod: Obj, container: str) -> Obj | None:
    status = pod.get("status") or {}
    for cs in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        if cs.get("name") == container:
            return cs  # type: ignore[no-any-return]
    return None


def _started(pod: Obj, state: Obj, previous: bool) -> float:
    """When the container's run (its last one, for `previous`) started: its status says, else its pod's creation."""
    run = ((state.get("lastState") or {}) if previous else (state.get("state") or {}))
    started = (run.get("running") or run.get("terminated") or {}).get("startedAt")
    return parse_time(started) or parse_time(pod["metadata"].get("creationTimestamp")) or 0.0


def _lines_after(lines: TimedLines, cursor: LogCursor) -> TimedLines:
    """The lines not read yet: those after the cursor's time, and those of its time beyond the number read."""
    last, seen = cursor
    out: TimedLines = []
    at_last = 0
    for ts, line in lines:
        if ts == last:
            at_last += 1
            if at_last <= seen:
                continue
        elif ts < last:
            continue
        out.append((ts, line))
    return out


def _cursor(lines: TimedLines, before: LogCursor | None) -> LogCursor:
    """Where a follow goes on from once `lines` are read: the latest time among them and how many have it."""
    if not lines:
        return before or (float("-inf"), 0)
    last = max(ts for ts, _ in lines)
    if before is not None and before[0] > last:
        return before
    return last, sum(1 for ts, _ in lines if ts == last)


def _nano(ts: float) -> str:
    """The kubelet's RFC3339NanoFixed ("2006-01-02T15:04:05.000000000Z07:00"): nine digits, zeros kept; the
    simulator's times go to the microsecond."""
    second, micros = divmod(round(ts * 1_000_000), 1_000_000)
    return f"{datetime.fromtimestamp(second, UTC):%Y-%m-%dT%H:%M:%S}.{micros:06d}000Z"


OMITTED_WHEN_EMPTY = ("labels", "annotations", "finalizers", "ownerReferences", "managedFields")


def _omit_empty_meta(obj: Obj) -> None:
    """Drop empty maps and lists from `metadata`, as the apiserver's typed ObjectMeta does (its fields are
    `omitempty`, kubernetes staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/types.go): `kubectl apply` and
    `kubectl diff` send `annotations: {}`, which a real cluster does not keep. A new metadata map, since the old
    one may be the stored object's."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and any(meta.get(key, 0) in ({}, [], None) for key in OMITTED_WHEN_EMPTY):
        obj["metadata"] = {k: v for k, v in meta.items() if not (k in OMITTED_WHEN_EMPTY and v in ({}, [], None))}


def _as_stored(new: Obj, old: Obj) -> Obj:
    """`new` as `Cluster.replace` would store it over `old`, for a dry run: the same identity and generation, and
    the old resourceVersion, since nothing was written (as a real apiserver answers a dry-run update)."""
    meta = {**new["metadata"], "uid": old["metadata"]["uid"],
            "creationTimestamp": old["metadata"]["creationTimestamp"],
            "resourceVersion": old["metadata"]["resourceVersion"]}
    generation = old["metadata"].get("generation", 1)
    meta["generation"] = generation + 1 if new.get("spec") != old.get("spec") else generation
    return {**new, "metadata": meta}


def _labels_match(selector: LabelSelector, obj: Obj) -> bool:
    return selector.empty or selector.matches(obj["metadata"].get("labels"))


def _waiting_reason(pod: Obj, container: str) -> str | None:
    status = pod.get("status") or {}
    for cs in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        if cs.get("name") == container:
            waiting = (cs.get("state") or {}).get("waiting")
            return (waiting.get("reason") or "ContainerCreating") if waiting is not None else None
    return "ContainerCreating" if status.get("phase", "Pending") == "Pending" else None


def _non_negative_int(name: str, value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n < 0:
        raise ApiError(400, "BadRequest", f"{name}: Invalid value: {value!r}: must be a non-negative integer")
    return n
