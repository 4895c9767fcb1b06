"""Faults shipped as a bad rollout: a deployment's pod template changes (a new revision), so the previous
revision is intact and `rollout_undo` is a real fix where a real SRE would use it. Whether the bad rollout takes
the service down or only gets stuck is the target's deployment strategy's doing (see `RolloutFault`); a memory
limit below the working set is the exception: the new pods pass their readiness probe before the first OOM kill,
so the rollout completes and then every pod crash-loops."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, model_validator

from agent_sre.apps.catalog import NODE_ALLOCATABLE_CPU, NODES, AppSpec, ServiceSpec, run_context
from agent_sre.apps.images import lookup
from agent_sre.apps.manifests import container_spec, deployment
from agent_sre.apps.software import check_value, effective_argv
from agent_sre.faults.base import FaultContext, FaultError, FaultParams, RolloutFault, restart_cause
from agent_sre.faults.platform import QUOTA
from agent_sre.kube.client import Kube
from agent_sre.kube.deployments import fenceposts
from agent_sre.kube.quantity import quantity
from agent_sre.models.scenario import GroundTruth
from agent_sre.models.tools import ToolCall
from agent_sre.models.verdict import HealthSnapshot

BUSYBOX = "docker.io/library/busybox:1.36"
MIB = 1024 * 1024
INIT_RESOURCES = {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "32Mi"}}


def _undo(ctx: FaultContext) -> list[ToolCall]:
    return [ToolCall(tool="rollout_undo", args={"deployment": ctx.target})]


class _TemplateFault(RolloutFault):
    """A fault that patches fields of the target's container; clearing patches the app's own values back."""

    group = "containers"

    def broken(self, ctx: FaultContext) -> dict[str, Any]:
        raise NotImplementedError

    def healthy(self, ctx: FaultContext) -> dict[str, Any]:
        raise NotImplementedError

    def cause(self, ctx: FaultContext) -> str:
        return restart_cause(ctx, f"update {ctx.target}")

    def _inject(self, k8s: Kube, ctx: FaultContext) -> None:
        k8s.patch_container(ctx.namespace, ctx.target, ctx.svc.container, self.broken(ctx), self.cause(ctx))

    def _clear(self, k8s: Kube, ctx: FaultContext) -> None:
        k8s.patch_container(ctx.namespace, ctx.target, ctx.svc.container, self.healthy(ctx),
                            restart_cause(ctx, f"restore {ctx.target} to its release configuration"))

    def fix(self, ctx: FaultContext) -> list[ToolCall]:
        return _undo(ctx)

    def direct_fix(self, ctx: FaultContext) -> list[ToolCall] | None:
        """Patch the container's own values back (a null removes what the fault added)."""
        fix = super().direct_fix(ctx)
        if fix is not None:
            return fix
        container = {"name": ctx.svc.container, **self.healthy(ctx)}
        return [ToolCall(tool="patch", args={"kind": "deployment", "name": ctx.target, "patch": {
            "spec": {"template": {"spec": {self.group: [container]}}}}})]


# --- image ------------------------------------------------------------------------------------------------------

class ImageParams(FaultParams):
    tag: str = Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


def _missing_tag(svc: ServiceSpec) -> str:
    """The next patch release, which was never pushed: the classic typo'd or not-yet-built tag."""
    parts = svc.tag.split(".")
    while True:
        parts[-1] = str(int(parts[-1]) + 1) if parts[-1].isdigit() else parts[-1] + "1"
        tag = ".".join(parts)
        if not svc.software.publishes(tag):
            return tag


class BadImage(_TemplateFault):
    name = "bad_image"
    summary = "deploy an image tag that does not exist in the registry (ErrImagePull / ImagePullBackOff)"
    fault_class = "deploy/image"
    modelled_on = "AIOpsLab misconfig_app (wrong image), ITBench invalid image tag"
    Params = ImageParams

    def defaults(self, app: AppSpec, target: str) -> dict[str, Any]:
        return {"tag": _missing_tag(app.service(target))}

    def validate(self, ctx: FaultContext) -> None:
        if ctx.svc.software.publishes(ctx.params.tag):
            raise FaultError(f"tag {ctx.params.tag!r} exists for {ctx.svc.repo}; pick one that does not "
                             f"(existing: {', '.join(ctx.svc.software.tags)})")

    def broken(self, ctx: FaultContext) -> dict[str, Any]:
        return {"image": f"{ctx.svc.repo}:{ctx.params.tag}"}

    def healthy(self, ctx: FaultContext) -> dict[str, Any]:
        return {"image": ctx.svc.image}

    def direct_fix(self, ctx: FaultContext) -> list[ToolCall] | None:
        return [ToolCall(tool="set_image", args={"deployment": ctx.target, "container": ctx.svc.container,
                                                 "image": ctx.svc.image})]

    def cause(self, ctx: FaultContext) -> str:
        return restart_cause(ctx, f"kubectl set image deployment/{ctx.target} {ctx.svc.container}="
                                  f"{ctx.svc.repo}:{ctx.params.tag}")


