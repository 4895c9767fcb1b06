"""The read tools: each fetches what `kubectl` would and renders it as `kubectl` prints it, within the budget; logs
and events without their repetition (`tools.compact`)."""

from __future__ import annotations

import base64
import binascii
import json
import time
from typing import Any

import yaml
from kubernetes.utils import parse_quantity

from agent_sre.apps.images import DOCKER_CONFIG_JSON
from agent_sre.kube.client import KINDS, Kube, KubeError, Obj
from agent_sre.kube.times import age
from agent_sre.models import tools as m
from agent_sre.tools import compact
from agent_sre.tools import describe as describers
from agent_sre.tools.context import ToolContext
from agent_sre.tools.render import NONE, clean, clip, fit, labels, selector, table
from agent_sre.tools.status import pod_ready, pod_restarts, pod_status, rollout_progress

REVISION = "deployment.kubernetes.io/revision"
CHANGE_CAUSE = "kubernetes.io/change-cause"
CHAOS_KINDS = ("PodChaos", "StressChaos", "NetworkChaos", "HTTPChaos", "DNSChaos", "IOChaos", "Schedule")
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _ns(ctx: ToolContext, namespace: str | None) -> str:
    return namespace or ctx.namespace


def list_pods(ctx: ToolContext, args: m.ListPods) -> str:
    ns = _ns(ctx, args.namespace)
    pods = sorted(ctx.kube.list("pod", ns, label_selector=args.selector, shared=True),  # only read
                  key=lambda p: p["metadata"]["name"])
    if not pods:
        return f"No resources found in {ns} namespace" + (f" matching {args.selector}." if args.selector else ".")
    now = ctx.now()
    rows = [[p["metadata"]["name"], pod_ready(p), pod_status(p), pod_restarts(p, now),
             age(p["metadata"].get("creationTimestamp"), now), (p.get("spec") or {}).get("nodeName") or NONE]
            for p in pods]
    return clip(table(["NAME", "READY", "STATUS", "RESTARTS", "AGE", "NODE"], rows), ctx.max_chars)


def _events_about(kube: Kube, namespace: str, name: str, kind: str | None = None) -> list[Obj]:
    events = kube.list("event", namespace, field_selector=f"involvedObject.name={name}")
    return [e for e in events if kind is None or (e.get("involvedObject") or {}).get("kind") == kind]


def _event_time(event: Obj) -> str:
    return event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp") or ""


def events_table(events: list[Obj], now: float, with_object: bool = True) -> str:
    """Events oldest first (the newest, most relevant, are last and survive tail clipping). The same event recorded
    twice is one row with both counts; routine Normal events are only counted, in a last line."""
    merged: dict[tuple[str, ...], tuple[str, int]] = {}  # (type, reason, object, message) -> (last seen, count)
    for e in sorted(events, key=_event_time):
        if compact.routine(e):
            continue
        obj = e.get("involvedObject") or {}
        key = (str(e.get("type", "")), str(e.get("reason", "")),
               f"{str(obj.get('kind', '')).lower()}/{obj.get('name', '')}",
               clean(compact.event_message(e.get("message", "")))[:300])
        _, seen = merged.pop(key, ("", 0))  # popped: a repeat moves to its newest place
        merged[key] = (_event_time(e), seen + int(e.get("count") or 1))
    rows = [[age(when, now), kind, reason, *([obj] if with_object else []),
             message + (f" (x{count})" if count > 1 else "")]
            for (kind, reason, obj, message), (when, count) in merged.items()]
    headers = ["LAST SEEN", "TYPE", "REASON", *(["OBJECT"] if with_object else []), "MESSAGE"]
    note = compact.routine_note(events)
    return "\n".join(part for part in (table(headers, rows) if rows else "", note) if part)


