"""An incident: what the remediation workflow is asked to fix, however it arrived."""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agent_sre.models.alert import Alert
from agent_sre.models.scenario import Scenario
from agent_sre.models.tools import Risk

IncidentSource = Literal["alertmanager", "sdk", "cli", "user_report", "simulation"]
MAX_WORKFLOW_ID = 1000  # the Temporal server's limit.maxIDLength, by default
MAX_PROBE_WAIT_S = 300.0  # the most a verdict waits, past the settle window, for liveness probes to act
LEASE_CHECK_S = 300.0  # how long a dead holder can block its namespace: the lock checks on a live one this often


class RemediationLimits(BaseModel):
    """Bounds on one remediation. Times are real seconds on the Temporal clock (durable timers)."""

    max_steps: int = Field(default=15, ge=1, le=100)
    deadline_s: float = Field(default=900.0, gt=0)
    settle_s: float = Field(default=30.0, ge=0, description="wait after the last action before judging")
    cluster_timeout_s: float = Field(
        default=300.0, gt=0, description="how long a read of the namespace's health (the baseline, the verdict) may "
                                         "keep failing before the incident gives up on its cluster")
    feedback_window_s: float = Field(default=0.0, ge=0, description="how long human feedback is accepted")
    approval_risk: Risk | None = Field(default=None, description="writes at or above this risk wait for a human")
    approval_timeout_s: float = Field(default=600.0, gt=0)
    approve_high_risk: Literal["human", "auto"] = Field(
        default="human", description="who approves a write the rules judge high-risk (agent_sre.tools.write_rules): "
                                     "a human, as approval_risk's writes are, or nobody (simulated incidents, "
                                     "AGENT_SRE_AUTO_APPROVE_NAMESPACES); a forbidden write never runs")
    namespace_lease_s: float | None = Field(
        default=None, gt=0, description="how often the namespace's lock checks that this incident, holding the write "
                                        "lease, still runs: a live holder keeps it (however long an approval takes), "
                                        "one that died loses it within this time; None: LEASE_CHECK_S (300 s)")

    @property
    def namespace_lease_seconds(self) -> float:
        return self.namespace_lease_s if self.namespace_lease_s is not None else LEASE_CHECK_S

    def settling(self, seconds: float | None) -> RemediationLimits:
        """These limits with a settle window of at least `seconds` (a scenario's `settle_s`, for a slow starter
        whose fix shows only later, on the clock the incident's timers run on); the limits' own is the default, never
        shortened. None: as they are."""
        if seconds is None or seconds <= self.settle_s:
            return self
        return self.model_copy(update={"settle_s": seconds})


class Incident(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(default="", description="stable identity; derived from the alert's firing episode (fingerprint "
                                            "and startsAt, `Alert.episode_id`) when empty")
    source: IncidentSource = "sdk"
    alert: Alert | None = Field(default=None, description="the alert that leads `alerts`: the first to fire")
    alerts: list[Alert] = Field(default_factory=list, description="every alert of the Alertmanager group this "
                                "incident answers, `alert` first; empty (older incidents): `alert` alone")
    report: str | None = Field(default=None, max_length=4000, description="a user's own words")
    namespace: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    service: str | None = None
    kubeconfig: str | None = Field(default=None, description="cluster to act on; None = the worker's default")
    scenario: Scenario | None = Field(default=None, description="ground truth, only for simulated incidents")
    limits: RemediationLimits = Field(default_factory=RemediationLimits)
    created_at: datetime | None = None

    @field_validator("report")
    @classmethod
    def _blank_report_is_none(cls, report: str | None) -> str | None:
        return (report.strip() or None) if report is not None else None

    @model_validator(mode="after")
    def _identity(self) -> Incident:
        if self.alert is None and self.alerts:
            self.alert = self.alerts[0]
        if self.alert is None and not self.report:
            raise ValueError("an incident needs an alert or a report")
        if not self.id:
            if self.alert is not None:
                self.id = self.alert.episode_id()
            else:
                self.id = hashlib.sha256(f"{self.namespace}\n{self.report}".encode()).hexdigest()[:16]
        if len(self.workflow_id) > MAX_WORKFLOW_ID:
            raise ValueError(f"the incident's workflow id would be {len(self.workflow_id)} characters and Temporal "
                             f"allows {MAX_WORKFLOW_ID}: give it a shorter id (or its alert a shorter fingerprint)")
        if self.service is None and self.alert is not None:
            self.service = self.alert.labels.get("service") or self.alert.labels.get("deployment")
        return self

    @property
    def workflow_id(self) -> str:
        """One remediation per firing episode: a re-sent alert attaches to the workflow of its episode."""
        return f"incident-{self.namespace}-{self.id}"

    @property
    def all_alerts(self) -> list[Alert]:
        return self.alerts or ([self.alert] if self.alert is not None else [])

    def with_alerts(self, alerts: list[Alert]) -> Incident:
        """The incident with the latest version of each alert (by fingerprint), new ones appended; `alert` and the
        identity stay: the incident is the one its first alert started."""
        latest = {a.stable_fingerprint(): a for a in (*self.all_alerts, *alerts)}
        return self.model_copy(update={"alerts": list(latest.values()),
                                       "alert": latest[self.alert.stable_fingerprint()] if self.alert else None})

    @property
    def fault_class(self) -> str:
        return self.scenario.ground_truth.fault_class if self.scenario else "unknown"

    @classmethod
    def from_alert(cls, alert: Alert, source: IncidentSource = "alertmanager", **kw: object) -> Incident:
        namespace = alert.labels.get("namespace")
        if not namespace:
            raise ValueError(f"alert {alert.labels.get('alertname', '?')} has no 'namespace' label")
        return cls(source=source, alert=alert, namespace=namespace, **kw)  # type: ignore[arg-type]

    @classmethod
    def from_alerts(cls, alerts: list[Alert], source: IncidentSource = "alertmanager", **kw: object) -> Incident:
        """One incident for the alerts of one Alertmanager group in one namespace: led, and named, by the first to
        fire, so that every delivery of the group while that alert fires names the same incident."""
        ordered = sorted(alerts, key=Alert.first_key)
        incident = cls.from_alert(ordered[0], source, **kw)
        return incident.model_copy(update={"alerts": ordered}) if len(ordered) > 1 else incident
