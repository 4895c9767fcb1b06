"""Guardrails: what the agent may do, enforced here and never left to the model's judgement.

A refused call never reaches the cluster; the caller records the refusal in the trajectory. The rules:

1. Scope. Writes act only in the incident's namespace: write tools take no `namespace` argument, patches may not
   touch `metadata.namespace` / `metadata.name`, and the request layer (`kube.Kube`, given the tools'
   `guard.Guard`) re-checks every mutating request. The one cluster-scoped write is `uncordon` (the fix for a
   cordoned node), and a node patch may do nothing but clear `spec.unschedulable`. Reads may look at other
   namespaces, except secrets, which are readable only in the incident's namespace.
2. Deny-list. Deleting a namespace, deployment, service, PVC, node or any other kind outside the allow-list
   (pods, network policies, Chaos Mesh experiments) is refused; so is patching a kind outside the allow-list.
3. Never to zero. Setting a deployment's replicas to 0 (by `scale` or by a patch) is refused: it takes the
   service down and is never a remediation here; a person does it deliberately, outside the agent.
4. Patches are confined to the object's content: under `metadata` only labels and annotations (not the tool's
   own idempotency annotation); never `kind`, `apiVersion`, `status` or a deployment's immutable `spec.selector`;
   no operation on an ancestor of those (`remove /metadata`, `replace /spec` on a deployment, `$patch: replace`);
   JSON patch ops limited to add/remove/replace/test; at most 16 KiB and 20 levels deep; never empty.
5. Arguments are validated beyond their pydantic types: names are DNS-1123, label selectors use selector
   syntax, values carry no control characters (other than tab, CR and LF), quota values are quantities, and
   `patch_quota` may only raise existing limits and `set_hpa_max` never sets a maximum below the autoscaler's
   minimum (both checked against the live object in `write.py`).
6. Judged by its effect. Every write is first sent as a server-side dry run (or, for a delete, its object read), and
   `write_rules` judges the object before and after: a forbidden finding refuses it, a high-risk one holds it
   (`NeedsApproval`) until the call is made again approved. These rules are the authority on what a write does;
   the checks above give early, clear messages for what a call's arguments alone betray.
"""

from __future__ import annotations

import json
import re
from typing import Any

from kubernetes.utils import parse_quantity

from agent_sre.models import tools as m
from agent_sre.models.tools import WriteAssessment, WriteFinding

IDEMPOTENCY_ANNOTATION = "agent-sre.io/idempotency-key"

MAX_PATCH_BYTES = 16 * 1024
MAX_PATCH_DEPTH = 20
MAX_SELECTOR_CHARS = 512

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_SELECTOR = re.compile(r"^[A-Za-z0-9_./\-=!,() ]*$")
_PORT_NAME = re.compile(r"^(?=.*[a-z])[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_QUOTA_KEY = re.compile(r"^[a-z0-9]([-a-z0-9./]*[a-z0-9])?$")
_IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]+$")  # printable ASCII: it travels in an annotation and a header
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")

PATCHABLE = frozenset({"deployment", "service", "configmap", "secret", "networkpolicy", "resourcequota", "node",
                       "horizontalpodautoscaler"})
DELETABLE = frozenset({"pod", "networkpolicy", "PodChaos", "StressChaos", "NetworkChaos", "HTTPChaos", "DNSChaos",
                       "IOChaos", "Schedule"})
JSON_PATCH_OPS = frozenset({"add", "remove", "replace", "test"})

Path = tuple[str, ...]
# Fields no patch may touch, with why; an operation on an ancestor of one of them clobbers it too.
_PROTECTED: dict[Path, str] = {
    ("kind",): "the object's kind cannot change",
    ("apiVersion",): "the object's apiVersion cannot change",
    ("status",): "status is written by controllers, not by patches",
    ("metadata", "annotations", IDEMPOTENCY_ANNOTATION): "the idempotency annotation belongs to the tool layer",
}
_DEPLOYMENT_PROTECTED: dict[Path, str] = {("spec", "selector"): "a deployment's spec.selector is immutable"}


class Refusal(Exception):
    """A call the guardrails stop before it reaches the cluster; the message says why, for the model to read."""


class NeedsApproval(Refusal):
    """A write the rules judge high-risk: not sent, and sent as asked once the call is approved."""

    def __init__(self, assessment: WriteAssessment) -> None:
        super().__init__(f"needs approval: {assessment.reasons('high')}")
        self.assessment = assessment


# --- per-call checks (static: no cluster access) ---------------------------------------------------------------
def check_call(tool: str, args: m._Args, incident_namespace: str, idempotency_key: str | None) -> None:
    """Raise `Refusal` if a validated call breaks a rule that needs no cluster state."""
    namespace = getattr(args, "namespace", None)
    if namespace is not None:
        _dns_label(namespace, "namespace")
    if isinstance(args, m.Describe | m.GetResource) and args.kind == "secret" and namespace not in (
            None, incident_namespace):
        raise Refusal(f"secrets are readable only in the incident's namespace {incident_namespace!r}")
    if isinstance(args, m.ListPods) and args.selector is not None:
        _selector(args.selector)
    if isinstance(args, m.GetLogs) and args.container is not None:
        _dns_label(args.container, "container")
    if isinstance(args, m.GetEvents) and args.object_name is not None:
        _dns_subdomain(args.object_name, "object_name")
    if not m.TOOL_SPECS[tool].write:
        return
    if not idempotency_key or len(idempotency_key) > 253 or not _IDEMPOTENCY_KEY.match(idempotency_key):
        raise Refusal("a write needs an idempotency key of 1-253 printable ASCII characters (the caller's bug)")
    _WRITE_CHECKS.get(type(args), _no_check)(args)


