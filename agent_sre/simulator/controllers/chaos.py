"""The Chaos Mesh controllers: experiments act on the pods they select for as long as they last (`simulator/chaos.py`
says what each does), pod-kill deletes once, and each records its status; Schedules spawn experiments.

A Schedule never acts itself. As Chaos Mesh's schedule controllers do (chaos-mesh/chaos-mesh,
controllers/schedule/cron/controller.go, cron/utils.go, gc/controller.go, pause/controller.go, active/controller.go
and utils/list.go), at each tick of its cron schedule it creates a child experiment of its `type`, named
`<schedule>-<5 random characters>` (the apiserver's SimpleNameGenerator; here the characters follow from the name
and the tick, so a history gives the same names), labelled `managed-by: <schedule>`, owned by the Schedule
(controller and blockOwnerDeletion set), with the embedded spec; then it sets `status.time` (lastScheduleTime). A
tick is the latest one missed since `status.time` (else the creation), within `startingDeadlineSeconds` when set;
with `concurrencyPolicy` Forbid (the default) no child is spawned while one is not finished (a one-shot pod-kill
once it has injected; others once their duration has run out), and the missed tick stays due: it is spawned as
soon as the running child ends or is deleted. Children beyond `historyLimit` are deleted, oldest first, unless their
duration is still running. A paused Schedule spawns nothing and its children carry its pause annotation.
`status.active` lists references to every child. Deleting the Schedule deletes its children (the garbage collector
follows their owner references), which ends the fault; deleting only a child does not stop the next one.
"""

from __future__ import annotations

from typing import Any

from agent_sre.kube.chaosmesh import GROUP, PAUSE_ANNOTATION, VERSION
from agent_sre.kube.times import parse_duration
from agent_sre.simulator import chaos, kubelet
from agent_sre.simulator.cluster import Obj, clone
from agent_sre.simulator.controllers.context import Pass
from agent_sre.simulator.controllers.state import stable_suffix

MANAGED_BY = "managed-by"  # v1alpha1.LabelManagedBy: the label naming a child's Schedule
MAX_MISSED_RUNS = 100  # cron/utils.go: more missed ticks than this and the Schedule reports an error instead
ONE_SHOT = ("pod-kill", "container-kill")  # IsOneShot: done once injected; their duration does not apply


def reconcile(p: Pass) -> None:
    schedules = p.c.list(chaos.SCHEDULE_RESOURCE)
    for resource in (*chaos.CHAOS_RESOURCES.values(), chaos.SCHEDULE_RESOURCE):
        for obj in p.c.list(resource):
            p.st.created.setdefault(obj["metadata"]["uid"], p.now)
    _collect_garbage(p, {s["metadata"]["uid"] for s in schedules})
    for schedule in schedules:
        _spawn(p, schedule)
    objects = {r: p.c.list(r) for r in chaos.CHAOS_RESOURCES.values()}
    for items in objects.values():
        for obj in items:
            _timing(p, obj)
    experiments = chaos.active_experiments(objects, p.now, p.st.created)
    acting = {exp.uid for exp in experiments}
    pods = p.pods() if experiments else []
    for exp in experiments:
        selected = chaos.apply(exp, pods, p.effects)
        if exp.kind == "PodChaos" and exp.spec.get("action") == "pod-kill" and exp.uid not in p.st.chaos_ticks:
            p.st.chaos_ticks[exp.uid] = 0
            for pod in selected:
                _kill(p, pod)
            pods = p.pods()
        _status(p, exp, selected)
    for resource, items in objects.items():
        for obj in items:
            if obj["metadata"]["uid"] not in acting and _expired(p, obj):
                _stopped(p, resource, obj)
    for schedule in schedules:
        _history(p, schedule)
        _active(p, schedule)


def _timing(p: Pass, obj: Obj) -> None:
    """Wake up when an experiment's duration runs out."""
    duration = parse_duration((obj.get("spec") or {}).get("duration"))
    if duration is not None:
        p.later(p.st.created[obj["metadata"]["uid"]] + duration)


def _expired(p: Pass, obj: Obj) -> bool:
    """DurationExceeded: the experiment has a duration and it has run out."""
    duration = parse_duration((obj.get("spec") or {}).get("duration"))
    return duration is not None and p.now + kubelet.TIME_EPSILON_S >= p.st.created[obj["metadata"]["uid"]] + duration


def _paused(obj: Obj) -> bool:
    return (obj["metadata"].get("annotations") or {}).get(PAUSE_ANNOTATION) == "true"


