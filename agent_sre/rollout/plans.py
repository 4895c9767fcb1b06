"""The shipped rollout plans, and loading a plan from a YAML file.

A plan file is a `RolloutPlan` in YAML; steps may use the short forms:

    name: cautious
    steps:
      - ab_test: {weight: 50, duration: 7d, min_samples: 40}
      - set_weight: 10
      - bake: 3d
      - analyze
      - pause          # a human confirms before the rest
      - set_weight: 100
    analysis: {min_samples: 40, max_extensions: 2}
    guardrails: {interval: 30m, max_harmful_rate: 0.1}
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import yaml
from pydantic import ValidationError

from agent_sre.models.rollout import (
    AbTestStep,
    AnalysisConfig,
    AnalyzeStep,
    BakeStep,
    GuardrailConfig,
    RolloutPlan,
    SetWeightStep,
)
from agent_sre.validation import explain

WEEK = timedelta(days=7)

# A/B 50/50 for a week, then 10% → 50% → 100% with a week each; every traffic increase waits for a passing
# analysis of the week before it.
DEFAULT_PLAN = RolloutPlan(name="default", steps=[
    AbTestStep(weight=50, duration=WEEK),
    SetWeightStep(weight=10), BakeStep(duration=WEEK), AnalyzeStep(),
    SetWeightStep(weight=50), BakeStep(duration=WEEK), AnalyzeStep(),
    SetWeightStep(weight=100),
])

# 10 → 25 → 50 → 100 over four hours: for a fix that cannot wait a week. Less data per step, so smaller samples
# suffice and the guardrails look closer.
_STAGE = timedelta(minutes=80)
FAST_CANARY_PLAN = RolloutPlan(
    name="fast-canary",
    steps=[SetWeightStep(weight=10), BakeStep(duration=_STAGE), AnalyzeStep(),
           SetWeightStep(weight=25), BakeStep(duration=_STAGE), AnalyzeStep(),
           SetWeightStep(weight=50), BakeStep(duration=_STAGE), AnalyzeStep(),
           SetWeightStep(weight=100)],
    analysis=AnalysisConfig(min_samples=10, min_ttm_samples=5, extension=timedelta(minutes=20), max_extensions=3),
    guardrails=GuardrailConfig(interval=timedelta(minutes=5), lookback=timedelta(minutes=30), min_incidents=5),
)

PLANS = {p.name: p for p in (DEFAULT_PLAN, FAST_CANARY_PLAN)}


class PlanError(ValueError):
    """A plan that cannot be used, with the reason."""


def load_plan(name_or_path: str) -> RolloutPlan:
    """A shipped plan by name, or a YAML plan file, validated."""
    if name_or_path in PLANS:
        return PLANS[name_or_path]
    path = Path(name_or_path)
    if not path.is_file():
        raise PlanError(f"{name_or_path!r} is neither a plan file nor a shipped plan ({', '.join(PLANS)})")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise PlanError(f"{path}: not YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise PlanError(f"{path}: a plan is a mapping with `steps`")
    data.setdefault("name", path.stem)
    try:
        return RolloutPlan.model_validate(data)
    except ValidationError as exc:
        raise PlanError(f"{path}: {explain(exc, root='plan')}") from exc
