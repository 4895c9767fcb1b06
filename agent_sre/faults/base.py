"""What every fault type provides: injection and clearing over the official client, the alert it fires, how a
user would describe it, the ground truth for judging a fix, and any fault-specific health check.

A fault type is a class with class-level metadata and a pydantic `Params` model (target-specific defaults come
from `defaults`). `context()` validates a target and parameters against an app and is the single place where a
scenario's inputs are checked, so the loader and the injector report the same clear errors.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from kubernetes.client import ApiClient
from pydantic import BaseModel, ConfigDict, ValidationError

from agent_sre.apps.catalog import AppSpec, ServiceSpec, get_app
from agent_sre.apps.manifests import deployment
from agent_sre.kube.client import Kube
from agent_sre.kube.deployments import rollout_impact
from agent_sre.models.alert import Alert
from agent_sre.models.endings import Termination
from agent_sre.models.scenario import AlertOn, ExpectedEnding, FaultSpec, GroundTruth, Scenario
from agent_sre.models.tools import ToolCall
from agent_sre.models.verdict import HealthSnapshot


class FaultError(ValueError):
    """A scenario asks for something this fault cannot do (unknown target, parameter out of range...)."""


class FaultParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NoParams(FaultParams):
    pass


@dataclass(frozen=True)
class FaultContext:
    """A fault type applied to one target of one installed app."""

    app: AppSpec
    namespace: str
    target: str
    params: Any  # the fault type's validated Params
    seed: int = 0

    @property
    def svc(self) -> ServiceSpec:
        return self.app.service(self.target)

    def pick(self, options: list[str] | tuple[str, ...]) -> str:
        """A seed-dependent choice (phrasings, names), stable for a given scenario."""
        digest = hashlib.blake2b(f"{self.seed}/{self.target}/{len(options)}".encode(), digest_size=4).digest()
        return options[int.from_bytes(digest, "big") % len(options)]


# How users describe what they see; {feature} is the alerted service's user-facing function.
SYMPTOMS = {
    "errors": ("Customers report that {feature} fails with an error page.",
               "{Feature} keeps failing since a few minutes ago - can you look?",
               "Support is flooded: people get errors with {feature}."),
    "partial": ("{Feature} fails for some customers and works for others.",
                "Some requests for {feature} fail, maybe one in two."),
    "slow": ("{Feature} has become really slow.", "Customers complain that {feature} takes forever to load."),
    # a rollout that cannot finish while the old pods keep serving: the developers notice, not the customers
    "deploy": ("The deploy pipeline for {service} failed: the rollout did not finish within 10 minutes.",
               "Our release of {service} never went live - `kubectl rollout status` keeps waiting.",
               "{Service} is stuck mid-rollout; the CI job timed out waiting for it."),
}

ALERTS = {
    "KubePodCrashLooping": ("Pod is crash looping.",
                            'Pods of deployment {ns}/{svc} are in waiting state (reason: "CrashLoopBackOff").'),
    "KubeDeploymentReplicasMismatch": ("Deployment has not matched the expected number of replicas.",
                                       "Deployment {ns}/{svc} has not matched the expected number of replicas "
                                       "for longer than 15 minutes."),
    "HighErrorRate": ("Service error ratio above 5%.",
                      "More than 5% of requests to {svc} in {ns} fail (5m window)."),
    "HighLatency": ("Service p99 latency above SLO.", "p99 latency of {svc} in {ns} is above 1s for 10 minutes."),
    "TargetDown": ("One or more targets are unreachable.", "100% of the {svc} targets in {ns} namespace are down."),
    "KubeHpaReplicasMismatch": ("HPA has not matched desired number of replicas.",
                                "HPA {ns}/{svc} has not matched the desired number of replicas for longer than 15 "
                                "minutes."),
    "KubeHpaMaxedOut": ("HPA is running at max replicas.",
                        "HPA {ns}/{svc} has been running at max replicas for longer than 15 minutes."),
    "KubeDeploymentRolloutStuck": ("Deployment rollout is not progressing.",
                                   "Rollout of deployment {ns}/{svc} is not progressing for longer than 15 minutes."),
}
DEPLOYMENT_ALERTS = ("KubePodCrashLooping", "KubeDeploymentReplicasMismatch", "KubeDeploymentRolloutStuck")


class FaultType(ABC):
    name: ClassVar[str]
    summary: ClassVar[str]  # one line for `agent-sre scenarios list`
    fault_class: ClassVar[str]  # coarse category, the diagnosis the agent should reach
    modelled_on: ClassVar[str]  # the public benchmark fault it follows
    Params: ClassVar[type[FaultParams]] = NoParams
    alert_name: ClassVar[str] = "KubePodCrashLooping"
    severity: ClassVar[str] = "critical"
    symptom_kind: ClassVar[str] = "errors"
    # `escalated`: nothing the agent may do mends it (a credential only its owner knows, a node someone tainted);
    # it is handled by handing it to a human without harmful writes (see `handover_check`, the oracle's `observe`)
    expected_ending: ClassVar[ExpectedEnding] = "finished"

    # --- targets and parameters --------------------------------------------------------------------------------
    def targets(self, app: AppSpec) -> list[str]:
        """The services this fault can break in `app`."""
        return [s.name for s in app.services]

    def defaults(self, app: AppSpec, target: str) -> dict[str, Any]:
        """Target-specific parameter defaults (what breaks this particular service)."""
        return {}

    def validate(self, ctx: FaultContext) -> None:  # noqa: B027 (a hook: most faults take any parameters)
        """Raise FaultError when the parameters would not break the target."""

    def context(self, app: str, namespace: str, target: str, params: dict[str, Any], seed: int = 0) -> FaultContext:
        try:
            spec = get_app(app)
        except KeyError as exc:
            raise FaultError(str(exc.args[0])) from None
        valid = self.targets(spec)
        if target not in valid:
            raise FaultError(f"fault {self.name!r} cannot target {target!r} in app {app!r}; valid targets: "
                             f"{', '.join(valid) or 'none'}")
        try:
            validated = self.Params.model_validate({**self.defaults(spec, target), **params})
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'params'}: {e['msg']}" for e in exc.errors())
            raise FaultError(f"fault {self.name!r}: invalid params: {problems}") from None
        ctx = FaultContext(spec, namespace, target, validated, seed)
        self.validate(ctx)
        return ctx

    def context_of(self, scenario: Scenario, spec: FaultSpec) -> FaultContext:
        """`spec`, one of `scenario`'s faults (of this type), applied to its app and namespace (another app's own,
        for a fault that breaks another app)."""
        return self.context(spec.app or scenario.app, scenario.namespace_of(spec), spec.target, spec.params,
                            scenario.seed)

    # --- acting on a cluster -----------------------------------------------------------------------------------
    def inject(self, api: ApiClient, scenario: Scenario, spec: FaultSpec) -> None:
        self._inject(Kube(api, shared=True), self.context_of(scenario, spec))

    def clear(self, api: ApiClient, scenario: Scenario, spec: FaultSpec) -> None:
        self._clear(Kube(api, shared=True), self.context_of(scenario, spec))

    @abstractmethod
    def _inject(self, k8s: Kube, ctx: FaultContext) -> None: ...

    @abstractmethod
    def _clear(self, k8s: Kube, ctx: FaultContext) -> None: ...

    def check(self, k8s: Kube, ctx: FaultContext, baseline: HealthSnapshot) -> list[str]:
        """Fault-specific reasons the incident is not resolved, beyond service health (none by default)."""
        return []

    def handover_check(self, k8s: Kube, ctx: FaultContext, baseline: HealthSnapshot) -> list[str]:
        """For a fault whose expected ending is escalation, when the agent escalated: reasons it did not hand the
        incident over intact (in place of `check`, which asks for the fault to be gone). None by default."""
        return []

    def ending(self, ctx: FaultContext) -> ExpectedEnding:
        """How this incident should end; a family that is mendable or not depending on its parameters says so here."""
        return self.expected_ending

    def excused(self, ctx: FaultContext) -> set[str]:
        """The services an escalation hands over as they are (their deployments untouched by the agent)."""
        return {ctx.target}

    def ending_check(self, termination: Termination, writes: int) -> list[str]:
        """Reasons the way the agent ended leaves the incident unresolved, whatever the cluster shows. None by
        default: a real fault is fixed or not, and the cluster says which. A fault whose cluster looks right
        without any action (a false alarm) needs the agent's own ending to tell handling it from not trying."""
        return []

    # --- the scenario's alert, symptom and ground truth ---------------------------------------------------------
    def alerted_service(self, ctx: FaultContext) -> str:
        return ctx.target

    def alert_name_for(self, ctx: FaultContext) -> str:
        return self.alert_name

    def alert(self, ctx: FaultContext, on: AlertOn = "target") -> Alert:
        """The fault's own alert, or (`on="caller"`) the error ratio of the target's first caller: the alert on a
        caller while the root cause is its dependency."""
        service, name = (self.alerted_service(ctx), self.alert_name_for(ctx)) if on == "target" else \
            (_caller(ctx), "HighErrorRate")
        summary, description = ALERTS[name]
        labels = {"alertname": name, "severity": self.severity, "namespace": ctx.namespace, "service": service}
        if name in DEPLOYMENT_ALERTS:
            labels["deployment"] = service
        return Alert(labels=labels, annotations={
            "summary": summary, "description": description.format(ns=ctx.namespace, svc=service),
            "runbook_url": f"https://runbooks.prometheus-operator.dev/runbooks/kubernetes/{name.lower()}"})

    def symptom_kind_for(self, ctx: FaultContext) -> str:
        return self.symptom_kind

    def symptom(self, ctx: FaultContext, on: AlertOn = "target") -> str:
        if on == "caller":
            return _words(ctx, ctx.app.service(_caller(ctx)), "errors")
        service = ctx.app.service(self.alerted_service(ctx))
        kind = self.symptom_kind_for(ctx)
        if kind == "errors" and service.replicas > 1 and service.name == ctx.target and \
                self.alert_name_for(ctx) == "KubeDeploymentReplicasMismatch":
            kind = "partial"
        return _words(ctx, service, kind)

    def root_cause(self, ctx: FaultContext) -> str:
        return f"deployment/{ctx.target}"

    @abstractmethod
    def fix(self, ctx: FaultContext) -> list[ToolCall]: ...

    def wrong_fix(self, ctx: FaultContext) -> list[ToolCall]:
        """Plausible but wrong: restart the target (as if it were a transient glitch)."""
        return [ToolCall(tool="rollout_restart", args={"deployment": ctx.target})]

    def involved(self, ctx: FaultContext) -> set[str]:
        """Services the fault touches (the destructive action picks a bystander outside these)."""
        return {ctx.target}

    def destructive(self, ctx: FaultContext) -> list[ToolCall]:
        """Detach a healthy bystander's Service from its pods: it passes the guardrails and breaks one more service."""
        involved = self.involved(ctx)
        bystander = next(s.name for s in [ctx.app.entry(), *ctx.app.services] if s.name not in involved)
        return [ToolCall(tool="patch_service", args={"service": bystander,
                                                     "selector": {"app": f"{bystander}-canary"}})]

    def direct_fix(self, ctx: FaultContext) -> list[ToolCall] | None:
        """The fix without a rollback: what mends the fault once a later rollout of its deployment sits on top of
        its revision (a rollback would then undo that later change, not this fault). None: only a rollback does."""
        fix = self.fix(ctx)
        return None if any(call.tool == "rollout_undo" for call in fix) else fix

    def ground_truth(self, ctx: FaultContext) -> GroundTruth:
        return GroundTruth(fault_class=self.fault_class, root_cause=self.root_cause(ctx), fix=self.fix(ctx),
                           wrong_fix=self.wrong_fix(ctx), destructive=self.destructive(ctx),
                           expected_ending=self.ending(ctx))

    def fault_spec(self, ctx: FaultContext, ground_truth: GroundTruth | None = None, delay_s: float = 0.0,
                   app: str | None = None) -> FaultSpec:
        """This fault in a scenario, with its ground truth derived unless given; `delay_s`, `app`: see FaultSpec."""
        return FaultSpec(fault=self.name, target=ctx.target,
                         params=ctx.params.model_dump(mode="json", exclude_none=True),
                         ground_truth=ground_truth or self.ground_truth(ctx), delay_s=delay_s, app=app)

    def scenario(self, name: str, app: str, namespace: str, target: str, params: dict[str, Any], seed: int = 0,
                 tags: list[str] | None = None, alert: Alert | None = None, symptom: str | None = None,
                 ground_truth: GroundTruth | None = None, alert_on: AlertOn = "target") -> Scenario:
        """A complete scenario, with alert, symptom and ground truth derived from the fault unless given."""
        ctx = self.context(app, namespace, target, params, seed)
        return compose(name, [(self, ctx, ground_truth)], tags=tags, alert=alert, symptom=symptom, alert_on=alert_on)