def _finished(p: Pass, obj: Obj) -> bool:
    """IsChaosFinished (controllers/utils/controller/finished.go): a one-shot experiment once every record is
    injected; any other once it is stopped and its duration has run out (never, without one)."""
    spec, status = obj.get("spec") or {}, (obj.get("status") or {}).get("experiment") or {}
    records = status.get("containerRecords") or []
    if spec.get("action") in ONE_SHOT:
        return bool(records) and all(r.get("phase") == "Injected" for r in records)
    return _expired(p, obj)


def _children(p: Pass, schedule: Obj) -> tuple[str, list[Obj]]:
    """ActiveLister.ListActiveJobs: the experiments of the Schedule's type labelled with its name (in any
    namespace, as upstream lists them), oldest first."""
    kind, _ = chaos.inner_spec(schedule.get("spec") or {})
    resource = chaos.CHAOS_RESOURCES.get(kind)
    if resource is None:
        return "", []
    name = schedule["metadata"]["name"]
    children = [o for o in p.c.list(resource) if (o["metadata"].get("labels") or {}).get(MANAGED_BY) == name]
    return resource, sorted(children, key=lambda o: (p.st.created.get(o["metadata"]["uid"], p.now),
                                                     o["metadata"]["name"]))


def _collect_garbage(p: Pass, schedules: set[str]) -> None:
    """The garbage collector: a child whose owning Schedule is gone goes with it."""
    for resource in chaos.CHAOS_RESOURCES.values():
        for obj in p.c.list(resource):
            owners = [r.get("uid") for r in obj["metadata"].get("ownerReferences") or [] if r.get("kind") == "Schedule"]
            if owners and not any(uid in schedules for uid in owners):
                p.remove(resource, obj)


def _spawn(p: Pass, schedule: Obj) -> None:
    """The pause and cron controllers: children follow the Schedule's pause; a due tick spawns a child."""
    meta, spec = schedule["metadata"], schedule.get("spec") or {}
    uid, paused = meta["uid"], _paused(schedule)
    resource, children = _children(p, schedule)
    kind, inner = chaos.inner_spec(spec)
    if not resource or inner is None:
        return
    for child in children:
        if _paused(child) != paused:
            annotations = {**(child["metadata"].get("annotations") or {}), PAUSE_ANNOTATION: str(paused).lower()}
            p.write(resource, {**child, "metadata": {**child["metadata"], "annotations": annotations}})
    if paused:
        return
    last = p.st.last_scheduled.get(uid, p.st.created[uid])
    deadline = spec.get("startingDeadlineSeconds")
    earliest = max(last, p.now - deadline) if isinstance(deadline, int) else last
    missed, runs = None, 0
    tick = chaos.next_run(str(spec.get("schedule", "")), earliest)
    while tick is not None and tick <= p.now + kubelet.TIME_EPSILON_S:
        missed, runs = tick, runs + 1
        if runs > MAX_MISSED_RUNS:
            _once(p, schedule, -1.0, "Failed", "Failed to get run time: too many missed start time (> 100). Set or "
                                               "decrease .spec.startingDeadlineSeconds or check clock skew")
            return
        tick = chaos.next_run(str(spec.get("schedule", "")), tick)
    if tick is None:
        _once(p, schedule, -1.0, "Failed", f"Failed to get run time: unparseable schedule: {spec.get('schedule')}")
        return
    p.later(tick)
    if missed is None:
        return
    if spec.get("concurrencyPolicy", "Forbid") in ("Forbid", ""):
        running = next((c for c in children if not _finished(p, c)), None)
        if running is not None:
            _once(p, schedule, missed, "Forbid", f"Forbid spawning new job because: {running['metadata']['name']} "
                                                 f"is still running")
            return
    n = p.st.spawned.get(uid, 0)
    p.st.spawned[uid] = n + 1
    name = f"{meta['name'][:58]}-{stable_suffix(meta.get('namespace'), meta['name'], meta.get('creationTimestamp'), n)}"
    child = p.store(resource, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": kind,
        "metadata": {"name": name, "namespace": meta.get("namespace"), "labels": {MANAGED_BY: meta["name"]},
                     "ownerReferences": [{"apiVersion": schedule.get("apiVersion", f"{GROUP}/{VERSION}"),
                                          "kind": "Schedule", "name": meta["name"], "uid": uid,
                                          "controller": True, "blockOwnerDeletion": True}]},
        "spec": clone(inner)})
    p.st.created[child["metadata"]["uid"]] = p.now
    p.st.last_scheduled[uid] = p.now
    p.event(schedule, "Spawned", f"Create new object: {name}")


