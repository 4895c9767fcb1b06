"""Chaos Mesh experiments (`chaos-mesh.org/v1alpha1`): the fault lasts until the experiment is removed.

The resources are exactly what one would `kubectl apply` on a cluster running Chaos Mesh, so the same injection
runs against the simulator and a real cluster. With a `schedule` (cron, or `@every 2m`) the experiment is the
template of a `Schedule`, which spawns it afresh at every tick (`<name>-<suffix>`, owned by the Schedule): deleting
that child only lets the next tick bring the fault back; the fix is deleting (or pausing) the Schedule.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from agent_sre.apps.catalog import PART_OF, AppSpec
from agent_sre.faults.base import FaultContext, FaultParams, FaultType
from agent_sre.kube.client import Kube
from agent_sre.models.tools import ToolCall

_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_DURATION = r"^[0-9]+(ms|s|m|h)$"
_SCHEDULE = r"^@every [0-9]+(s|m|h)$|^@(hourly|daily)$|^[-*/,0-9]+ [-*/,0-9]+ \* \* \*$"


class ScheduledParams(FaultParams):
    """Every chaos fault's schedule variant: with `schedule`, a `Schedule` spawns the experiment at each tick."""

    experiment: str = Field(pattern=_NAME)
    schedule: str | None = Field(default=None, pattern=_SCHEDULE)
    concurrency: Literal["Forbid", "Allow"] | None = None  # the Schedule's concurrencyPolicy (default Forbid)
    history_limit: int | None = Field(default=None, ge=1, le=100)  # its historyLimit (default 5)


class _ChaosFault(FaultType):
    kind = "PodChaos"
    symptom_kind = "errors"

    def experiment_name(self, ctx: FaultContext) -> str:
        return str(ctx.params.experiment)

    def schedule(self, ctx: FaultContext) -> str | None:
        """The cron schedule the experiment runs under, or None: a single experiment."""
        return getattr(ctx.params, "schedule", None)

    def resource_kind(self, ctx: FaultContext) -> str:
        """The kind the fault creates (and its fix deletes): the Schedule when there is one."""
        return "Schedule" if self.schedule(ctx) else self.kind

    def spec(self, ctx: FaultContext) -> dict[str, Any]:
        raise NotImplementedError

    def selector(self, ctx: FaultContext) -> dict[str, Any]:
        return {"namespaces": [ctx.namespace], "labelSelectors": {"app": ctx.target}}

    def _inject(self, k8s: Kube, ctx: FaultContext) -> None:
        spec = self.spec(ctx)
        schedule = self.schedule(ctx)
        if schedule:
            spec = {"schedule": schedule, "type": self.kind,
                    "historyLimit": getattr(ctx.params, "history_limit", None) or 5,
                    "concurrencyPolicy": getattr(ctx.params, "concurrency", None) or "Forbid",
                    self.kind[:1].lower() + self.kind[1:]: spec}
        k8s.create_chaos(ctx.namespace, self.resource_kind(ctx), {
            "metadata": {"name": self.experiment_name(ctx), "labels": {PART_OF: ctx.app.name}}, "spec": spec})

    def _clear(self, k8s: Kube, ctx: FaultContext) -> None:
        k8s.remove(self.resource_kind(ctx), ctx.namespace, self.experiment_name(ctx))

    def root_cause(self, ctx: FaultContext) -> str:
        return f"{self.resource_kind(ctx).lower()}/{self.experiment_name(ctx)}"

    def fix(self, ctx: FaultContext) -> list[ToolCall]:
        return [ToolCall(tool="delete_chaos_experiment", args={"kind": self.resource_kind(ctx),
                                                               "name": self.experiment_name(ctx)})]


class PodKillParams(ScheduledParams):
    every: str = Field(default="1m", pattern=_DURATION)


class ChaosPodKill(_ChaosFault):
    name = "chaos_pod_kill"
    summary = "a Chaos Mesh Schedule kills one of the target's pods every minute (pods keep restarting fresh)"
    fault_class = "chaos/pod-kill"
    modelled_on = "AIOpsLab pod_kill, ITBench Chaos Mesh PodChaos"
    Params = PodKillParams
    alert_name = "HighErrorRate"
    severity = "warning"
    symptom_kind = "partial"

    def defaults(self, app: AppSpec, target: str) -> dict[str, Any]:
        return {"experiment": f"{target}-pod-kill"}

    def schedule(self, ctx: FaultContext) -> str:
        """Always under a Schedule (one kill is a transient): `schedule`, else every `every`."""
        return ctx.params.schedule or f"@every {ctx.params.every}"

    def spec(self, ctx: FaultContext) -> dict[str, Any]:
        return {"action": "pod-kill", "mode": "one", "selector": self.selector(ctx)}