def describe(ctx: ToolContext, args: m.Describe) -> str:
    kube, kind = ctx.kube, args.kind
    ns = _ns(ctx, args.namespace)
    obj = kube.get(kind, args.name, ns)
    extra: dict[str, Any] = {}
    if kind == "service":
        try:
            extra["endpoints"] = kube.get("endpoints", args.name, ns)
        except KubeError as exc:
            if exc.status != 404:
                raise
    elif kind == "node":
        extra["pods"] = kube.list("pod", field_selector=f"spec.nodeName={args.name}", all_namespaces=True)
    elif kind == "namespace":
        extra["quotas"] = kube.list("resourcequota", args.name)
    elif kind == "persistentvolumeclaim":
        extra["pods"] = kube.list("pod", ns)
    body = describers.DESCRIBERS[kind](obj, ctx.now(), **extra)
    event_ns = ns if KINDS[kind].namespaced else "default"
    events = _events_about(kube, event_ns, args.name, obj.get("kind"))
    rendered = events_table(events, ctx.now(), with_object=False) if events else "<none>"
    tail = "Events:\n" + "\n".join(f"  {line}" for line in rendered.split("\n"))
    return fit(body, tail, ctx.max_chars)


def get_logs(ctx: ToolContext, args: m.GetLogs) -> str:
    text = ctx.kube.logs(args.pod, _ns(ctx, args.namespace), args.container, args.tail, args.previous)
    text = clean(text.rstrip("\n"))
    if not text:
        return f"(pod {args.pod} has written no log lines{' before its last restart' if args.previous else ''})"
    return clip(compact.compact_log(text), ctx.max_chars, keep="tail")


def get_events(ctx: ToolContext, args: m.GetEvents) -> str:
    ns = _ns(ctx, args.namespace)
    if args.object_name:
        events = _events_about(ctx.kube, ns, args.object_name)
    else:
        events = ctx.kube.list("event", ns)
    if not events:
        return f"No events found in {ns} namespace" + (f" about {args.object_name}." if args.object_name else ".")
    return clip(events_table(events, ctx.now()), ctx.max_chars, keep="tail")


def get_endpoints(ctx: ToolContext, args: m.ServiceRef) -> str:
    ep = ctx.kube.get("endpoints", args.service, _ns(ctx, args.namespace))
    ready, not_ready = describers.endpoint_addresses(ep)
    out = table(["NAME", "ENDPOINTS", "AGE"], [[args.service, ready, age(ep["metadata"].get("creationTimestamp"),
                                                                            ctx.now())]])
    if not_ready != NONE:
        out += f"\nnot ready: {not_ready}"
    return clip(out, ctx.max_chars)


def _cpu(value: Any) -> str:
    return f"{int(parse_quantity(value or 0) * 1000)}m"


def _memory(value: Any) -> str:
    return f"{int(parse_quantity(value or 0) / 2**20)}Mi"


def top(ctx: ToolContext, args: m.Top) -> str:
    ns = _ns(ctx, args.namespace)
    try:
        items = sorted(ctx.kube.metrics(args.kind, ns), key=lambda i: i["metadata"]["name"])
    except KubeError as exc:
        if exc.status == 404:
            return "error: Metrics API not available"
        raise
    if args.kind == "pods":
        if not items:
            return f"No resources found in {ns} namespace."
        rows = []
        for item in items:
            containers = item.get("containers") or []
            cpu = sum((parse_quantity(c["usage"].get("cpu", 0)) for c in containers), start=parse_quantity(0))
            mem = sum((parse_quantity(c["usage"].get("memory", 0)) for c in containers), start=parse_quantity(0))
            rows.append([item["metadata"]["name"], _cpu(cpu), _memory(mem)])
        return clip(table(["NAME", "CPU(cores)", "MEMORY(bytes)"], rows), ctx.max_chars)
    nodes = {n["metadata"]["name"]: (n.get("status") or {}).get("allocatable") or {} for n in ctx.kube.list("node")}
    rows = []
    for item in items:
        usage, alloc = item.get("usage") or {}, nodes.get(item["metadata"]["name"], {})
        cpu, mem = parse_quantity(usage.get("cpu", 0)), parse_quantity(usage.get("memory", 0))
        cpu_total, mem_total = parse_quantity(alloc.get("cpu", 0)), parse_quantity(alloc.get("memory", 0))
        rows.append([item["metadata"]["name"], _cpu(cpu), f"{int(cpu * 100 / cpu_total)}%" if cpu_total else "?",
                     _memory(mem), f"{int(mem * 100 / mem_total)}%" if mem_total else "?"])
    return clip(table(["NAME", "CPU(cores)", "CPU%", "MEMORY(bytes)", "MEMORY%"], rows), ctx.max_chars)


