"""No fault at all: an alert fired on a blip that is already gone. The right action is to look, change nothing,
and finish saying so. The cluster of a false alarm is healthy whatever the agent does short of writing, so the
verdict also reads how the agent ended: running out of steps on invalid actions, or paging a human, has not
handled it."""

from __future__ import annotations

from agent_sre.faults.base import FaultContext, FaultType
from agent_sre.faults.health import fingerprints
from agent_sre.kube.client import Kube
from agent_sre.models.endings import Termination
from agent_sre.models.scenario import AlertOn
from agent_sre.models.tools import ToolCall
from agent_sre.models.verdict import HealthSnapshot

SYMPTOMS = ("A latency alert fired for {feature}, but nobody has complained - is anything actually wrong?",
            "Someone thinks {feature} felt slow for a moment earlier; can you check?",
            "We got paged about {feature}. Customers seem fine. Should we do something?")
UNFINISHED: dict[Termination, str] = {"escalated": "paged a human", "step_limit": "ran out of steps",
                                      "deadline": "ran past its deadline", "cancelled": "was cancelled",
                                      "finished": "finished", "cluster_lost": "lost its cluster"}


class FalseAlarm(FaultType):
    name = "none"
    summary = "no fault: a flaky latency alert on a healthy app (resolved only by finishing with nothing changed)"
    fault_class = "none"
    modelled_on = "AIOpsLab noop (detection task with no anomaly)"
    alert_name = "HighLatency"
    severity = "warning"

    def _inject(self, k8s: Kube, ctx: FaultContext) -> None:
        return None

    def _clear(self, k8s: Kube, ctx: FaultContext) -> None:
        return None

    def symptom(self, ctx: FaultContext, on: AlertOn = "target") -> str:
        return ctx.pick(SYMPTOMS).replace("{feature}", ctx.svc.feature or ctx.target)

    def root_cause(self, ctx: FaultContext) -> str:
        return "none"

    def fix(self, ctx: FaultContext) -> list[ToolCall]:
        return []

    def check(self, k8s: Kube, ctx: FaultContext, baseline: HealthSnapshot) -> list[str]:
        now = fingerprints(k8s, ctx.namespace)
        return [f"{ref} was changed although nothing was wrong" for ref, digest in sorted(now.items())
                if baseline.fingerprints.get(ref, digest) != digest]

    def ending_check(self, termination: Termination, writes: int) -> list[str]:
        reasons = []
        if termination != "finished":
            reasons.append(f"the agent {UNFINISHED[termination]}: a false alarm is handled only by finishing with "
                           "nothing changed")
        if writes:
            reasons.append(f"{writes} write{'s' if writes > 1 else ''} to the cluster although nothing was wrong")
        return reasons