# --- environment ------------------------------------------------------------------------------------------------

class EnvParams(FaultParams):
    env: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    value: str = Field(max_length=512)


def _typo_host(host: str) -> str:
    if host in ("postgres", "db"):
        return f"{host}-primary"
    if host == "redis":
        return "redis-master"
    return host + ("-v2" if host.endswith("s") else "s")


def _breaking_value(svc: ServiceSpec, name: str, value: str) -> str:
    kind = svc.software.env[name].kind
    if kind in ("url", "addr", "host"):
        m = re.search(r"([a-z][-a-z0-9]*)(?=[:/]|$)", value.split("//", 1)[-1])
        assert m is not None
        host = m.group(1)
        return value.replace(host, _typo_host(host), 1)
    if kind == "enum":
        return {"live": "production", "sandbox": "test"}.get(value, "verbose")
    return f"{value}h" if kind == "int" else ""


def _env_candidates(svc: ServiceSpec) -> list[str]:
    order = {"url": 0, "addr": 1, "host": 2, "enum": 3, "int": 4}
    names = [k for k in svc.literal_env() if svc.software.env.get(k) and svc.software.env[k].kind in order]
    return sorted(names, key=lambda k: order[svc.software.env[k].kind])


def _rejected(ctx: FaultContext, name: str, value: str) -> bool:
    """Would the target's program refuse to start with `name=value`?"""
    svc = ctx.svc
    check = run_context(ctx.app, ctx.namespace, ctx.seed)
    return check_value(name, svc.software.env[name], value, svc.literal_env(), check) is not None


class BadEnv(_TemplateFault):
    name = "bad_env"
    summary = "set an environment variable to a value the program rejects (CrashLoopBackOff, telling log line)"
    fault_class = "config/env"
    modelled_on = "ITBench misconfigured environment variable, AIOpsLab misconfig_app"
    Params = EnvParams
    crashes = True

    def targets(self, app: AppSpec) -> list[str]:
        return [s.name for s in app.services if _env_candidates(s)]

    def defaults(self, app: AppSpec, target: str) -> dict[str, Any]:
        svc = app.service(target)
        name = _env_candidates(svc)[0]
        return {"env": name, "value": _breaking_value(svc, name, svc.literal_env()[name])}

    def validate(self, ctx: FaultContext) -> None:
        literal = ctx.svc.literal_env()
        if ctx.params.env not in literal:
            raise FaultError(f"{ctx.target} has no literal environment variable {ctx.params.env!r} "
                             f"(literal ones: {', '.join(literal) or 'none'})")
        if ctx.params.env not in ctx.svc.software.env or not _rejected(ctx, ctx.params.env, ctx.params.value):
            raise FaultError(f"{ctx.params.env}={ctx.params.value!r} does not break {ctx.target}: the program "
                             f"accepts it")

    def broken(self, ctx: FaultContext) -> dict[str, Any]:
        return {"env": [{"name": ctx.params.env, "value": ctx.params.value}]}

    def healthy(self, ctx: FaultContext) -> dict[str, Any]:
        return {"env": [{"name": ctx.params.env, "value": ctx.svc.literal_env()[ctx.params.env]}]}

    def cause(self, ctx: FaultContext) -> str:
        return restart_cause(ctx, f"kubectl set env deployment/{ctx.target} {ctx.params.env}={ctx.params.value}")

    def fix(self, ctx: FaultContext) -> list[ToolCall]:
        return [ToolCall(tool="set_env", args={"deployment": ctx.target, "container": ctx.svc.container,
                                               "name": ctx.params.env, "value": ctx.svc.literal_env()[ctx.params.env]})]