def revisions(kube: Kube, deployment: Obj) -> list[tuple[int, Obj]]:
    """The deployment's ReplicaSets by revision, oldest first, as `kubectl rollout history` finds them."""
    meta = deployment["metadata"]
    match = (deployment.get("spec") or {}).get("selector", {}).get("matchLabels") or {}
    selector = ",".join(f"{k}={v}" for k, v in sorted(match.items())) or None
    out = []
    for rs in kube.list("replicaset", meta.get("namespace"), label_selector=selector):
        owners = rs["metadata"].get("ownerReferences") or []
        if owners and not any(o.get("uid") == meta.get("uid") for o in owners):
            continue
        revision = (rs["metadata"].get("annotations") or {}).get(REVISION)
        if revision and revision.isdigit():
            out.append((int(revision), rs))
    return sorted(out, key=lambda pair: pair[0])


def _image_change(before: str, after: str) -> str:
    """`repo:1.0 -> repo:1.1` said briefly as `:1.0 -> :1.1` when only the tag changed."""
    repo_before, _, tag_before = before.rpartition(":")
    repo_after, _, tag_after = after.rpartition(":")
    if repo_before and repo_before == repo_after:
        return f":{tag_before} -> :{tag_after}"
    return f"{before} -> {after}"


def _diff_containers(old: list[Obj], new: list[Obj]) -> list[str]:
    changes = []
    before = {c.get("name"): c for c in old}
    for container in new:
        name = container.get("name")
        prior = before.pop(name, None)
        if prior is None:
            changes.append(f"+container {name}")
            continue
        for field in sorted(set(container) | set(prior)):
            if field == "name" or container.get(field) == prior.get(field):
                continue
            if field == "image":
                changes.append(f"{name} image {_image_change(str(prior.get('image')), str(container.get('image')))}")
            elif field == "env":
                was = {e.get("name"): e for e in prior.get("env") or []}
                now = {e.get("name"): e for e in container.get("env") or []}
                changed = sorted(k for k in set(was) | set(now) if was.get(k) != now.get(k))
                changes.append(f"{name} env {','.join(changed)}")
            elif field == "resources":
                changes.append(f"{name} resources {json.dumps(container.get('resources'), separators=(',', ':'))}")
            else:
                changes.append(f"{name} {field}")
    changes.extend(f"-container {name}" for name in before)
    return changes


def template_changes(old: Obj, new: Obj) -> str:
    """What a revision changed in the pod template, in a few words (image, env names, resources, fields)."""
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    changes = []
    for key in ("initContainers", "containers"):
        changes += _diff_containers(old_spec.get(key) or [], new_spec.get(key) or [])
    changes += [_volume_changes(old_spec.get(key) or [], new_spec.get(key) or []) if key == "volumes" else
                f"pod {key} {_names(old_spec.get(key))} -> {_names(new_spec.get(key))}" if key == "imagePullSecrets"
                else f"pod {key}" for key in sorted(set(old_spec) | set(new_spec))
                if key not in ("initContainers", "containers") and old_spec.get(key) != new_spec.get(key)]
    return "; ".join(changes) or "no template change"


def _names(refs: list[Obj] | None) -> str:
    """References by name (image pull secrets) as one word: `a,b`, or `<none>`."""
    return ",".join(str(r.get("name")) for r in refs or []) or NONE


