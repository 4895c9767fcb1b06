"""The kubelet model: a pod's phase, container states, restart counts and events as functions of simulated time.

A container's behaviour is decided when it starts (`Run`): the image is pulled, its environment resolved from
secrets and config maps, and the image's software (`software.start`) says whether it runs, crashes, hangs or
completes. Everything time-dependent afterwards (CrashLoopBackOff back-off, restart counts, readiness after
start-up, image pull retries) is computed from the elapsed time since that start, so a pod looks the same
whenever it is observed, and nothing has to tick in the background.

A failing container re-reads its configuration at each restart, so a fixed secret heals it; a running
container keeps the configuration it started with, exactly like a real one.
"""

from __future__ import annotations

import base64
import binascii
import copy
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from agent_sre.apps.images import (
    DOCKER_CONFIG_JSON,
    DOCKER_CONFIG_KEY,
    PAUSE_IMAGE,
    auth_error,
    lookup,
    offered_auth,
    pull_error,
    registry_of,
)
from agent_sre.apps.software import Outcome, RunContext, Software, effective_argv, start
from agent_sre.kube.quantity import quantity
from agent_sre.kube.times import rfc3339
from agent_sre.simulator.cluster import Obj

SANDBOX_S = 1.0  # pod sandbox and network set-up before the first container starts
PULL_S = 1.5  # pulling an image that exists
BACKOFF_START_S, BACKOFF_CAP_S = 10.0, 300.0
PROBE_PERIOD_S = 10.0
METRICS_RESOLUTION_S = 15.0  # metrics-server's default --metric-resolution: how often `kubectl top` figures change
ERR_IMAGE_PULL_S = 5.0  # a failed pull shows as ErrImagePull until the kubelet's next sync turns it into back-off
FAILING = frozenset({"crash", "start_error", "pull_error", "config_error", "hang"})
INF = float("inf")
TIME_EPSILON_S = 1e-3  # far above float rounding at epoch scale (2.4e-7 per operation), far below any delay


@lru_cache(maxsize=65536)
def _stamp(second: int) -> str:
    return rfc3339(second)


def stamp(ts: float) -> str:
    """`stamp(ts)`, cached: a pass formats the same few timestamps thousands of times."""
    return _stamp(int(ts))


def _go_duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    minutes, secs = divmod(seconds, 60)
    return f"{minutes}m{secs}s"


