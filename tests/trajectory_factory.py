"""Hand-built trajectories for the reward, redaction and storage tests (pydantic models, no workflow needed)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from agent_sre.models.alert import Alert
from agent_sre.models.incident import Incident, RemediationLimits
from agent_sre.models.policy import ChatMessage, PolicyDecision
from agent_sre.models.reward import HumanFeedback
from agent_sre.models.scenario import GroundTruth, Scenario
from agent_sre.models.tools import ToolCall, ToolResult
from agent_sre.models.trajectory import Step, Trajectory
from agent_sre.models.verdict import Verdict

START = datetime(2026, 3, 14, 9, 26, 53, tzinfo=UTC)
ALERT = Alert(labels={"alertname": "CartCrashLooping", "namespace": "shop", "service": "cart", "severity": "page"},
              annotations={"summary": "cart pods are crash looping"})


def step(action: ToolCall | None, result: ToolResult | None, completion: str = "",
         invalid_reason: str | None = None) -> Step:
    """A step; `index` and `at` are filled in by `make_trajectory`."""
    decision = PolicyDecision(action=action, invalid_reason=invalid_reason,
                              completion=completion or (action.model_dump_json() if action else "not json"),
                              new_messages=[ChatMessage(role="user", content="observation")],
                              model_version="runbook-v1")
    return Step(index=0, decision=decision, result=result, at=START)


def read(tool: str = "list_pods", output: str = "NAME READY STATUS\ncart-1 0/1 CrashLoopBackOff", **args: Any) -> Step:
    return step(ToolCall(tool=tool, args=args), ToolResult(tool=tool, ok=True, output=output))


def write(tool: str = "rollout_undo", ok: bool = True, refused: bool = False, **args: Any) -> Step:
    args = args or {"deployment": "cart"}
    output = "refused: not allowed" if refused else ("rolled back" if ok else "error: conflict")
    return step(ToolCall(tool=tool, args=args),
                ToolResult(tool=tool, ok=ok and not refused, refused=refused, output=output,
                           error=None if ok and not refused else output))


def finish(diagnosis: str = "deployment/cart: bad image", summary: str = "rolled back") -> Step:
    return step(ToolCall(tool="finish", args={"diagnosis": diagnosis, "summary": summary}), None)


def escalate(diagnosis: str = "deployment/cart: still CrashLoopBackOff",
             summary: str = "rolled back; the rollout never became available") -> Step:
    return step(ToolCall(tool="escalate", args={"diagnosis": diagnosis, "summary": summary}), None)


def scenario(fault: str = "bad-image", destructive: list[ToolCall] | None = None) -> Scenario:
    return Scenario(name=f"cart-{fault}", app="shop", namespace="shop", fault=fault, target="cart", alert=ALERT,
                    ground_truth=GroundTruth(fault_class=fault, root_cause="deployment/cart",
                                             fix=[ToolCall(tool="rollout_undo", args={"deployment": "cart"})],
                                             destructive=destructive or []))


def make_trajectory(steps: list[Step], outcome: str | None = "resolved", mitigated_after_s: float = 20.0,
                    alert_resolved: bool = True, fault: str = "bad-image", reasons: list[str] | None = None,
                    feedback: list[int] | None = None, max_steps: int = 15, termination: str = "finished",
                    destructive: list[ToolCall] | None = None, alert: Alert | None = ALERT,
                    report: str | None = None, model_version: str = "runbook-v1",
                    start: datetime = START) -> Trajectory:
    """An episode of `steps`. The verdict's service health follows `alert_resolved` (the alerted `cart` still
    unhealthy or not) and its baseline follows `fault` (nothing unhealthy at the start of a false alarm)."""
    incident = Incident(source="simulation", alert=alert, report=report, namespace="shop",
                        scenario=scenario(fault, destructive), limits=RemediationLimits(max_steps=max_steps))
    numbered = [s.model_copy(update={"index": i, "at": start + timedelta(seconds=i)}) for i, s in enumerate(steps)]
    verdict = None if outcome is None else Verdict(
        outcome=outcome, reasons=reasons or [f"judged {outcome}"],
        unhealthy={} if alert_resolved else {"cart": ["0/2 pods ready"]},
        baseline_unhealthy=[] if fault == "none" else ["cart"])
    return Trajectory(
        incident=incident, workflow_id=incident.workflow_id, run_id="run-0001", policy="runbook",
        model_version=model_version,
        conversation=[m for s in numbered for m in
                      (*s.decision.new_messages, ChatMessage(role="assistant", content=s.decision.completion))],
        steps=numbered, termination=termination,
        diagnosis=numbered[-1].action.args.get("diagnosis") if numbered and numbered[-1].action else None,
        verdict=verdict, feedback=[HumanFeedback(rating=r) for r in feedback or []],
        started_at=start, mitigated_at=start + timedelta(seconds=mitigated_after_s),
        ended_at=start + timedelta(seconds=mitigated_after_s + 30))
