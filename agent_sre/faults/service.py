"""Faults in how traffic reaches a service: its Service object, or its capacity."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from agent_sre.apps.catalog import AppSpec
from agent_sre.faults.base import FaultContext, FaultError, FaultParams, FaultType, first_caller
from agent_sre.kube.client import Kube
from agent_sre.models.tools import ToolCall


class _ServiceFault(FaultType):
    """Callers fail to reach the target: their error ratio alerts first (the target itself looks fine)."""

    alert_name = "HighErrorRate"

    def alerted_service(self, ctx: FaultContext) -> str:
        return first_caller(ctx)

    def involved(self, ctx: FaultContext) -> set[str]:
        return {ctx.target, first_caller(ctx)}


class TargetPortParams(FaultParams):
    target_port: int | str = Field(union_mode="left_to_right")


class ServiceTargetPort(_ServiceFault):
    name = "service_target_port"
    summary = "point the Service's targetPort at a port the pods do not listen on (connection refused)"
    fault_class = "network/service-port"
    modelled_on = "AIOpsLab k8s_target_port-misconfig, ITBench service port misconfiguration"
    Params = TargetPortParams

    def defaults(self, app: AppSpec, target: str) -> dict[str, Any]:
        return {"target_port": app.service(target).port + 1}

    def validate(self, ctx: FaultContext) -> None:
        port = ctx.params.target_port
        if port in (ctx.svc.port, str(ctx.svc.port), "http" if ctx.svc.probe == "http" else ctx.svc.name):
            raise FaultError(f"{ctx.target}'s pods listen on {port}; the Service would still work")
        if isinstance(port, int) and not 1 <= port <= 65535:
            raise FaultError(f"target_port {port} is not a port number")

    def _set(self, k8s: Kube, ctx: FaultContext, port: int | str) -> None:
        k8s.patch_service(ctx.namespace, ctx.target, [{"op": "replace", "path": "/spec/ports/0/targetPort",
                                                       "value": port}], "json")

    def _inject(self, k8s: Kube, ctx: FaultContext) -> None:
        self._set(k8s, ctx, ctx.params.target_port)

    def _clear(self, k8s: Kube, ctx: FaultContext) -> None:
        self._set(k8s, ctx, ctx.svc.port)

    def root_cause(self, ctx: FaultContext) -> str:
        return f"service/{ctx.target}"

    def fix(self, ctx: FaultContext) -> list[ToolCall]:
        return [ToolCall(tool="patch_service", args={"service": ctx.target, "target_port": ctx.svc.port})]


class PortParams(FaultParams):
    port: int = Field(ge=1, le=65535)


class ServicePort(_ServiceFault):
    """The Service's own `port` changed, its targetPort left alone: the endpoints still list every ready pod on the
    port it listens on, but callers dial `service:<old port>`, and kube-proxy forwards only the ports a Service
    declares (upstream pkg/proxy/iptables/proxier.go writes one KUBE-SVC rule per Service port; a ClusterIP on a
    port no rule names refuses the connection). See https://kubernetes.io/docs/concepts/services-networking/service/
    ("port" is what clients use, "targetPort" where the pods listen)."""

    name = "service_port_mismatch"
    summary = "change the Service's port (not its targetPort): callers dial the old one and are refused"
    fault_class = "network/service-port"
    modelled_on = "ITBench service port misconfiguration (Service port changed), AIOpsLab misconfigured service"
    Params = PortParams

    def targets(self, app: AppSpec) -> list[str]:
        return [s.name for s in app.services if app.callers(s.name)]  # its callers are who dial the port

    def defaults(self, app: AppSpec, target: str) -> dict[str, Any]:
        return {"port": 80 if app.service(target).port != 80 else 8080}

    def validate(self, ctx: FaultContext) -> None:
        if ctx.params.port == ctx.svc.port:
            raise FaultError(f"{ctx.target}'s callers dial port {ctx.svc.port}; the Service would still work")

    def _set(self, k8s: Kube, ctx: FaultContext, port: int) -> None:
        k8s.patch_service(ctx.namespace, ctx.target, [
            {"op": "replace", "path": "/spec/ports/0/port", "value": port},
            {"op": "replace", "path": "/spec/ports/0/targetPort", "value": ctx.svc.port}], "json")

    def _inject(self, k8s: Kube, ctx: FaultContext) -> None:
        self._set(k8s, ctx, ctx.params.port)

    def _clear(self, k8s: Kube, ctx: FaultContext) -> None:
        self._set(k8s, ctx, ctx.svc.port)

    def root_cause(self, ctx: FaultContext) -> str:
        return f"service/{ctx.target}"

    def fix(self, ctx: FaultContext) -> list[ToolCall]:
        return [ToolCall(tool="patch_service", args={"service": ctx.target, "port": ctx.svc.port})]

    def wrong_fix(self, ctx: FaultContext) -> list[ToolCall]:
        """The classic mix-up: set the targetPort (already right) to the port the callers dial."""
        return [ToolCall(tool="patch_service", args={"service": ctx.target, "target_port": ctx.svc.port})]


class SelectorParams(FaultParams):
    value: str = Field(pattern=r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


class ServiceSelector(_ServiceFault):
    name = "service_selector"
    summary = "change the Service's selector so it matches no pod (empty endpoints)"
    fault_class = "network/service-selector"
    modelled_on = "ITBench service selector misconfiguration"
    Params = SelectorParams

    def defaults(self, app: AppSpec, target: str) -> dict[str, Any]:
        return {"value": f"{target}-v2"}

    def validate(self, ctx: FaultContext) -> None:
        if ctx.params.value == ctx.target:
            raise FaultError(f"app={ctx.target} is the correct selector; it would not break anything")

    def _inject(self, k8s: Kube, ctx: FaultContext) -> None:
        k8s.patch_service(ctx.namespace, ctx.target, {"spec": {"selector": {"app": ctx.params.value}}})

    def _clear(self, k8s: Kube, ctx: FaultContext) -> None:
        k8s.patch_service(ctx.namespace, ctx.target, {"spec": {"selector": {"app": ctx.target}}})

    def root_cause(self, ctx: FaultContext) -> str:
        return f"service/{ctx.target}"

    def fix(self, ctx: FaultContext) -> list[ToolCall]:
        return [ToolCall(tool="patch_service", args={"service": ctx.target, "selector": {"app": ctx.target}})]


class ScaledToZero(_ServiceFault):
    name = "scaled_to_zero"
    summary = "scale a deployment to zero replicas (callers get connection refused)"
    fault_class = "capacity/scaled-to-zero"
    modelled_on = "AIOpsLab scale_pod_zero"

    def alert_name_for(self, ctx: FaultContext) -> str:
        # nobody inside calls an entry service: Prometheus notices its scrape targets vanish
        return "HighErrorRate" if ctx.app.callers(ctx.target) else "TargetDown"

    def _inject(self, k8s: Kube, ctx: FaultContext) -> None:
        k8s.scale(ctx.namespace, ctx.target, 0)

    def _clear(self, k8s: Kube, ctx: FaultContext) -> None:
        k8s.scale(ctx.namespace, ctx.target, ctx.svc.replicas)

    def fix(self, ctx: FaultContext) -> list[ToolCall]:
        return [ToolCall(tool="scale", args={"deployment": ctx.target, "replicas": ctx.svc.replicas})]


class DependencyParams(FaultParams):
    dependency: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class DependencyDown(FaultType):
    name = "dependency_down"
    summary = "a critical dependency of the alerting service is down (scaled to zero); the alert is on its caller"
    fault_class = "dependency/unavailable"
    modelled_on = "AIOpsLab network_loss/pod_failure of a backing store, ITBench dependency unavailable"
    Params = DependencyParams
    alert_name = "HighErrorRate"

    def targets(self, app: AppSpec) -> list[str]:
        return [s.name for s in app.services if any(e.critical for e in s.deps)]

    def defaults(self, app: AppSpec, target: str) -> dict[str, Any]:
        return {"dependency": next(e.callee for e in app.service(target).deps if e.critical)}

    def validate(self, ctx: FaultContext) -> None:
        critical = [e.callee for e in ctx.svc.deps if e.critical]
        if ctx.params.dependency not in critical:
            raise FaultError(f"{ctx.params.dependency!r} is not a critical dependency of {ctx.target} "
                             f"(critical dependencies: {', '.join(critical)})")

    def _inject(self, k8s: Kube, ctx: FaultContext) -> None:
        k8s.scale(ctx.namespace, ctx.params.dependency, 0)

    def _clear(self, k8s: Kube, ctx: FaultContext) -> None:
        k8s.scale(ctx.namespace, ctx.params.dependency, ctx.app.service(ctx.params.dependency).replicas)

    def root_cause(self, ctx: FaultContext) -> str:
        return f"deployment/{ctx.params.dependency}"

    def involved(self, ctx: FaultContext) -> set[str]:
        return {ctx.target, ctx.params.dependency}

    def fix(self, ctx: FaultContext) -> list[ToolCall]:
        dep = ctx.app.service(ctx.params.dependency)
        return [ToolCall(tool="scale", args={"deployment": dep.name, "replicas": dep.replicas})]