def crash_timeline(elapsed: float, run_s: float) -> tuple[int, bool, float, float]:
    """Where a crash-looping container is after `elapsed` seconds: runs of `run_s` separated by the kubelet's
    back-off (10s doubling to 5m). Returns (restarts, running now, start offset of the current/last run,
    seconds until the next state change). A moment within a millisecond of a boundary counts as past it: a
    reconcile pass scheduled for that boundary must see the new state despite float rounding."""
    def start_of(k: int) -> float:
        if k <= 5:
            return k * run_s + BACKOFF_START_S * (2.0 ** k - 1)
        return start_of(5) + (k - 5) * (run_s + BACKOFF_CAP_S)

    at = elapsed + TIME_EPSILON_S
    if at >= start_of(5):
        k = 5 + int((at - start_of(5)) // (run_s + BACKOFF_CAP_S))
    else:
        k = next(i for i in range(5, -1, -1) if start_of(i) <= at)
    begin = start_of(k)
    running = at < begin + run_s
    next_change = (begin + run_s if running else start_of(k + 1)) - elapsed
    return k, running, begin, next_change


def backoff_of(k: int) -> float:
    return BACKOFF_CAP_S if k >= 5 else BACKOFF_START_S * 2 ** k


@dataclass
class Run:
    """One container's behaviour since `since`: the outcome every (re)start of it has until something changes."""

    outcome: Outcome
    since: float
    image: str
    restarts_before: int = 0
    last_term: Obj | None = None  # the terminated state of the run before `since` (lastState)
    ready_failure: str | None = None  # why the readiness probe can never pass, as the kubelet reports it
    liveness_failure: str | None = None  # why the liveness probe fails (the kubelet then kills the container)

    def __copy__(self) -> Run:
        """A shallow copy (logs keep one of the run they render), several times cheaper than copy's generic one."""
        out = object.__new__(Run)
        out.__dict__.update(self.__dict__)
        return out


@dataclass
class PodState:
    """What the kubelet remembers about a pod beyond its status: its runs, and when conditions changed."""

    node: str
    ip: str
    host_ip: str
    scheduled_at: float
    runs: dict[str, Run] = field(default_factory=dict)  # "init/NAME" or "main/NAME"
    conditions: dict[str, tuple[bool, float]] = field(default_factory=dict)
    failure_since: float | None = None  # Chaos Mesh pod-failure in effect since
    events: dict[str, int] = field(default_factory=dict)  # event key -> count already recorded
    ready: bool = False
    ready_since: float | None = None
    log_key: tuple[Any, ...] = ()
    quiet_rv: str | None = None  # the pod's resourceVersion when it was last seen running, ready and settled

    def fork(self) -> PodState:
        """A copy to change independently: the runs and tables are changed in place, the values they hold are not
        (outcomes are frozen, a last terminated state is never edited)."""
        out = object.__new__(PodState)  # a shallow copy, several times cheaper than copy.copy's generic one
        out.__dict__.update(self.__dict__)
        out.runs = {key: copy.copy(run) for key, run in self.runs.items()}
        out.conditions, out.events = dict(self.conditions), dict(self.events)
        return out


@dataclass
class NamespaceView:
    """The parts of a namespace a starting container can observe (one per namespace per reconcile pass)."""

    name: str
    services: dict[str, tuple[int, ...]]
    ready_ports: dict[str, set[int]]  # service -> ports that have ready endpoints (init scripts wait for these)
    passwords: dict[str, str]
    secrets: dict[str, Obj]
    configmaps: dict[str, Obj]
    registries: dict[str, str]  # private registry -> the `auth` it accepts from this namespace's app

    def secret_value(self, name: str, key: str) -> str | None:
        data = (self.secrets[name].get("data") or {})
        if key not in data:
            return None
        try:
            return base64.b64decode(data[key]).decode("utf-8", "replace")
        except (binascii.Error, ValueError):
            return None


# --- evaluating a container start -------------------------------------------------------------------------------

def _resolve_env(container: Obj, pod: Obj, view: NamespaceView) -> tuple[dict[str, str], str | None]:
    """The container's environment, or the CreateContainerConfigError message the kubelet would report."""
    env: dict[str, str] = {}
    ns = view.name
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        if "configMapRef" in source:
            ref = source["configMapRef"]
            cm = view.configmaps.get(ref.get("name", ""))
            if cm is None:
                if not ref.get("optional"):
                    return env, f'configmap "{ref.get("name")}" not found'
                continue
            env.update({prefix + k: str(v) for k, v in (cm.get("data") or {}).items()})
        elif "secretRef" in source:
            ref = source["secretRef"]
            if ref.get("name", "") not in view.secrets:
                if not ref.get("optional"):
                    return env, f'secret "{ref.get("name")}" not found'
                continue
            for key in view.secrets[ref["name"]].get("data") or {}:
                env[prefix + key] = view.secret_value(ref["name"], key) or ""
    for item in container.get("env") or []:
        name = item.get("name", "")
        if "valueFrom" not in item:
            env[name] = str(item.get("value", ""))
            continue
        source = item["valueFrom"]
        if "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            secret, key = ref.get("name", ""), ref.get("key", "")
            if secret not in view.secrets:
                if ref.get("optional"):
                    continue
                return env, f'secret "{secret}" not found'
            value = view.secret_value(secret, key)
            if value is None:
                if ref.get("optional"):
                    continue
                return env, f"couldn't find key {key} in Secret {ns}/{secret}"
            env[name] = value
        elif "configMapKeyRef" in source:
            ref = source["configMapKeyRef"]
            cm_name, key = ref.get("name", ""), ref.get("key", "")
            cm = view.configmaps.get(cm_name)
            if cm is None or key not in (cm.get("data") or {}):
                if ref.get("optional"):
                    continue
                return env, (f'configmap "{cm_name}" not found' if cm is None
                             else f"couldn't find key {key} in ConfigMap {ns}/{cm_name}")
            env[name] = str(cm["data"][key])
        elif "fieldRef" in source:
            path = source["fieldRef"].get("fieldPath", "")
            env[name] = {"metadata.name": pod["metadata"]["name"], "metadata.namespace": ns,
                         "spec.nodeName": pod["spec"].get("nodeName", "")}.get(path, "")
    return env, None


def _memory_limit(container: Obj) -> int | None:
    limit = ((container.get("resources") or {}).get("limits") or {}).get("memory")
    return int(quantity(limit)) if limit is not None else None


def cpu_limit_m(container: Obj) -> float | None:
    """The container's CPU limit in millicores (its CFS quota per period), None when it has none."""
    limit = ((container.get("resources") or {}).get("limits") or {}).get("cpu")
    return quantity(limit) * 1000 if limit is not None else None


def _pull_credentials(pod: Obj, view: NamespaceView, registry: str) -> tuple[list[str], tuple[str, ...]]:
    """The `auth` values the pod's image pull secrets offer `registry`, and the secrets the kubelet could not
    retrieve (upstream kubelet_pods.go `getPullSecretsForPod`; only `kubernetes.io/dockerconfigjson` secrets hold
    credentials it reads, credentialprovider/secrets `MakeDockerKeyring`)."""
    offered, missing = [], []
    for ref in pod["spec"].get("imagePullSecrets") or []:
        secret = view.secrets.get(ref.get("name", ""))
        if secret is None:
            missing.append(ref.get("name", ""))
        elif secret.get("type") == DOCKER_CONFIG_JSON:
            auth = offered_auth(view.secret_value(ref["name"], DOCKER_CONFIG_KEY) or "", registry)
            if auth is not None:
                offered.append(auth)
    return offered, tuple(missing)


def evaluate(container: Obj, pod: Obj, view: NamespaceView) -> tuple[Outcome, Software | None]:
    """What starting `container` does now: pull (with the pod's credentials where the registry is private), resolve
    configuration, run the image's software."""
    image = container.get("image", "")
    registry = registry_of(image)
    offered, missing = _pull_credentials(pod, view, registry)
    error = auth_error(image, offered, view.registries.get(registry)) or pull_error(image)
    if error is not None:
        return Outcome("pull_error", message=error, missing_secrets=missing), None
    sw, tag = lookup(image)
    assert sw is not None
    env, config_error = _resolve_env(container, pod, view)
    if config_error is not None:
        return Outcome("config_error", message=config_error), sw
    ctx = RunContext(view.name, view.services, view.passwords, _memory_limit(container))
    outcome = start(sw, effective_argv(container, sw), env, ctx, tag)
    if outcome.kind == "hang" and outcome.wait_for is not None:
        service, port = outcome.wait_for
        if port in view.ready_ports.get(service, ()):
            outcome = Outcome("complete", reason="Completed", run_s=1.0, lines=outcome.lines)
    return outcome, sw


def probe_failure(probe: Obj | None, container: Obj, outcome: Outcome, sw: Software, ip: str) -> str | None:
    """Why `probe` fails against this running process (kubelet wording), or None when it passes once started."""
    if not probe or outcome.kind != "run":
        return None
    ports = {p.get("name"): p.get("containerPort") for p in container.get("ports") or []}

    def port_of(spec: Obj) -> int | None:
        port = spec.get("port")
        return ports.get(port) if isinstance(port, str) and not port.isdigit() else int(port) if port else None

    if "httpGet" in probe:
        spec = probe["httpGet"]
        port, path = port_of(spec), spec.get("path", "/")
        url = f"http://{ip}:{port}{path}"
        if port is None:
            return f'probe errored: unable to resolve port "{spec.get("port")}"'
        if port != outcome.listen_port:
            return f'probe failed: Get "{url}": dial tcp {ip}:{port}: connect: connection refused'
        if path.split("?", 1)[0] not in sw.routes:
            return "probe failed: HTTP probe failed with statuscode: 404"
        return None
    if "tcpSocket" in probe:
        port = port_of(probe["tcpSocket"])
        if port != outcome.listen_port:
            return f"probe failed: dial tcp {ip}:{port}: connect: connection refused"
        return None
    if "exec" in probe:
        command = (probe["exec"].get("command") or [""])[0]
        if command not in sw.binaries:
            return (f'probe errored: rpc error: code = Unknown desc = failed to exec in container: failed to start '
                    f'exec: OCI runtime exec failed: exec failed: unable to start container process: exec: '
                    f'"{command}": executable file not found in $PATH: unknown')
    return None


# --- the pod's status at `now` ----------------------------------------------------------------------------------

Emit = Callable[[Obj, PodState, str, str, str, int, str], None]


@dataclass
class ContainerView:
    status: Obj
    ready: bool
    started: bool  # has run at least once
    done_at: float | None  # init containers: when it completed
    next_change: float  # when something others depend on changes (readiness, completion, a start)
    next_display: float = INF  # when only what the status shows changes (back-off phase, retries, counts)


def _terminated(run: Run, begin: float, end: float, container_id: str) -> Obj:
    out = run.outcome
    term = {"exitCode": out.exit_code, "reason": out.reason, "startedAt": stamp(begin),
            "finishedAt": stamp(end), "containerID": container_id}
    if out.kind == "start_error":
        term["message"] = out.message
    return term


def _container_id(pod_uid: str, name: str, restart: int) -> str:
    return "containerd://" + hashlib.blake2b(f"{pod_uid}/{name}/{restart}".encode(), digest_size=32).hexdigest()


def _image_id(image: str) -> str:
    repo = image.split("@", 1)[0].rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image
    return f"{repo}@sha256:" + hashlib.sha256(image.encode()).hexdigest()


def view_container(pod: Obj, ps: PodState, run: Run, container: Obj, now: float, init: bool,
                   emit: Emit) -> ContainerView:
    """The container's status at `now`, recording the events its history implies."""
    out, name, uid = run.outcome, container["name"], pod["metadata"]["uid"]
    image = container.get("image", "")
    elapsed = now - run.since
    status: Obj = {"name": name, "image": image, "imageID": "", "ready": False, "started": False,
                   "restartCount": run.restarts_before, "state": {}, "lastState": {}}
    if run.last_term is not None:
        status["lastState"] = {"terminated": run.last_term}
    pod_ref = f"{pod['metadata']['name']}_{pod['metadata'].get('namespace', '')}({uid})"

    if out.kind in ("pull_error", "config_error"):
        k, _, begin, nxt = crash_timeline(elapsed, 0.0)
        if out.kind == "pull_error":
            fresh = elapsed - begin + TIME_EPSILON_S < ERR_IMAGE_PULL_S  # right after a failed attempt
            reason = "ErrImagePull" if fresh else "ImagePullBackOff"
            if fresh:
                nxt = min(nxt, begin + ERR_IMAGE_PULL_S - elapsed)
            code = "NotFound" if out.message.endswith(": not found") else "Unknown"
            message = (f"rpc error: code = {code} desc = {out.message}" if reason == "ErrImagePull"
                       else f'Back-off pulling image "{image}"')
            status["state"] = {"waiting": {"reason": reason, "message": message}}
            if out.missing_secrets:
                emit(pod, ps, "FailedToRetrieveImagePullSecret", "Unable to retrieve some image pull secrets "
                     f"({', '.join(out.missing_secrets)}); attempting to pull the image may not succeed.", "Warning",
                     k + 1, name)
            emit(pod, ps, "Pulling", f'Pulling image "{image}"', "Normal", k + 1, name)
            emit(pod, ps, "Failed", f'Failed to pull image "{image}": rpc error: code = {code} desc = {out.message}',
                 "Warning", k + 1, name)
            emit(pod, ps, "Failed", "Error: ErrImagePull", "Warning", k + 1, name)
            if k > 0:
                emit(pod, ps, "BackOff", f'Back-off pulling image "{image}"', "Normal", k, name)
                emit(pod, ps, "Failed", "Error: ImagePullBackOff", "Warning", k, name)
        else:
            status["state"] = {"waiting": {"reason": "CreateContainerConfigError", "message": out.message}}
            emit(pod, ps, "Failed", f"Error: {out.message}", "Warning", k + 1, name)
        return ContainerView(status, False, False, None, INF, now + nxt)

    status["imageID"] = _image_id(image)
    if run.restarts_before == 0:
        emit(pod, ps, "Pulled", f'Successfully pulled image "{image}" in {PULL_S}s ({PULL_S}s including waiting)',
             "Normal", 1, name)

    if out.kind in ("crash", "start_error"):
        run_s = out.run_s if out.kind == "crash" else 0.0
        k, running, begin, nxt = crash_timeline(elapsed, run_s)
        restarts = run.restarts_before + k
        status["restartCount"] = restarts
        current_id = _container_id(uid, name, restarts)
        if running:
            status["state"] = {"running": {"startedAt": stamp(run.since + begin)}}
            status["started"] = True
            status["containerID"] = current_id
            if k > 0:
                prev = run.since + begin - backoff_of(k - 1) - run_s
                status["lastState"] = {"terminated": _terminated(run, prev, prev + run_s,
                                                                 _container_id(uid, name, restarts - 1))}
            ready_at = run.since + begin + out.startup_s
            ready = out.kind == "crash" and out.startup_s > 0 and now >= ready_at and run.ready_failure is None
            status["ready"] = ready
            next_change = now + nxt if ready or out.startup_s <= 0 or now >= ready_at else min(ready_at, now + nxt)
        else:
            status["state"] = {"waiting": {"reason": "CrashLoopBackOff", "message": (
                f"back-off {_go_duration(backoff_of(k))} restarting failed container={name} pod={pod_ref}")}}
            status["lastState"] = {"terminated": _terminated(run, run.since + begin, run.since + begin + run_s,
                                                             current_id)}
            next_change = now + nxt
        starts = k + 1
        if out.kind == "start_error":
            emit(pod, ps, "Failed", f"Error: {out.message}", "Warning", starts, name)
        else:
            emit(pod, ps, "Created", f"Created container {name}", "Normal", starts, name)
            emit(pod, ps, "Started", f"Started container {name}", "Normal", starts, name)
        if k > 0:
            emit(pod, ps, "Pulled", f'Container image "{image}" already present on machine', "Normal", k, name)
        if run.liveness_failure is not None:
            kills = k if running else k + 1
            probe = container.get("livenessProbe") or {}
            emit(pod, ps, "Unhealthy", "Liveness " + run.liveness_failure, "Warning",
                 max(1, starts * probe.get("failureThreshold", 3)), name)
            if kills:
                emit(pod, ps, "Killing", f"Container {name} failed liveness probe, will be restarted", "Normal",
                     kills, name)
        backoffs = k if running else k + 1
        if backoffs:
            emit(pod, ps, "BackOff", f"Back-off restarting failed container {name} in pod {pod_ref}", "Warning",
                 backoffs, name)
        # a process growing towards its memory limit: metrics-server sees it grow at every scrape
        scrape = now + METRICS_RESOLUTION_S if running and out.reason == "OOMKilled" else INF
        if out.kind == "crash" and 0 < out.startup_s < out.run_s and run.ready_failure is None:
            return ContainerView(status, status["ready"], True, None, next_change, scrape)  # ready between crashes
        return ContainerView(status, False, True, None, INF, min(next_change, scrape))

    container_id = _container_id(uid, name, run.restarts_before)
    emit(pod, ps, "Created", f"Created container {name}", "Normal", 1, name)
    emit(pod, ps, "Started", f"Started container {name}", "Normal", 1, name)
    status["containerID"] = container_id
    status["started"] = True
    if out.kind == "complete":
        done_at = run.since + out.run_s
        if now >= done_at:
            status["state"] = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": stamp(run.since),
                                              "finishedAt": stamp(done_at), "containerID": container_id}}
            status["started"] = False
            status["ready"] = True
            return ContainerView(status, True, True, done_at, INF)
        status["state"] = {"running": {"startedAt": stamp(run.since)}}
        return ContainerView(status, False, True, None, done_at)
    if out.kind == "hang":
        status["state"] = {"running": {"startedAt": stamp(run.since)}}
        return ContainerView(status, False, True, None, INF)

    # a process that keeps running
    started_at = run.since
    if ps.failure_since is not None and not init:
        status["image"] = PAUSE_IMAGE
        status["imageID"] = _image_id(PAUSE_IMAGE)
        started_at = ps.failure_since
    status["state"] = {"running": {"startedAt": stamp(started_at)}}
    ready_at = run.since + out.startup_s
    probe = container.get("readinessProbe")
    failure = run.ready_failure
    next_probe = INF
    if ps.failure_since is not None and probe:
        failure = "probe failed: dial tcp: connect: connection refused"
    if probe and (failure is not None or now < ready_at):
        # probes fail from the start of this run (or of the chaos that broke it), once the initial delay is over
        origin = (ps.failure_since if ps.failure_since is not None else run.since) + probe.get("initialDelaySeconds", 0)
        period = probe.get("periodSeconds", PROBE_PERIOD_S)
        periods = int(max(0.0, (now if failure else ready_at) - origin + TIME_EPSILON_S) // period)
        message = failure or "probe failed: HTTP probe failed with statuscode: 503"
        if periods > 0 and (failure or "httpGet" in probe):
            emit(pod, ps, "Unhealthy", "Readiness " + message, "Warning", periods, name)
        if failure:  # the event count grows with every failed probe
            next_probe = origin + (periods + 1) * period
    ready = failure is None and now >= ready_at and not init
    status["ready"] = ready
    return ContainerView(status, ready, True, None, ready_at if now < ready_at else INF, next_probe)


# --- one pod ----------------------------------------------------------------------------------------------------

def _new_run(container: Obj, pod: Obj, view: NamespaceView, ip: str, since: float, restarts: int = 0,
             last_term: Obj | None = None) -> Run:
    outcome, sw = evaluate(container, pod, view)
    run = Run(outcome, since, container.get("image", ""), restarts, last_term)
    if sw is None or outcome.kind != "run":
        return run
    run.ready_failure = probe_failure(container.get("readinessProbe"), container, outcome, sw, ip)
    liveness = container.get("livenessProbe")
    failure = probe_failure(liveness, container, outcome, sw, ip)
    run_s = liveness_window(liveness) if liveness is not None else 0.0
    if failure is None and liveness is not None and outcome.startup_s >= run_s:
        # A slow starter whose probe gives up before it is up: nothing listens yet, so each probe is refused
        failure = probe_failure(liveness, container, replace(outcome, listen_port=0), sw, ip)
    if failure is not None and liveness is not None:
        # The kubelet kills a container whose liveness probe keeps failing: a crash loop with exit code 137.
        run.outcome = Outcome("crash", exit_code=137, reason="Error", run_s=run_s, lines=outcome.lines,
                              listen_port=outcome.listen_port, startup_s=outcome.startup_s)
        run.liveness_failure = failure
    return run


def liveness_window(probe: Obj) -> float:
    """Seconds from a container's start until a liveness probe that fails from the first try has it killed:
    `initialDelaySeconds`, then `failureThreshold` failed probes `periodSeconds` apart (upstream
    pkg/kubelet/prober/worker.go: the worker probes nothing before the initial delay and reports a failure only
    after `failureThreshold` consecutive ones; the kubelet then kills the container, exit code 137)."""
    return float(probe.get("initialDelaySeconds", 0) + probe.get("periodSeconds", PROBE_PERIOD_S) *
                 probe.get("failureThreshold", 3))


def _restart_state(run: Run, now: float, uid: str, name: str) -> tuple[int, Obj | None]:
    """(restartCount, lastState.terminated) of `run` at `now`, for a container that restarts right now."""
    out = run.outcome
    if out.kind not in ("crash", "start_error"):
        return run.restarts_before, run.last_term
    run_s = out.run_s if out.kind == "crash" else 0.0
    k, running, begin, _ = crash_timeline(now - run.since, run_s)
    restarts = run.restarts_before + k
    end = min(now, run.since + begin + run_s) if running else run.since + begin + run_s
    return restarts + 1, _terminated(run, run.since + begin, end, _container_id(uid, name, restarts))


def _run_for(ps: PodState, key: str, container: Obj, pod: Obj, view: Callable[[], NamespaceView], start_at: float,
             now: float, reread: bool) -> Run | None:
    """The container's current run, starting it at `start_at` (None while that is still in the future). A failing
    run re-reads its configuration: when the outcome would now differ, the container restarts with it. Without
    `reread` only the endpoints it waits for can have changed since it last read it."""
    run = ps.runs.get(key)
    if run is None:
        if now < start_at:
            return None
        run = ps.runs[key] = _new_run(container, pod, view(), ps.ip, start_at)
        return run
    if run.outcome.kind in FAILING and run.liveness_failure is None and (reread or run.outcome.wait_for is not None):
        fresh = _new_run(container, pod, view(), ps.ip, now)
        if fresh.outcome != run.outcome:
            restarts, last = _restart_state(run, now, pod["metadata"]["uid"], container["name"])
            fresh.restarts_before, fresh.last_term = restarts, last
            run = ps.runs[key] = fresh
    return run


def _waiting(container: Obj, reason: str) -> Obj:
    return {"name": container["name"], "image": container.get("image", ""), "imageID": "", "ready": False,
            "started": False, "restartCount": 0, "state": {"waiting": {"reason": reason}}, "lastState": {}}


def _apply_pod_failure(ps: PodState, failing: bool, now: float) -> None:
    """Chaos Mesh pod-failure swaps the containers for `pause`: each swap, in and out, is a restart."""
    if failing == (ps.failure_since is not None):
        return
    for key, run in ps.runs.items():
        if key.startswith("main/") and run.outcome.kind == "run":
            run.restarts_before += 1
            if not failing:
                run.since = now
    ps.failure_since = now if failing else None


def sync_pod(pod: Obj, ps: PodState, view: Callable[[], NamespaceView], now: float, emit: Emit,
             pod_failure: bool = False, reread: bool = True) -> tuple[Obj, bool, float, float]:
    """The status of a scheduled pod at `now`: (status, ready, next change others depend on, next change of
    what the status shows only). `view` gives the namespace as a starting container sees it; `reread`: its
    configuration (objects only API requests write) may have changed since the last sync."""
    spec = pod["spec"]
    _apply_pod_failure(ps, pod_failure, now)
    next_change = next_display = INF
    t = ps.scheduled_at + SANDBOX_S
    initialized, pending = now >= t, []
    init_statuses: list[Obj] = []
    for container in spec.get("initContainers") or []:
        run = _run_for(ps, "init/" + container["name"], container, pod, view, t + PULL_S, now, reread) \
            if initialized else None
        if run is None:
            init_statuses.append(_waiting(container, "PodInitializing"))
            next_change = min(next_change, t + PULL_S) if initialized else next_change
            initialized = False
            pending.append(container["name"])
            continue
        cv = view_container(pod, ps, run, container, now, True, emit)
        init_statuses.append(cv.status)
        next_change, next_display = min(next_change, cv.next_change), min(next_display, cv.next_display)
        if cv.done_at is None:
            initialized = False
            pending.append(container["name"])
        else:
            t = cv.done_at
    statuses: list[Obj] = []
    all_ready, any_started = True, False
    for container in spec.get("containers") or []:
        run = _run_for(ps, "main/" + container["name"], container, pod, view, t + PULL_S, now, reread) \
            if initialized else None
        if run is None:
            statuses.append(_waiting(container, "ContainerCreating" if initialized or now < t else "PodInitializing"))
            if initialized:
                next_change = min(next_change, t + PULL_S)
            all_ready = False
            continue
        cv = view_container(pod, ps, run, container, now, False, emit)
        statuses.append(cv.status)
        next_change, next_display = min(next_change, cv.next_change), min(next_display, cv.next_display)
        all_ready = all_ready and cv.ready
        any_started = any_started or cv.started or bool(cv.status["lastState"])
    if now < ps.scheduled_at + SANDBOX_S:  # the sandbox only shows; the first container starts after the pull
        next_display = min(next_display, ps.scheduled_at + SANDBOX_S)
        next_change = min(next_change, ps.scheduled_at + SANDBOX_S + PULL_S)
    if all_ready != ps.ready:
        ps.ready = all_ready
        ps.ready_since = now if all_ready else None
    unready = [c["name"] for c, s in zip(spec.get("containers") or [], statuses, strict=True) if not s["ready"]]
    conditions = {
        "PodReadyToStartContainers": (now >= ps.scheduled_at + SANDBOX_S, "", ""),
        "Initialized": (initialized, "ContainersNotInitialized",
                        f"containers with incomplete status: [{' '.join(pending)}]"),
        "Ready": (all_ready, "ContainersNotReady", f"containers with unready status: [{' '.join(unready)}]"),
        "ContainersReady": (all_ready, "ContainersNotReady", f"containers with unready status: [{' '.join(unready)}]"),
        "PodScheduled": (True, "", ""),
    }
    phase = "Running" if initialized and any_started else "Pending"
    if initialized and spec.get("restartPolicy", "Always") != "Always":
        phase, next_change, next_display = _finished_phase(spec, ps, statuses, now, phase, next_change, next_display)
        if phase in ("Succeeded", "Failed"):
            all_ready, ps.ready = False, False
            for kind in ("Ready", "ContainersReady"):
                conditions[kind] = (False, "PodCompleted" if phase == "Succeeded" else "PodFailed", "")
    status: Obj = {"phase": phase,
                   "conditions": [_condition(ps, kind, ok, reason, message, now)
                                  for kind, (ok, reason, message) in conditions.items()],
                   "hostIP": ps.host_ip, "hostIPs": [{"ip": ps.host_ip}], "podIP": ps.ip, "podIPs": [{"ip": ps.ip}],
                   "startTime": stamp(ps.scheduled_at), "containerStatuses": statuses,
                   "qosClass": qos_class(spec)}
    if init_statuses:
        status["initContainerStatuses"] = init_statuses
    return status, all_ready, next_change, next_display


def _finished_phase(spec: Obj, ps: PodState, statuses: list[Obj], now: float, phase: str, next_change: float,
                    next_display: float) -> tuple[str, float, float]:
    """A pod that does not always restart (a job's) ends: Succeeded once every container exited 0; with
    `restartPolicy: Never`, Failed once one exited otherwise (it is not restarted: its first exit stays its state)."""
    never = spec.get("restartPolicy") == "Never"
    failed = False
    for status in statuses:
        run = ps.runs.get("main/" + status["name"])
        if run is None:
            return phase, next_change, next_display
        out = run.outcome
        if never and out.kind in ("crash", "start_error"):
            end = run.since + (out.run_s if out.kind == "crash" else 0.0)
            if now < end:
                return phase, min(next_change, end), next_display
            status["state"] = {"terminated": {"exitCode": out.exit_code or 1, "reason": out.reason or "Error",
                                              "startedAt": stamp(run.since), "finishedAt": stamp(end),
                                              "containerID": status.get("containerID", "")}}
            status.update(ready=False, started=False, restartCount=run.restarts_before, lastState={})
            failed = True
        elif (status.get("state") or {}).get("terminated", {}).get("exitCode") != 0:
            return phase, next_change, next_display
    return ("Failed" if failed else "Succeeded"), INF, INF


def _condition(ps: PodState, kind: str, ok: bool, reason: str, message: str, now: float) -> Obj:
    previous = ps.conditions.get(kind)
    if previous is None or previous[0] != ok:
        previous = ps.conditions[kind] = (ok, now if previous is not None else ps.scheduled_at)
    cond: Obj = {"type": kind, "status": "True" if ok else "False", "lastProbeTime": None,
                 "lastTransitionTime": stamp(previous[1])}
    if not ok and reason:
        cond["reason"], cond["message"] = reason, message
    return cond


def qos_class(spec: Obj) -> str:
    containers = spec.get("containers") or []
    resources = [c.get("resources") or {} for c in containers]
    if not any(r.get("requests") or r.get("limits") for r in resources):
        return "BestEffort"
    guaranteed = all(
        (r.get("limits") or {}).get(k) is not None
        and quantity((r.get("requests") or {}).get(k, r["limits"][k])) == quantity(r["limits"][k])
        for r in resources for k in ("cpu", "memory"))
    return "Guaranteed" if guaranteed else "Burstable"


# --- resource usage (what cAdvisor reports to metrics-server) ---------------------------------------------------

MiB = 1024 * 1024


def _jitter(*parts: object) -> float:
    digest = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2 ** 64


def usage(pod: Obj, ps: PodState, now: float, cpu_extra: float, memory_extra: float,
          load: float) -> dict[str, tuple[float, float]]:
    """CPU (millicores) and memory (bytes) of each running app container: the program's steady figures scaled
    by its share of the traffic, plus chaos stress, at most the CPU limit (the CFS quota); an OOM-bound process
    grows towards its memory limit (from its working set, a leaking build's steady growth; from half the limit, a
    working set the limit never held)."""
    out: dict[str, tuple[float, float]] = {}
    name = pod["metadata"]["name"]
    for container in pod["spec"].get("containers") or []:
        run = ps.runs.get("main/" + container["name"])
        if run is None or run.outcome.kind not in ("run", "crash"):
            continue
        sw, _ = lookup(run.image)
        if sw is None:
            continue
        if ps.failure_since is not None:
            out[container["name"]] = (0.0, 0.6 * MiB)
            continue
        limit = _memory_limit(container)
        j = _jitter(name, container["name"], int(now // 60))
        if run.outcome.kind == "crash":
            k, running, begin, _ = crash_timeline(now - run.since, run.outcome.run_s)
            if not running:
                continue
            if run.outcome.reason != "OOMKilled":
                out[container["name"]] = (3.0 + 4 * j, 12 * MiB)
                continue
            progress = (now - run.since - begin) / max(run.outcome.run_s, 1e-9)
            ceiling = limit or sw.memory_mib * MiB
            low = min(sw.memory_mib * MiB, 0.55 * ceiling)
            out[container["name"]] = (sw.cpu_millicores * 1.6, low + (0.99 * ceiling - low) * progress)
            continue
        cpu = sw.cpu_millicores * load * (0.85 + 0.3 * j) + cpu_extra
        memory = sw.memory_mib * MiB * (0.95 + 0.1 * j) + memory_extra
        if limit is not None:
            memory = min(memory, limit * 0.99)
        cpu_limit = cpu_limit_m(container)
        if cpu_limit is not None:  # the CFS quota: a process never gets more than its limit per period
            cpu = min(cpu, cpu_limit)
        out[container["name"]] = (cpu, memory)
    return out