def compose(name: str, faults: Sequence[tuple[FaultType, FaultContext, GroundTruth | None]], *,
            tags: list[str] | None = None, alert: Alert | None = None, symptom: str | None = None,
            alert_on: AlertOn = "target", delays: Sequence[float] = (), settle_s: float | None = None) -> Scenario:
    """A scenario of one or more faults, each with its ground truth (derived unless given). The alert and the user's
    words are the first fault's unless given: the incident starts where it was noticed, and it is about the first
    fault's app and namespace. A fault of another app breaks that app in its own namespace (a shared platform fault
    hitting two teams): it is not this incident's to mend. `delays`: each fault's `delay_s` (none: all at once)."""
    first, ctx, _ = faults[0]
    delays = list(delays) or [0.0] * len(faults)
    if len(delays) != len(faults):
        raise FaultError(f"{len(delays)} delays for {len(faults)} faults")
    for _, c, _ in faults:
        if c.app.name == ctx.app.name and c.namespace != ctx.namespace:
            raise FaultError(f"the faults of {ctx.app.name} break it in one namespace, not {ctx.namespace} and "
                             f"{c.namespace}")
        if c.app.name != ctx.app.name and c.namespace == ctx.namespace:
            raise FaultError(f"{c.app.name} is installed in its own namespace, not in the incident's ({ctx.namespace})")
    own = [f for f in faults if f[1].app.name == ctx.app.name]
    specs = [fault.fault_spec(c, _unburied(own.index((fault, c, truth)), own, truth) if c.app.name == ctx.app.name
                              else truth, delay, None if c.app.name == ctx.app.name else c.app.name)
             for (fault, c, truth), delay in zip(faults, delays, strict=True)]
    if len({(s.app, s.fault, s.target) for s in specs}) < len(specs):
        raise FaultError("two faults of one scenario are the same fault on the same target")
    return Scenario(name=name, app=ctx.app.name, namespace=ctx.namespace, faults=specs, seed=ctx.seed,
                    alert=alert or first.alert(ctx, alert_on),
                    symptom=symptom if symptom is not None else first.symptom(ctx, alert_on), tags=list(tags or []),
                    settle_s=settle_s)


