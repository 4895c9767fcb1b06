"""The one-word pod status, READY and RESTARTS columns, computed as `kubectl get pods` computes them.

The STATUS column is the most telling line for a model (CrashLoopBackOff, OOMKilled, ImagePullBackOff,
Init:Error), so it follows kubectl's printer: init containers first, then the last non-running container.
"""

from __future__ import annotations

from typing import Any

from agent_sre.kube.times import human_duration, parse_time

Obj = dict[str, Any]


def pod_status(pod: Obj) -> str:
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Unknown"
    init_specs = (pod.get("spec") or {}).get("initContainers") or []
    initializing = False
    for i, cs in enumerate(status.get("initContainerStatuses") or []):
        state = cs.get("state") or {}
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if terminated and terminated.get("exitCode", 0) == 0:
            continue
        initializing = True
        if terminated:
            reason = "Init:" + (terminated.get("reason") or _exit(terminated))
        elif waiting and waiting.get("reason") and waiting["reason"] != "PodInitializing":
            reason = "Init:" + waiting["reason"]
        else:
            reason = f"Init:{i}/{len(init_specs)}"
        break
    if not initializing:
        has_running = False
        for cs in reversed(status.get("containerStatuses") or []):
            state = cs.get("state") or {}
            waiting, terminated = state.get("waiting"), state.get("terminated")
            if waiting and waiting.get("reason"):
                reason = waiting["reason"]
            elif terminated:
                reason = terminated.get("reason") or _exit(terminated)
            elif cs.get("ready") and state.get("running") is not None:
                has_running = True
        if reason == "Completed" and has_running:
            reason = "Running" if _condition(pod, "Ready").get("status") == "True" else "NotReady"
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        reason = "Terminating"
    return reason


def _exit(terminated: Obj) -> str:
    if terminated.get("signal"):
        return f"Signal:{terminated['signal']}"
    return f"ExitCode:{terminated.get('exitCode', 0)}"


def _condition(obj: Obj, kind: str) -> Obj:
    """The status condition of type `kind`, or {} when there is none."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            found: Obj = cond
            return found
    return {}


def pod_ready(pod: Obj) -> str:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    total = len((pod.get("spec") or {}).get("containers") or []) or len(statuses)
    return f"{sum(1 for cs in statuses if cs.get('ready'))}/{total}"


def pod_restarts(pod: Obj, now: float) -> str:
    """"5 (2m ago)": total restarts and how long ago the last container terminated."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    count = sum(int(cs.get("restartCount") or 0) for cs in statuses)
    last = max((parse_time(((cs.get("lastState") or {}).get("terminated") or {}).get("finishedAt")) or 0.0
                for cs in statuses), default=0.0)
    return f"{count} ({human_duration(now - last)} ago)" if count and last else str(count)


def rollout_progress(deployment: Obj) -> tuple[str, bool]:
    """What `kubectl rollout status` says of a deployment now (its DeploymentStatusViewer), and whether it stops
    waiting: rolled out, or past its progress deadline (an `error:` line, as kubectl exits non-zero)."""
    meta, spec, status = (deployment.get(key) or {} for key in ("metadata", "spec", "status"))
    name = meta.get("name")
    if meta.get("generation", 0) > status.get("observedGeneration", 0):
        return "Waiting for deployment spec update to be observed...", False
    if _condition(deployment, "Progressing").get("reason") == "ProgressDeadlineExceeded":
        return f'error: deployment "{name}" exceeded its progress deadline', True
    waiting = f'Waiting for deployment "{name}" rollout to finish: '
    replicas, updated = spec.get("replicas", 1), status.get("updatedReplicas", 0)
    if updated < replicas:
        return waiting + f"{updated} out of {replicas} new replicas have been updated...", False
    if status.get("replicas", 0) > updated:
        return waiting + f"{status['replicas'] - updated} old replicas are pending termination...", False
    if status.get("availableReplicas", 0) < updated:
        return waiting + f"{status.get('availableReplicas', 0)} of {updated} updated replicas are available...", False
    return f'deployment "{name}" successfully rolled out', True
