"""What a finished incident amounts to: one definition for the workflow's result and for in-process evaluation."""

from __future__ import annotations

from agent_sre.models.remediation import IncidentOutcome
from agent_sre.models.trajectory import Trajectory
from agent_sre.rewards.base import EpisodeFacts


def incident_outcome(t: Trajectory, key: str | None = None) -> IncidentOutcome:
    """The summary of a finished, scored trajectory, as the workflow returns it and evaluations tally it."""
    assert t.verdict is not None and t.reward is not None and t.termination is not None
    results = [s.result for s in t.steps if s.result is not None]
    return IncidentOutcome(
        incident_id=t.incident.id, workflow_id=t.workflow_id, outcome=t.verdict.outcome, termination=t.termination,
        model_version=t.model_version, steps=len(t.steps), writes=len(t.writes),
        refused=sum(r.refused for r in results), invalid=sum(s.action is None for s in t.steps),
        false_positive=EpisodeFacts.of(t).false_positive,
        diagnosis=t.diagnosis, summary=t.summary, reward=t.reward, time_to_mitigate_s=t.time_to_mitigate_s, trajectory_key=key)
