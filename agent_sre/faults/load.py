"""Faults of load and outside traffic: a surge on an under-provisioned service, an autoscaler a quota holds back,
and a NetworkPolicy that shuts the users out of the entry service.

The surge is the load generator's (`apps.traffic`): its ConfigMap lives in its own namespace, out of the agent's
reach, so the agent must serve the traffic, not wish it away.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from pydantic import Field

from agent_sre.apps import traffic
from agent_sre.apps.catalog import PART_OF, AppSpec, ServiceSpec
from agent_sre.faults.base import FaultContext, FaultError, FaultParams, FaultType
from agent_sre.faults.platform import QUOTA, DenyingPolicy, guarded
from agent_sre.kube.client import Kube, KubeError
from agent_sre.kube.quantity import quantity
from agent_sre.models.tools import ToolCall
from agent_sre.tools.write_rules import DEFAULT_MAX_REPLICAS

HPA_TARGET_UTILIZATION = 70  # what the teams' autoscalers aim at, and the rule a fix sizes a deployment by
MAX_SURGE = 20.0
MAX_SIZED = 10  # replicas a fix may ask for: more would not fit the nodes


def saturation(app: AppSpec, service: str) -> float:
    """How many times its normal traffic saturates the service's pods."""
    svc = app.service(service)
    return svc.software.capacity_rps * svc.replicas / traffic.demand(app)[service]


def sized(svc: ServiceSpec, factor: float) -> int:
    """Replicas that bring the pods' CPU back to the autoscalers' target: ceil(replicas x factor x usage /
    (target x request)), the HPA's own rule on a normal day's usage."""
    request_m = quantity(svc.cpu) * 1000
    return math.ceil(svc.replicas * factor * svc.software.cpu_millicores / (HPA_TARGET_UTILIZATION / 100 * request_m)
                     - 1e-9)


class SurgeParams(FaultParams):
    factor: float = Field(gt=1.0, le=MAX_SURGE)


class TrafficSurge(FaultType):
    name = "traffic_surge"
    summary = "the load generator sends a service several times its traffic: its pods saturate (CPU, errors)"
    fault_class = "capacity/load"
    modelled_on = "AIOpsLab / ITBench load spike on an under-provisioned service"
    Params: ClassVar[type[FaultParams]] = SurgeParams
    alert_name = "HighErrorRate"

    def targets(self, app: AppSpec) -> list[str]:
        """Stateless, unpinned services a surge of at most 20x saturates while what they call keeps up, and that
        ten pods serve."""
        return [s.name for s in app.services if s.tier != "data" and not s.node_selector and
                saturation(app, s.name) * 1.2 <= MAX_SURGE and
                sized(s, self._default_factor(app, s.name)) <= MAX_SIZED and
                self._others_keep_up(app, s.name, self._default_factor(app, s.name))]

    @staticmethod
    def _default_factor(app: AppSpec, target: str) -> float:
        return math.ceil(saturation(app, target) * 1.2 * 2) / 2  # a fifth past saturation, in halves

    @staticmethod
    def _others_keep_up(app: AppSpec, target: str, factor: float) -> bool:
        demand = traffic.demand(app, {target: factor})
        return all(demand[s.name] <= s.software.capacity_rps * s.replicas * traffic.SERVED_UTILISATION
                   for s in app.services if s.name != target)

    def defaults(self, app: AppSpec, target: str) -> dict[str, Any]:
        return {"factor": self._default_factor(app, target)}

    def validate(self, ctx: FaultContext) -> None:
        factor, sat = ctx.params.factor, saturation(ctx.app, ctx.target)
        if factor <= sat:
            raise FaultError(f"{ctx.target}'s pods serve {sat:.2f} times its normal traffic: a surge of {factor} "
                             "saturates nothing (use more)")
        if not self._others_keep_up(ctx.app, ctx.target, factor):
            raise FaultError(f"a surge of {factor} on {ctx.target} saturates what it calls too: use less")

    def _surge(self, k8s: Kube, ctx: FaultContext) -> None:
        if k8s.find("namespace", traffic.LOADGEN_NAMESPACE) is None:
            k8s.create("namespace", "", {"metadata": {"name": traffic.LOADGEN_NAMESPACE}})
        data = {ctx.target: f"{ctx.params.factor:g}"}
        try:
            k8s.create("configmap", traffic.LOADGEN_NAMESPACE,
                       {"metadata": {"name": ctx.namespace, "labels": {PART_OF: "loadgen"}}, "data": data})
        except KubeError as exc:
            if exc.status != 409:
                raise
            k8s.set_configmap_key(traffic.LOADGEN_NAMESPACE, ctx.namespace, ctx.target, data[ctx.target])

    def _inject(self, k8s: Kube, ctx: FaultContext) -> None:
        self._surge(k8s, ctx)

    def _clear(self, k8s: Kube, ctx: FaultContext) -> None:
        k8s.remove("configmap", traffic.LOADGEN_NAMESPACE, ctx.namespace)

    def fix(self, ctx: FaultContext) -> list[ToolCall]:
        return [ToolCall(tool="scale", args={"deployment": ctx.target, "replicas": sized(ctx.svc, ctx.params.factor)})]