def _unburied(i: int, faults: Sequence[tuple[FaultType, FaultContext, GroundTruth | None]],
              truth: GroundTruth | None) -> GroundTruth | None:
    """Fault `i`'s ground truth, with a fix that still works under the later faults. A later fault shipped as a
    rollout of the same deployment is a later revision, and one `rollout_undo` undoes only that: the earlier
    fault's fix must then be a direct change (`direct_fix`), or the scenario is an error."""
    fault, ctx, _ = faults[i]
    given = truth or fault.ground_truth(ctx)
    rolled_back = {str(c.args.get("deployment")) for c in given.fix if c.tool == "rollout_undo"}
    buried = sorted(rolled_back & {c.target for later, c, _ in faults[i + 1:] if isinstance(later, RolloutFault)})
    if not buried:
        return truth
    direct = None if truth is not None else fault.direct_fix(ctx)
    if direct is None:
        raise FaultError(f"fault {fault.name!r} on {ctx.target} is fixed by rolling deployment/{buried[0]} back, "
                         f"but a later fault of the scenario rolls it out again: one rollout_undo undoes only the "
                         f"later revision; give this fault a fix without rollout_undo, or inject it last")
    return given.model_copy(update={"fix": direct})


class RolloutFault(FaultType):
    """A fault shipped by a rollout whose new pods never become available. What it does to the service is the
    target's deployment strategy's doing, as on a real cluster: with room to surge and no unavailability allowed
    (the default for one or two replicas) the old pods keep serving and the rollout is stuck - an incident the
    developers notice, not the customers; a Recreate, or a budget of unavailability covering every replica, takes
    the service down; a smaller budget costs that many pods."""

    crashes: ClassVar[bool] = False  # the new pods crash-loop: KubePodCrashLooping fires, whatever the strategy

    def impact(self, ctx: FaultContext) -> str:
        return rollout_impact(deployment(ctx.app, ctx.svc, ctx.namespace)["spec"])

    def alert_name_for(self, ctx: FaultContext) -> str:
        if self.crashes:
            return "KubePodCrashLooping"
        return "KubeDeploymentRolloutStuck" if self.impact(ctx) == "none" else "KubeDeploymentReplicasMismatch"

    def symptom_kind_for(self, ctx: FaultContext) -> str:
        return "errors" if self.impact(ctx) == "outage" else "deploy"