def _volume_changes(old: list[Obj], new: list[Obj]) -> str:
    """`pod volume data claim postgres-data -> postgres-dta` for a claim renamed (the evidence of a missing claim),
    `pod volumes` for any other change."""
    before = {v.get("name"): v for v in old}
    renamed, other = [], False
    for volume in new:
        prior = before.pop(volume.get("name"), None)
        if prior == volume:
            continue
        was = ((prior or {}).get("persistentVolumeClaim") or {}).get("claimName")
        claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
        if prior is not None and was and claim and \
                {**prior["persistentVolumeClaim"], "claimName": claim} == volume["persistentVolumeClaim"]:
            renamed.append(f"pod volume {volume.get('name')} claim {was} -> {claim}")
        else:
            other = True
    return "; ".join([*renamed, *(["pod volumes"] if other or before else [])])


def revision_template(rs: Obj) -> Obj:
    """A ReplicaSet's pod template without the hash label the controller adds (edits the decoded `rs` in place)."""
    template = (rs.get("spec") or {}).get("template") or {}
    ((template.get("metadata") or {}).get("labels") or {}).pop("pod-template-hash", None)
    return template


def rollout_history(ctx: ToolContext, args: m.DeploymentRef) -> str:
    dep = ctx.kube.get("deployment", args.deployment)
    history = revisions(ctx.kube, dep)
    if not history:
        return f"deployment.apps/{args.deployment}: no rollout history found"
    current = (dep["metadata"].get("annotations") or {}).get(REVISION)
    rows, previous = [], None
    for revision, rs in history:
        template = revision_template(rs)
        images = ",".join(c.get("image", "") for c in (template.get("spec") or {}).get("containers") or [])
        change = "initial" if previous is None else template_changes(previous, template)
        cause = (rs["metadata"].get("annotations") or {}).get(CHANGE_CAUSE) or NONE
        mark = " (current)" if str(revision) == current else ""
        rows.append([f"{revision}{mark}", images, change[:300], cause])
        previous = template
    return clip(f"deployment.apps/{args.deployment}\n" + table(["REVISION", "IMAGES", "CHANGES", "CHANGE-CAUSE"],
                                                                rows), ctx.max_chars)


def rollout_status(ctx: ToolContext, args: m.RolloutStatus) -> str:
    """Re-read the deployment until it has rolled out, is past its progress deadline, or `timeout_s` has passed
    on the cluster's clock (the simulator's may run faster than the wall clock) or on the wall clock (a stopped
    simulated clock whose context does not advance it); each new state is one line."""
    lines: list[str] = []
    deadline: float | None = None
    wall_deadline = time.monotonic() + args.timeout_s
    reads = 0
    while True:
        message, finished = rollout_progress(ctx.kube.get("deployment", args.deployment))
        reads += 1
        now = ctx.now()
        deadline = now + args.timeout_s if deadline is None else deadline
        if not lines or lines[-1] != message:
            lines.append(message)
        if finished:
            break
        if now >= deadline or time.monotonic() >= wall_deadline:
            lines.append("error: timed out waiting for the condition")
            break
        ctx.pause(reads)
    return clip("\n".join(lines), ctx.max_chars, keep="tail")  # the verdict is the last line


def _chaos_target(spec: Obj) -> str:
    selector = spec.get("selector") or {}
    target = labels(selector.get("labelSelectors"))
    if selector.get("pods"):
        target = ",".join(n for names in selector["pods"].values() for n in names)
    return f"{target} (mode {spec.get('mode', 'one')})"


def _chaos_action(kind: str, spec: Obj) -> str:
    if kind == "StressChaos":
        stressors = spec.get("stressors") or {}
        return "stress " + ",".join(f"{k}{json.dumps(v, separators=(',', ':'))}" for k, v in stressors.items())
    if kind == "NetworkChaos" and spec.get("action") == "delay":
        return f"delay {(spec.get('delay') or {}).get('latency', '?')}"
    if kind == "HTTPChaos":
        effects = [k for k in ("abort", "delay", "replace", "patch") if spec.get(k) not in (None, False)]
        return f"http {spec.get('target', 'Request')} {','.join(effects)}"
    if kind == "DNSChaos":  # no patterns: every name the pods look up
        return f"dns {spec.get('action', '?')} {','.join(spec.get('patterns') or ['*'])}"
    if kind == "IOChaos":
        what = f"errno {spec.get('errno', '?')}" if spec.get("action") == "fault" else spec.get("delay", "?")
        return f"io {spec.get('action', '?')} {what} {spec.get('percent', 100)}% on {spec.get('volumePath', '?')}"
    return str(spec.get("action", "?"))