# --- command ----------------------------------------------------------------------------------------------------

class CommandParams(FaultParams):
    command: list[str] | None = None
    args: list[str] | None = None

    @model_validator(mode="after")
    def _one(self) -> CommandParams:
        if self.command is None and self.args is None:
            raise ValueError("give command, args or both")
        return self


def _effective_argv(svc: ServiceSpec, command: list[str] | None, args: list[str] | None) -> tuple[str, ...]:
    container: dict[str, Any] = {"command": command if command is not None else list(svc.command) or None,
                                 "args": args if args is not None else list(svc.args) or None}
    return effective_argv(container, svc.software)


class BadCommand(_TemplateFault):
    name = "bad_command"
    summary = "change the container's command or arguments so the program cannot start"
    fault_class = "deploy/command"
    modelled_on = "AIOpsLab wrong_bin_usage, ITBench bad container command"
    Params = CommandParams
    crashes = True

    def defaults(self, app: AppSpec, target: str) -> dict[str, Any]:
        svc = app.service(target)
        sw = svc.software
        if sw.runtime == "go":
            return {"args": ["server"]}
        if sw.runtime == "node":
            return {"args": ["index.js"]}
        if sw.runtime == "python":
            return {"command": ["python", "-m", sw.program + "s"]}
        if sw.runtime == "java":
            return {"command": ["java", "-jar", f"/app/{sw.program}-service.jar"]}
        if sw.runtime == "redis":
            return {"args": [*svc.args, "--maxmemory-polcy", "allkeys-lru"]}
        return {"command": [f"{sw.program}-server"]}

    def validate(self, ctx: FaultContext) -> None:
        if _effective_argv(ctx.svc, ctx.params.command, ctx.params.args) == ctx.svc.software.argv:
            raise FaultError(f"that command line is what {ctx.target} normally runs; it would not break it")

    def broken(self, ctx: FaultContext) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if ctx.params.command is not None:
            out["command"] = ctx.params.command
        if ctx.params.args is not None:
            out["args"] = ctx.params.args
        return out

    def healthy(self, ctx: FaultContext) -> dict[str, Any]:
        return {"command": list(ctx.svc.command) or None, "args": list(ctx.svc.args) or None}


# --- resources --------------------------------------------------------------------------------------------------

class MemoryParams(FaultParams):
    memory_limit: str = Field(pattern=r"^[0-9]+(Ki|Mi|Gi)?$")


class OomLimit(_TemplateFault):
    name = "oom_limit"
    summary = "lower the memory limit below the program's working set (OOMKilled, CrashLoopBackOff)"
    fault_class = "resources/memory"
    modelled_on = "ITBench resource limit too low, AIOpsLab memory stress"
    Params = MemoryParams
    crashes = True

    def symptom_kind_for(self, ctx: FaultContext) -> str:
        return "errors"  # the rollout completes before the first OOM kill: every pod is the new one

    def defaults(self, app: AppSpec, target: str) -> dict[str, Any]:
        return {"memory_limit": f"{max(8, app.service(target).software.memory_mib // 2)}Mi"}

    def validate(self, ctx: FaultContext) -> None:
        working_set = ctx.svc.software.memory_mib * 1024 * 1024
        if quantity(ctx.params.memory_limit) >= working_set:
            raise FaultError(f"{ctx.target} needs {ctx.svc.software.memory_mib}Mi; a {ctx.params.memory_limit} "
                             f"limit would not OOM-kill it")

    def broken(self, ctx: FaultContext) -> dict[str, Any]:
        request = ctx.svc.memory if quantity(ctx.svc.memory) <= quantity(ctx.params.memory_limit) \
            else ctx.params.memory_limit
        return {"resources": {"limits": {"memory": ctx.params.memory_limit}, "requests": {"memory": request}}}

    def healthy(self, ctx: FaultContext) -> dict[str, Any]:
        return {"resources": {"limits": {"memory": ctx.svc.memory_limit}, "requests": {"memory": ctx.svc.memory}}}

    def cause(self, ctx: FaultContext) -> str:
        return restart_cause(ctx, f"kubectl set resources deployment/{ctx.target} --limits=memory="
                                  f"{ctx.params.memory_limit}")

    def fix(self, ctx: FaultContext) -> list[ToolCall]:
        return [ToolCall(tool="set_resources", args={"deployment": ctx.target, "container": ctx.svc.container,
                                                     "memory_limit": ctx.svc.memory_limit})]


