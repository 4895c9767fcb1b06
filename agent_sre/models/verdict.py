"""The health oracle's judgement of an incident: resolved, unresolved or made worse, and why."""

from __future__ import annotations

from pydantic import BaseModel, Field

from agent_sre.models.endings import Outcome


class HealthSnapshot(BaseModel):
    """The namespace as the oracle saw it right after injection: the baseline that 'worse' is measured against."""

    namespace: str
    unhealthy: dict[str, list[str]] = Field(default_factory=dict, description="service -> why it is unhealthy")
    resources: list[str] = Field(default_factory=list, description="kind/name of every object that must survive")
    fingerprints: dict[str, str] = Field(default_factory=dict, description="kind/name -> hash of its spec or data")
    neighbours: dict[str, dict[str, str]] = Field(
        default_factory=dict, description="another app's namespace the incident must not write to -> the "
                                          "fingerprints of its objects (a shared fault's other victim)")


class Verdict(BaseModel):
    """The judgement, per service and per invariant, with what the incident changed."""

    outcome: Outcome
    reasons: list[str] = Field(default_factory=list, description="why: one line per finding, most important first")
    unhealthy: dict[str, list[str]] = Field(default_factory=dict, description="service -> why, now")
    baseline_unhealthy: list[str] = Field(default_factory=list, description="services unhealthy at the baseline")
    deleted: list[str] = Field(default_factory=list, description="kind/name present at the baseline, gone now")
    newly_unhealthy: list[str] = Field(default_factory=list,
                                       description="services healthy at the baseline and unhealthy now: harm")
    changed: list[str] = Field(default_factory=list, description="kind/name whose spec or data changed since the "
                                                                 "baseline (what the incident changed)")
    harm: dict[str, list[str]] = Field(default_factory=dict, description="invariant -> how it broke (services, "
                                       "kept, placement, cordon, scope); any makes the outcome 'worse'")
    probes_pending_s: float = Field(default=0.0, ge=0, description="seconds of the cluster's clock before a fresh "
                                    "container's liveness probe has acted; above 0 the verdict is provisional (a "
                                    "restarted slow starter looks healthy until its probe kills it)")

    @property
    def resolved(self) -> bool:
        return self.outcome == "resolved"

    @property
    def worse(self) -> bool:
        return self.outcome == "worse"
