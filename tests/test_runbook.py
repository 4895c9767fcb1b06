"""The runbook's rules act on evidence about the pod they blame, as an on-call engineer reading kubectl would.

Each test is one rule bug an SRE found (issue: on-call correctness): a day-old OOMKill or another object's
readiness failure taken as the fault, a rolling update read as a scale to zero, a cordon looked for in output the
runbook never read, a scale back to one whatever the count was, ties between sick pods broken by name.
"""

from __future__ import annotations

import pytest
from trajectory_factory import make_trajectory, read

from agent_sre.models.remediation import PolicyRef
from agent_sre.models.scenario import Scenario
from agent_sre.models.tools import TOOL_SPECS, ToolCall
from agent_sre.models.trajectory import Trajectory
from agent_sre.outcome import incident_outcome
from agent_sre.policy.runbook import RunbookPolicy
from agent_sre.scenarios import load_scenarios
from agent_sre.simulator.simulator import Simulator
from agent_sre.training.evaluate import play

RUNBOOK = PolicyRef(name="runbook", version="runbook")


def _played(name: str) -> Trajectory:
    scenario: Scenario = next(s for s in load_scenarios() if s.name == name)
    return play(RunbookPolicy(), RUNBOOK, scenario, Simulator(speed=0))


def _calls(t: Trajectory) -> list[ToolCall]:
    return [s.action for s in t.steps if s.action is not None]


def _writes(t: Trajectory) -> list[ToolCall]:
    return [c for c in _calls(t) if TOOL_SPECS[c.tool].write]


def _next(*reads: tuple[str, dict[str, object], str]) -> ToolCall:
    """The runbook's next action after these reads (tool, args, output) on a `cart` alert."""
    t = make_trajectory([read(tool, output, **args) for tool, args, output in reads], outcome=None)
    return RunbookPolicy().choose(RUNBOOK, t)


@pytest.mark.parametrize("name", ["false-alarm-catalog-s0", "false-alarm-checkout-s1"])
def test_a_false_alarm_beside_old_noise_is_finished_without_a_write(name: str) -> None:
    """The benign noise: a pod that was OOMKilled once yesterday and has run since, and a readiness failure of
    another service 42 minutes ago. Neither is the alerting service's fault."""
    t = _played(name)
    listing = t.steps[0].result.output if t.steps[0].result else ""
    assert "(26h ago)" in listing and "Readiness probe failed" in t.steps[1].result.output  # the noise is there
    assert _writes(t) == [] and t.termination == "finished", _calls(t)
    assert not incident_outcome(t).false_positive and incident_outcome(t).outcome == "resolved"


def test_a_cordoned_node_is_found_where_kubectl_shows_it_and_uncordoned() -> None:
    t = _played("cordoned-node-payment-s0")
    nodes = next(s.result.output for s in t.steps if s.action and s.action.tool == "list_nodes" and s.result)
    cordoned = next(line.split()[0] for line in nodes.splitlines() if "SchedulingDisabled" in line)
    assert _writes(t) == [ToolCall(tool="uncordon", args={"node": cordoned})]  # its placement constraints kept
    assert t.verdict is not None and t.verdict.outcome == "resolved"


def test_a_deployment_scaled_to_zero_gets_back_the_replicas_it_had() -> None:
    t = _played("scaled-to-zero-catalog-s0")
    events = t.steps[1].result.output if t.steps[1].result else ""
    had = int(events.split("to 0 from ")[1].split()[0])
    assert had > 1 and _writes(t) == [ToolCall(tool="scale", args={"deployment": "catalog", "replicas": had})]
    assert t.verdict is not None and t.verdict.outcome == "resolved"


ROLLING_UPDATE = ("LAST SEEN   TYPE     REASON              OBJECT           MESSAGE\n"
                  "3m          Normal   ScalingReplicaSet   deployment/web   Scaled down replica set web-6d4cf56db6 "
                  "to 0 from 2")
