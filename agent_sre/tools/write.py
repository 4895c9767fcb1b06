"""The write tools: each turns its arguments into one patch or one delete, as the matching kubectl command does.

Patches are built from the live object (which container, which revision, which port), stamped with the call's
idempotency key and sent through `Kube.patch`, so every write is guarded and retry-safe (see `idempotency`).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes.utils import parse_quantity

from agent_sre.kube.client import KINDS, KubeError, Obj
from agent_sre.models import tools as m
from agent_sre.tools.context import ToolContext, ToolFailure
from agent_sre.tools.guardrails import IDEMPOTENCY_ANNOTATION, Refusal
from agent_sre.tools.idempotency import applied_key, with_key
from agent_sre.tools.read import revision_template, revisions

Build = Callable[[Obj], "tuple[str, Any] | Outcome"]


@dataclass
class Outcome:
    output: str
    replay: bool = False


def _content(obj: Obj) -> Any:
    """What a write can change, without bookkeeping: spec/data and labels, not status or our own annotation."""
    meta = obj.get("metadata") or {}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != IDEMPOTENCY_ANNOTATION}
    return ({k: v for k, v in obj.items() if k not in ("metadata", "status")}, meta.get("labels"), annotations)


def _patch(ctx: ToolContext, kind: str, name: str, done: str, build: Build) -> Outcome:
    """Read, replay if this call already applied, else build the patch from the live object and send it stamped."""
    key = ctx.idempotency_key or ""
    ref = f"{KINDS[kind].display}/{name}"
    current = ctx.kube.get(kind, name)
    if applied_key(current) == key:
        return Outcome(f"{ref} {done} (already, by an earlier attempt of this call: idempotent replay, nothing "
                       f"sent)", replay=True)
    built = build(current)
    if isinstance(built, Outcome):
        return built
    patch_type, body = built
    after = ctx.kube.patch(kind, name, with_key(body, patch_type, current, key), patch_type, key)
    return Outcome(f"{ref} {done}" + ("" if _content(after) != _content(current) else " (no change)"))


def _delete(ctx: ToolContext, kind: str, name: str) -> Outcome:
    ref = f'{KINDS[kind].display} "{name}"'
    try:
        ctx.kube.delete(kind, name, ctx.idempotency_key or "")
    except KubeError as exc:
        if exc.status == 404 and ctx.attempt > 1:
            return Outcome(f"{ref} already deleted (idempotent replay of attempt {ctx.attempt})", replay=True)
        raise
    return Outcome(f"{ref} deleted")


def _container(deployment: Obj, container: str, fields: tuple[str, ...] = ("containers",)) -> tuple[str, Obj]:
    spec = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    for field in fields:
        for item in spec.get(field) or []:
            if item.get("name") == container:
                return field, item
    names = [c.get("name") for f in fields for c in spec.get(f) or []]
    raise ToolFailure(f'unable to find container named "{container}" in deployment '
                      f'{deployment["metadata"]["name"]} (containers: {", ".join(map(str, names)) or "none"})')


def _template_patch(field: str, item: Obj) -> dict[str, Any]:
    return {"spec": {"template": {"spec": {field: [item]}}}}


# --- tools -----------------------------------------------------------------------------------------------------
def patch(ctx: ToolContext, args: m.Patch) -> Outcome:
    return _patch(ctx, args.kind, args.name, "patched", lambda _: (args.patch_type, args.patch))


def set_image(ctx: ToolContext, args: m.SetImage) -> Outcome:
    def build(dep: Obj) -> tuple[str, Any]:
        field, _ = _container(dep, args.container, ("containers", "initContainers"))
        return "strategic", _template_patch(field, {"name": args.container, "image": args.image})

    return _patch(ctx, "deployment", args.deployment, "image updated", build)


def rollout_undo(ctx: ToolContext, args: m.RolloutUndo) -> Outcome:
    def build(dep: Obj) -> tuple[str, Any] | Outcome:
        history = revisions(ctx.kube, dep)
        if args.to_revision is not None:
            target = next((rs for rev, rs in history if rev == args.to_revision), None)
            if target is None:
                raise ToolFailure(f"unable to find specified revision {args.to_revision} in history "
                                  f"(revisions: {', '.join(str(r) for r, _ in history) or 'none'})")
            revision = args.to_revision
        else:
            if len(history) < 2:
                raise ToolFailure(f"no rollout history found for deployment {args.deployment!r}: "
                                  f"there is no previous revision to go back to")
            revision, target = history[-2]
        template = revision_template(target)
        if template == (dep.get("spec") or {}).get("template"):
            return Outcome(f"deployment.apps/{args.deployment} skipped rollback "
                           f"(current template already matches revision {revision})")
        return "json", [{"op": "replace", "path": "/spec/template", "value": template}]

    return _patch(ctx, "deployment", args.deployment, "rolled back", build)


def scale(ctx: ToolContext, args: m.Scale) -> Outcome:
    return _patch(ctx, "deployment", args.deployment, "scaled",
                  lambda _: ("merge", {"spec": {"replicas": args.replicas}}))


def rollout_restart(ctx: ToolContext, args: m.DeploymentRef) -> Outcome:
    def build(_: Obj) -> tuple[str, Any]:
        at = datetime.fromtimestamp(ctx.now(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return "strategic", {"spec": {"template": {"metadata": {"annotations": {
            "kubectl.kubernetes.io/restartedAt": at}}}}}

    return _patch(ctx, "deployment", args.deployment, "restarted", build)


def patch_service(ctx: ToolContext, args: m.PatchService) -> Outcome:
    def build(svc: Obj) -> tuple[str, Any]:
        spec = svc.get("spec") or {}
        body: dict[str, Any] = {}
        if args.port is not None or args.target_port is not None:
            ports = json.loads(json.dumps(spec.get("ports") or []))
            chosen = next((p for p in ports if args.port is not None and p.get("port") == args.port), None)
            if chosen is None and len(ports) == 1:
                chosen = ports[0]
            if chosen is None:
                raise ToolFailure(f"service {args.service} has ports {[p.get('port') for p in ports]}; "
                                  f"pass `port` equal to one of them to choose which to change")
            if args.port is not None:
                chosen["port"] = args.port
            if args.target_port is not None:
                chosen["targetPort"] = args.target_port
            body["ports"] = ports
        if args.selector is not None:
            removed = {k: None for k in spec.get("selector") or {} if k not in args.selector}
            body["selector"] = {**removed, **args.selector}
        return "merge", {"spec": body}

    return _patch(ctx, "service", args.service, "patched", build)


def set_resources(ctx: ToolContext, args: m.SetResources) -> Outcome:
    wanted = {"limits": {"memory": args.memory_limit, "cpu": args.cpu_limit},
              "requests": {"memory": args.memory_request, "cpu": args.cpu_request}}
    wanted = {group: {k: v for k, v in values.items() if v is not None} for group, values in wanted.items()}

    def build(dep: Obj) -> tuple[str, Any]:
        field, container = _container(dep, args.container)
        current = container.get("resources") or {}
        limits = {**(current.get("limits") or {}), **wanted["limits"]}
        requests = {**(current.get("requests") or {}), **wanted["requests"]}
        for resource in ("memory", "cpu"):
            if resource in limits and resource in requests and \
                    parse_quantity(requests[resource]) > parse_quantity(limits[resource]):
                raise ToolFailure(f"{resource} request {requests[resource]} must be less than or equal to the "
                                  f"{resource} limit {limits[resource]}")
        resources = {group: values for group, values in wanted.items() if values}
        return "strategic", _template_patch(field, {"name": args.container, "resources": resources})

    return _patch(ctx, "deployment", args.deployment, "resource requirements updated", build)


def set_env(ctx: ToolContext, args: m.SetEnv) -> Outcome:
    def build(dep: Obj) -> tuple[str, Any]:
        field, _ = _container(dep, args.container)
        env = {"name": args.name, "value": args.value, "valueFrom": None}  # a literal replaces a reference
        return "strategic", _template_patch(field, {"name": args.container, "env": [env]})

    return _patch(ctx, "deployment", args.deployment, "env updated", build)


def remove_scheduling_constraints(ctx: ToolContext, args: m.DeploymentRef) -> Outcome:
    def build(dep: Obj) -> tuple[str, Any] | Outcome:
        spec = ((dep.get("spec") or {}).get("template") or {}).get("spec") or {}
        if not spec.get("nodeSelector") and not spec.get("affinity"):
            return Outcome(f"deployment.apps/{args.deployment} has no nodeSelector or affinity: nothing to remove")
        return "strategic", {"spec": {"template": {"spec": {"nodeSelector": None, "affinity": None}}}}

    return _patch(ctx, "deployment", args.deployment, "scheduling constraints removed", build)


def uncordon(ctx: ToolContext, args: m.NodeRef) -> Outcome:
    def build(node: Obj) -> tuple[str, Any] | Outcome:
        if not (node.get("spec") or {}).get("unschedulable"):
            return Outcome(f"node/{args.node} already uncordoned")
        return "merge", {"spec": {"unschedulable": None}}

    return _patch(ctx, "node", args.node, "uncordoned", build)


def delete_pod(ctx: ToolContext, args: m.PodRef) -> Outcome:
    return _delete(ctx, "pod", args.pod)


def delete_chaos_experiment(ctx: ToolContext, args: m.ChaosRef) -> Outcome:
    return _delete(ctx, args.kind, args.name)


def delete_network_policy(ctx: ToolContext, args: m.NetworkPolicyRef) -> Outcome:
    return _delete(ctx, "networkpolicy", args.name)


def set_config_key(ctx: ToolContext, args: m.SetConfigKey) -> Outcome:
    value = base64.b64encode(args.value.encode()).decode() if args.kind == "secret" else args.value
    return _patch(ctx, args.kind, args.name, f"key {args.key!r} set",
                  lambda _: ("merge", {"data": {args.key: value}}))


def patch_quota(ctx: ToolContext, args: m.PatchQuota) -> Outcome:
    def build(quota: Obj) -> tuple[str, Any]:
        hard = (quota.get("spec") or {}).get("hard") or {}
        for key, value in args.hard.items():
            if key not in hard:
                limits = ", ".join(sorted(hard)) or "none"
                raise Refusal(f"quota {args.name} has no limit on {key!r} (limits: {limits}); "
                              f"patch_quota only raises existing limits")
            if parse_quantity(value) < parse_quantity(hard[key]):
                raise Refusal(f"patch_quota only raises limits: {key} {hard[key]} -> {value} would lower it")
        return "merge", {"spec": {"hard": args.hard}}

    return _patch(ctx, "resourcequota", args.name, "patched", build)


def set_hpa_max(ctx: ToolContext, args: m.SetHpaMax) -> Outcome:
    """`kubectl patch hpa NAME -p '{"spec":{"maxReplicas":N}}'`; the write rules bound how far it may go."""
    def build(hpa: Obj) -> tuple[str, Any] | Outcome:
        spec = hpa.get("spec") or {}
        if args.max_replicas < spec.get("minReplicas", 1):
            raise Refusal(f"maxReplicas {args.max_replicas} is below the autoscaler's minReplicas "
                          f"{spec.get('minReplicas', 1)}")
        if spec.get("maxReplicas") == args.max_replicas:
            return Outcome(f"horizontalpodautoscaler.autoscaling/{args.name} already has maxReplicas "
                           f"{args.max_replicas}")
        return "merge", {"spec": {"maxReplicas": args.max_replicas}}

    return _patch(ctx, "horizontalpodautoscaler", args.name, "patched", build)