def quota_room(app: AppSpec, svc: ServiceSpec) -> int:
    """How many pods of `svc` the app's ResourceQuota admits beyond every pod the app runs."""
    room = [int(app.quota["pods"]) - sum(s.replicas for s in app.services)]
    for key, field in (("requests.cpu", "cpu"), ("requests.memory", "memory")):
        if key in app.quota:
            used = sum(s.replicas * quantity(getattr(s, field)) for s in app.services)
            room.append(math.floor((quantity(app.quota[key]) - used) / quantity(getattr(svc, field))))
    return min(room)


def autoscaler(ctx: FaultContext, max_replicas: int) -> dict[str, Any]:
    """The team's autoscaler of the target: from its catalog replicas up to `max_replicas`, at 70% CPU."""
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": ctx.target, "labels": {PART_OF: ctx.app.name}},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": ctx.target},
                     "minReplicas": ctx.svc.replicas, "maxReplicas": max_replicas,
                     "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
                         "type": "Utilization", "averageUtilization": HPA_TARGET_UTILIZATION}}}]}}


class HpaMaxParams(SurgeParams):
    max_replicas: int = Field(ge=1, le=50)


class HpaMaxReplicas(TrafficSurge):
    """A surge the target's autoscaler answers up to its `maxReplicas`, which is below what the traffic needs: the
    HPA holds the deployment at its maximum with ScalingLimited True (TooManyReplicas: "the desired replica count is
    more than the maximum replica count"), as upstream's autoscaling/v2 status says, and the pods stay overloaded.
    Scaling the deployment by hand does not last: the autoscaler owns the count and sets it back to its maximum."""

    name = "hpa_max_replicas"
    summary = "a surge the target's HPA answers, but its maxReplicas is below what the traffic needs (TooManyReplicas)"
    fault_class = "capacity/autoscaler"
    modelled_on = "ITBench HPA capped at maxReplicas under load (KubeHpaMaxedOut)"
    Params = HpaMaxParams
    alert_name = "KubeHpaMaxedOut"

    def targets(self, app: AppSpec) -> list[str]:
        """Stateless, unpinned services a surge of at most 20x overloads past one pod more than the catalog runs
        (so the autoscaler scales, and says so, before its maximum stops it), while what they call keeps up, and
        whose fix stays within the replicas the write rules allow without approval."""
        return [s.name for s in app.services if s.tier != "data" and not s.node_selector and
                (factor := self._default_factor(app, s.name)) <= MAX_SURGE and
                self._others_keep_up(app, s.name, factor) and
                traffic.needed_pods(app, s.name, {s.name: factor}) >= s.replicas + 2 and
                sized(s, factor) + 2 <= DEFAULT_MAX_REPLICAS]

    @staticmethod
    def _default_factor(app: AppSpec, target: str) -> float:
        return math.ceil(saturation(app, target) * 1.8 * 2) / 2  # four fifths past saturation, in halves

    def defaults(self, app: AppSpec, target: str) -> dict[str, Any]:
        """One pod fewer than serve the surge."""
        factor = self._default_factor(app, target)
        return {"factor": factor, "max_replicas": traffic.needed_pods(app, target, {target: factor}) - 1}

    def validate(self, ctx: FaultContext) -> None:
        """The autoscaler scales (its maximum is above the catalog's replicas) and stops short of serving the
        surge; the fix's pods pass the namespace's quota and the write rules' replica bound."""
        super().validate(ctx)
        needed = traffic.needed_pods(ctx.app, ctx.target, {ctx.target: ctx.params.factor})
        if not ctx.svc.replicas < ctx.params.max_replicas < needed:
            raise FaultError(f"{needed} pods of {ctx.target} serve the surge: a maximum of {ctx.params.max_replicas} "
                             f"must be above its {ctx.svc.replicas} replicas and below that")
        fixed = self.fix(ctx)[0].args["max_replicas"]
        if fixed > min(DEFAULT_MAX_REPLICAS, ctx.svc.replicas + quota_room(ctx.app, ctx.svc)):
            raise FaultError(f"a surge of {ctx.params.factor} needs {fixed} pods of {ctx.target}: more than the "
                             f"namespace's quota or the write rules' bound of {DEFAULT_MAX_REPLICAS} admit (use less)")

    def _inject(self, k8s: Kube, ctx: FaultContext) -> None:
        k8s.create("horizontalpodautoscaler", ctx.namespace, autoscaler(ctx, ctx.params.max_replicas))
        self._surge(k8s, ctx)

    def _clear(self, k8s: Kube, ctx: FaultContext) -> None:
        super()._clear(k8s, ctx)
        k8s.remove("horizontalpodautoscaler", ctx.namespace, ctx.target)

    def root_cause(self, ctx: FaultContext) -> str:
        return f"horizontalpodautoscaler/{ctx.target}"

    def fix(self, ctx: FaultContext) -> list[ToolCall]:
        return [ToolCall(tool="set_hpa_max", args={"name": ctx.target,
                                                   "max_replicas": sized(ctx.svc, ctx.params.factor) + 2})]

    def wrong_fix(self, ctx: FaultContext) -> list[ToolCall]:
        """Scale by hand: the autoscaler sets the count back to its maximum at its next sync."""
        return [ToolCall(tool="scale", args={"deployment": ctx.target,
                                             "replicas": sized(ctx.svc, ctx.params.factor)})]


