"""Chaos Mesh experiments (`chaos-mesh.org/v1alpha1`): the fault lasts until the experiment is removed.

The resources are exactly what one would `kubectl apply` on a cluster running Chaos Mesh, so the same injection
runs against the simulator and a real cluster. With a `schedule` (cron, or `@every 2m`) the experiment is the
template of a `Schedule`, which spawns it afresh at every tick (`<name>-<suffix>`, owned by the Schedule): deleting
that child only lets the next tick bring the fault back; the fix is deleting (or pausing) the Schedule.

Every experiment takes Chaos Mesh's selector `mode` (and its `value`): `one` pod of the target, `all`, `fixed`
(a count), `fixed-percent` or `random-max-percent` (a percentage). A mode that leaves some pods alone is a partial
outage: `mode: one` on a two-replica service leaves it degraded but serving.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from agent_sre.apps.catalog import PART_OF, AppSpec
from agent_sre.faults.base import FaultContext, FaultError, FaultParams, FaultType, first_caller
from agent_sre.kube.chaosmesh import mode_count
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
    # Chaos Mesh's selector mode (None: the fault's own, `default_mode`) and its value: fixed, how many pods;
    # fixed-percent and random-max-percent, what percentage
    mode: Literal["one", "all", "fixed", "fixed-percent", "random-max-percent"] | None = None
    value: int | None = None

    @model_validator(mode="after")
    def _value_fits_mode(self) -> ScheduledParams:
        """Chaos Mesh reads `value` only for the counting modes, and refuses a count below 1 or a percentage
        outside (0, 100]; saying so here beats an experiment that selects nothing."""
        if self.mode in (None, "one", "all"):
            if self.value is not None:
                raise ValueError(f"mode {self.mode or 'the default'!r} takes no value; give mode 'fixed', "
                                 f"'fixed-percent' or 'random-max-percent' with it")
        elif self.value is None:
            raise ValueError(f"mode {self.mode!r} needs a value ("
                             f"{'a number of pods' if self.mode == 'fixed' else 'a percentage'})")
        elif self.value < 1 or self.mode != "fixed" and self.value > 100:
            raise ValueError(f"mode {self.mode!r}: value {self.value} is out of range (" +
                             ("at least 1 pod)" if self.mode == "fixed" else "a percentage in 1..100)"))
        return self


class _ChaosFault(FaultType):
    kind = "PodChaos"
    symptom_kind = "errors"
    default_mode = "all"

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

    def scope(self, ctx: FaultContext) -> dict[str, Any]:
        """The experiment's selector with its mode (and value)."""
        value = {} if ctx.params.value is None else {"value": str(ctx.params.value)}
        return {"mode": self.mode(ctx), **value, "selector": self.selector(ctx)}

    def mode(self, ctx: FaultContext) -> str:
        return str(ctx.params.mode or self.default_mode)

    def validate(self, ctx: FaultContext) -> None:
        """A mode must select a pod of the target's replicas: fixed-percent 40 of 2 pods selects none (Chaos
        Mesh rounds down), and random-max-percent draws its percentage from 0, so it may select none."""
        if self.mode(ctx) == "random-max-percent":
            raise FaultError(f"fault {self.name!r}: mode 'random-max-percent' may select no pod (Chaos Mesh draws "
                             f"the percentage from 0 to {ctx.params.value}), so the incident may not happen; use "
                             f"'fixed' or 'fixed-percent'")
        if mode_count(self.mode(ctx), ctx.params.value, ctx.svc.replicas) == 0:
            raise FaultError(f"fault {self.name!r}: mode {self.mode(ctx)!r} value {ctx.params.value} selects no pod "
                             f"of {ctx.target}'s {ctx.svc.replicas} (Chaos Mesh rounds the share down)")

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
    default_mode = "one"

    def defaults(self, app: AppSpec, target: str) -> dict[str, Any]:
        return {"experiment": f"{target}-pod-kill"}

    def schedule(self, ctx: FaultContext) -> str:
        """Always under a Schedule (one kill is a transient): `schedule`, else every `every`."""
        return ctx.params.schedule or f"@every {ctx.params.every}"

    def spec(self, ctx: FaultContext) -> dict[str, Any]:
        return {"action": "pod-kill", **self.scope(ctx)}


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
        return {"action": "pod-failure", **self.scope(ctx), "duration": ctx.params.duration}


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
        return {"action": "delay", **self.scope(ctx), "direction": "to",
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
        return {"action": "loss", **self.scope(ctx), "direction": "to",
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
        return {**self.scope(ctx),
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
        return {**self.scope(ctx), "target": "Request", "port": ctx.svc.port,
                "path": "*", "abort": True}


class DnsParams(ScheduledParams):
    host: str = Field(pattern=_NAME)  # the dependency whose name stops resolving
    action: Literal["error", "random"] = "error"


class ChaosDns(_ChaosFault):
    name = "chaos_dns"
    summary = "Chaos Mesh DNSChaos fails (or mis-answers) the target's lookups of a dependency (unreachable by name)"
    fault_class = "chaos/dns"
    modelled_on = "Chaos Mesh DNSChaos"
    Params = DnsParams
    kind = "DNSChaos"
    alert_name = "HighErrorRate"

    def targets(self, app: AppSpec) -> list[str]:
        return [s.name for s in app.services if any(e.critical for e in s.deps)]

    def defaults(self, app: AppSpec, target: str) -> dict[str, Any]:
        host = next(e.callee for e in app.service(target).deps if e.critical)
        return {"experiment": f"{target}-dns", "host": host}

    def validate(self, ctx: FaultContext) -> None:
        super().validate(ctx)
        critical = [e.callee for e in ctx.svc.deps if e.critical]
        if ctx.params.host not in critical:
            raise FaultError(f"fault {self.name!r}: {ctx.target} does not depend on {ctx.params.host!r}; its "
                             f"dependencies: {', '.join(critical)}")

    def spec(self, ctx: FaultContext) -> dict[str, Any]:
        """Patterns as one writes them for an in-cluster name: the service's FQDN and anything under it."""
        return {"action": ctx.params.action, **self.scope(ctx),
                "patterns": [f"{ctx.params.host}.{ctx.namespace}.svc.*"]}

    def involved(self, ctx: FaultContext) -> set[str]:
        return {ctx.target, ctx.params.host}


class IoParams(ScheduledParams):
    action: Literal["latency", "fault"] = "latency"
    delay: str = Field(default="400ms", pattern=_DURATION)  # latency: added to each file operation
    percent: int = Field(default=100, ge=1, le=100)  # the share of file operations affected
    volume_path: str = Field(default="/var/lib/postgresql/data", pattern=r"^/[-_./a-zA-Z0-9]*$")


class ChaosIo(_ChaosFault):
    name = "chaos_io"
    summary = "Chaos Mesh IOChaos slows or fails the file operations on a database's volume (slow or failing queries)"
    fault_class = "chaos/io"
    modelled_on = "Chaos Mesh IOChaos (latency, fault) on a stateful service's volume"
    Params = IoParams
    kind = "IOChaos"

    def targets(self, app: AppSpec) -> list[str]:
        return [s.name for s in app.services if s.software.runtime == "postgres"]

    def defaults(self, app: AppSpec, target: str) -> dict[str, Any]:
        return {"experiment": f"{target}-io"}

    def alert_name_for(self, ctx: FaultContext) -> str:
        return "HighLatency" if ctx.params.action == "latency" else "HighErrorRate"

    def symptom_kind_for(self, ctx: FaultContext) -> str:
        return "slow" if ctx.params.action == "latency" else "errors"

    def alerted_service(self, ctx: FaultContext) -> str:
        """A database's callers notice: their requests wait on (or fail with) its queries."""
        return first_caller(ctx)

    def validate(self, ctx: FaultContext) -> None:
        super().validate(ctx)
        if not ctx.svc.software.keeps_files_under(ctx.params.volume_path):
            raise FaultError(f"fault {self.name!r}: {ctx.target} keeps its files in {ctx.svc.software.data_dir}; "
                             f"volume_path {ctx.params.volume_path} is not on them")

    def spec(self, ctx: FaultContext) -> dict[str, Any]:
        """Every file operation under the volume (no `path` or `methods` filter); a fault returns EIO (errno 5)."""
        effect = {"delay": ctx.params.delay} if ctx.params.action == "latency" else {"errno": 5}
        return {"action": ctx.params.action, **self.scope(ctx), "volumePath": ctx.params.volume_path, **effect,
                "percent": ctx.params.percent}