HEALTHY_PODS = ("NAME                   READY   STATUS    RESTARTS   AGE   NODE\n"
                "cart-5c7f9d8b6-abcde   1/1     Running   0          2d    worker-1\n"
                "web-7f8d9c6b5-fghij    1/1     Running   0          3m    worker-2\n"
                "web-7f8d9c6b5-klmno    1/1     Running   0          3m    worker-3")


def test_a_rolling_update_whose_scale_up_is_not_listed_is_confirmed_before_anything_is_scaled() -> None:
    """The old replica set of a rolling update goes to zero too; only the deployment says whether it wants none."""
    seen = [("list_pods", {}, HEALTHY_PODS), ("get_events", {}, ROLLING_UPDATE),
            ("list_chaos_experiments", {}, "No chaos experiments in shop namespace."),
            ("describe", {"kind": "deployment", "name": "cart"}, "Name: cart\nReplicas: 2 desired | 2 updated"),
            ("get_endpoints", {"service": "cart"}, "NAME   ENDPOINTS\ncart   10.0.0.1:8080")]
    assert _next(*seen) == ToolCall(tool="describe", args={"kind": "deployment", "name": "web"})
    still_wanted = ("describe", {"kind": "deployment", "name": "web"}, "Name: web\nReplicas: 2 desired | 2 updated")
    assert _next(*seen, still_wanted).tool == "finish"  # not `scale web replicas=1`, which halved it
    scaled_down = ("describe", {"kind": "deployment", "name": "web"}, "Name: web\nReplicas: 0 desired | 0 updated")
    assert _next(*seen, scaled_down) == ToolCall(tool="scale", args={"deployment": "web", "replicas": 2})


def test_of_two_equally_sick_pods_the_newest_is_investigated_not_the_first_by_name() -> None:
    listing = ("NAME                   READY   STATUS             RESTARTS     AGE   NODE\n"
               "alpha-5c7f9d8b6-abcde  0/1     CrashLoopBackOff   40 (2m ago)  3d    worker-1\n"
               "beta-7f8d9c6b5-fghij   0/1     CrashLoopBackOff   3 (30s ago)  4m    worker-2")
    seen = [("list_pods", {}, listing), ("get_events", {}, "No events."),
            ("list_chaos_experiments", {}, "No chaos experiments in shop namespace."),
            ("describe", {"kind": "deployment", "name": "cart"}, "Name: cart\nReplicas: 2 desired"),
            ("get_endpoints", {"service": "cart"}, "NAME   ENDPOINTS\ncart   10.0.0.1:8080")]
    assert _next(*seen) == ToolCall(tool="describe", args={"kind": "pod", "name": "beta-7f8d9c6b5-fghij"})


def test_an_oom_kill_is_fixed_from_the_limit_of_the_pod_that_was_killed() -> None:
    """The limit is read from the killed pod's own description, never from another deployment's."""
    t = _played(next(s.name for s in load_scenarios() if s.fault == "oom_limit"))
    fix = _writes(t)[0]
    described = next(s.result.output for s in t.steps if s.action and s.action.tool == "describe"
                     and s.action.args.get("kind") == "pod" and s.result)
    limit = described.split("Limits: memory=")[1].split("Mi")[0]
    assert fix.tool == "set_resources" and fix.args["memory_limit"] == f"{max(int(limit) * 4, 512)}Mi"


def test_a_service_label_that_names_no_object_is_not_read_again_and_again() -> None:
    """An alert labelled `service=Cart_Service` cannot name a deployment; describing it would be an invalid action,
    and the runbook used to make it again at every turn until the step limit."""
    scenario = next(s for s in load_scenarios() if s.fault == "oom_limit")
    alert = scenario.alert.model_copy(update={"labels": {**scenario.alert.labels, "service": "Cart_Service"}})
    t = play(RunbookPolicy(), RUNBOOK, scenario.model_copy(update={"alert": alert}), Simulator(speed=0))
    assert all(s.action is not None for s in t.steps), [s.decision.invalid_reason for s in t.steps]
    assert t.termination == "finished" and t.verdict is not None and t.verdict.outcome == "resolved"
