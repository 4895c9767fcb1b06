"""Chaos Mesh experiments (`chaos-mesh.org/v1alpha1`) as effects on the pods they select.

The custom resources are the real ones, so fault injection code targets a cluster running Chaos Mesh unchanged.
Here an experiment acts for as long as it exists, is not paused and its `duration` has not run out; removing
the resource ends the fault. DNSChaos answers the selected pods' lookups of matching names as Chaos Mesh's DNS
server (CoreDNS with the k8s_dns_chaos plugin) does: SERVFAIL (`error`) or a random address (`random`); the name
looked up is the first one of the pod's search list, `<service>.<namespace>.svc.cluster.local`, which patterns
(`*`, `?` globs; none: every name) are matched against. IOChaos acts on the file operations under `volumePath`:
here those of a data store's data directory (the official images' VOLUME), a `percent` of them delayed or failed.
A `Schedule` acts only through the experiments it spawns at the ticks of its cron schedule
(`controllers/chaos.py`), as Chaos Mesh's schedule controllers do.
"""

from __future__ import annotations

import fnmatch
import hashlib
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from agent_sre.apps.images import lookup
from agent_sre.kube.chaosmesh import GROUP, PAUSE_ANNOTATION, PLURALS, ModeError, mode_count
from agent_sre.kube.selectors import matches
from agent_sre.kube.times import parse_duration
from agent_sre.simulator.cluster import Obj
from agent_sre.simulator.kubelet import TIME_EPSILON_S

CHAOS_RESOURCES = {kind: f"{plural}.{GROUP}" for kind, plural in PLURALS.items() if kind != "Schedule"}
SCHEDULE_RESOURCE = f"{PLURALS['Schedule']}.{GROUP}"


def _minutes(field: str) -> set[int] | None:
    """The values (minutes, hours) a cron field names: `*`, `*/N`, `N`, `a,b`, `a-b`."""
    out: set[int] = set()
    for part in field.split(","):
        step = 1
        if "/" in part:
            part, _, every = part.partition("/")
            if not every.isdigit() or int(every) == 0:
                return None
            step = int(every)
        if part == "*":
            lo, hi = 0, 59
        elif "-" in part:
            a, _, b = part.partition("-")
            if not (a.isdigit() and b.isdigit()):
                return None
            lo, hi = int(a), int(b)
        elif part.isdigit():
            lo = hi = int(part)
        else:
            return None
        out.update(range(lo, hi + 1, step))
    return out


