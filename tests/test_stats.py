"""The evaluation's statistics against published values (scipy's binomtest and Wilson interval agree with them)."""

from __future__ import annotations

import pytest

from agent_sre.training.stats import binomial_two_sided, compare_paired, mcnemar_exact, wilson_interval


@pytest.mark.parametrize(("k", "n", "low", "high"), [
    (26, 46, 0.422474, 0.697907),  # the runbook on the held-out suite
    (0, 10, 0.0, 0.277533),
    (10, 10, 0.722467, 1.0),
    (1, 1, 0.206549, 1.0),
    (5, 10, 0.236593, 0.763407),
])
def test_wilson_interval(k: int, n: int, low: float, high: float) -> None:
    assert wilson_interval(k, n) == pytest.approx((low, high), abs=1e-6)


def test_wilson_interval_edges() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)  # nothing measured, nothing known
    assert wilson_interval(0, 7)[0] == 0.0 and wilson_interval(7, 7)[1] == 1.0  # exact, not an ulp off
    low, high = wilson_interval(26, 46)
    assert low < 26 / 46 < high
    assert wilson_interval(52, 92)[1] - wilson_interval(52, 92)[0] < high - low  # twice the suite, narrower
    for bad in ((-1, 5), (6, 5), (1, -1)):
        with pytest.raises(ValueError):
            wilson_interval(*bad)


@pytest.mark.parametrize(("b", "c", "p"), [
    (6, 1, 0.125),  # 2 * (C(7,0) + C(7,1)) / 2^7
    (1, 6, 0.125),  # symmetric
    (10, 0, 0.001953125),  # 2 / 2^10
    (12, 4, 0.076812744140625),
    (3, 3, 1.0),  # an even split caps at 1
    (0, 0, 1.0),  # no disagreement: no evidence
    (1, 0, 1.0),
])
def test_mcnemar_exact(b: int, c: int, p: float) -> None:
    assert mcnemar_exact(b, c) == pytest.approx(p, abs=1e-12)


def test_binomial_two_sided_and_bad_counts() -> None:
    assert binomial_two_sided(2, 20) == pytest.approx(0.000402450561523, abs=1e-12)
    assert binomial_two_sided(18, 20) == binomial_two_sided(2, 20)
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 2)
    with pytest.raises(ValueError):
        binomial_two_sided(3, 2)


def test_paired_comparison_counts_only_disagreements_on_common_scenarios() -> None:
    a = {"s1": True, "s2": True, "s3": False, "s4": True, "only-a": True}
    b = {"s1": True, "s2": False, "s3": True, "s4": False, "only-b": False}
    result = compare_paired(a, b)
    assert (result.pairs, result.only_a, result.only_b) == (4, 2, 1)
    assert result.p_value == pytest.approx(1.0)
    with pytest.raises(ValueError, match="share no scenario"):
        compare_paired({"x": True}, {"y": True})
