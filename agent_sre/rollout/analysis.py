"""Candidate against baseline, the way Kayenta judges a canary: one test per metric, then one verdict.

- success rate, false-positive rate, harmful rate: a one-sided two-proportion z-test (pooled) says whether the
  candidate is worse; if not, a non-inferiority z-test (Agresti–Caffo adjusted, sound near 0 % and 100 %) says
  whether it is no worse than the margin. Worse → fail; no worse than the margin → pass; neither → inconclusive.
- time to mitigate (resolved incidents): a one-sided Mann–Whitney U test. Fail when the candidate is
  significantly slower and its median is beyond the tolerance; pass when its median is within the tolerance.
- fewer incidents than the minimum in either arm: inconclusive, whatever the rates look like. Low traffic is
  neither success nor failure; the guardrails (absolute limits, checked throughout) cover the catastrophes.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from math import sqrt
from statistics import median

from scipy.stats import mannwhitneyu, norm

from agent_sre.models.rollout import (
    AnalysisConfig,
    AnalysisResult,
    ArmSummary,
    GuardrailConfig,
    GuardrailResult,
    Judgement,
    Metric,
    MetricResult,
    format_duration,
)
from agent_sre.rollout.samples import OutcomeSample


def summarize_arm(version: str, samples: Sequence[OutcomeSample]) -> ArmSummary:
    ttm = [s.time_to_mitigate_s for s in samples if s.time_to_mitigate_s is not None]
    return ArmSummary(version=version, incidents=len(samples), resolved=sum(s.resolved for s in samples),
                      false_positives=sum(s.false_positive for s in samples), harmful=sum(s.harmful for s in samples),
                      median_ttm_s=median(ttm) if ttm else None)


def compare_rate(metric: Metric, candidate: tuple[int, int], baseline: tuple[int, int], higher_is_better: bool,
                 margin: float, alpha: float) -> MetricResult:
    """`candidate` and `baseline` are (events, incidents), both with incidents > 0."""
    (xc, nc), (xb, nb) = candidate, baseline
    pc, pb = xc / nc, xb / nb
    sign = 1 if higher_is_better else -1
    worse_by = sign * (pb - pc)
    pooled = (xc + xb) / (nc + nb)
    se = sqrt(pooled * (1 - pooled) * (1 / nc + 1 / nb))
    p_worse = float(norm.sf(worse_by / se)) if se > 0 else 1.0  # se = 0: both arms all-0 or all-1, identical
    shown = f"candidate {pc:.1%} ({xc}/{nc}) vs baseline {pb:.1%} ({xb}/{nb})"
    if p_worse < alpha:
        return MetricResult(metric=metric, judgement="fail", candidate=pc, baseline=pb, p_value=p_worse,
                            test="two-proportion z-test (one-sided)", detail=f"{metric}: {shown}: worse")
    ac, ab = (xc + 1) / (nc + 2), (xb + 1) / (nb + 2)
    se_ni = sqrt(ac * (1 - ac) / (nc + 2) + ab * (1 - ab) / (nb + 2))
    p_ni = float(norm.sf((margin - sign * (ab - ac)) / se_ni))
    if p_ni < alpha:
        return MetricResult(metric=metric, judgement="pass", candidate=pc, baseline=pb, p_value=p_ni,
                            test="non-inferiority z-test (Agresti–Caffo)",
                            detail=f"{metric}: {shown}: not worse by more than {margin:.0%}")
    return MetricResult(metric=metric, judgement="inconclusive", candidate=pc, baseline=pb, p_value=p_ni,
                        test="non-inferiority z-test (Agresti–Caffo)",
                        detail=f"{metric}: {shown}: a drop of more than {margin:.0%} cannot be ruled out yet")


def compare_ttm(candidate: Sequence[float], baseline: Sequence[float], tolerance: float, alpha: float,
                min_samples: int) -> MetricResult:
    if len(candidate) < min_samples or len(baseline) < min_samples:
        return MetricResult(metric="time_to_mitigate", judgement="inconclusive",
                            candidate=median(candidate) if candidate else None,
                            baseline=median(baseline) if baseline else None, test="Mann–Whitney U",
                            detail=f"time_to_mitigate: {len(candidate)} and {len(baseline)} resolved incidents; "
                                   f"need {min_samples} in each")
    mc, mb = median(candidate), median(baseline)
    p_slower = float(mannwhitneyu(candidate, baseline, alternative="greater").pvalue)
    slower = mc > mb * (1 + tolerance)
    shown = f"median candidate {mc:.0f}s vs baseline {mb:.0f}s"
    judgement: Judgement = ("fail" if slower and p_slower < alpha else "inconclusive" if slower else "pass")
    detail = {"fail": f"{shown}: slower beyond {tolerance:.0%}",
              "inconclusive": f"{shown}: possibly slower beyond {tolerance:.0%}, not significant yet",
              "pass": f"{shown}: within {tolerance:.0%}"}[judgement]
    return MetricResult(metric="time_to_mitigate", judgement=judgement, candidate=mc, baseline=mb, p_value=p_slower,
                        test="Mann–Whitney U (one-sided)", detail=f"time_to_mitigate: {detail}")


def analyze(candidate: ArmSummary, baseline: ArmSummary, candidate_samples: Sequence[OutcomeSample],
            baseline_samples: Sequence[OutcomeSample], config: AnalysisConfig, min_samples: int,
            window: tuple[datetime, datetime]) -> AnalysisResult:
    metrics: list[MetricResult] = []
    if candidate.incidents and baseline.incidents:
        c, b = candidate, baseline
        metrics = [
            compare_rate("success_rate", (c.resolved, c.incidents), (b.resolved, b.incidents), True,
                         config.success_margin, config.alpha),
            compare_ttm([s.time_to_mitigate_s for s in candidate_samples if s.time_to_mitigate_s is not None],
                        [s.time_to_mitigate_s for s in baseline_samples if s.time_to_mitigate_s is not None],
                        config.ttm_tolerance, config.alpha, config.min_ttm_samples),
            compare_rate("false_positive_rate", (c.false_positives, c.incidents), (b.false_positives, b.incidents),
                         False, config.false_positive_margin, config.alpha),
            compare_rate("harmful_rate", (c.harmful, c.incidents), (b.harmful, b.incidents), False,
                         config.harmful_margin, config.alpha),
        ]
    judgement: Judgement
    if candidate.incidents < min_samples or baseline.incidents < min_samples:
        judgement = "inconclusive"
        reasons = [f"low traffic: the candidate served {candidate.incidents} and the baseline {baseline.incidents} "
                   f"judged incidents in the window; {min_samples} each are needed for a verdict"]
    elif failed := [m.detail for m in metrics if m.judgement == "fail"]:
        judgement, reasons = "fail", failed
    elif open_ := [m.detail for m in metrics if m.judgement == "inconclusive"]:
        judgement, reasons = "inconclusive", open_
    else:
        judgement, reasons = "pass", [m.detail for m in metrics]
    return AnalysisResult(judgement=judgement, reasons=reasons, candidate=candidate, baseline=baseline,
                          metrics=metrics, window_start=window[0], window_end=window[1])


def check_guardrails(samples: Sequence[OutcomeSample], config: GuardrailConfig, until: datetime) -> GuardrailResult:
    n, harmful, resolved = len(samples), sum(s.harmful for s in samples), sum(s.resolved for s in samples)
    span = format_duration(config.lookback)

    def result(breached: bool, reason: str) -> GuardrailResult:
        return GuardrailResult(breached=breached, reason=reason, incidents=n, harmful=harmful, resolved=resolved,
                               checked_at=until)

    if n < config.min_incidents:
        return result(False, f"{n} candidate incidents in the last {span}: too few to judge "
                             f"(guardrails need {config.min_incidents})")
    if harmful / n > config.max_harmful_rate:
        return result(True, f"harmful actions: {harmful}/{n} ({harmful / n:.0%}) of the candidate's incidents in the "
                            f"last {span} were made worse (limit {config.max_harmful_rate:.0%})")
    if config.min_success_rate is not None and resolved / n < config.min_success_rate:
        return result(True, f"success rate: {resolved}/{n} ({resolved / n:.0%}) of the candidate's incidents in the "
                            f"last {span} resolved (floor {config.min_success_rate:.0%})")
    return result(False, f"{n} candidate incidents in the last {span}: {harmful} made worse, {resolved} resolved")
