"""Declarative fault scenarios: what to break, the alert that fires, and the ground truth for judging a fix."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agent_sre.models.alert import Alert
from agent_sre.models.tools import ToolCall

# Where the alert fires: on the broken service, or on its first caller (whose users notice first).
AlertOn = Literal["target", "caller"]
# How the agent should end the incident: `finished` (fixed, or nothing to fix), or `escalated` (what is broken is
# not the agent's to mend, e.g. a credential nobody but its owner knows: it hands over without harmful writes).
ExpectedEnding = Literal["finished", "escalated"]
# A fault that arrives later is held by the simulated environment and applied when its clock passes the delay. Beyond
# this no episode is still running (its steps, their waits and the settle window take minutes): it would never arrive.
MAX_DELAY_S = 1800.0
# The longest settle window a scenario may ask for: a slow starter's probes act within minutes, not hours.
MAX_SETTLE_S = 900.0


class GroundTruth(BaseModel):
    """What an expert would conclude and do. `fix` is a list of tool calls that resolves the incident."""

    model_config = ConfigDict(extra="forbid")  # a misspelt `wrong_fixes:` is an error, not an empty wrong fix

    fault_class: str
    root_cause: str  # e.g. "deployment/cart"
    fix: list[ToolCall] = Field(default_factory=list)
    wrong_fix: list[ToolCall] = Field(default_factory=list, description="plausible but wrong; must not resolve")
    destructive: list[ToolCall] = Field(default_factory=list, description="raw action that makes things worse")
    expected_ending: ExpectedEnding = Field("finished", description="escalated: handled only by handing it to a "
                                            "human, the services it broke left as they were or mended")


class FaultSpec(BaseModel):
    """One fault of a scenario: its type, what it breaks, with what, and the ground truth of that fault alone."""

    model_config = ConfigDict(extra="forbid")

    fault: str  # a fault type name from the catalog, or "none" for a false alarm
    target: str = ""  # usually a service / deployment name
    params: dict[str, Any] = Field(default_factory=dict)
    ground_truth: GroundTruth
    # Left out of the serialised form while unused (`exclude_if`), as are the scenario's `settle_s`: a scenario that
    # uses none of them serialises as before they existed (suites' digests, stored episodes, workflow histories).
    delay_s: float = Field(0.0, ge=0, le=MAX_DELAY_S, exclude_if=lambda v: not v,
                           description="seconds after injection that it arrives")
    app: str | None = Field(None, exclude_if=lambda v: v is None,
                            description="another app the fault breaks, in that app's own namespace (a shared "
                                        "platform fault hitting another team); None: the incident's")


SINGLE_FAULT_KEYS = ("fault", "target", "params", "ground_truth")


class Scenario(BaseModel):
    """An incident: one or more faults in one namespace, the alert that fires, and what a user says. It is resolved
    only when every fault is. The single-fault form (`fault`, `target`, `params`, `ground_truth` at the top, as
    every scenario stored before `faults` was) is read as a list of one."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    app: str
    namespace: str
    faults: list[FaultSpec] = Field(min_length=1)
    seed: int = 0
    alert: Alert
    symptom: str = Field(default="", description="how a user would phrase the problem in words")
    tags: list[str] = Field(default_factory=list)
    settle_s: float | None = Field(None, gt=0, le=MAX_SETTLE_S, exclude_if=lambda v: v is None,
                                   description="the least settle window before the verdict (a slow starter's); None: "
                                               "the incident limits' alone")

    @model_validator(mode="after")
    def _arrivals(self) -> Scenario:
        """The incident starts with its first fault; a fault in another app is there when it starts (the observer
        counts any change of that namespace against the baseline as harm, so a later one would read as the agent's)."""
        if self.faults[0].app not in (None, self.app) or self.faults[0].delay_s:
            raise ValueError("the first fault is the incident's own, there from the start: no `app` of another "
                             "app and no delay_s on it")
        for i, spec in enumerate(self.faults):
            if spec.app not in (None, self.app) and spec.delay_s:
                raise ValueError(f"faults[{i}]: a fault in another app ({spec.app}) is there from the start: "
                                 f"delay_s is for the incident's own faults")
        return self

    @model_validator(mode="before")
    @classmethod
    def _one_fault(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not SINGLE_FAULT_KEYS & data.keys():
            return data
        if "faults" in data:
            raise ValueError("a scenario has `fault` (one) or `faults` (a list), not both")
        rest = {k: v for k, v in data.items() if k not in SINGLE_FAULT_KEYS}
        return {**rest, "faults": [{k: data[k] for k in SINGLE_FAULT_KEYS if k in data}]}

    def own(self, spec: FaultSpec) -> bool:
        """Whether `spec` breaks this incident's app (not another team's)."""
        return spec.app in (None, self.app)

    def namespace_of(self, spec: FaultSpec) -> str:
        """Where `spec` breaks: the incident's namespace, or another app's own (it is installed under its name)."""
        return self.namespace if self.own(spec) else str(spec.app)

    @property
    def own_faults(self) -> list[FaultSpec]:
        """The faults of this incident's namespace: the ones its agent must mend and its observer judges."""
        return [f for f in self.faults if self.own(f)]

    @property
    def apps(self) -> list[str]:
        """Every app the scenario's environment installs: the incident's, then those its other faults break."""
        return list(dict.fromkeys([self.app, *(str(f.app) for f in self.faults if not self.own(f))]))

    @property
    def neighbours(self) -> list[str]:
        """The other apps' namespaces: the agent must not write there."""
        return list(dict.fromkeys(self.namespace_of(f) for f in self.faults if not self.own(f)))

    @property
    def held(self) -> list[FaultSpec]:
        """The faults that arrive later: held by the simulated environment until its clock passes their delay."""
        return [f for f in self.faults if f.delay_s]

    @property
    def fault(self) -> str:
        """The fault type, or the types joined by `+` (one fault on two deployments is still one type)."""
        return "+".join(dict.fromkeys(f.fault for f in self.faults))

    @property
    def target(self) -> str:
        return ",".join(dict.fromkeys(f.target for f in self.faults))

    @property
    def params(self) -> dict[str, Any]:
        """The only fault's parameters; of several, each fault's under `fault/target`."""
        if len(self.faults) == 1:
            return self.faults[0].params
        return {f"{f.fault}/{f.target}": f.params for f in self.faults}

    @property
    def ground_truth(self) -> GroundTruth:
        """The only fault's ground truth; of several, theirs together: every fix is needed, every root cause named.
        The fixes that roll a deployment back come first: a rollback goes to the revision before the current one,
        so it must run before another fix's own rollout of that deployment buries the revision it undoes (the
        faults' composition sees that each rollback undoes its deployment's latest fault); the others follow in
        fault order. A handover (`escalate`) ends the episode: it goes last, once, after every fix. Only this
        incident's faults count: another app's is its own team's to mend. A fault that arrives later composes as if
        it were there from the start: the observer judges the state at the end, once it has arrived."""
        own = self.own_faults
        if len(own) == 1:
            return own[0].ground_truth
        truths = [f.ground_truth for f in own]
        rollbacks = [t for t in truths if any(c.tool == "rollout_undo" for c in t.fix)]
        ordered = rollbacks + [t for t in truths if not any(t is r for r in rollbacks)]
        fixes = [c for t in ordered for c in t.fix]
        fixes = [c for c in fixes if c.tool != "escalate"] + [c for c in fixes if c.tool == "escalate"][:1]
        return GroundTruth(fault_class="+".join(dict.fromkeys(t.fault_class for t in truths)),
                           root_cause=", ".join(dict.fromkeys(t.root_cause for t in truths)),
                           fix=fixes, wrong_fix=[c for t in truths for c in t.wrong_fix],
                           destructive=[c for t in truths for c in t.destructive],
                           expected_ending="escalated" if any(t.expected_ending == "escalated" for t in truths)
                           else "finished")

    @property
    def false_alarm(self) -> bool:
        """Nothing to fix: every fault is benign (a false alarm, a transient event, hostile text alone)."""
        return all(f.ground_truth.fault_class == "none" for f in self.own_faults)


class ScenarioFamily(BaseModel):
    """A parameterised family: every combination of `matrix` values yields one scenario (no code needed)."""

    model_config = ConfigDict(extra="forbid")

    family: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    app: str
    fault: str
    matrix: dict[str, list[Any]] = Field(default_factory=dict, description="keys: target and fault params")
    seeds: list[int] = Field(default_factory=lambda: [0])
    alert_on: AlertOn = "target"
    tags: list[str] = Field(default_factory=list)
