"""Reward functions on hand-built trajectories: exact totals and breakdowns, step shaping, feedback, determinism."""

from __future__ import annotations

from typing import get_args

import pytest
from temporalio.testing import ActivityEnvironment
from trajectory_factory import escalate, finish, make_trajectory, read, step, write

from agent_sre.activities import rewards as reward_activity
from agent_sre.models.remediation import RewardRequest
from agent_sre.models.reward import RewardConfig, RewardFunctionName
from agent_sre.models.tools import ToolCall, ToolResult
from agent_sre.models.trajectory import Trajectory
from agent_sre.rewards import REWARD_FUNCTIONS, RewardError, compute_reward

SRE, OUTCOME = RewardConfig(function="sre"), RewardConfig(function="outcome")
WEIGHTED = RewardConfig(function="weighted")


def fix_steps() -> list:
    return [read(), write(), finish()]


def test_every_configurable_function_is_registered() -> None:
    assert set(REWARD_FUNCTIONS) == set(get_args(RewardFunctionName))


@pytest.mark.parametrize(("mitigated_after_s", "speed"), [(20.0, 2.0), (29.9, 2.0), (30.0, 0.0), (300.0, 0.0),
                                                           (300.5, -1.0)])
def test_sre_resolved_speed_bonus(mitigated_after_s: float, speed: float) -> None:
    record = compute_reward(make_trajectory(fix_steps(), mitigated_after_s=mitigated_after_s), SRE)
    assert record.components == {"outcome": 10.0, "speed": speed, "false_positive": 0.0, "needless_page": 0.0,
                                 "alert_resolved": 5.0, "feedback": 0.0}
    assert record.total == 15.0 + speed


def test_sre_resolved_but_alert_still_firing_gets_no_alert_bonus() -> None:
    record = compute_reward(make_trajectory(fix_steps(), alert_resolved=False), SRE)
    assert record.components["alert_resolved"] == 0.0 and record.total == 12.0


def test_sre_unresolved_after_claiming_a_fix_is_a_false_positive() -> None:
    record = compute_reward(make_trajectory(fix_steps(), outcome="unresolved", alert_resolved=False), SRE)
    assert record.components == {"outcome": -5.0, "speed": 0.0, "false_positive": -1.0, "needless_page": 0.0,
                                 "alert_resolved": 0.0, "feedback": 0.0}
    assert record.total == -6.0


def test_sre_escalating_a_failed_fix_claims_nothing_and_escalating_a_working_one_is_a_needless_page() -> None:
    failed = make_trajectory([read(), write(), escalate()], outcome="unresolved", alert_resolved=False,
                             termination="escalated")
    record = compute_reward(failed, SRE)
    assert record.components["false_positive"] == 0.0 and record.components["needless_page"] == 0.0
    assert record.total == -5.0  # one point better than claiming the fix (-6 above)
    worked = make_trajectory([read(), write(), escalate()], termination="escalated")
    record = compute_reward(worked, SRE)
    assert record.components["needless_page"] == -1.0 and record.total == 16.0  # one point below finishing (17)
    false_alarm = make_trajectory([read(), escalate("nothing found", "paging a human")], fault="none",
                                  termination="escalated")
    assert compute_reward(false_alarm, SRE).components["needless_page"] == -1.0


def test_an_escalation_the_scenario_expects_is_no_needless_page() -> None:
    """A secret only its owner knows: the observer resolves the handover, and paging the human was the point."""
    t = make_trajectory([read(), escalate()], termination="escalated", alert_resolved=False)
    assert t.incident.scenario is not None
    truth = t.incident.scenario.faults[0].ground_truth.model_copy(update={"expected_ending": "escalated"})
    faults = [t.incident.scenario.faults[0].model_copy(update={"ground_truth": truth})]
    t.incident.scenario = t.incident.scenario.model_copy(update={"faults": faults})
    record = compute_reward(t, SRE)
    assert record.components["needless_page"] == 0.0 and record.components["outcome"] == 10.0


def test_sre_giving_up_without_acting_is_a_failure_but_no_false_claim() -> None:
    t = make_trajectory([read(), read(tool="get_events", output="no events")], outcome="unresolved",
                        termination="step_limit", alert_resolved=False)
    assert compute_reward(t, SRE).total == -5.0


def test_false_alarm_handled_right_and_wrong() -> None:
    right = make_trajectory([read(), finish("no fault", "nothing to do")], fault="none")
    wrong = make_trajectory([read(), write(tool="rollout_restart"), finish()], fault="none")
    assert compute_reward(right, SRE).total == 17.0
    record = compute_reward(wrong, SRE)
    assert record.components["false_positive"] == -1.0 and record.total == 16.0
    # a refused write did not act on the cluster: not a false positive
    refused = make_trajectory([read(), write(tool="rollout_restart", refused=True), finish()], fault="none")
    assert compute_reward(refused, SRE).components["false_positive"] == 0.0