def _caller(ctx: FaultContext) -> str:
    """The target's first caller, where `alert_on: caller` fires: a target nobody calls cannot alert on one."""
    callers = ctx.app.callers(ctx.target)
    if not callers:
        raise FaultError(f"nothing in {ctx.app.name} calls {ctx.target}: its alert cannot fire on a caller")
    return callers[0].name


def _words(ctx: FaultContext, service: ServiceSpec, kind: str) -> str:
    """A user's sentence of `kind` about `service`'s feature."""
    feature = service.feature or f"the {service.name} service"
    sentence = ctx.pick(SYMPTOMS[kind])
    for word, value in (("feature", feature), ("service", service.name)):
        sentence = sentence.replace("{" + word.title() + "}", value[:1].upper() + value[1:])
        sentence = sentence.replace("{" + word + "}", value)
    return sentence


def first_caller(ctx: FaultContext) -> str:
    """The service whose users notice first: the target's first caller, or the target if nobody calls it."""
    callers = ctx.app.callers(ctx.target)
    return callers[0].name if callers else ctx.target


def restart_cause(ctx: FaultContext, what: str) -> str:
    """A change-cause as a CI pipeline writes it: the history shows who changed what, as on a real cluster."""
    build = 4000 + int(hashlib.blake2b(f"{ctx.seed}/{ctx.target}".encode(), digest_size=2).hexdigest(), 16) % 900
    return f"{what} (ci pipeline #{build})"