class LeakParams(FaultParams):
    tag: str = Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
    history: bool = True  # False: the deployment keeps no old revisions (revisionHistoryLimit 0), nothing to undo


class MemoryLeak(_TemplateFault):
    name = "memory_leak"
    summary = "roll out a build whose working set grows until the memory limit OOM-kills it, again and again"
    fault_class = "resources/memory-leak"
    modelled_on = "ITBench / AIOpsLab memory leak after a release (OOMKilled minutes apart, restarts climbing)"
    Params = LeakParams
    crashes = True

    def targets(self, app: AppSpec) -> list[str]:
        return [s.name for s in app.services if s.software.leaks]

    def defaults(self, app: AppSpec, target: str) -> dict[str, Any]:
        return {"tag": next(iter(app.service(target).software.leaks))}

    def validate(self, ctx: FaultContext) -> None:
        if ctx.params.tag not in ctx.svc.software.leaks:
            raise FaultError(f"build {ctx.params.tag!r} of {ctx.svc.repo} does not leak (leaking builds: "
                             f"{', '.join(ctx.svc.software.leaks)})")

    def symptom_kind_for(self, ctx: FaultContext) -> str:
        return "errors"  # each pod serves for a minute or more, then dies: the rollout completes

    def broken(self, ctx: FaultContext) -> dict[str, Any]:
        return {"image": f"{ctx.svc.repo}:{ctx.params.tag}"}

    def healthy(self, ctx: FaultContext) -> dict[str, Any]:
        return {"image": ctx.svc.image}

    def cause(self, ctx: FaultContext) -> str:
        return restart_cause(ctx, f"kubectl set image deployment/{ctx.target} {ctx.svc.container}="
                                  f"{ctx.svc.repo}:{ctx.params.tag}")

    def _inject(self, k8s: Kube, ctx: FaultContext) -> None:
        """The new build; without history, then a history limit of 0: the deployment controller deletes the old
        ReplicaSets once scaled down (upstream's cleanupDeployment), as a GitOps setup that keeps its history in
        git does."""
        super()._inject(k8s, ctx)
        if not ctx.params.history:
            k8s.patch_deployment(ctx.namespace, ctx.target, {"spec": {"revisionHistoryLimit": 0}}, "strategic")

    def _clear(self, k8s: Kube, ctx: FaultContext) -> None:
        super()._clear(k8s, ctx)
        if not ctx.params.history:
            k8s.patch_deployment(ctx.namespace, ctx.target, {"spec": {"revisionHistoryLimit": 10}}, "strategic")

    def check(self, k8s: Kube, ctx: FaultContext, baseline: HealthSnapshot) -> list[str]:
        """The leak itself, not the moment: a pod that runs between two OOM kills looks healthy, and a higher
        limit only spaces the kills out."""
        pods = k8s.list("pod", ctx.namespace, label_selector=f"app={ctx.target}")
        leaking = sorted({c.get("image", "") for p in pods for c in p["spec"].get("containers") or []
                          if _leak_of(c.get("image", "")) > 0})
        return [f"deployment/{ctx.target} runs {image}, whose working set grows {_leak_of(image):g}Mi a minute "
                f"until its memory limit OOM-kills it" for image in leaking]

    def fix(self, ctx: FaultContext) -> list[ToolCall]:
        if ctx.params.history:
            return _undo(ctx)
        return [ToolCall(tool="escalate", args={
            "diagnosis": f"containers of deployment {ctx.target} are OOMKilled again and again since build "
                         f"{ctx.params.tag}: its memory grows until the limit, and the deployment keeps no earlier "
                         f"revision to roll back to",
            "summary": "a higher limit only postpones the next kill: its owner must ship a build without the leak "
                       "or name the one to go back to; I changed nothing"})]

    def ground_truth(self, ctx: FaultContext) -> GroundTruth:
        """Without history, a handover: the build without the leak is in no object the agent can read."""
        truth = super().ground_truth(ctx)
        return truth if ctx.params.history else truth.model_copy(update={"expected_ending": "escalated"})

    def wrong_fix(self, ctx: FaultContext) -> list[ToolCall]:
        """Double the memory limit: the leak reaches it minutes later."""
        doubled = f"{int(quantity(ctx.svc.memory_limit) * 2 / MIB)}Mi"
        return [ToolCall(tool="set_resources", args={"deployment": ctx.target, "container": ctx.svc.container,
                                                     "memory_limit": doubled})]


