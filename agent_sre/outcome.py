"""What an ended incident amounts to: the workflow's result (one definition, for in-process evaluation too) and
the page an escalation sends."""

from __future__ import annotations

from datetime import datetime

from agent_sre.models.remediation import EscalationNotice, IncidentOutcome
from agent_sre.models.trajectory import Trajectory
from agent_sre.redaction import incident_secrets, redact_model
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
        diagnosis=t.diagnosis, summary=t.summary, reward=t.reward, time_to_mitigate_s=t.time_to_mitigate_s,
        trajectory_key=key)


def escalation_notice(t: Trajectory, at: datetime) -> EscalationNotice:
    """The page for an escalated trajectory, sent before its verdict: the settle window is for the reward, and a
    human should not wait for it. Redacted, and rid of every secret value the agent read in this incident (a
    diagnosis that restates the password it found): the trajectory is all that needs, so the workflow calls this
    deterministically."""
    i = t.incident
    alertname = i.alert.labels.get("alertname") if i.alert is not None else None
    diagnosis, summary = t.diagnosis or "(no diagnosis)", t.summary or "(no summary)"
    text = (f"agent-sre escalated {alertname or i.id} in {i.namespace}/{i.service or '-'} to a human: {diagnosis} "
            f"({summary}). What it did: agent-sre incident steps {t.workflow_id}")
    notice = EscalationNotice(text=text, incident_id=i.id, workflow_id=t.workflow_id, namespace=i.namespace,
                              service=i.service, alertname=alertname, model_version=t.model_version,
                              diagnosis=diagnosis, summary=summary,
                              actions=[s.action.command_line() for s in t.writes if s.action is not None], at=at)
    return redact_model(notice, incident_secrets(t))
