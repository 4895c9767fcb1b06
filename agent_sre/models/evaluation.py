"""evaluation.v1: policies compared on evaluation suites, with the uncertainty of each figure.

Per policy and suite: the counts behind each rate, the 95 % Wilson interval of the resolve rate, and McNemar's exact
test against named reference policies on the scenarios both played; plus every scenario's outcome, so that any
other pairing or grouping can be recomputed from the file alone (`training/comparison.py` builds and renders it).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from agent_sre.models.endings import Outcome

ALL_SUITES = "all"  # the row that pools a policy's suites: where the evaluation has the most episodes


class ScenarioOutcome(BaseModel):
    """One episode, reduced to what the comparison counts."""

    suite: str
    scenario: str
    fault: str
    outcome: Outcome
    termination: str
    resolved: bool = Field(description="the observer judged it resolved: the success of every rate here")
    false_positive: bool
    escalated: bool
    steps: int
    invalid: int = Field(description="steps without a valid action (the output did not parse as a tool call)")
    generated_tokens: int | None = Field(default=None, description="None: the policy generates none (rule-based)")


class PairedTest(BaseModel):
    """This row's policy against a reference on the scenarios both played (paired by suite and scenario)."""

    reference: str
    pairs: int
    only_policy: int = Field(description="resolved by this policy, not by the reference")
    only_reference: int = Field(description="resolved by the reference, not by this policy")
    p_value: float = Field(ge=0.0, le=1.0, description="exact two-sided McNemar test")


class SuiteResult(BaseModel):
    policy: str
    suite: str = Field(description=f"a suite's name, or {ALL_SUITES!r}: the policy's suites pooled")
    episodes: int
    resolved: int
    false_positives: int
    escalations: int
    invalid_actions: int
    steps: int
    resolve_rate: float
    resolve_low: float = Field(description="95 % Wilson interval of the resolve rate")
    resolve_high: float
    tokens_per_episode: float | None = Field(default=None, description="mean generated tokens; None when no "
                                                                        "episode reported any")
    versus: list[PairedTest] = Field(default_factory=list)
    scenarios: list[ScenarioOutcome] = Field(default_factory=list)


class EvaluationComparison(BaseModel):
    schema_version: Literal["evaluation.v1"] = "evaluation.v1"
    references: list[str] = Field(default_factory=list, description="the policies every other is tested against")
    results: list[SuiteResult] = Field(default_factory=list)

    def result(self, policy: str, suite: str = ALL_SUITES) -> SuiteResult:
        """The row of `policy` on `suite`; KeyError when there is none."""
        for r in self.results:
            if r.policy == policy and r.suite == suite:
                return r
        raise KeyError(f"no result for {policy!r} on {suite!r}")