def _no_check(args: m._Args) -> None:
    return None


def _check_scale(args: m.Scale) -> None:
    if args.replicas == 0:
        raise Refusal(f"scaling deployment {args.deployment!r} to 0 replicas would take it down; "
                     f"scale-to-zero is never a remediation (rule: never to zero)")


def _check_patch(args: m.Patch) -> None:
    check_patch(args.kind, args.patch_type, args.patch)


def _check_resources(args: m.SetResources) -> None:
    if not any((args.memory_limit, args.memory_request, args.cpu_limit, args.cpu_request)):
        raise Refusal("set_resources needs at least one of memory_limit, memory_request, cpu_limit, cpu_request")


def _check_env(args: m.SetEnv) -> None:
    _plain_text(args.value, "value")


def _check_config_key(args: m.SetConfigKey) -> None:
    _plain_text(args.value, "value")
    if len(args.key) > 253:
        raise Refusal("key: at most 253 characters")


def _check_service(args: m.PatchService) -> None:
    if args.port is None and args.target_port is None and args.selector is None:
        raise Refusal("patch_service needs at least one of port, target_port, selector")
    if isinstance(args.target_port, int) and not 1 <= args.target_port <= 65535:
        raise Refusal(f"target_port {args.target_port} is not a port number (1-65535)")
    if isinstance(args.target_port, str) and (len(args.target_port) > 15 or not _PORT_NAME.match(args.target_port)):
        raise Refusal(f"target_port {args.target_port!r} is neither a number nor a port name (IANA_SVC_NAME)")
    if args.selector is not None:
        if not args.selector:
            raise Refusal("an empty selector would detach the service from every pod")
        for key, value in args.selector.items():
            if len(key) > 316 or not _LABEL_KEY.match(key) or len(value) > 63 or not _LABEL_VALUE.match(value):
                raise Refusal(f"selector {key}={value!r} is not a valid label key/value")


def _check_quota(args: m.PatchQuota) -> None:
    for key, value in args.hard.items():
        if len(key) > 253 or not _QUOTA_KEY.match(key):
            raise Refusal(f"quota resource name {key!r} is not valid (e.g. requests.cpu, limits.memory, pods)")
        try:
            parse_quantity(value)
        except ValueError:
            raise Refusal(f"quota value {value!r} for {key} is not a quantity (e.g. 2, 500m, 4Gi)") from None


_WRITE_CHECKS: dict[type, Any] = {
    m.Scale: _check_scale, m.Patch: _check_patch, m.SetResources: _check_resources, m.SetEnv: _check_env,
    m.SetConfigKey: _check_config_key, m.PatchService: _check_service, m.PatchQuota: _check_quota,
}


def _dns_label(value: str, what: str) -> None:
    if len(value) > 63 or not _DNS_LABEL.match(value):
        raise Refusal(f"{what} {value[:80]!r} is not a valid name (lowercase letters, digits, '-'; at most 63)")


def _dns_subdomain(value: str, what: str) -> None:
    if len(value) > 253 or not _DNS_SUBDOMAIN.match(value):
        raise Refusal(f"{what} {value[:80]!r} is not a valid object name")


def _selector(selector: str) -> None:
    if len(selector) > MAX_SELECTOR_CHARS or not _SELECTOR.match(selector):
        raise Refusal(f"selector {selector[:80]!r} is not label-selector syntax (e.g. app=cart,tier!=db)")


def _plain_text(value: str, what: str) -> None:
    if _CONTROL.search(value):
        raise Refusal(f"{what} contains control characters")


# --- patches ---------------------------------------------------------------------------------------------------
def check_patch(kind: str, patch_type: str, patch: Any) -> None:
    """Rule 4 for a user-supplied patch of `kind`, whatever its format."""
    if not patch:
        raise Refusal("the patch is empty")
    encoded = json.dumps(patch)
    if len(encoded) > MAX_PATCH_BYTES:
        raise Refusal(f"the patch is {len(encoded)} bytes; at most {MAX_PATCH_BYTES} are accepted")
    _check_strings(patch, 0)
    if patch_type == "json":
        if not isinstance(patch, list):
            raise Refusal("a JSON patch is a list of operations")
        for op in patch:
            _check_json_op(kind, op)
    else:
        if not isinstance(patch, dict):
            raise Refusal(f"a {patch_type} patch is an object, not a list (use patch_type=json for a list of ops)")
        _check_merge(kind, (), patch)


