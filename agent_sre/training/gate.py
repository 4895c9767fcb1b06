"""Judging a candidate: the evaluation suite it is measured on, and the gate against its parent.

A suite is identified by its name and a fingerprint of its scenarios and of the evaluation settings, so results
stored with a version are reused only for exactly the same measurement, and a gate never compares a candidate
and a parent measured differently.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from agent_sre.episodes import interleave_by_fault
from agent_sre.models.episode import OutcomeStats
from agent_sre.models.scenario import Scenario
from agent_sre.models.training import EvaluationConfig, GateTolerances
from agent_sre.scenarios import heldout_suite, load_scenarios, variants_suite

NAMED_SUITES = {"heldout": heldout_suite, "variants": variants_suite}


def suite_source(suite: str | None) -> Path:
    """Where a suite's scenarios are: a file or directory anywhere; a name of `NAMED_SUITES` that is no path here
    (`--suite variants`, wherever the package is installed); none: the held-out suite."""
    if not suite:
        return heldout_suite()
    path = Path(suite)
    return NAMED_SUITES[suite]() if not path.exists() and suite in NAMED_SUITES else path


def load_suite(config: EvaluationConfig) -> tuple[str, list[Scenario]]:
    """(suite id, scenarios) of an evaluation config: its suite (default: the held-out suite); with a `limit`, the
    first scenarios taken across fault types, since a suite lists its families in blocks."""
    source = suite_source(config.suite)
    scenarios = load_scenarios(source)
    if config.limit is not None:
        scenarios = interleave_by_fault(scenarios)[:config.limit]
    measured = {"scenarios": [s.model_dump(mode="json") for s in scenarios], "max_turns": config.max_turns,
                "extra_turns_per_service": config.extra_turns_per_service,
                "max_new_tokens": config.max_new_tokens}
    digest = hashlib.sha256(json.dumps(measured, sort_keys=True).encode()).hexdigest()[:10]
    name = "".join(c if c.isalnum() or c in "-_." else "-" for c in source.stem) or "suite"
    return f"{name}-{len(scenarios)}-{digest}", scenarios


WORSE = "worse beyond tolerance"


def failures(reasons: list[str]) -> list[str]:
    """Of `judge`'s reasons, those of the metrics that failed."""
    return [why for why in reasons if why.endswith(f": {WORSE}")]


def judge(candidate: OutcomeStats, parent: OutcomeStats, tolerances: GateTolerances) -> tuple[bool, list[str]]:
    """Not worse than the parent beyond the tolerances on success, false positives, harm and invalid actions.
    Returns (passed, one reason per metric)."""
    checks = [("success rate", candidate.success_rate, parent.success_rate, tolerances.success_rate, True),
              ("false-positive rate", candidate.false_positive_rate, parent.false_positive_rate,
               tolerances.false_positive_rate, False),
              ("harmful rate", candidate.harmful_rate, parent.harmful_rate, tolerances.harmful_rate, False),
              ("invalid-action rate", candidate.invalid_action_rate, parent.invalid_action_rate,
               tolerances.invalid_action_rate, False)]
    passed, reasons = True, []
    for name, mine, theirs, tolerance, higher_is_better in checks:
        worse_by = (theirs - mine) if higher_is_better else (mine - theirs)
        ok = worse_by <= tolerance + 1e-9
        passed &= ok
        verdict = "ok" if ok else WORSE
        reasons.append(f"{name} {mine:.1%} vs parent {theirs:.1%} (tolerance {tolerance:.1%}): {verdict}")
    return passed, reasons