def _leak_of(image: str) -> float:
    """MiB a minute the build `image` leaks (0: it does not)."""
    sw, tag = lookup(image)
    return sw.leaks.get(tag, 0.0) if sw is not None else 0.0


class CpuLimitParams(FaultParams):
    cpu_limit: str = Field(pattern=r"^[0-9]+m$")


MIN_THROTTLE = 4.0  # times its need over its limit: a service throttled this hard is slow for everyone


class CpuThrottled(_TemplateFault):
    """`kubectl set resources --limits=cpu=X --requests=cpu=X` far below what the program uses: nothing crashes,
    but the kernel's CFS quota lets it run only X per 100 ms period, so each request waits out throttled periods:
    its p99 (and its callers') climbs, and metrics-server shows its CPU pinned at the limit."""

    name = "cpu_throttled"
    summary = "roll out a CPU limit far below what the program uses: CFS throttling makes it and its callers slow"
    fault_class = "resources/cpu"
    modelled_on = "ITBench CPU limit too low (CPUThrottlingHigh), AIOpsLab CPU starvation"
    Params = CpuLimitParams

    def targets(self, app: AppSpec) -> list[str]:
        """Stateless services using enough CPU that a tenth of it is still a few millicores."""
        return [s.name for s in app.services if s.tier != "data" and s.software.cpu_millicores >= 40]

    def defaults(self, app: AppSpec, target: str) -> dict[str, Any]:
        return {"cpu_limit": f"{max(1, app.service(target).software.cpu_millicores // 10)}m"}

    def validate(self, ctx: FaultContext) -> None:
        need = ctx.svc.software.cpu_millicores
        if quantity(ctx.params.cpu_limit) * 1000 * MIN_THROTTLE > need:
            raise FaultError(f"{ctx.target} uses {need}m of CPU; a limit of {ctx.params.cpu_limit} barely "
                             f"throttles it (use at most {need / MIN_THROTTLE:.0f}m)")

    def symptom_kind_for(self, ctx: FaultContext) -> str:
        return "slow"  # the new pods run and pass their probes: the rollout completes, and serves slowly

    def alert_name_for(self, ctx: FaultContext) -> str:
        return "HighLatency"

    def broken(self, ctx: FaultContext) -> dict[str, Any]:
        # the API server refuses a request above its limit: the request comes down with it
        return {"resources": {"limits": {"cpu": ctx.params.cpu_limit}, "requests": {"cpu": ctx.params.cpu_limit}}}

    def healthy(self, ctx: FaultContext) -> dict[str, Any]:
        return {"resources": {"limits": {"cpu": None}, "requests": {"cpu": ctx.svc.cpu}}}

    def cause(self, ctx: FaultContext) -> str:
        return restart_cause(ctx, f"kubectl set resources deployment/{ctx.target} --limits=cpu={ctx.params.cpu_limit} "
                                  f"--requests=cpu={ctx.params.cpu_limit}")

    def direct_fix(self, ctx: FaultContext) -> list[ToolCall] | None:
        """The request the app declares, and a limit twice it (a limit at least the program's need)."""
        request = quantity(ctx.svc.cpu) * 1000
        return [ToolCall(tool="set_resources", args={"deployment": ctx.target, "container": ctx.svc.container,
                                                     "cpu_request": ctx.svc.cpu, "cpu_limit": f"{request * 2:.0f}m"})]

    def wrong_fix(self, ctx: FaultContext) -> list[ToolCall]:
        """Scale out: twice the pods, each still throttled at the same limit."""
        return [ToolCall(tool="scale", args={"deployment": ctx.target, "replicas": ctx.svc.replicas * 2})]


class CpuParams(FaultParams):
    cpu_request: str = Field(pattern=r"^[0-9]+m?$")