def _check_strings(value: Any, depth: int) -> None:
    if depth > MAX_PATCH_DEPTH:
        raise Refusal(f"the patch nests deeper than {MAX_PATCH_DEPTH} levels")
    if isinstance(value, str):
        _plain_text(value, "a patch value")
    elif isinstance(value, dict):
        for key, item in value.items():
            _plain_text(key, "a patch key")
            _check_strings(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check_strings(item, depth + 1)


def _pointer(path: Any) -> Path:
    if not isinstance(path, str) or not path.startswith("/"):
        raise Refusal(f"JSON patch path {str(path)[:80]!r} must be a JSON pointer starting with '/'")
    return tuple(t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/"))


def _check_json_op(kind: str, op: Any) -> None:
    if not isinstance(op, dict) or op.get("op") not in JSON_PATCH_OPS:
        raise Refusal(f"JSON patch operations are limited to {sorted(JSON_PATCH_OPS)}; got {str(op)[:120]}")
    path = _pointer(op.get("path"))
    if op["op"] == "test":
        return
    if op["op"] != "remove" and "value" not in op:
        raise Refusal(f"JSON patch {op['op']} at {op['path']} needs a value")
    _check_touch(kind, path, op.get("value"), wholesale=True)


def _check_merge(kind: str, path: Path, patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if key.startswith("$"):
            directive, _, field = key.partition("/")
            if directive == "$patch" and value in ("replace", "delete") or directive == "$retainKeys":
                _check_touch(kind, path, None, wholesale=True)
            elif directive in ("$setElementOrder", "$deleteFromPrimitiveList") and field:
                _check_touch(kind, (*path, field), None, wholesale=True)
            elif directive != "$patch":
                raise Refusal(f"unknown strategic-merge directive {key!r}")
        elif isinstance(value, dict):
            _check_touch(kind, (*path, key), value, wholesale=False)
            _check_merge(kind, (*path, key), value)
        else:
            _check_touch(kind, (*path, key), value, wholesale=True)


def _check_touch(kind: str, path: Path, value: Any, *, wholesale: bool) -> None:
    """Refuse writing `value` at `path`; `wholesale` means everything under `path` is replaced or removed."""
    where = "/" + "/".join(path)
    if not path:
        raise Refusal("a patch may not replace the whole object")
    protected = {**_PROTECTED, **(_DEPLOYMENT_PROTECTED if kind == "deployment" else {})}
    for guarded, why in protected.items():
        if path[:len(guarded)] == guarded or (wholesale and guarded[:len(path)] == path):
            raise Refusal(f"the patch touches {where}: {why}")
    if path[0] == "metadata" and (len(path) == 1 and wholesale or len(path) > 1 and path[1] not in (
            "labels", "annotations")):
        raise Refusal(f"the patch touches {where}: only metadata.labels and metadata.annotations may change "
                     f"(never the object's name or namespace)")
    if kind == "deployment" and _replicas_zero(path, value):
        raise Refusal("the patch sets the deployment's replicas to 0, which takes it down (rule: never to zero)")


def _replicas_zero(path: Path, value: Any) -> bool:
    target = ("spec", "replicas")
    if path == target:
        return value in (0, "0") and value is not False
    if target[:len(path)] == path and isinstance(value, dict):
        return _replicas_zero(path + (target[len(path)],), value.get(target[len(path)]))
    return False


# --- request-level check (defence in depth, in kube.Kube via tools.guard) ---------------------------------------
def check_write(verb: str, kind: str, name: str, namespace: str, body: Any) -> None:
    """The last check before a mutating request leaves the process, whatever tool built it."""
    if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        raise Refusal(f"{name[:80]!r} is not a valid object name")
    _dns_label(namespace, "namespace")
    if verb == "delete" and kind not in DELETABLE:
        raise Refusal(f"deleting a {kind} is deny-listed: only pods, network policies and chaos experiments "
                     f"may be deleted (namespaces, deployments, services, PVCs and nodes never)")
    if verb == "patch" and kind not in PATCHABLE:
        raise Refusal(f"patching a {kind} is not in the allow-list {sorted(PATCHABLE)}")
    if verb not in ("patch", "delete"):
        raise Refusal(f"{verb} is not an allowed write")
    if kind == "node" and not _is_uncordon(body):
        raise Refusal("the only cluster-wide write allowed is uncordoning a node")


def _is_uncordon(body: Any) -> bool:
    if not isinstance(body, dict) or body.get("spec") != {"unschedulable": None}:
        return False
    rest = {k: v for k, v in body.items() if k != "spec"}
    return rest in ({}, {"metadata": {"annotations": {IDEMPOTENCY_ANNOTATION: _annotation(body)}}})


def _annotation(body: dict[str, Any]) -> Any:
    return body.get("metadata", {}).get("annotations", {}).get(IDEMPOTENCY_ANNOTATION)


def enforce(findings: list[WriteFinding], approved: bool) -> None:
    """Rule 6: refuse a write a rule forbids; hold one a rule judges high-risk unless the call is `approved`."""
    assessment = WriteAssessment.of(findings)
    if assessment.risk == "forbidden":
        raise Refusal(assessment.reasons("forbidden"))
    if assessment.risk == "high" and not approved:
        raise NeedsApproval(assessment)
