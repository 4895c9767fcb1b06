"""The drill part of `agent-sre demo`: the production drill (learning/drill.py) on a budget of minutes.

Production is whatever the demo's earlier stages left there (the runbook: a model would make every incident
seconds of CPU generation), serving the fault types it resolved every time in the demo's batch, until the mix
shifts to the fault type it did worst on. The learning schedule (its interval compressed to a minute) then runs
one cycle that trains: one off-policy step from the demo's trained model (or the converted SmolLM2) on what
production served, a small held-out evaluation, the production gate on re-created incidents and, if it passed, a
compressed rollout. Whatever came of it is reported as it happened: minutes of CPU training do not make a model
better than the runbook, and the table says so when they do not.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

from temporalio.client import Client

from agent_sre.config import Settings
from agent_sre.learning.drill import drill_plan, run_drill
from agent_sre.models.episode import OutcomeStats
from agent_sre.models.learning import DrillCycle, DrillPlan, DrillReport, LearningConfig
from agent_sre.models.scenario import Scenario
from agent_sre.registry import Registry

DEMO_BY = "make demo"
EVERY = timedelta(minutes=1)  # the first cycle waits for the next whole minute: a Schedule's intervals are aligned
INCIDENTS_PER_WINDOW = 12
MIN_EPISODES = 8
MAX_ACTIONS = 12  # the runbook needs up to ten
OFFPOLICY_BATCH = 2  # episodes of 3-4k tokens: one step reads ~8k tokens, about a minute on 2 cores
EVAL_SCENARIOS = 2  # held-out, and re-created recent incidents
EVAL_TURNS = 3  # each turn re-reads a prompt of 1.5-2k tokens: seconds per turn on a CPU
TIME_LIMIT = timedelta(minutes=15)  # the budget is ~5 minutes on 2 idle cores; the rest is room for a loaded one


def worst_fault(stats: Sequence[OutcomeStats]) -> str | None:
    """The fault type production did worst on (lowest success, then the most episodes): the shifted mix."""
    rows = [r for r in stats if r.group != "all" and r.success_rate < 1.0]
    return min(rows, key=lambda r: (r.success_rate, -r.episodes, r.group)).group if rows else None


def demo_learning(name: str, base: str, rollout_queue: str) -> LearningConfig:
    """The stream: one off-policy step from `base`, judged on two scenarios of each suite (three turns each), the
    rollout compressed to the schedule's pace."""
    return LearningConfig.model_validate({
        "name": name, "rollout_queue": rollout_queue, "start_at": datetime.now(UTC).isoformat(), "settle_s": 5,
        "min_episodes": MIN_EPISODES, "replay_eval_share": 0.5, "replay_eval_limit": EVAL_SCENARIOS,
        "training": {"algorithm": "offpolicy", "base": base, "requested_by": DEMO_BY,
                     # One step, so beta 0: the KL term is zero when the policy still is its reference, and
                     # without it the reference model's forward pass is not paid. Global baseline: the runbook is
                     # deterministic, every episode of a fault type has the same return, and a per-class baseline
                     # would leave nothing to learn from.
                     "offpolicy": {"max_steps": 1, "batch_size": OFFPOLICY_BATCH, "learning_rate": 1e-5,
                                   "beta": 0.0, "baseline": "global"},
                     "evaluation": {"limit": EVAL_SCENARIOS, "max_turns": EVAL_TURNS, "max_new_tokens": 64}},
        "rollout_plan": drill_plan(EVERY, INCIDENTS_PER_WINDOW).model_dump(mode="json")})


def demo_plan(name: str, production: str, base: str, usual: Sequence[Scenario], shifted: Sequence[Scenario],
              concurrency: int, rollout_queue: str) -> DrillPlan:
    """One cycle that trains; a window of incidents before it (shifting halfway through) and one after."""
    return DrillPlan(model=production, cycles=1, every=EVERY, incidents_per_cycle=INCIDENTS_PER_WINDOW,
                     concurrency=concurrency, max_steps=MAX_ACTIONS, mix=_fault_types(usual),
                     shifted="+".join(_fault_types(shifted)), shift_after=INCIDENTS_PER_WINDOW // 2, shift_share=0.5,
                     time_limit=TIME_LIMIT, learning=demo_learning(name, base, rollout_queue))


async def run_demo_drill(client: Client, settings: Settings, registry: Registry, base: str,
                         usual: list[Scenario], shifted: list[Scenario], concurrency: int,
                         on_cycle: Callable[[DrillCycle], None] = lambda c: None,
                         on_progress: Callable[[str], None] = lambda line: None) -> DrillReport:
    """The drill with production as it stands, serving `usual` and shifting to `shifted`; its one cycle that
    trains starts from `base`."""
    name = f"demo-drill-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    plan = demo_plan(name, registry.production().version, base, usual, shifted, concurrency, settings.queue_agent)
    return await run_drill(client, settings, registry, plan, usual, shifted, on_cycle=on_cycle,
                           on_progress=on_progress)


def _fault_types(scenarios: Sequence[Scenario]) -> list[str]:
    return sorted({s.fault for s in scenarios})