class CpuUnschedulable(_TemplateFault):
    name = "cpu_unschedulable"
    summary = "request more CPU than any node can offer (Pending, FailedScheduling: Insufficient cpu)"
    fault_class = "scheduling/resources"
    modelled_on = "ITBench CPU starvation / unschedulable requests"
    Params = CpuParams

    def defaults(self, app: AppSpec, target: str) -> dict[str, Any]:
        return {"cpu_request": "4"}

    def validate(self, ctx: FaultContext) -> None:
        if quantity(ctx.params.cpu_request) <= quantity(NODE_ALLOCATABLE_CPU):
            raise FaultError(f"a node offers {NODE_ALLOCATABLE_CPU} CPU; a request of {ctx.params.cpu_request} "
                             f"still fits")
        hard = ctx.app.quota.get("requests.cpu")
        if hard is None:
            return
        # Every pod the broken rollout creates must pass the namespace's quota, on top of every pod the app runs
        # (old pods counted in full): a pod the quota refuses is never created (FailedCreate: exceeded quota), a
        # quota incident, not a Pending pod that no node can fit.
        surge, unavailable = fenceposts(deployment(ctx.app, ctx.svc, ctx.namespace)["spec"])
        new_pods = min(ctx.svc.replicas, surge + unavailable) if surge + unavailable else ctx.svc.replicas
        room = quantity(hard) - sum(s.replicas * quantity(s.cpu) for s in ctx.app.services)
        if new_pods * quantity(ctx.params.cpu_request) > room + 1e-9:
            raise FaultError(
                f"the namespace's ResourceQuota {QUOTA} (requests.cpu={hard}) leaves {room:g} CPU for "
                f"{new_pods} new {ctx.target} pod(s); a request of {ctx.params.cpu_request} would be refused at pod "
                f"creation (exceeded quota) instead of leaving the pods Pending: pick a request at most "
                f"{room / new_pods:g} CPU")

    def broken(self, ctx: FaultContext) -> dict[str, Any]:
        return {"resources": {"requests": {"cpu": ctx.params.cpu_request}}}

    def healthy(self, ctx: FaultContext) -> dict[str, Any]:
        return {"resources": {"requests": {"cpu": ctx.svc.cpu}}}

    def fix(self, ctx: FaultContext) -> list[ToolCall]:
        return [ToolCall(tool="set_resources", args={"deployment": ctx.target, "container": ctx.svc.container,
                                                     "cpu_request": ctx.svc.cpu})]


# --- placement --------------------------------------------------------------------------------------------------

class PlacementParams(FaultParams):
    mode: Literal["nodeSelector", "affinity"] = "nodeSelector"
    key: str = Field(default="disktype", pattern=r"^[A-Za-z0-9./-]+$")
    value: str = Field(default="nvme", pattern=r"^[A-Za-z0-9._-]*$")


class NodeSelectorMissing(RolloutFault):
    name = "node_selector_missing"
    summary = "pin the pods to a node label no node has (Pending: didn't match Pod's node affinity/selector)"
    fault_class = "scheduling/placement"
    modelled_on = "AIOpsLab assign_non_existent_node, ITBench node selector to a missing node"
    Params = PlacementParams

    def validate(self, ctx: FaultContext) -> None:
        p = ctx.params
        if any(extra.get(p.key) == p.value or (p.key == "kubernetes.io/hostname" and name == p.value)
               or (p.key == "topology.kubernetes.io/zone" and zone == p.value) for name, zone, extra in NODES):
            raise FaultError(f"a node is labelled {p.key}={p.value}; the pods would still schedule")

    def _inject(self, k8s: Kube, ctx: FaultContext) -> None:
        p = ctx.params
        if p.mode == "nodeSelector":
            spec: dict[str, Any] = {"nodeSelector": {p.key: p.value}}
        else:
            spec = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": p.key, "operator": "In", "values": [p.value]}]}]}}}}
        k8s.patch_deployment(ctx.namespace, ctx.target, {"spec": {"template": {"spec": spec}}},
                             cause=restart_cause(ctx, f"schedule {ctx.target} on {p.key}={p.value} nodes"))

    def _clear(self, k8s: Kube, ctx: FaultContext) -> None:
        spec = {"nodeSelector": {ctx.params.key: None}} if ctx.params.mode == "nodeSelector" else {"affinity": None}
        k8s.patch_deployment(ctx.namespace, ctx.target, {"spec": {"template": {"spec": spec}}})

    def fix(self, ctx: FaultContext) -> list[ToolCall]:
        if ctx.svc.node_selector:  # its own pinning must stay: go back to the previous revision
            return _undo(ctx)
        return [ToolCall(tool="remove_scheduling_constraints", args={"deployment": ctx.target})]


