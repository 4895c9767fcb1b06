"""The rollout's statistics, guardrails and plans: pure functions, checked against scipy and by hand."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from scipy.stats import chi2_contingency

from agent_sre.models.rollout import AnalysisConfig, GuardrailConfig, RolloutPlan
from agent_sre.rollout.analysis import analyze, check_guardrails, compare_rate, compare_ttm, summarize_arm
from agent_sre.rollout.plans import DEFAULT_PLAN, FAST_CANARY_PLAN, PlanError, load_plan
from agent_sre.rollout.samples import OutcomeSample

T0 = datetime(2026, 3, 14, tzinfo=UTC)
CONFIG = AnalysisConfig()


def samples(resolved: int, unresolved: int = 0, harmful: int = 0, false_positive: int = 0,
            ttm_s: float = 60.0) -> list[OutcomeSample]:
    made = [OutcomeSample(T0, True, False, False, ttm_s + i % 7) for i in range(resolved)]
    made += [OutcomeSample(T0, False, False, False, None) for _ in range(unresolved)]
    made += [OutcomeSample(T0, False, True, True, None) for _ in range(harmful)]
    made += [OutcomeSample(T0, False, False, True, None) for _ in range(false_positive)]
    return made


def run(candidate: list[OutcomeSample], baseline: list[OutcomeSample], min_samples: int = 30):
    return analyze(summarize_arm("cand", candidate), summarize_arm("base", baseline), candidate, baseline, CONFIG,
                   min_samples, (T0, T0 + timedelta(days=7)))


def test_worse_success_rate_fails_with_the_pooled_z_test() -> None:
    result = compare_rate("success_rate", (50, 100), (70, 100), True, 0.10, 0.05)
    assert result.judgement == "fail" and result.test == "two-proportion z-test (one-sided)"
    # The pooled two-proportion z-test is the 2x2 chi-square test without continuity correction: z² = χ².
    chi2_p = chi2_contingency([[50, 50], [70, 30]], correction=False).pvalue
    assert result.p_value == pytest.approx(chi2_p / 2, rel=1e-9)


def test_better_or_equal_rates_pass_and_small_samples_stay_open() -> None:
    assert compare_rate("success_rate", (90, 100), (70, 100), True, 0.10, 0.05).judgement == "pass"
    assert compare_rate("success_rate", (140, 200), (140, 200), True, 0.10, 0.05).judgement == "pass"
    open_ = compare_rate("success_rate", (14, 20), (14, 20), True, 0.10, 0.05)
    assert open_.judgement == "inconclusive" and "cannot be ruled out" in open_.detail


def test_lower_is_better_rates_fail_when_the_candidate_harms_more() -> None:
    assert compare_rate("harmful_rate", (10, 100), (2, 100), False, 0.05, 0.05).judgement == "fail"
    assert compare_rate("harmful_rate", (0, 100), (0, 100), False, 0.05, 0.05).judgement == "pass"  # se = 0


def test_time_to_mitigate_by_mann_whitney() -> None:
    fast, slow = [60.0 + i for i in range(30)], [120.0 + i for i in range(30)]
    assert compare_ttm(slow, fast, 0.2, 0.05, 10).judgement == "fail"
    assert compare_ttm(fast, slow, 0.2, 0.05, 10).judgement == "pass"
    noisy_slower = compare_ttm([50, 60, 110, 120, 400], [60, 70, 80, 90, 100], 0.2, 0.05, 5)
    assert noisy_slower.judgement == "inconclusive"  # a higher median, but not significantly
    assert compare_ttm(fast[:3], slow, 0.2, 0.05, 10).judgement == "inconclusive"


def test_low_traffic_is_inconclusive_whatever_the_rates() -> None:
    result = run(samples(2, harmful=8), samples(70, 30))
    assert result.judgement == "inconclusive"
    assert result.reasons == ["low traffic: the candidate served 10 and the baseline 100 judged incidents in the "
                              "window; 30 each are needed for a verdict"]


def test_the_verdict_is_the_worst_metric() -> None:
    good = run(samples(63, 7, ttm_s=60), samples(49, 19, false_positive=2, ttm_s=120))
    assert good.judgement == "pass" and len(good.reasons) == 4
    slower = run(samples(63, 7, ttm_s=300), samples(49, 21, ttm_s=120))
    assert slower.judgement == "fail" and slower.reasons[0].startswith("time_to_mitigate: median candidate 303s")
    fp = run(samples(40, 0, false_positive=30), samples(49, 21))
    assert fp.judgement == "fail" and fp.reasons[0].startswith("false_positive_rate: candidate 42.9% (30/70)")


def test_guardrails() -> None:
    config = GuardrailConfig(min_incidents=10, max_harmful_rate=0.2, min_success_rate=0.5)
    assert not check_guardrails(samples(2, harmful=3), config, T0).breached  # 5 incidents: too few to judge
    harmful = check_guardrails(samples(6, harmful=4), config, T0)
    assert harmful.breached and harmful.reason.startswith("harmful actions: 4/10 (40%)")
    failing = check_guardrails(samples(4, 6), config, T0)
    assert failing.breached and failing.reason.startswith("success rate: 4/10 (40%)")
    healthy = check_guardrails(samples(8, 1, harmful=1), config, T0)
    assert not healthy.breached and (healthy.incidents, healthy.harmful, healthy.resolved) == (10, 1, 8)


def test_shipped_plans() -> None:
    def waits(plan: RolloutPlan) -> timedelta:
        return sum((s.duration for s in plan.steps if s.kind in ("bake", "ab_test")), timedelta())

    def weights(plan: RolloutPlan) -> list[float]:
        return [s.weight for s in plan.steps if s.kind in ("set_weight", "ab_test")]
    assert waits(DEFAULT_PLAN) == timedelta(weeks=3) and weights(DEFAULT_PLAN) == [50, 10, 50, 100]
    assert [s.kind for s in DEFAULT_PLAN.steps][:4] == ["ab_test", "set_weight", "bake", "analyze"]
    assert waits(FAST_CANARY_PLAN) == timedelta(hours=4) and weights(FAST_CANARY_PLAN) == [10, 25, 50, 100]
    assert load_plan("default") is DEFAULT_PLAN and load_plan("fast-canary") is FAST_CANARY_PLAN


def test_a_plan_file_in_short_form(tmp_path: Path) -> None:
    path = tmp_path / "cautious.yaml"
    path.write_text("steps:\n  - ab_test: {weight: 20, duration: 3d, min_samples: 40}\n  - set_weight: 50\n"
                    "  - bake: 1h30m\n  - analyze\n  - pause\n  - set_weight: 100\n"
                    "guardrails: {interval: 30m, max_harmful_rate: 0.1}\n")
    plan = load_plan(str(path))
    assert plan.name == "cautious" and [s.kind for s in plan.steps] == [
        "ab_test", "set_weight", "bake", "analyze", "pause", "set_weight"]
    assert plan.steps[2].duration == timedelta(hours=1, minutes=30)
    assert plan.guardrails.interval == timedelta(minutes=30)
    assert RolloutPlan.model_validate_json(plan.model_dump_json()) == plan  # what the workflow receives


@pytest.mark.parametrize(("text", "error"), [
    ("steps: [bake: 1d, analyze]", "step 1 (bake) comes before any step gives the candidate traffic"),
    ("steps: [set_weight: 10, analyze]", "step 2 (analyze) right after set_weight would see no incidents"),
    ("steps: [set_weight: 100, bake: 1d, analyze]", "at weight 100 the baseline serves nothing"),
    ("steps: [set_weight: 10, bake: 1d]", "the plan never analyses the candidate"),
    ("steps: [set_weight: 10, bake: 0s, analyze]", "steps.1.bake.duration: must be longer than zero"),
    ("steps: [set_weight: 0]", "steps.0.set_weight.weight: Input should be greater than 0"),
    ("steps: [promote_now: 3]", "does not match any of the expected tags"),
    ("steps: []", "steps: List should have at least 1 item"),
    ("steps: [set_weight: 10, bake: 1d, analyze]\nguardrails: {interval: 2h, lookback: 1h}",
     "lookback must be at least the check interval"),
    ("- set_weight: 10", "a plan is a mapping with `steps`"),
])
def test_bad_plans_are_refused_with_the_reason(tmp_path: Path, text: str, error: str) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    with pytest.raises(PlanError, match=re.escape(error)):
        load_plan(str(path))


def test_an_unknown_plan_name() -> None:
    with pytest.raises(PlanError, match="'weekly' is neither a plan file nor a shipped plan"):
        load_plan("weekly")