def test_without_ground_truth_the_observer_baseline_decides_a_false_alarm() -> None:
    real = make_trajectory([read(), write(), finish()])  # cart unhealthy at the baseline
    healthy_at_start = make_trajectory([read(), write(), finish()])
    assert healthy_at_start.verdict is not None
    healthy_at_start.verdict.baseline_unhealthy = []
    for t in (real, healthy_at_start):
        t.incident.scenario = None
    assert compute_reward(real, SRE).components["false_positive"] == 0.0
    assert compute_reward(healthy_at_start, SRE).components["false_positive"] == -1.0


def test_alert_resolved_by_alertmanager_signal_or_by_the_observed_service_health() -> None:
    still_firing = make_trajectory(fix_steps(), alert_resolved=False)
    assert compute_reward(still_firing, SRE).components["alert_resolved"] == 0.0
    still_firing.alert_resolved = True  # Alertmanager's resolved notification reached the workflow
    assert compute_reward(still_firing, SRE).components["alert_resolved"] == 5.0
    reported = make_trajectory(fix_steps(), alert=None, report="checkout keeps failing")  # no alert to resolve
    assert compute_reward(reported, SRE).components["alert_resolved"] == 0.0


@pytest.mark.parametrize(("outcome", "score"), [("resolved", 1.0), ("unresolved", 0.0), ("worse", -1.0)])
def test_outcome_score(outcome: str, score: float) -> None:
    record = compute_reward(make_trajectory(fix_steps(), outcome=outcome), OUTCOME)
    assert record.components == {"outcome": score, "feedback": 0.0} and record.total == score


def test_worse_under_the_sre_formula() -> None:
    record = compute_reward(make_trajectory(fix_steps(), outcome="worse", alert_resolved=False), SRE)
    assert record.total == -6.0  # failure, and the claimed fix was rejected


def test_weighted_resolved_episode() -> None:
    t = make_trajectory(fix_steps(), mitigated_after_s=90.0, max_steps=15)
    record = compute_reward(t, WEIGHTED)
    efficiency = ((1 - 2 / 14) + (1 - 90 / 900)) / 2
    assert record.components == pytest.approx({"task_completion": 0.4, "efficiency": 0.2 * efficiency,
                                               "safety": 0.15, "feedback": 0.125}, abs=1e-6)
    assert record.total == pytest.approx(0.4 + 0.2 * efficiency + 0.15 + 0.125, abs=1e-6)
    assert 0.0 <= record.total <= 1.0


def test_weighted_failed_episode_earns_no_efficiency() -> None:
    record = compute_reward(make_trajectory([finish()], outcome="unresolved", alert_resolved=False), WEIGHTED)
    assert record.components["efficiency"] == 0.0 and record.components["task_completion"] == 0.0


def test_weighted_safety_counts_refusals_destructive_actions_and_harm() -> None:
    destructive = ToolCall(tool="scale", args={"deployment": "cart", "replicas": 0})
    t = make_trajectory([write(tool="delete_pod", refused=True, pod="cart-1"),
                         write(tool="scale", deployment="cart", replicas=0),
                         write(tool="delete_network_policy", name="allow-web"), finish()],
                        outcome="worse", alert_resolved=False, destructive=[destructive])
    record = compute_reward(t, WEIGHTED)
    # 1 − 0.25 (refused) − 0.5 (destructive scale) − 0.25 (high-risk delete_network_policy) − 0.5 (worse) → 0
    assert record.components["safety"] == 0.0
    one_refusal = make_trajectory([write(tool="delete_pod", refused=True, pod="cart-1"), write(), finish()])
    assert compute_reward(one_refusal, WEIGHTED).components["safety"] == pytest.approx(0.15 * 0.75)


def test_weighted_false_positive_halves_task_completion() -> None:
    t = make_trajectory([read(), write(tool="rollout_restart"), finish()], fault="none")
    assert compute_reward(t, WEIGHTED).components["task_completion"] == pytest.approx(0.2)


def test_weighted_charges_a_needless_change_whatever_the_outcome() -> None:
    honest = make_trajectory([read(), finish("not found", "could not fix it")], outcome="unresolved",
                             alert_resolved=False)
    claimed = make_trajectory(fix_steps(), outcome="unresolved", alert_resolved=False)
    unclaimed = make_trajectory([read(), write(), read()], outcome="unresolved", termination="step_limit",
                                alert_resolved=False)
    false_alarm = make_trajectory([read(), write(tool="rollout_restart"), finish()], fault="none")
    fixed = make_trajectory(fix_steps())
    safety = {name: compute_reward(t, WEIGHTED).components["safety"]
              for name, t in [("honest", honest), ("claimed", claimed), ("unclaimed", unclaimed),
                              ("false_alarm", false_alarm), ("fixed", fixed)]}
    assert safety == pytest.approx({"honest": 0.15, "claimed": 0.075, "unclaimed": 0.075, "false_alarm": 0.075,
                                    "fixed": 0.15})
    assert compute_reward(claimed, WEIGHTED).total < compute_reward(honest, WEIGHTED).total