# --- probes -----------------------------------------------------------------------------------------------------

class ProbeParams(FaultParams):
    probe: Literal["readiness", "liveness"] = "readiness"
    mode: Literal["path", "port", "timing"] = "path"
    path: str = Field(default="/health", pattern=r"^/[A-Za-z0-9/_.-]*$")
    port: int | None = Field(default=None, ge=1, le=65535)
    # mode timing: the probe points where the program answers, but gives up before a slow starter is up
    initial_delay_s: int | None = Field(default=None, ge=0, le=600)
    period_s: int | None = Field(default=None, ge=1, le=300)
    failure_threshold: int | None = Field(default=None, ge=1, le=30)

    @model_validator(mode="before")
    @classmethod
    def _timing(cls, data: Any) -> Any:
        """The timing fields belong to mode timing (5 s, every 5 s, 3 failures unless given), and only to it."""
        if not isinstance(data, dict):
            return data
        timing = {"initial_delay_s": 5, "period_s": 5, "failure_threshold": 3}
        if data.get("mode") == "timing":
            return {**timing, **data}
        given = [k for k in timing if data.get(k) is not None]
        if given:
            raise ValueError(f"{', '.join(given)} apply to mode timing only (mode is {data.get('mode', 'path')})")
        return data


class ReadinessProbe(_TemplateFault):
    name = "readiness_probe"
    summary = ("point the readiness probe (Running, never Ready) or the liveness probe (killed, crash-looping) at a "
               "path or port that does not answer")
    fault_class = "deploy/probe"
    modelled_on = "ITBench broken readiness probe"
    Params = ProbeParams

    def targets(self, app: AppSpec) -> list[str]:
        """Services probed over the network (an HTTP GET or a TCP connect): an exec probe runs a command instead."""
        return [s.name for s in app.services if s.probe in ("http", "tcp")]

    def defaults(self, app: AppSpec, target: str) -> dict[str, Any]:
        return {"port": app.service(target).port + 1}

    def validate(self, ctx: FaultContext) -> None:
        p = ctx.params
        if ctx.svc.probe == "tcp" and p.mode == "path":
            raise FaultError(f"{ctx.target}'s probes connect to a TCP port and ask for no path: use mode port or "
                             f"timing")
        if p.mode == "path" and p.path in ctx.svc.software.routes:
            raise FaultError(f"{ctx.target} answers on {p.path}; pick a path it does not serve")
        if p.mode == "port" and p.port == ctx.svc.port:
            raise FaultError(f"{ctx.target} listens on {p.port}; pick another port")
        if p.mode == "timing":
            if p.probe != "liveness":
                raise FaultError("a readiness probe that starts too early only delays readiness; mode timing needs "
                                 "probe: liveness")
            window = self.window(ctx)
            if window > ctx.svc.software.startup_s:
                raise FaultError(f"{ctx.target} starts in {ctx.svc.software.startup_s:g}s; a liveness probe that "
                                 f"gives up after {window}s (initial_delay_s + period_s x failure_threshold) lets it "
                                 f"start: give it less time than that")

    @staticmethod
    def window(ctx: FaultContext) -> int:
        """Seconds from the start until the kubelet kills a container that has not answered its liveness probe."""
        p = ctx.params
        return int(p.initial_delay_s + p.period_s * p.failure_threshold)

    def alert_name_for(self, ctx: FaultContext) -> str:
        """A failing liveness probe gets the container killed, over and over: a crash loop."""
        return "KubePodCrashLooping" if ctx.params.probe == "liveness" else super().alert_name_for(ctx)

    def symptom_kind_for(self, ctx: FaultContext) -> str:
        return "errors" if ctx.params.probe == "liveness" else super().symptom_kind_for(ctx)

    def broken(self, ctx: FaultContext) -> dict[str, Any]:
        p = ctx.params
        if p.mode == "timing":
            return {"livenessProbe": {"initialDelaySeconds": p.initial_delay_s, "periodSeconds": p.period_s,
                                      "failureThreshold": p.failure_threshold}}
        if ctx.svc.probe == "tcp":
            return {f"{p.probe}Probe": {"tcpSocket": {"port": p.port}}}
        get = {"path": p.path} if p.mode == "path" else {"port": p.port}
        return {f"{p.probe}Probe": {"httpGet": get}}

    def healthy(self, ctx: FaultContext) -> dict[str, Any]:
        if ctx.params.mode == "timing":
            own = container_spec(ctx.svc)["livenessProbe"]
            return {"livenessProbe": {k: own[k] for k in ("initialDelaySeconds", "periodSeconds", "failureThreshold")}}
        if ctx.svc.probe == "tcp":
            return {f"{ctx.params.probe}Probe": {"tcpSocket": {"port": ctx.svc.port}}}
        path = "/ready" if ctx.params.probe == "readiness" else "/healthz"
        return {f"{ctx.params.probe}Probe": {"httpGet": {"path": path, "port": ctx.svc.port}}}

    def cause(self, ctx: FaultContext) -> str:
        if ctx.params.mode != "timing":
            return super().cause(ctx)
        return restart_cause(ctx, f"tighten {ctx.target}'s liveness probe (initialDelaySeconds="
                                  f"{ctx.params.initial_delay_s})")


