"""Chaos Mesh experiments (`chaos-mesh.org/v1alpha1`): the fault lasts until the experiment is removed.

The resources are exactly what one would `kubectl apply` on a cluster running Chaos Mesh, so the same injection
runs against the simulator and a real cluster.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from agent_sre.apps.catalog import PART_OF, AppSpec
from agent_sre.faults.base import FaultContext, FaultParams, FaultType
from agent_sre.kube.client import Kube
from agent_sre.models.tools import ToolCall

_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_DURATION = r"^[0-9]+(ms|s|m|h)$"


class _ChaosFault(FaultType):
    kind = "PodChaos"
    symptom_kind = "errors"

    def experiment_name(self, ctx: FaultContext) -> str:
        return ctx.params.experiment

    def spec(self, ctx: FaultContext) -> dict[str, Any]:
        raise NotImplementedError

    def selector(self, ctx: FaultContext) -> dict[str, Any]:
        return {"namespaces": [ctx.namespace], "labelSelectors": {"app": ctx.target}}

    def _inject(self, k8s: Kube, ctx: FaultContext) -> None:
        k8s.create_chaos(ctx.namespace, self.kind, {
            "metadata": {"name": self.experiment_name(ctx), "labels": {PART_OF: ctx.app.name}},
            "spec": self.spec(ctx)})

    def _clear(self, k8s: Kube, ctx: FaultContext) -> None:
        k8s.remove(self.kind, ctx.namespace, self.experiment_name(ctx))

    def root_cause(self, ctx: FaultContext) -> str:
        return f"{self.kind.lower()}/{self.experiment_name(ctx)}"

    def fix(self, ctx: FaultContext) -> list[ToolCall]:
        return [ToolCall(tool="delete_chaos_experiment", args={"kind": self.kind, "name": self.experiment_name(ctx)})]


class PodKillParams(FaultParams):
    experiment: str = Field(pattern=_NAME)
    every: str = Field(default="1m", pattern=_DURATION)


class ChaosPodKill(_ChaosFault):
    name = "chaos_pod_kill"
    summary = "a Chaos Mesh Schedule kills one of the target's pods every minute (pods keep restarting fresh)"
    fault_class = "chaos/pod-kill"
    modelled_on = "AIOpsLab pod_kill, ITBench Chaos Mesh PodChaos"
    Params = PodKillParams
    kind = "Schedule"
    alert_name = "HighErrorRate"
    severity = "warning"
    symptom_kind = "partial"

    def defaults(self, app: AppSpec, target: str) -> dict[str, Any]:
        return {"experiment": f"{target}-pod-kill"}

    def spec(self, ctx: FaultContext) -> dict[str, Any]:
        return {"schedule": f"@every {ctx.params.every}", "type": "PodChaos", "historyLimit": 5,
                "concurrencyPolicy": "Forbid",
                "podChaos": {"action": "pod-kill", "mode": "one", "selector": self.selector(ctx)}}


class PodFailureParams(FaultParams):
    experiment: str = Field(pattern=_NAME)
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


class DelayParams(FaultParams):
    experiment: str = Field(pattern=_NAME)
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


class LossParams(FaultParams):
    experiment: str = Field(pattern=_NAME)
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


class StressParams(FaultParams):
    experiment: str = Field(pattern=_NAME)
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


class AbortParams(FaultParams):
    experiment: str = Field(pattern=_NAME)


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