class HpaQuotaParams(SurgeParams):
    pods: int = Field(ge=1)
    max_replicas: int = Field(ge=2, le=50)


class HpaQuotaExceeded(TrafficSurge):
    name = "hpa_quota_exceeded"
    summary = "a surge the target's HPA answers, but the namespace's pod quota forbids the new pods (FailedCreate)"
    fault_class = "capacity/quota"
    modelled_on = "ITBench ResourceQuota blocking an autoscaler's scale-out"
    Params = HpaQuotaParams
    alert_name = "KubeHpaReplicasMismatch"

    def defaults(self, app: AppSpec, target: str) -> dict[str, Any]:
        factor = self._default_factor(app, target)
        return {"factor": factor, "pods": sum(s.replicas for s in app.services),
                "max_replicas": sized(app.service(target), factor) + 2}

    def validate(self, ctx: FaultContext) -> None:
        super().validate(ctx)
        running = sum(s.replicas for s in ctx.app.services)
        if ctx.params.pods > running:
            raise FaultError(f"the app runs {running} pods; a quota of {ctx.params.pods} leaves room for the "
                             f"autoscaler (use at most {running})")
        if ctx.params.max_replicas < sized(ctx.svc, ctx.params.factor):
            raise FaultError(f"the autoscaler needs up to {sized(ctx.svc, ctx.params.factor)} replicas for this "
                             "surge: a lower maximum is another fault")

    def _inject(self, k8s: Kube, ctx: FaultContext) -> None:
        k8s.set_quota(ctx.namespace, QUOTA, {"pods": str(ctx.params.pods)})
        k8s.create("horizontalpodautoscaler", ctx.namespace, autoscaler(ctx, ctx.params.max_replicas))
        self._surge(k8s, ctx)

    def _clear(self, k8s: Kube, ctx: FaultContext) -> None:
        super()._clear(k8s, ctx)
        k8s.remove("horizontalpodautoscaler", ctx.namespace, ctx.target)
        k8s.set_quota(ctx.namespace, QUOTA, {"pods": ctx.app.quota["pods"]})

    def root_cause(self, ctx: FaultContext) -> str:
        return f"resourcequota/{QUOTA}"

    def fix(self, ctx: FaultContext) -> list[ToolCall]:
        return [ToolCall(tool="patch_quota", args={"name": QUOTA, "hard": {"pods": ctx.app.quota["pods"]}})]

    def wrong_fix(self, ctx: FaultContext) -> list[ToolCall]:
        """Scale by hand: the quota forbids those pods as well (and the autoscaler owns the count)."""
        return [ToolCall(tool="scale", args={"deployment": ctx.target,
                                             "replicas": sized(ctx.svc, ctx.params.factor)})]


class IngressPolicyDeny(DenyingPolicy):
    name = "ingress_policy_deny"
    summary = "a NetworkPolicy on the entry service admits only its own namespace: the users' ingress times out"
    modelled_on = "ITBench NetworkPolicy blocking ingress (from the ingress controller's namespace)"

    def targets(self, app: AppSpec) -> list[str]:
        entry = app.entry()
        return [] if guarded(app, entry.name) else [entry.name]

    def defaults(self, app: AppSpec, target: str) -> dict[str, Any]:
        return {"policy": f"{target}-same-namespace-only"}

    def admitted(self, ctx: FaultContext) -> list[dict[str, Any]]:
        return [{"podSelector": {}}]