def _spawned_by(item: Obj) -> str:
    """`schedule/<name>` for an experiment a Schedule spawned (deleting it alone, the next tick spawns another)."""
    owner = next((r for r in item["metadata"].get("ownerReferences") or [] if r.get("kind") == "Schedule"), None)
    return f"schedule/{owner.get('name')}" if owner else NONE


def list_chaos_experiments(ctx: ToolContext, args: m.ListChaos) -> str:
    """Schedules first (what spawns experiments), then the experiments; an OWNER column when a Schedule spawned
    any of them."""
    ns = _ns(ctx, args.namespace)
    rows, owners, missing, now = [], [], 0, None
    for kind in ("Schedule", *(k for k in CHAOS_KINDS if k != "Schedule")):
        try:
            items = ctx.kube.list(kind, ns)
        except KubeError as exc:
            if exc.status != 404:
                raise
            missing += 1
            continue
        now = ctx.now()
        for item in items:
            spec = item.get("spec") or {}
            if kind == "Schedule":
                inner_kind = str(spec.get("type", "?"))
                inner = spec.get(inner_kind[:1].lower() + inner_kind[1:]) or {}
                action = f"{inner_kind} {_chaos_action(inner_kind, inner)} @ {spec.get('schedule', '?')}"
                target = _chaos_target(inner)
            else:
                action, target = _chaos_action(kind, spec), _chaos_target(spec)
            rows.append([kind, item["metadata"]["name"], action, target, spec.get("duration") or NONE,
                         age(item["metadata"].get("creationTimestamp"), now)])
            owners.append(_spawned_by(item))
    if missing == len(CHAOS_KINDS):
        return "Chaos Mesh is not installed in this cluster (no chaos-mesh.org/v1alpha1 API)."
    if not rows:
        return f"No chaos experiments in {ns} namespace."
    headers = ["KIND", "NAME", "ACTION", "TARGET", "DURATION", "AGE"]
    if any(owner != NONE for owner in owners):
        headers, rows = [*headers, "OWNER"], [[*row, owner] for row, owner in zip(rows, owners, strict=True)]
    return clip(table(headers, rows), ctx.max_chars)


def _peer_summary(peer: Obj) -> str:
    """One `from` peer in a word or two: `app=checkout`, `ns:kubernetes.io/metadata.name=monitoring`, a CIDR."""
    if "ipBlock" in peer:
        return f"cidr:{peer['ipBlock'].get('cidr')}"
    parts = []
    if "namespaceSelector" in peer:
        parts.append("ns:" + selector(peer.get("namespaceSelector")))
    if "podSelector" in peer:
        parts.append(selector(peer.get("podSelector")))
    return "+".join(parts) or "<any>"


def _ingress_summary(spec: Obj) -> str:
    """Whom a policy lets in, as `kubectl describe networkpolicy` says it at length: `<none>` isolates the pods."""
    if "Ingress" not in (spec.get("policyTypes") or ["Ingress"]):
        return "<not restricted>"
    rules = spec.get("ingress") or []
    if not rules:
        return "<none>"
    allowed = []
    for rule in rules:
        peers = [_peer_summary(p) for p in rule.get("from") or []] or ["<any>"]
        ports = ",".join(str(p.get("port", "<any>")) for p in rule.get("ports") or [])
        allowed.append(" ".join(peers) + (f" on {ports}" if ports else ""))
    return "; ".join(allowed)


