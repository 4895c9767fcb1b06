"""The horizontal pod autoscaler (autoscaling/v2), as kube-controller-manager's podautoscaler runs it with its default
flags: every 15 s, for each HPA, the CPU utilization of the target's pods (metrics-server's figures against their
requests) gives desiredReplicas = ceil(currentReplicas * current / target), left alone within a tolerance of 0.1,
with unready and unmeasured pods counted as the upstream replica calculator counts them; then, for an HPA without
`behavior`, the highest recommendation of the last 5 minutes (scale-down stabilization), at most
max(2 * current, 4) in one step, within min/max. The scale goes to the target's `spec.replicas`; the status holds
currentReplicas, desiredReplicas, the measured metric and the AbleToScale, ScalingActive and ScalingLimited
conditions with upstream's reasons and messages, and events say each rescale and each failure.

Only `Resource` metrics of `cpu` with an `Utilization` or `AverageValue` target are measured (what the simulator's
metrics-server serves); any other metric makes ScalingActive false, as a metric the cluster cannot read does.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from agent_sre.kube.quantity import quantity
from agent_sre.kube.selectors import matches
from agent_sre.kube.times import parse_time
from agent_sre.simulator import kubelet
from agent_sre.simulator.cluster import Obj
from agent_sre.simulator.controllers.context import Pass

RESOURCE = "horizontalpodautoscalers.autoscaling"
SYNC_PERIOD_S = 15.0  # --horizontal-pod-autoscaler-sync-period
TOLERANCE = 0.1  # --horizontal-pod-autoscaler-tolerance
DOWNSCALE_STABILIZATION_S = 300.0  # --horizontal-pod-autoscaler-downscale-stabilization
CPU_INITIALIZATION_S = 300.0  # --horizontal-pod-autoscaler-cpu-initialization-period
INITIAL_READINESS_DELAY_S = 30.0  # --horizontal-pod-autoscaler-initial-readiness-delay
METRIC_WINDOW_S = 15.0  # metrics-server's resolution: a sample covers this much time before its timestamp
SCALE_UP_LIMIT_FACTOR, SCALE_UP_LIMIT_MINIMUM = 2.0, 4.0
COMPONENT = "horizontal-pod-autoscaler"
CPU_METRIC = "cpu resource utilization (percentage of request)"

PodGroup = Literal["ready", "unready", "missing", "ignored"]


class MetricError(Exception):
    """The replica count cannot be computed from the metric (upstream's error text)."""


@dataclass(frozen=True)
class PodSample:
    """One pod of the target as the replica calculator groups it, with its CPU request and usage (millicores)."""

    name: str
    group: PodGroup
    request_m: float | None  # None: a container without a CPU request
    usage_m: float = 0.0
    missing_request: str = ""  # the container without a request


def utilization_ratio(metrics: Mapping[str, float], requests: Mapping[str, float],
                      target: int) -> tuple[float, int, float]:
    """(usage ratio, utilization percent, average usage) over the pods with metrics: metricsclient's
    GetResourceUtilizationRatio, integer percent as upstream computes it."""
    total = sum(int(v) for v in metrics.values())
    requested = sum(int(requests[name]) for name in metrics)
    if requested == 0:
        raise MetricError("no metrics returned matched known pods")
    utilization = total * 100 // requested
    return utilization / target, utilization, total / len(metrics)


def replicas_for_utilization(current: int, samples: Iterable[PodSample], target: int,
                             tolerance: float = TOLERANCE) -> tuple[int, int, float]:
    """(replica count proposal, utilization %, average usage m): the replica calculator's GetResourceReplicas."""
    samples = list(samples)
    if not samples:
        raise MetricError("no pods returned by selector while calculating replica count")
    metrics = {s.name: s.usage_m for s in samples if s.group == "ready"}
    if not metrics:
        raise MetricError("did not receive metrics for targeted pods (pods might be unready)")
    requests: dict[str, float] = {}
    for s in samples:
        if s.request_m is None:
            raise MetricError(f"missing request for cpu in container {s.missing_request} of Pod {s.name}")
        requests[s.name] = s.request_m
    ready_count = len(metrics)
    unready = [s.name for s in samples if s.group == "unready"]
    missing = [s.name for s in samples if s.group == "missing"]
    ratio, utilization, average = utilization_ratio(metrics, requests, target)
    scale_up_with_unready = bool(unready) and ratio > 1.0
    if not scale_up_with_unready and not missing:
        if abs(1.0 - ratio) <= tolerance:
            return current, utilization, average
        return math.ceil(ratio * ready_count), utilization, average
    if missing:
        if ratio < 1.0:  # on a scale-down, a pod without metrics counts as using its request (or the target)
            fallback = max(100, target)
            metrics.update({name: requests[name] * fallback // 100 for name in missing})
        elif ratio > 1.0:  # on a scale-up, as using nothing
            metrics.update({name: 0.0 for name in missing})
    if scale_up_with_unready:
        metrics.update({name: 0.0 for name in unready})
    new_ratio, _, _ = utilization_ratio(metrics, requests, target)
    if abs(1.0 - new_ratio) <= tolerance or (ratio < 1.0 < new_ratio) or (ratio > 1.0 > new_ratio):
        return current, utilization, average  # the assumptions would reverse the direction: no change
    proposal = math.ceil(new_ratio * len(metrics))
    if (new_ratio < 1.0 and proposal > current) or (new_ratio > 1.0 and proposal < current):
        return current, utilization, average
    return proposal, utilization, average


def replicas_for_average_value(current: int, samples: Iterable[PodSample], target_m: float,
                               tolerance: float = TOLERANCE) -> tuple[int, float]:
    """(proposal, average usage m) for an AverageValue target: GetRawResourceReplicas (no requests needed)."""
    samples = list(samples)
    metrics = {s.name: s.usage_m for s in samples if s.group == "ready"}
    if not metrics:
        raise MetricError("did not receive metrics for targeted pods (pods might be unready)")
    average = sum(metrics.values()) / len(metrics)
    ratio = average / target_m
    if abs(1.0 - ratio) <= tolerance:
        return current, average
    return math.ceil(sum(metrics.values()) / target_m), average


def stabilize(history: tuple[tuple[int, float], ...], proposal: int, now: float,
              window: float = DOWNSCALE_STABILIZATION_S) -> tuple[int, tuple[tuple[int, float], ...]]:
    """(the highest recommendation of the window, the history with this one recorded): stabilizeRecommendation,
    which replaces one sample older than the window, or appends."""
    highest, old = proposal, None
    for i, (value, at) in enumerate(history):
        if at < now - window:
            old = i
        elif value > highest:
            highest = value
    entries = list(history)
    if old is not None:
        entries[old] = (proposal, now)
    else:
        entries.append((proposal, now))
    return highest, tuple(entries)


def limit(current: int, desired: int, low: int, high: int) -> tuple[int, str, str]:
    """convertDesiredReplicasWithRules: (replicas, ScalingLimited reason, message)."""
    scale_up_limit = int(max(SCALE_UP_LIMIT_FACTOR * current, SCALE_UP_LIMIT_MINIMUM))
    if high > scale_up_limit:
        top, reason, message = scale_up_limit, "ScaleUpLimit", \
            "the desired replica count is increasing faster than the maximum scale rate"
    else:
        top, reason, message = high, "TooManyReplicas", \
            "the desired replica count is more than the maximum replica count"
    if desired < low:
        return low, "TooFewReplicas", "the desired replica count is less than the minimum replica count"
    if desired > top:
        return top, reason, message
    return desired, "DesiredWithinRange", "the desired count is within the acceptable range"


# --- the controller step --------------------------------------------------------------------------------------

def _pod_group(pod: Obj, now: float, has_metrics: bool) -> PodGroup:
    """groupPods for CPU: deleted or failed pods are ignored, pending ones unready, one without metrics missing; a
    pod in its first 5 minutes counts only once ready for a full metric window, an older one unless it has never
    been ready since it started."""
    status = pod.get("status") or {}
    if pod["metadata"].get("deletionTimestamp") or status.get("phase") == "Failed":
        return "ignored"
    if status.get("phase") == "Pending":
        return "unready"
    if not has_metrics:
        return "missing"
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    started = parse_time(status.get("startTime"))
    if ready is None or started is None:
        return "unready"
    changed = parse_time(ready.get("lastTransitionTime")) or started
    if started + CPU_INITIALIZATION_S > now:
        unready = ready.get("status") == "False" or now - METRIC_WINDOW_S < changed
    else:
        unready = ready.get("status") == "False" and started + INITIAL_READINESS_DELAY_S > changed
    return "unready" if unready else "ready"


def _samples(p: Pass, ns: str, selector: Obj, load: Mapping[tuple[str, str], float]) -> list[PodSample]:
    out = []
    for pod in p.pods(ns):
        if not matches(selector, pod["metadata"].get("labels")):
            continue
        name = pod["metadata"]["name"]
        ps = p.st.pods.get((ns, name))
        fx = p.effects.get((ns, name))
        app = (pod["metadata"].get("labels") or {}).get("app", "")
        figures = kubelet.usage(pod, ps, p.now, fx.cpu_millicores if fx else 0.0, fx.memory_bytes if fx else 0.0,
                                load.get((ns, app), 1.0)) if ps is not None else {}
        request, missing = 0.0, ""
        for container in pod["spec"].get("containers") or []:
            cpu = ((container.get("resources") or {}).get("requests") or {}).get("cpu")
            if cpu is None:
                missing = container.get("name", "")
                break
            request += quantity(str(cpu)) * 1000
        out.append(PodSample(name, _pod_group(pod, p.now, bool(figures)), None if missing else request,
                             float(int(sum(cpu for cpu, _ in figures.values()))), missing))
    return out


def _condition(old: Mapping[str, Obj], kind: str, ok: bool, reason: str, message: str, now: float) -> Obj:
    previous = old.get(kind)
    status = "True" if ok else "False"
    since = previous.get("lastTransitionTime") if previous and previous.get("status") == status else \
        kubelet.stamp(now)
    return {"type": kind, "status": status, "lastTransitionTime": since, "reason": reason, "message": message}


def reconcile(p: Pass) -> None:
    """Each HPA whose sync period has come round: measure, recommend, scale, and record its status."""
    hpas = p.c.list(RESOURCE)
    if not hpas:
        return
    load = p.st.signals[1].load if p.st.signals is not None else {}
    for hpa in hpas:
        uid = hpa["metadata"]["uid"]
        last, history = p.st.autoscaling.get(uid, (None, ()))
        if last is not None and p.now < last + SYNC_PERIOD_S - kubelet.TIME_EPSILON_S and \
                hpa["metadata"].get("generation") == p.st.autoscaling_seen.get(uid):
            p.later(last + SYNC_PERIOD_S)
            continue
        history = _sync(p, hpa, history, load)
        p.st.autoscaling[uid] = (p.now, history)
        p.st.autoscaling_seen[uid] = hpa["metadata"].get("generation")
        p.later(p.now + SYNC_PERIOD_S)


def _sync(p: Pass, hpa: Obj, history: tuple[tuple[int, float], ...],
          load: Mapping[tuple[str, str], float]) -> tuple[tuple[int, float], ...]:
    ns, spec = hpa["metadata"]["namespace"], hpa.get("spec") or {}
    status = hpa.get("status") or {}
    old = {c.get("type"): c for c in status.get("conditions") or []}
    ref = spec.get("scaleTargetRef") or {}
    low, high = spec.get("minReplicas", 1), spec.get("maxReplicas", 1)
    conditions: dict[str, Obj] = {}

    def condition(kind: str, ok: bool, reason: str, message: str) -> None:
        conditions[kind] = _condition(old, kind, ok, reason, message, p.now)

    def finish(current: int, desired: int, metrics: list[Obj], rescaled: bool) -> None:
        new: Obj = {"currentReplicas": current, "desiredReplicas": desired}
        if metrics:
            new["currentMetrics"] = metrics
        if rescaled:
            new["lastScaleTime"] = kubelet.stamp(p.now)
        elif status.get("lastScaleTime"):
            new["lastScaleTime"] = status["lastScaleTime"]
        order = ("AbleToScale", "ScalingActive", "ScalingLimited")
        new["conditions"] = [conditions.get(k) or old[k] for k in order if k in conditions or k in old]
        new["observedGeneration"] = hpa["metadata"].get("generation", 1)
        if new != status:
            p.write(RESOURCE, {**hpa, "status": new})

    dep = p.c.get("deployments.apps", ns, ref.get("name", "")) if ref.get("kind") == "Deployment" else None
    if dep is None:
        what = "deployments.apps" if ref.get("kind") == "Deployment" else f"{str(ref.get('kind', '')).lower()}s"
        message = f'{what} "{ref.get("name", "")}" not found'
        condition("AbleToScale", False, "FailedGetScale",
                  f"the HPA controller was unable to get the target's current scale: {message}")
        p.event(hpa, "FailedGetScale", message, "Warning", component=COMPONENT)
        finish(status.get("currentReplicas", 0), status.get("desiredReplicas", 0), [], False)
        return history
    condition("AbleToScale", True, "SucceededGetScaleSubresource",
              "the HPA controller was able to get the target's current scale")
    dep_spec = dep.get("spec") or {}
    wanted, current = dep_spec.get("replicas", 1), (dep.get("status") or {}).get("replicas", 0)
    metrics: list[Obj] = []
    reason = ""
    if wanted == 0 and low != 0:
        condition("ScalingActive", False, "ScalingDisabled", "scaling is disabled since the replica count of the "
                                                            "target is zero")
        finish(current, 0, [], False)
        return history
    if current > high:
        desired, reason = high, "Current number of replicas above Spec.MaxReplicas"
    elif current < low:
        desired, reason = low, "Current number of replicas below Spec.MinReplicas"
    else:
        try:
            proposal, metrics, reason = _proposal(p, ns, dep_spec, spec, current, load)
        except MetricError as exc:
            error = f"failed to get cpu utilization: {exc}"
            condition("ScalingActive", False, "FailedGetResourceMetric",
                      f"the HPA was unable to compute the replica count: {error}")
            p.event(hpa, "FailedGetResourceMetric", error, "Warning", component=COMPONENT)
            p.event(hpa, "FailedComputeMetricsReplicas", "invalid metrics (1 invalid out of 1), first error is: "
                    f"failed to get cpu resource metric value: {error}", "Warning", component=COMPONENT)
            finish(current, status.get("desiredReplicas", current), [], False)
            return history
        condition("ScalingActive", True, "ValidMetricFound",
                  f"the HPA was able to successfully calculate a replica count from {CPU_METRIC}")
        stabilized, history = stabilize(history, proposal, p.now) if not spec.get("behavior") else \
            (proposal, history)
        if stabilized != proposal:
            condition("AbleToScale", True, "ScaleDownStabilized", "recent recommendations were higher than current "
                                                                  "one, applying the highest recent recommendation")
        else:
            condition("AbleToScale", True, "ReadyForNewScale", "recommended size matches current size")
        desired, limited, message = limit(current, stabilized, low, high)
        condition("ScalingLimited", desired != stabilized, limited, message)
    rescale = desired != current  # as upstream: the scale is set again while the target has not reached it
    if rescale:
        if desired != wanted:
            p.write("deployments.apps", {**dep, "spec": {**dep_spec, "replicas": desired}})
        condition("AbleToScale", True, "SucceededRescale",
                  f"the HPA controller was able to update the target scale to {desired}")
        p.event(hpa, "SuccessfulRescale", f"New size: {desired}; reason: {reason}", component=COMPONENT)
    finish(current, desired, metrics, rescale)
    return history


def _proposal(p: Pass, ns: str, dep_spec: Obj, spec: Obj, current: int,
              load: Mapping[tuple[str, str], float]) -> tuple[int, list[Obj], str]:
    """The metric's replica proposal, its status entry and the rescale reason."""
    metric_specs = spec.get("metrics") or []
    if len(metric_specs) != 1 or metric_specs[0].get("type") != "Resource" or \
            (metric_specs[0].get("resource") or {}).get("name") != "cpu":
        raise MetricError("the simulated metrics-server serves only the cpu resource metric")
    target: Any = (metric_specs[0]["resource"].get("target") or {})
    samples = _samples(p, ns, dep_spec.get("selector") or {}, load)
    if target.get("type") == "AverageValue":
        target_m = quantity(str(target.get("averageValue", "0"))) * 1000
        proposal, average = replicas_for_average_value(current, samples, target_m or 1.0)
        current_metric: Obj = {"averageValue": f"{int(average)}m"}
        above = average > target_m
    else:
        wanted = int(target.get("averageUtilization", 80))
        proposal, utilization, average = replicas_for_utilization(current, samples, wanted)
        current_metric = {"averageUtilization": utilization, "averageValue": f"{int(average)}m"}
        above = utilization > wanted
    metrics = [{"type": "Resource", "resource": {"name": "cpu", "current": current_metric}}]
    return proposal, metrics, f"{CPU_METRIC} above target" if above else "All metrics below target"