def _once(p: Pass, schedule: Obj, tick: float, reason: str, message: str) -> None:
    """A warning about the Schedule, once per missed tick (-1: once): the controller reconciles when the Schedule
    or a child changes, not at every look, so the count must not follow how often passes run."""
    uid = schedule["metadata"]["uid"]
    if p.st.schedule_warned.get(uid) != tick:
        p.st.schedule_warned[uid] = tick
        p.event(schedule, reason, message, "Warning")


def _history(p: Pass, schedule: Obj) -> None:
    """The gc controller: children beyond `historyLimit`, oldest first, are deleted unless still running."""
    resource, children = _children(p, schedule)
    limit = (schedule.get("spec") or {}).get("historyLimit") or 0
    for child in children[:max(0, len(children) - int(limit))]:
        spec = child.get("spec") or {}
        if spec.get("action") not in ONE_SHOT and parse_duration(spec.get("duration")) is not None \
                and not _expired(p, child):
            continue
        p.remove(resource, child)


def _active(p: Pass, schedule: Obj) -> None:
    """The active controller: `status.active` names every child (sorted by name); `status.time` is the last
    spawn."""
    _, children = _children(p, schedule)
    uid = schedule["metadata"]["uid"]
    status: dict[str, Any] = {}
    refs = sorted(({"apiVersion": c.get("apiVersion", f"{GROUP}/{VERSION}"), "kind": c.get("kind"),
                    "namespace": c["metadata"].get("namespace"), "name": c["metadata"]["name"],
                    "uid": c["metadata"]["uid"], "resourceVersion": c["metadata"].get("resourceVersion")}
                   for c in children), key=lambda r: str(r["name"]))
    if refs:
        status["active"] = refs
    if uid in p.st.last_scheduled:
        status["time"] = kubelet.stamp(p.st.last_scheduled[uid])
    current = p.c.get(chaos.SCHEDULE_RESOURCE, schedule["metadata"].get("namespace", ""), schedule["metadata"]["name"])
    if current is not None and (current.get("status") or {}) != status:
        p.write(chaos.SCHEDULE_RESOURCE, {**current, "status": status})


def _status(p: Pass, exp: chaos.Experiment, selected: list[Obj]) -> None:
    resource = chaos.CHAOS_RESOURCES[exp.kind]
    obj = p.c.get(resource, exp.namespace, exp.name)
    if obj is None:
        return
    records = [{"id": f"{pod['metadata']['namespace']}/{pod['metadata']['name']}", "selectorKey": ".",
                "phase": "Injected", "injectedCount": 1, "recoveredCount": 0} for pod in selected]
    stamp = kubelet.stamp(p.st.created[exp.uid])
    status = {"conditions": [
        {"type": "Selected", "status": "True" if selected else "False"},
        {"type": "AllInjected", "status": "True" if selected else "False"},
        {"type": "AllRecovered", "status": "False"}, {"type": "Paused", "status": "False"}],
        "experiment": {"desiredPhase": "Run", "containerRecords": records,
                       "records": [{"time": stamp, "operation": "Apply", "type": "Succeeded"}]}}
    if exp.spec.get("action") in ONE_SHOT and (obj.get("status") or {}).get("experiment"):
        return  # a one-shot experiment's records say what it did when it acted
    if obj.get("status") != status:
        p.write(resource, {**obj, "status": status})


def _stopped(p: Pass, resource: str, obj: Obj) -> None:
    """An experiment whose duration ran out: recovered, its records no longer injected."""
    experiment = (obj.get("status") or {}).get("experiment") or {}
    records = [{**r, "phase": "Not Injected", "recoveredCount": 1} for r in experiment.get("containerRecords") or []]
    status = {"conditions": [
        {"type": "Selected", "status": "True" if records else "False"},
        {"type": "AllInjected", "status": "False"},
        {"type": "AllRecovered", "status": "True"}, {"type": "Paused", "status": "False"}],
        "experiment": {**experiment, "desiredPhase": "Stop", "containerRecords": records}}
    if (obj.get("spec") or {}).get("action") in ONE_SHOT or obj.get("status") == status:
        return
    p.write(resource, {**obj, "status": status})


def _kill(p: Pass, pod: Obj) -> None:
    """Chaos Mesh deletes the pod (grace period 0); its ReplicaSet replaces it."""
    p.event(pod, "Killing", f"Stopping container {pod['spec']['containers'][0]['name']}", component="kubelet")
    p.delete_pod(pod)
