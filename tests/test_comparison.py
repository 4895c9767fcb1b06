"""Policies compared on suites (evaluation.v1): counts, Wilson intervals, paired McNemar tests, the markdown table."""

from __future__ import annotations

import pytest

from agent_sre.models.episode import EpisodeResult
from agent_sre.models.evaluation import ALL_SUITES, EvaluationComparison
from agent_sre.models.remediation import IncidentOutcome
from agent_sre.models.reward import RewardRecord
from agent_sre.training.comparison import compare, markdown_table


def episode(scenario: str, outcome: str = "resolved", termination: str = "finished", false_positive: bool = False,
            steps: int = 5, invalid: int = 0, tokens: int | None = None, fault: str = "bad_image") -> EpisodeResult:
    reward = RewardRecord(incident_id=scenario, model_version="v", function="sre", total=0.0, components={},
                          step_rewards=[0.0] * steps)
    return EpisodeResult(scenario=scenario, fault=fault, environment=f"env-{scenario}", generated_tokens=tokens,
                         outcome=IncidentOutcome(incident_id=scenario, workflow_id=f"wf-{scenario}", outcome=outcome,
                                                 termination=termination, model_version="v", steps=steps, writes=1,
                                                 refused=0, invalid=invalid, false_positive=false_positive,
                                                 diagnosis=None, reward=reward, time_to_mitigate_s=None))


def suite(prefix: str, resolved: list[bool], **kwargs: object) -> list[EpisodeResult]:
    return [episode(f"{prefix}-{i}", "resolved" if ok else "unresolved", **kwargs)  # type: ignore[arg-type]
            for i, ok in enumerate(resolved)]


def test_counts_interval_and_the_pooled_row() -> None:
    heldout = suite("h", [True] * 26 + [False] * 20)
    heldout[30] = episode("h-30", "unresolved", false_positive=True, invalid=2, tokens=100)
    heldout[31] = episode("h-31", "worse", termination="escalated", tokens=300)
    comparison = compare({"runbook": {"heldout": heldout, "variants": suite("v", [True, False, False, True])}})
    row = comparison.result("runbook", "heldout")
    assert (row.episodes, row.resolved, row.false_positives, row.escalations, row.invalid_actions, row.steps) == \
        (46, 26, 1, 1, 2, 230)
    assert row.resolve_rate == pytest.approx(26 / 46)
    assert (row.resolve_low, row.resolve_high) == pytest.approx((0.422474, 0.697907), abs=1e-6)
    assert row.tokens_per_episode == 200.0  # over the episodes that reported tokens
    assert comparison.result("runbook", "variants").tokens_per_episode is None
    pooled = comparison.result("runbook", ALL_SUITES)
    assert (pooled.episodes, pooled.resolved) == (50, 28) and len(pooled.scenarios) == 50
    assert [(o.suite, o.scenario, o.resolved) for o in pooled.scenarios[-2:]] == [("variants", "v-2", False),
                                                                                ("variants", "v-3", True)]
    assert compare({"runbook": {"heldout": heldout}}).results[-1].suite == "heldout"  # one suite: nothing to pool
    with pytest.raises(KeyError):
        comparison.result("sft")


def test_paired_tests_against_references_on_the_scenarios_both_played() -> None:
    runbook = suite("h", [True] * 6 + [False] * 4)  # h-0..h-5 resolved
    sft = suite("h", [False] * 5 + [True] * 5)  # h-5..h-9: h-5 both, 5 of runbook's alone, 4 of its own
    base = suite("h", [False] * 9 + [True])
    comparison = compare({"runbook": {"heldout": runbook}, "sft": {"heldout": sft}, "base": {"heldout": base}},
                         references=["runbook", "base"])
    [vs_runbook, vs_base] = comparison.result("sft", "heldout").versus
    assert (vs_runbook.reference, vs_runbook.pairs, vs_runbook.only_policy, vs_runbook.only_reference) == \
        ("runbook", 10, 4, 5)
    assert vs_runbook.p_value == pytest.approx(1.0)
    assert (vs_base.only_policy, vs_base.only_reference) == (4, 0) and vs_base.p_value == pytest.approx(0.125)
    # a reference is not tested against itself, and a suite a reference did not play has no test
    assert [t.reference for t in comparison.result("runbook", "heldout").versus] == ["base"]
    lone = compare({"runbook": {"heldout": runbook}, "sft": {"variants": sft}}, references=["runbook"])
    assert lone.result("sft", "variants").versus == []


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="reference 'gpt' has no results"):
        compare({"runbook": {"heldout": suite("h", [True])}}, references=["gpt"])
    with pytest.raises(ValueError, match="twice"):
        compare({"runbook": {"heldout": suite("h", [True]) + suite("h", [False])}})
    with pytest.raises(ValueError, match="pooled row"):
        compare({"runbook": {ALL_SUITES: suite("h", [True])}})


def test_the_markdown_table_and_the_json_round_trip() -> None:
    runbook = suite("h", [True] * 6 + [False])
    sft = suite("h", [False] * 6 + [True], tokens=50)
    comparison = compare({"runbook": {"heldout": runbook}, "sft": {"heldout": sft}}, references=["runbook"])
    table = markdown_table(comparison)
    lines = table.splitlines()
    assert lines[0] == ("| policy | suite | episodes | success (95 % CI) | false positives | escalations | "
                        "invalid actions | tokens / episode | p vs runbook |")
    assert lines[2] == "| runbook | heldout | 7 | 6/7 = 86 % (49–97 %) | 0 | 0 | 0 (0 % of steps) | – | – |"
    assert lines[3] == "| sft | heldout | 7 | 1/7 = 14 % (3–51 %) | 0 | 0 | 0 (0 % of steps) | 50 | 0.125 (1:6) |"
    assert "McNemar" in lines[-1]
    assert EvaluationComparison.model_validate_json(comparison.model_dump_json()) == comparison
