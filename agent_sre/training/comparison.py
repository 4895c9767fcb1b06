"""Policies compared on evaluation suites: the figures of `models.evaluation` from episode results, and a markdown
table of them.

Every rate comes with its count, the resolve rate with its 95 % Wilson interval, and each policy is tested against
the named references with McNemar's exact test on the scenarios both played, so a table says not only which model
resolved more but whether the difference could be chance (`training/stats.py`). A policy evaluated on more than
one suite also gets a row that pools them (`ALL_SUITES`): the held-out suite and its variants together.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agent_sre.models.episode import EpisodeResult
from agent_sre.models.evaluation import ALL_SUITES, EvaluationComparison, PairedTest, ScenarioOutcome, SuiteResult
from agent_sre.training.stats import compare_paired, wilson_interval

Results = Mapping[str, Mapping[str, Sequence[EpisodeResult]]]  # policy -> suite -> one episode per scenario


def scenario_outcome(suite: str, result: EpisodeResult) -> ScenarioOutcome:
    o = result.outcome
    return ScenarioOutcome(suite=suite, scenario=result.scenario, fault=result.fault, outcome=o.outcome,
                           termination=o.termination, resolved=o.outcome == "resolved",
                           false_positive=o.false_positive, escalated=o.termination == "escalated", steps=o.steps,
                           invalid=o.invalid, generated_tokens=result.generated_tokens)


def suite_result(policy: str, suite: str, outcomes: Sequence[ScenarioOutcome]) -> SuiteResult:
    """The figures of one policy's episodes; no paired tests yet (`compare` adds them)."""
    seen: set[tuple[str, str]] = set()
    for o in outcomes:
        if (o.suite, o.scenario) in seen:
            raise ValueError(f"{policy} played {o.scenario} of {o.suite} twice: a comparison pairs one episode per "
                             "scenario")
        seen.add((o.suite, o.scenario))
    n, resolved = len(outcomes), sum(o.resolved for o in outcomes)
    low, high = wilson_interval(resolved, n)
    tokens = [o.generated_tokens for o in outcomes if o.generated_tokens is not None]
    return SuiteResult(
        policy=policy, suite=suite, episodes=n, resolved=resolved,
        false_positives=sum(o.false_positive for o in outcomes), escalations=sum(o.escalated for o in outcomes),
        invalid_actions=sum(o.invalid for o in outcomes), steps=sum(o.steps for o in outcomes),
        resolve_rate=resolved / n if n else 0.0, resolve_low=low, resolve_high=high,
        tokens_per_episode=sum(tokens) / len(tokens) if tokens else None, scenarios=list(outcomes))


def _successes(result: SuiteResult) -> dict[str, bool]:
    return {f"{o.suite}/{o.scenario}": o.resolved for o in result.scenarios}


def compare(results: Results, references: Sequence[str] = (), pooled: bool = True) -> EvaluationComparison:
    """Every policy on every suite it played (one episode per scenario), tested against each reference that
    played the same suite; with `pooled`, a policy's suites together as one more row (`ALL_SUITES`) when it has
    more than one."""
    unknown = [r for r in references if r not in results]
    if unknown:
        raise ValueError(f"reference {', '.join(map(repr, unknown))} has no results; policies: "
                         f"{', '.join(results)}")
    rows: list[SuiteResult] = []
    for policy, suites in results.items():
        if ALL_SUITES in suites:
            raise ValueError(f"{ALL_SUITES!r} names the pooled row; call the suite something else")
        per_suite = {suite: [scenario_outcome(suite, r) for r in episodes] for suite, episodes in suites.items()}
        rows += [suite_result(policy, suite, outcomes) for suite, outcomes in per_suite.items()]
        if pooled and len(per_suite) > 1:
            rows.append(suite_result(policy, ALL_SUITES, [o for outcomes in per_suite.values() for o in outcomes]))
    by_key = {(r.policy, r.suite): r for r in rows}
    for row in rows:
        for reference in references:
            other = by_key.get((reference, row.suite))
            if reference == row.policy or other is None:
                continue
            mine, theirs = _successes(row), _successes(other)
            if not mine.keys() & theirs.keys():
                continue
            test = compare_paired(mine, theirs)
            row.versus.append(PairedTest(reference=reference, pairs=test.pairs, only_policy=test.only_a,
                                         only_reference=test.only_b, p_value=test.p_value))
    return EvaluationComparison(references=list(references), results=rows)


def _percent(x: float) -> str:
    return f"{100 * x:.0f} %"


def success_cell(r: SuiteResult) -> str:
    """`26/46 = 57 % (42–70 %)`: the count, the rate and its 95 % interval."""
    interval = f"{100 * r.resolve_low:.0f}–{_percent(r.resolve_high)}"
    return f"{r.resolved}/{r.episodes} = {_percent(r.resolve_rate)} ({interval})"


def p_cell(test: PairedTest | None) -> str:
    """`0.125 (6:1)`: the p-value, then the scenarios only this policy : only the reference resolved."""
    if test is None:
        return "–"
    p = "< 0.001" if test.p_value < 0.001 else f"{test.p_value:.3f}"
    return f"{p} ({test.only_policy}:{test.only_reference})"


def markdown_table(comparison: EvaluationComparison) -> str:
    """The comparison as a markdown table, one row per policy and suite, with a line saying how to read it."""
    refs = comparison.references
    header = ["policy", "suite", "episodes", "success (95 % CI)", "false positives", "escalations",
              "invalid actions", "tokens / episode", *(f"p vs {r}" for r in refs)]
    align = ["---", "---", "---:", "---", "---:", "---:", "---:", "---:", *("---" for _ in refs)]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    for r in comparison.results:
        tests = {t.reference: t for t in r.versus}
        invalid = f"{r.invalid_actions} ({_percent(r.invalid_actions / r.steps) if r.steps else '–'} of steps)"
        tokens = "–" if r.tokens_per_episode is None else f"{r.tokens_per_episode:.0f}"
        cells = [r.policy, r.suite, str(r.episodes), success_cell(r), str(r.false_positives), str(r.escalations),
                 invalid, tokens, *(p_cell(tests.get(ref)) for ref in refs)]
        lines.append("| " + " | ".join(cells) + " |")
    if refs:
        lines += ["", "p vs X: exact two-sided McNemar test on the scenarios both played; (a:b) = scenarios only "
                      "this policy : only X resolved."]
    return "\n".join(lines) + "\n"


__all__ = ["Results", "compare", "markdown_table", "p_cell", "scenario_outcome", "success_cell", "suite_result"]