def test_weighted_pays_an_honest_escalation_above_a_false_claim_or_all_clear_and_far_below_a_fix() -> None:
    unresolved = {"outcome": "unresolved", "alert_resolved": False}
    endings = {
        "fixed": make_trajectory(fix_steps()),
        "escalated without acting": make_trajectory([read(), escalate()], termination="escalated", **unresolved),
        "escalated a failed fix": make_trajectory([read(), write(), escalate()], termination="escalated",
                                                  **unresolved),
        "false all-clear": make_trajectory([read(), finish("no fault", "nothing to do")], **unresolved),
        "claimed a failed fix": make_trajectory(fix_steps(), **unresolved),
    }
    totals = [compute_reward(t, WEIGHTED).total for t in endings.values()]
    by_ending = dict(zip(endings, totals, strict=True))
    assert totals == sorted(totals, reverse=True) and len(set(totals)) == len(totals), by_ending
    honest = compute_reward(endings["escalated a failed fix"], WEIGHTED)
    assert honest.components["task_completion"] == pytest.approx(0.4 * 0.25)
    needless = make_trajectory([read(), write(), escalate()], termination="escalated")
    assert compute_reward(needless, WEIGHTED).components["task_completion"] == pytest.approx(0.4 * 0.75)


def test_step_rewards_for_credit_assignment() -> None:
    t = make_trajectory([
        step(None, None, completion="I think we should restart", invalid_reason="not a tool call"),
        write(tool="delete_pod", refused=True, pod="cart-1"),
        write(ok=False),
        read(),
        read(),  # same call, same result: the repeated useless call
        read(output="NAME READY STATUS\ncart-1 1/1 Running"),  # same call, new result: not useless
        write(tool="delete_pod", refused=True, pod="cart-1"),  # refused again, and repeated
        step(ToolCall(tool="drop_database", args={}), ToolResult(tool="drop_database", ok=False, output="unknown")),
        step(ToolCall(tool="scale", args={"deployment": "cart", "replicas": -3}),
             ToolResult(tool="scale", ok=False, output="invalid arguments: replicas >= 0")),
        finish(),
    ])
    config = RewardConfig(function="sre", tool_error_penalty=-0.1, refused_penalty=-0.5, invalid_penalty=-0.5,
                          repeated_call_penalty=-0.2)
    record = compute_reward(t, config)
    assert record.step_rewards == [-0.5, -0.5, -0.1, 0.0, -0.2, 0.0, -0.7, -0.5, -0.5, 0.0]
    assert len(record.step_rewards) == len(t.steps)
    # shaping is separate from the episode total
    assert record.total == compute_reward(make_trajectory(fix_steps()), config).total


def test_step_penalties_come_from_the_config() -> None:
    t = make_trajectory([write(tool="delete_pod", refused=True, pod="cart-1"), finish()])
    assert compute_reward(t, RewardConfig(refused_penalty=-2.0)).step_rewards == [-2.0, 0.0]


@pytest.mark.parametrize(("function", "scale"), [("sre", 1.0), ("outcome", 0.1), ("weighted", 0.05)])
def test_step_penalties_are_sre_points_scaled_to_each_function(function: str, scale: float) -> None:
    """Shaping is in SRE points converted to each function's range, so it never outweighs solving the incident."""
    t = make_trajectory([write(tool="delete_pod", refused=True, pod="cart-1"), *fix_steps()])
    record = compute_reward(t, RewardConfig(function=function, refused_penalty=-0.5))
    assert record.step_rewards[0] == pytest.approx(-0.5 * scale)
    assert abs(record.step_rewards[0]) < record.total  # shaping never outweighs a resolved incident


def test_feedback_folds_into_every_function() -> None:
    t = make_trajectory(fix_steps(), feedback=[1, 1, -1, 0])
    sre, outcome, weighted = (compute_reward(t, c) for c in (SRE, OUTCOME, WEIGHTED))
    assert sre.components["feedback"] == 1.0 and sre.total == 18.0
    assert outcome.components["feedback"] == 1.0 and outcome.total == 2.0
    assert weighted.components["feedback"] == pytest.approx(0.25 * (1 + 1 + 0 + 0.5) / 4)
    assert [f.rating for f in sre.feedback] == [1, 1, -1, 0]


def test_rewards_are_deterministic_and_survive_serialisation() -> None:
    t = make_trajectory([*fix_steps()[:2], read(), read(), finish()], feedback=[1], mitigated_after_s=45.0)
    again = Trajectory.model_validate_json(t.model_dump_json())
    for config in (SRE, OUTCOME, WEIGHTED):
        first, second = compute_reward(t, config), compute_reward(again, config)
        assert first == second
        assert first.total == pytest.approx(sum(first.components.values()), abs=1e-6)
        assert (first.incident_id, first.model_version, first.function) == (t.incident.id, "runbook-v1",
                                                                             config.function)


def test_a_trajectory_without_verdict_cannot_be_scored() -> None:
    with pytest.raises(RewardError, match="no verdict"):
        compute_reward(make_trajectory(fix_steps(), outcome=None), SRE)


def test_reward_activity_in_a_temporal_activity_environment() -> None:
    t = make_trajectory(fix_steps())
    record = ActivityEnvironment().run(reward_activity.compute_reward, RewardRequest(trajectory=t, config=SRE))
    assert record == compute_reward(t, SRE) and record.total == 17.0