def next_run(schedule: str, after: float) -> float | None:
    """The first tick of a Schedule's `schedule` strictly after `after` (epoch seconds), as Chaos Mesh's cron parser
    (robfig/cron) gives it: `@every D` ticks D after the last run (rounded down to the second), cron expressions
    at wall-clock minutes (`*/5 * * * *`, `M * * * *`, `M H * * *`, `@hourly`, `@daily`). None: not understood
    (day, month and weekday fields other than `*` included)."""
    schedule = schedule.strip()
    if schedule.startswith("@every "):
        every = parse_duration(schedule[len("@every "):])
        return math.floor(after) + every if every and every >= 1 else None
    schedule = {"@hourly": "0 * * * *", "@daily": "0 0 * * *", "@midnight": "0 0 * * *"}.get(schedule, schedule)
    fields = schedule.split()
    if len(fields) != 5 or any(f != "*" for f in fields[2:]):
        return None
    minutes, hours = _minutes(fields[0]), _minutes(fields[1])
    if not minutes or not hours:
        return None
    t = (math.floor(after) // 60 + 1) * 60
    for _ in range(2 * 24 * 60):
        if (t // 60) % 60 in minutes and (t // 3600) % 24 in hours:
            return float(t)
        t += 60
    return None


def inner_spec(schedule_spec: Obj) -> tuple[str, Obj | None]:
    """A Schedule's experiment kind (`type`) and its embedded spec (under the kind's lower-camel key)."""
    kind = str(schedule_spec.get("type", ""))
    inner = schedule_spec.get(kind[:1].lower() + kind[1:]) if kind else None
    return kind, inner if isinstance(inner, dict) else None


@dataclass
class PodEffects:
    """Everything active experiments do to one pod."""

    failure: bool = False
    cpu_millicores: float = 0.0
    memory_bytes: float = 0.0
    delay_ms: float = 0.0
    loss: float = 0.0  # fraction of packets dropped (1.0 = partitioned)
    abort: float = 0.0  # fraction of HTTP requests aborted or answered with an error
    http_delay_ms: float = 0.0
    dns: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (action, patterns) of each DNSChaos on the pod
    io_delay_ms: float = 0.0  # added to each file operation on the program's data
    io_error: float = 0.0  # fraction of those operations failing (EIO)
    experiments: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Experiment:
    """One experiment in effect: its kind, identity and the spec that says what it does."""

    kind: str
    namespace: str
    name: str
    uid: str
    spec: Obj


def _quantity_bytes(text: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|KiB|MiB|GiB)?", str(text).strip())
    if m is None:
        return 0.0
    unit = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}
    return float(m.group(1)) * unit[m.group(2) or "B"]


def _percent(text: object) -> float:
    try:
        return max(0.0, min(1.0, float(str(text).strip().rstrip("%")) / 100.0))
    except ValueError:
        return 0.0


def active_experiments(objects: Mapping[str, Iterable[Obj]], now: float,
                       created: Mapping[str, float]) -> list[Experiment]:
    """The experiments acting at `now` (a Schedule's act through the ones it spawned). `created` maps a resource
    uid to its creation time."""
    out: list[Experiment] = []
    for kind, resource in CHAOS_RESOURCES.items():
        for obj in objects.get(resource, ()):
            meta = obj["metadata"]
            if (meta.get("annotations") or {}).get(PAUSE_ANNOTATION) == "true":
                continue
            spec = obj.get("spec") or {}
            duration = parse_duration(spec.get("duration"))
            if duration is not None and now - created.get(meta["uid"], now) + TIME_EPSILON_S >= duration:
                continue
            out.append(Experiment(kind, meta.get("namespace", ""), meta["name"], meta["uid"], spec))
    return out


def select(exp: Experiment, pods: Iterable[Obj], selector: Obj | None = None, mode: str | None = None,
           value: object = None) -> list[Obj]:
    """The pods an experiment (or a NetworkChaos `target`) selects: Chaos Mesh's selector and mode."""
    spec = exp.spec
    selector = spec.get("selector") or {} if selector is None else selector
    mode = mode or spec.get("mode", "one")
    value = spec.get("value") if value is None else value
    namespaces = selector.get("namespaces") or [exp.namespace]
    label_sel = {"matchLabels": selector.get("labelSelectors") or {},
                 "matchExpressions": selector.get("expressionSelectors") or []}
    named = selector.get("pods") or {}
    phases = selector.get("podPhaseSelectors") or []
    chosen = []
    for pod in pods:
        meta = pod["metadata"]
        if meta.get("namespace") not in namespaces:
            continue
        if named and meta["name"] not in (named.get(meta["namespace"]) or []):
            continue
        if phases and (pod.get("status") or {}).get("phase") not in phases:
            continue
        if (label_sel["matchLabels"] or label_sel["matchExpressions"]) and not matches(
                label_sel, meta.get("labels")):
            continue
        chosen.append(pod)
    # Chaos Mesh picks at random; here the pick (and random-max-percent's percentage) is a stable hash of the
    # experiment and pod names.
    chosen.sort(key=lambda p: hashlib.blake2b(f"{exp.namespace}/{exp.name}/-1/{p['metadata']['name']}"
                                              .encode(), digest_size=8).digest())
    draw = int.from_bytes(hashlib.blake2b(f"{exp.namespace}/{exp.name}/percent".encode(), digest_size=8).digest(),
                          "big") / 2 ** 64
    try:
        return chosen[:mode_count(mode, value, len(chosen), draw)]
    except ModeError:
        return []  # Chaos Mesh fails the selection: nothing is injected


def apply(exp: Experiment, pods: list[Obj], effects: dict[tuple[str, str], PodEffects]) -> list[Obj]:
    """Add `exp`'s effects to the pods it selects; returns the selected pods (pod-kill: the pods to kill)."""
    selected = select(exp, pods)
    spec = exp.spec
    label = f"{exp.kind}/{exp.name}"

    def on(pod: Obj) -> PodEffects:
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        fx = effects.setdefault(key, PodEffects())
        fx.experiments.append(label)
        return fx

    if exp.kind == "PodChaos":
        if spec.get("action") == "pod-failure":
            for pod in selected:
                on(pod).failure = True
        return selected
    if exp.kind == "NetworkChaos":
        targets = selected
        if spec.get("direction") in ("from", "both") and spec.get("target"):
            target = spec["target"]
            targets = selected + select(exp, pods, target.get("selector") or {}, target.get("mode", "all"),
                                        target.get("value"))
        action = spec.get("action")
        for pod in targets:
            fx = on(pod)
            if action == "delay":
                delay = spec.get("delay") or {}
                fx.delay_ms += (parse_duration(delay.get("latency")) or 0.0) * 1000 + \
                    (parse_duration(delay.get("jitter")) or 0.0) * 1000
            elif action == "loss":
                fx.loss = 1 - (1 - fx.loss) * (1 - _percent((spec.get("loss") or {}).get("loss", "0")))
            elif action == "partition":
                fx.loss = 1.0
            elif action == "bandwidth":
                fx.delay_ms += 150.0
            elif action in ("corrupt", "duplicate"):
                fx.loss = 1 - (1 - fx.loss) * (1 - 0.5 * _percent((spec.get(action) or {}).get(action, "0")))
        return targets
    if exp.kind == "StressChaos":
        stressors = spec.get("stressors") or {}
        for pod in selected:
            fx = on(pod)
            cpu = stressors.get("cpu") or {}
            if cpu:
                fx.cpu_millicores += 10.0 * int(cpu.get("workers", 1)) * int(cpu.get("load", 100))
            memory = stressors.get("memory") or {}
            if memory:
                fx.memory_bytes += int(memory.get("workers", 1)) * _quantity_bytes(memory.get("size", "256MB"))
        return selected
    if exp.kind == "DNSChaos":
        entry = (str(spec.get("action", "error")), tuple(str(p) for p in spec.get("patterns") or ()))
        for pod in selected:
            fx = on(pod)
            fx.dns = (*fx.dns, entry)
        return selected
    if exp.kind == "IOChaos":
        acted = [pod for pod in selected if _on_data(pod, str(spec.get("volumePath", "")))]
        share = _percent(spec.get("percent", 100))
        for pod in acted:
            fx = on(pod)
            if spec.get("action") == "latency":
                fx.io_delay_ms += (parse_duration(spec.get("delay")) or 0.0) * 1000 * share
            elif spec.get("action") == "fault":
                fx.io_error = 1 - (1 - fx.io_error) * (1 - share)
        return acted
    if exp.kind == "HTTPChaos":
        share = 1.0 if spec.get("path") in (None, "", "*", "/*") else 0.5
        for pod in selected:
            fx = on(pod)
            if spec.get("abort") or (spec.get("replace") or {}).get("code", 200) >= 500:
                fx.abort = max(fx.abort, share)
            fx.http_delay_ms += (parse_duration(spec.get("delay")) or 0.0) * 1000 * share
        return selected
    return selected


def _on_data(pod: Obj, volume_path: str) -> bool:
    """Whether the program's data directory lies under `volume_path` (or holds it): the files IOChaos acts on."""
    return volume_path.startswith("/") and any(
        sw is not None and sw.keeps_files_under(volume_path)
        for sw, _ in (lookup(c.get("image", "")) for c in pod["spec"].get("containers") or []))


def resolves(dns: Iterable[tuple[str, tuple[str, ...]]], name: str, namespace: str) -> str:
    """What a pod under these DNSChaos answers gets for service `name`: "" (the real address), "error" (SERVFAIL)
    or "random" (a random address). The resolver asks for the search list's first name, the service's FQDN."""
    fqdn = f"{name}.{namespace}.svc.cluster.local"
    for action, patterns in dns:
        if not patterns or any(fnmatch.fnmatchcase(fqdn, p.rstrip(".")) for p in patterns):
            return action
    return ""