# --- init containers --------------------------------------------------------------------------------------------

class InitHangParams(FaultParams):
    container: str = Field(default="wait-for-migrations", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    service: str = Field(default="db-migrations", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    port: int = Field(default=5432, ge=1, le=65535)


class InitFailParams(FaultParams):
    container: str = Field(default="check-schema", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    required: str = Field(default="v42", pattern=r"^[A-Za-z0-9._-]+$")
    found: str = Field(default="v41", pattern=r"^[A-Za-z0-9._-]+$")


class _InitFault(RolloutFault):
    """An init container added by a rollout. Init containers' crash loops do not count for KubePodCrashLooping
    (kube-state-metrics reports them apart), so the rollout's alerts fire."""

    fault_class = "deploy/init-container"

    def init_container(self, ctx: FaultContext) -> dict[str, Any]:
        raise NotImplementedError

    def _inject(self, k8s: Kube, ctx: FaultContext) -> None:
        body = {"spec": {"template": {"spec": {"initContainers": [self.init_container(ctx)]}}}}
        k8s.patch_deployment(ctx.namespace, ctx.target, body,
                             cause=restart_cause(ctx, f"add init container {ctx.params.container}"))

    def _clear(self, k8s: Kube, ctx: FaultContext) -> None:
        dep = k8s.get("deployment", ctx.target, ctx.namespace)
        inits = ((dep.get("spec") or {}).get("template") or {}).get("spec", {}).get("initContainers") or []
        index = next((i for i, c in enumerate(inits) if c.get("name") == ctx.params.container), None)
        if index is None:
            return
        path = "/spec/template/spec/initContainers" + ("" if len(inits) == 1 else f"/{index}")
        k8s.patch_deployment(ctx.namespace, ctx.target, [{"op": "remove", "path": path}], "json")

    def fix(self, ctx: FaultContext) -> list[ToolCall]:
        return _undo(ctx)


class InitContainerHang(_InitFault):
    name = "init_container_hang"
    summary = "add an init container that waits forever for a service that does not exist (Init:0/1)"
    modelled_on = "ITBench hanging init container"
    Params = InitHangParams

    def validate(self, ctx: FaultContext) -> None:
        if ctx.app.has(ctx.params.service):
            raise FaultError(f"{ctx.params.service} is a service of {ctx.app.name}; the init container would not hang")

    def init_container(self, ctx: FaultContext) -> dict[str, Any]:
        p = ctx.params
        script = f'until nc -z {p.service} {p.port}; do echo "waiting for {p.service}:{p.port}"; sleep 2; done'
        return {"name": p.container, "image": BUSYBOX, "command": ["sh", "-c", script], "resources": INIT_RESOURCES}


class InitContainerFail(_InitFault):
    name = "init_container_fail"
    summary = "add an init container whose check fails on every attempt (Init:CrashLoopBackOff)"
    modelled_on = "ITBench failing init container"
    Params = InitFailParams

    def init_container(self, ctx: FaultContext) -> dict[str, Any]:
        p = ctx.params
        script = (f'echo "checking schema version (need {p.required})"; '
                  f"wget -qO- http://{ctx.target}:{ctx.svc.port}/schema/version | grep -q {p.required} || "
                  f'{{ echo "schema {p.required} required, found {p.found}"; exit 1; }}')
        return {"name": p.container, "image": BUSYBOX, "command": ["sh", "-c", script], "resources": INIT_RESOURCES}
