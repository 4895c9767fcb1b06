"""What a status or list command shows, where no one stored model holds it all: these models are what `-o json`
and `-o yaml` print (their field names are the interface, docs/cli.md), and what the tables are drawn from."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from agent_sre.models.episode import OutcomeStats
from agent_sre.models.learning import CycleRecord, LearningState
from agent_sre.models.registry import ModelVersion
from agent_sre.models.remediation import IncidentOutcome, RemediationStatus


class IncidentSummary(BaseModel):
    """One remediation as `incident list` finds it, by the search attributes the Temporal UI filters on."""

    workflow_id: str
    execution_status: str
    started_at: datetime
    service: str | None = None
    fault_class: str | None = None
    model_version: str | None = None
    ending: str | None = None
    outcome: str | None = None


class IncidentState(BaseModel):
    """`incident status`: the workflow, its answer to the status query (or why there is none), what a running one
    waits on, and the outcome of a completed one or why another ended."""

    workflow_id: str
    workflow_type: str
    execution_status: str
    started_at: datetime
    status: RemediationStatus | None = None
    status_unknown: str | None = None
    waiting_on: list[str] = []
    failing_workflow_task_attempt: int | None = None
    outcome: IncidentOutcome | None = None
    ended: str | None = None


class ModelDetails(ModelVersion):
    """`models show`: the version (card, stage, history) and its stored evaluation results by suite."""

    evaluation: dict[str, list[OutcomeStats]] = {}


class ScheduleSummary(BaseModel):
    """A learning stream's Temporal Schedule, as `learn status` shows it."""

    every: list[str]
    paused: bool
    note: str | None = None
    next_runs: list[datetime]
    running: list[str]
    started: int
    skipped_overlapping: int


class LearningStatus(BaseModel):
    """`learn status`: the schedule (None once deleted), the stream's state and its last cycles."""

    name: str
    schedule: ScheduleSummary | None
    state: LearningState
    cycles: list[CycleRecord]


class FaultTypeView(BaseModel):
    """`scenarios faults`: a fault type, what it does and the public benchmark fault it follows."""

    name: str
    fault_class: str
    summary: str
    modelled_on: str


class ComponentView(BaseModel):
    """`dev status`: a component of the embedded stack, where it listens, and whether it answers."""

    component: str
    endpoint: str
    answers: bool
    pid: int | None = None
    detail: str