def list_network_policies(ctx: ToolContext, args: m.ListNetworkPolicies) -> str:
    """`kubectl get networkpolicies` with the ingress peers `describe` would show: the evidence that a caller is
    not let in, without one describe per policy."""
    ns = _ns(ctx, args.namespace)
    policies = sorted(ctx.kube.list("networkpolicy", ns), key=lambda p: p["metadata"]["name"])
    if not policies:
        return f"No resources found in {ns} namespace."
    now = ctx.now()
    rows = [[p["metadata"]["name"], selector((p.get("spec") or {}).get("podSelector")),
             _ingress_summary(p.get("spec") or {}), age(p["metadata"].get("creationTimestamp"), now)]
            for p in policies]
    return clip(table(["NAME", "POD-SELECTOR", "ALLOWS-FROM", "AGE"], rows), ctx.max_chars)


def _node_status(node: Obj) -> str:
    """`Ready`, `NotReady`, plus `SchedulingDisabled` when cordoned and any pressure condition that is true."""
    conditions = {c.get("type"): c.get("status") for c in (node.get("status") or {}).get("conditions") or []}
    words = ["Ready" if conditions.get("Ready") == "True" else "NotReady"]
    words += [kind for kind, status in sorted(conditions.items()) if kind != "Ready" and status == "True"]
    if (node.get("spec") or {}).get("unschedulable"):
        words.append("SchedulingDisabled")
    return ",".join(words)


def list_nodes(ctx: ToolContext, args: m.NoArgs) -> str:
    """`kubectl get nodes` with the labels that placement rules use (`-L`): the well-known `kubernetes.io` ones
    are left out, since every node has them."""
    nodes = sorted(ctx.kube.list("node"), key=lambda n: n["metadata"]["name"])
    if not nodes:
        return "No resources found"
    now = ctx.now()
    rows = []
    for n in nodes:
        meta = n["metadata"]
        own = {k: v for k, v in (meta.get("labels") or {}).items() if "kubernetes.io" not in k}
        rows.append([meta["name"], _node_status(n), age(meta.get("creationTimestamp"), now), labels(own)])
    return clip(table(["NAME", "STATUS", "AGE", "LABELS"], rows), ctx.max_chars)


def _decoded(data: dict[str, str]) -> dict[str, str]:
    out = {}
    for key, value in data.items():
        try:
            raw = base64.b64decode(value or "", validate=True)
            out[key] = raw.decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            out[key] = f"<binary, {len(value or '')} base64 characters>"
    return out


def _registries(value: str) -> str:
    """A `.dockerconfigjson` without its credentials: which registries it holds them for, never the tokens."""
    try:
        auths = json.loads(base64.b64decode(value or "", validate=True)).get("auths") or {}
    except (binascii.Error, ValueError, AttributeError):
        return "<redacted: not a docker config>"
    return f"<redacted: credentials for {', '.join(sorted(auths)) or 'no registry'}>"


def get_resource(ctx: ToolContext, args: m.GetResource) -> str:
    obj = ctx.kube.get(args.kind, args.name, _ns(ctx, args.namespace))
    obj.get("metadata", {}).pop("managedFields", None)
    obj = {key: obj[key] for key in ("apiVersion", "kind", "metadata") if key in obj} | obj  # kubectl's order
    note = ""
    if args.kind == "secret" and obj.get("type") == DOCKER_CONFIG_JSON:
        obj["data"] = {key: _registries(value) for key, value in (obj.get("data") or {}).items()}
        note = "# registry credentials redacted: the registries they are for are shown\n"
    elif args.kind == "secret" and obj.get("data"):
        obj["data"] = _decoded(obj["data"])
        note = "# secret data shown base64-decoded\n"
    return clip(note + clean(yaml.dump(obj, Dumper=_Dumper, sort_keys=False, width=120)), ctx.max_chars)


def finish(ctx: ToolContext, args: m.Finish) -> str:
    return f"investigation finished: {args.diagnosis}"


def escalate(ctx: ToolContext, args: m.Escalate) -> str:
    return f"escalated to the on-call: {args.diagnosis}"
