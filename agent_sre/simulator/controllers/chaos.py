"""The Chaos Mesh controller: experiments and schedules act on the pods they select for as long as they last
(`simulator/chaos.py` says what each does), pod-kill deletes at each tick, and each records its status."""

from __future__ import annotations

from typing import Any

from agent_sre.kube.times import parse_duration
from agent_sre.simulator import chaos, kubelet
from agent_sre.simulator.cluster import Obj
from agent_sre.simulator.controllers.context import Pass


def reconcile(p: Pass) -> None:
    objects = {r: p.c.list(r) for r in (*chaos.CHAOS_RESOURCES.values(), chaos.SCHEDULE_RESOURCE)}
    for items in objects.values():
        for obj in items:
            uid = obj["metadata"]["uid"]
            if uid not in p.st.created:
                p.st.created[uid] = p.now
            _timing(p, obj)
    experiments = chaos.active_experiments(objects, p.now, p.st.created)
    if not experiments:
        return
    pods = p.pods()
    for exp in experiments:
        selected = chaos.apply(exp, pods, p.effects)
        if exp.kind == "PodChaos" and exp.spec.get("action") == "pod-kill":
            if p.st.chaos_ticks.get(exp.uid, -2) < exp.tick:
                p.st.chaos_ticks[exp.uid] = exp.tick
                for pod in selected:
                    _kill(p, pod)
                pods = p.pods()
        _status(p, exp, selected)


def _timing(p: Pass, obj: Obj) -> None:
    """Wake up when an experiment's duration runs out or its schedule ticks."""
    created = p.st.created[obj["metadata"]["uid"]]
    spec = obj.get("spec") or {}
    if obj.get("kind") == "Schedule":
        interval = chaos.parse_interval(str(spec.get("schedule", "")))
        if interval:
            kind = spec.get("type", "")
            inner = spec.get(kind[:1].lower() + kind[1:]) or {}
            tick = int((p.now - created + kubelet.TIME_EPSILON_S) // interval)
            p.later(created + (tick + 1) * interval)
            duration = parse_duration(inner.get("duration"))
            if duration is not None:
                p.later(created + tick * interval + duration)
        return
    duration = parse_duration(spec.get("duration"))
    if duration is not None:
        p.later(created + duration)


def _status(p: Pass, exp: chaos.Experiment, selected: list[Obj]) -> None:
    resource = chaos.SCHEDULE_RESOURCE if exp.tick >= 0 else chaos.CHAOS_RESOURCES[exp.kind]
    obj = p.c.get(resource, exp.namespace, exp.name)
    if obj is None:
        return
    records = [{"id": f"{pod['metadata']['namespace']}/{pod['metadata']['name']}", "selectorKey": ".",
                "phase": "Injected"} for pod in selected]
    status: dict[str, Any]
    if exp.tick >= 0:
        status = {"time": kubelet.stamp(p.st.created[exp.uid]), "active": [{"kind": exp.kind, "name": exp.name}]}
    else:
        stamp = kubelet.stamp(p.st.created[exp.uid])
        status = {"conditions": [
            {"type": "Selected", "status": "True" if selected else "False"},
            {"type": "AllInjected", "status": "True" if selected else "False"},
            {"type": "AllRecovered", "status": "False"}, {"type": "Paused", "status": "False"}],
            "experiment": {"desiredPhase": "Run", "containerRecords": records,
                           "records": [{"time": stamp, "operation": "Apply", "type": "Succeeded"}]}}
    if obj.get("status") != status:
        p.write(resource, {**obj, "status": status})


def _kill(p: Pass, pod: Obj) -> None:
    """Chaos Mesh deletes the pod (grace period 0); its ReplicaSet replaces it."""
    p.event(pod, "Killing", f"Stopping container {pod['spec']['containers'][0]['name']}", component="kubelet")
    p.delete_pod(pod)
