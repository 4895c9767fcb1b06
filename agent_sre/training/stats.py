"""The statistics an evaluation needs to tell two policies apart on a few dozen scenarios.

A success rate over 46 episodes moves by one scenario in 46 (2 points), so a difference of a few points between
two models may be noise. Two tools say how much is:

- `wilson_interval`: the 95 % score interval of a proportion. Unlike the normal approximation (p ± 1.96·√(p(1−p)/n))
  it stays inside [0, 1] and keeps its coverage near 0 and 1, where small suites and rare outcomes (false positives,
  escalations) live.
- `mcnemar_exact`: two policies played on the same scenarios are paired, and only the scenarios where they
  disagree carry information about which is better. The exact test asks how likely a split at least as uneven as
  b : c is if each disagreement were a fair coin; it needs no large-sample approximation, which with the handful of
  disagreements a suite gives would be wrong.

Pure Python (math.comb): no scipy at run time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

Z95 = 1.959963984540054  # the standard normal's 97.5th percentile: a two-sided 95 % interval


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval (95 % by default) of `successes` out of `n`, as (low, high).

    With no trials nothing is known: (0.0, 1.0)."""
    if n < 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got {successes} of {n}")
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    z2 = z * z
    denominator = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1.0 - p) / n + z2 / (4 * n * n))
    # at k = 0 or k = n one bound is exactly 0 or 1, which floating point misses by an ulp
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return low, high


def binomial_two_sided(k: int, n: int) -> float:
    """Two-sided exact p-value of seeing `k` or fewer (or as many the other way) of `n` fair coin flips: twice the
    smaller tail at p = 0.5, capped at 1 (the distribution is symmetric, so doubling is exact)."""
    if n < 0 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got {k} of {n}")
    if n == 0:
        return 1.0
    k = min(k, n - k)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / (1 << n)
    return min(1.0, 2.0 * tail)


def mcnemar_exact(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value for paired binary outcomes: `b` pairs where only A succeeded, `c` where only
    B did. Pairs where both succeeded or both failed say nothing about which is better and do not enter. 1.0 when
    the two never disagree."""
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts cannot be negative: b={b}, c={c}")
    return binomial_two_sided(min(b, c), b + c)


@dataclass(frozen=True)
class PairedComparison:
    """A against B on the scenarios both played: `only_a` won by A alone, `only_b` by B alone."""

    pairs: int
    only_a: int
    only_b: int
    p_value: float


def compare_paired(a: Mapping[str, bool], b: Mapping[str, bool]) -> PairedComparison:
    """McNemar's exact test of two policies' per-scenario successes, paired by scenario name. Only scenarios both
    played are paired; a comparison with none in common is refused, since it would report p = 1 for no reason."""
    common = a.keys() & b.keys()
    if not common:
        raise ValueError("the two evaluations share no scenario: nothing to pair")
    only_a = sum(1 for s in common if a[s] and not b[s])
    only_b = sum(1 for s in common if b[s] and not a[s])
    return PairedComparison(pairs=len(common), only_a=only_a, only_b=only_b, p_value=mcnemar_exact(only_a, only_b))


__all__ = ["Z95", "PairedComparison", "binomial_two_sided", "compare_paired", "mcnemar_exact", "wilson_interval"]