class PodFailureParams(ScheduledParams):
    duration: str = Field(default="2h", pattern=_DURATION)


class ChaosPodFailure(_ChaosFault):
    name = "chaos_pod_failure"
    summary = "Chaos Mesh pod-failure swaps the target's containers for pause (Running, never Ready)"
    fault_class = "chaos/pod-failure"
    modelled_on = "AIOpsLab pod_failure, ITBench Chaos Mesh PodChaos"
    Params = PodFailureParams
    alert_name = "KubeDeploymentReplicasMismatch"

    def defaults(self, app: AppSpec, target: str) -> dict[str, Any]:
        return {"experiment": f"{target}-pod-failure"}

    def spec(self, ctx: FaultContext) -> dict[str, Any]:
        return {"action": "pod-failure", "mode": "all", "duration": ctx.params.duration,
                "selector": self.selector(ctx)}


class DelayParams(ScheduledParams):
    latency: str = Field(default="1500ms", pattern=_DURATION)
    jitter: str = Field(default="200ms", pattern=_DURATION)


class ChaosNetworkDelay(_ChaosFault):
    name = "chaos_network_delay"
    summary = "Chaos Mesh NetworkChaos delays every packet to the target (latency climbs the call graph)"
    fault_class = "chaos/network-delay"
    modelled_on = "AIOpsLab network_delay, ITBench Chaos Mesh NetworkChaos"
    Params = DelayParams
    kind = "NetworkChaos"
    alert_name = "HighLatency"
    severity = "warning"
    symptom_kind = "slow"

    def defaults(self, app: AppSpec, target: str) -> dict[str, Any]:
        return {"experiment": f"{target}-network-delay"}

    def spec(self, ctx: FaultContext) -> dict[str, Any]:
        return {"action": "delay", "mode": "all", "direction": "to", "selector": self.selector(ctx),
                "delay": {"latency": ctx.params.latency, "jitter": ctx.params.jitter, "correlation": "25"}}


class LossParams(ScheduledParams):
    loss: int = Field(default=60, ge=1, le=100)


class ChaosNetworkLoss(_ChaosFault):
    name = "chaos_network_loss"
    summary = "Chaos Mesh NetworkChaos drops a share of the target's packets (timeouts and errors)"
    fault_class = "chaos/network-loss"
    modelled_on = "AIOpsLab network_loss, ITBench Chaos Mesh NetworkChaos"
    Params = LossParams
    kind = "NetworkChaos"
    alert_name = "HighErrorRate"

    def defaults(self, app: AppSpec, target: str) -> dict[str, Any]:
        return {"experiment": f"{target}-network-loss"}

    def spec(self, ctx: FaultContext) -> dict[str, Any]:
        return {"action": "loss", "mode": "all", "direction": "to", "selector": self.selector(ctx),
                "loss": {"loss": str(ctx.params.loss), "correlation": "25"}}


class StressParams(ScheduledParams):
    workers: int = Field(default=4, ge=1, le=16)
    load: int = Field(default=100, ge=1, le=100)


class ChaosStress(_ChaosFault):
    name = "chaos_stress"
    summary = "Chaos Mesh StressChaos burns CPU in the target's pods (slow responses, high usage in kubectl top)"
    fault_class = "chaos/stress"
    modelled_on = "AIOpsLab/ITBench Chaos Mesh StressChaos (CPU)"
    Params = StressParams
    kind = "StressChaos"
    alert_name = "HighLatency"
    severity = "warning"
    symptom_kind = "slow"

    def defaults(self, app: AppSpec, target: str) -> dict[str, Any]:
        return {"experiment": f"{target}-cpu-stress"}

    def spec(self, ctx: FaultContext) -> dict[str, Any]:
        return {"mode": "all", "selector": self.selector(ctx),
                "stressors": {"cpu": {"workers": ctx.params.workers, "load": ctx.params.load}}}


class AbortParams(ScheduledParams):
    pass


class ChaosHttpAbort(_ChaosFault):
    name = "chaos_http_abort"
    summary = "Chaos Mesh HTTPChaos aborts every HTTP request to the target (callers see EOF)"
    fault_class = "chaos/http-abort"
    modelled_on = "ITBench Chaos Mesh HTTPChaos abort"
    Params = AbortParams
    kind = "HTTPChaos"
    alert_name = "HighErrorRate"

    def targets(self, app: AppSpec) -> list[str]:
        return [s.name for s in app.services if s.probe == "http"]

    def defaults(self, app: AppSpec, target: str) -> dict[str, Any]:
        return {"experiment": f"{target}-http-abort"}

    def spec(self, ctx: FaultContext) -> dict[str, Any]:
        return {"mode": "all", "selector": self.selector(ctx), "target": "Request", "port": ctx.svc.port,
                "path": "*", "abort": True}
