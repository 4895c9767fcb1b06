"""Helpers for the LLM policy and SFT tests (the tiny model is tests/conftest.py's `tiny_model_dir`): runbook episodes
built by running the real RunbookPolicy over canned kubectl output (the shared conversation format, no cluster)."""

from __future__ import annotations

from datetime import timedelta

from trajectory_factory import ALERT, START, scenario

from agent_sre.models.incident import Incident
from agent_sre.models.policy import ChatMessage
from agent_sre.models.remediation import PolicyRef
from agent_sre.models.tools import TOOL_SPECS, ToolResult
from agent_sre.models.trajectory import Step, Trajectory
from agent_sre.models.verdict import Verdict
from agent_sre.policy.runbook import RunbookPolicy

PODS_HEADER = "NAME                    READY   STATUS             RESTARTS   AGE\n"
HEALTHY_WEB = "web-5c6d7e8f9a-abcde    1/1     Running            0          1h\n"
NO_CHAOS = "No chaos experiments found in namespace shop."

# fault -> what each tool prints (by tool name; `describe` by kind). Enough for the runbook to reach its fix.
CANNED: dict[str, dict[str, str]] = {
    "bad-image": {
        "list_pods": PODS_HEADER + "cart-7d9f8c6b5d-x2k4q   0/1     ImagePullBackOff   0          2m\n" + HEALTHY_WEB,
        "get_events": "LAST SEEN   TYPE      REASON   OBJECT                      MESSAGE\n"
                      '1m          Warning   Failed   pod/cart-7d9f8c6b5d-x2k4q   Failed to pull image "cart:v9"',
        "describe:deployment": "Name: cart\nReplicas: 2 desired | 1 updated | 2 total | 1 available",
        "describe:pod": "Name: cart-7d9f8c6b5d-x2k4q\nContainers:\n  cart:\n    Image: cart:v9",
        "get_endpoints": "NAME   ENDPOINTS        AGE\ncart   10.0.0.12:8080   1h",
        "rollout_undo": "deployment.apps/cart rolled back",
    },
    "oom": {
        "list_pods": PODS_HEADER + "cart-7d9f8c6b5d-x2k4q   0/1     OOMKilled          4          9m\n" + HEALTHY_WEB,
        "get_events": "LAST SEEN   TYPE      REASON    OBJECT                      MESSAGE\n"
                      "30s         Warning   BackOff   pod/cart-7d9f8c6b5d-x2k4q   Back-off restarting container",
        "describe:deployment": "Name: cart\nReplicas: 2 desired | 2 updated | 2 total | 1 available",
        "describe:pod": "Name: cart-7d9f8c6b5d-x2k4q\nContainers:\n  cart:\n    Limits:      memory=64Mi\n"
                        "    Last State:  Terminated\n      Reason:    OOMKilled",
        "get_logs": "starting cart\nloading catalog\nkilled",
        "get_endpoints": "NAME   ENDPOINTS   AGE\ncart   <none>      1h",
        "set_resources": "deployment.apps/cart resource requirements updated",
    },
    "none": {
        "list_pods": PODS_HEADER + "cart-7d9f8c6b5d-x2k4q   1/1     Running            0          3h\n" + HEALTHY_WEB,
        "get_events": "No resources found in shop namespace.",
        "describe:deployment": "Name: cart\nReplicas: 2 desired | 2 updated | 2 total | 2 available",
        "get_endpoints": "NAME   ENDPOINTS                         AGE\ncart   10.0.0.12:8080,10.0.0.13:8080   3h",
    },
}


ROLLED_OUT = 'Waiting for deployment "cart" rollout to finish: 0 of 2 updated replicas are available...\n' \
             'deployment "cart" successfully rolled out'
ROLLOUT_TIMED_OUT = 'Waiting for deployment "cart" rollout to finish: 0 of 2 updated replicas are available...\n' \
                    'error: timed out waiting for the condition'


def runbook_episode(fault: str = "bad-image", outcome: str = "resolved", run_id: str = "run-0001",
                    fix_rolls_out: bool = True, fix_error: str | None = None) -> Trajectory:
    """An episode of the real runbook policy, with the conversation exactly as the workflow records it, judged
    `outcome`. When its fix rolls out the runbook finishes (a claimed fix, whatever the verdict); when the rollout
    times out, or the fix itself fails with `fix_error`, it escalates."""
    incident = Incident(source="simulation", alert=ALERT, namespace="shop", scenario=scenario(fault))
    t = Trajectory(incident=incident, workflow_id=incident.workflow_id, run_id=run_id, policy="runbook",
                   model_version="runbook-v1", started_at=START)
    policy, ref = RunbookPolicy(), PolicyRef(name="runbook", version="runbook-v1")
    outputs = CANNED[fault] | {"rollout_status": ROLLED_OUT if fix_rolls_out else ROLLOUT_TIMED_OUT}
    while True:
        decision = policy.decide(ref, t)
        t.conversation.extend(decision.new_messages)
        t.conversation.append(ChatMessage(role="assistant", content=decision.completion))
        step = Step(index=len(t.steps), decision=decision, at=START + timedelta(seconds=len(t.steps)))
        t.steps.append(step)
        action = decision.action
        assert action is not None and len(t.steps) < 15, "the runbook never gives an invalid action"
        if t.end(action) is not None:
            break
        key = f"{action.tool}:{action.args['kind']}" if action.tool == "describe" else action.tool
        if fix_error is not None and TOOL_SPECS[action.tool].write:
            step.result = ToolResult(tool=action.tool, ok=False, output=fix_error)
        else:
            step.result = ToolResult(tool=action.tool, ok=True, output=outputs.get(key, "No resources found."))
    t.verdict = Verdict(outcome=outcome, reasons=[f"judged {outcome}"],
                        unhealthy={} if outcome == "resolved" else {"cart": ["0/2 pods ready"]},
                        baseline_unhealthy=[] if fault == "none" else ["cart"])
    t.alert_resolved = outcome == "resolved"
    t.mitigated_at = START + timedelta(seconds=len(t.steps))
    t.ended_at = t.mitigated_at + timedelta(seconds=30)
    return t
