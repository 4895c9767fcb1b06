"""Chaos Mesh experiments (`chaos-mesh.org/v1alpha1`) as effects on the pods they select.

The custom resources are the real ones, so fault injection code targets a cluster running Chaos Mesh unchanged.
Here an experiment acts for as long as it exists, is not paused and its `duration` has not run out; removing
the resource ends the fault. A `Schedule` runs its embedded experiment at every tick of its cron schedule (the
experiment then lasts `duration` from each tick, or kills one pod per tick for pod-kill).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from agent_sre.kube.chaosmesh import GROUP, PAUSE_ANNOTATION, PLURALS
from agent_sre.kube.selectors import matches
from agent_sre.kube.times import parse_duration
from agent_sre.simulator.cluster import Obj
from agent_sre.simulator.kubelet import TIME_EPSILON_S

CHAOS_RESOURCES = {kind: f"{plural}.{GROUP}" for kind, plural in PLURALS.items() if kind != "Schedule"}
SCHEDULE_RESOURCE = f"{PLURALS['Schedule']}.{GROUP}"


def parse_interval(schedule: str) -> float | None:
    """Seconds between ticks of a Schedule: `@every 2m`, `*/5 * * * *`, `* * * * *`, `M * * * *` (hourly)."""
    schedule = schedule.strip()
    if schedule.startswith("@every "):
        return parse_duration(schedule[len("@every "):])
    fields = schedule.split()
    if len(fields) != 5 or any(f != "*" for f in fields[1:]):
        return {"@hourly": 3600.0, "@daily": 86400.0}.get(schedule)
    minute = fields[0]
    if minute == "*":
        return 60.0
    if minute.startswith("*/") and minute[2:].isdigit() and int(minute[2:]) > 0:
        return 60.0 * int(minute[2:])
    return 3600.0 if minute.isdigit() else None


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
    experiments: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Experiment:
    """One experiment in effect: its kind, identity and the spec that says what it does."""

    kind: str
    namespace: str
    name: str
    uid: str
    spec: Obj
    tick: int = -1  # for pod-kill under a Schedule: the current tick


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
    """The experiments acting at `now`. `created` maps a resource uid to its creation time."""
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
    for obj in objects.get(SCHEDULE_RESOURCE, ()):
        meta, spec = obj["metadata"], obj.get("spec") or {}
        if (meta.get("annotations") or {}).get(PAUSE_ANNOTATION) == "true":
            continue
        kind = spec.get("type", "")
        inner = spec.get(kind[:1].lower() + kind[1:]) if kind else None
        interval = parse_interval(str(spec.get("schedule", "")))
        if kind not in CHAOS_RESOURCES or not isinstance(inner, dict) or not interval:
            continue
        elapsed = now - created.get(meta["uid"], now) + TIME_EPSILON_S  # a pass at a tick sees the tick
        tick = int(elapsed // interval)
        duration = parse_duration(inner.get("duration"))
        if inner.get("action") != "pod-kill" and duration is not None and elapsed - tick * interval >= duration:
            continue
        out.append(Experiment(kind, meta.get("namespace", ""), meta["name"], meta["uid"], inner, tick))
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
    # Chaos Mesh picks at random; here the pick is a stable hash of the experiment and pod names.
    chosen.sort(key=lambda p: hashlib.blake2b(f"{exp.namespace}/{exp.name}/{exp.tick}/{p['metadata']['name']}"
                                              .encode(), digest_size=8).digest())
    n = len(chosen)
    if mode == "all" or n == 0:
        return chosen
    if mode == "one":
        return chosen[:1]
    try:
        number = float(str(value))
    except ValueError:
        return chosen[:1]
    if mode == "fixed":
        return chosen[:max(0, int(number))]
    if mode in ("fixed-percent", "random-max-percent"):
        return chosen[:max(1, math.floor(n * number / 100.0))]
    return chosen[:1]


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
    if exp.kind == "HTTPChaos":
        share = 1.0 if spec.get("path") in (None, "", "*", "/*") else 0.5
        for pod in selected:
            fx = on(pod)
            if spec.get("abort") or (spec.get("replace") or {}).get("code", 200) >= 500:
                fx.abort = max(fx.abort, share)
            fx.http_delay_ms += (parse_duration(spec.get("delay")) or 0.0) * 1000 * share
        return selected
    return selected
