"""The simulated step budget (issue #40): one rule, sized by what the namespace shows when the alert fires, for every
policy in training and evaluation."""

from __future__ import annotations

import pytest

from agent_sre.models.incident import RemediationLimits
from agent_sre.models.scenario import Scenario
from agent_sre.models.training import (
    MAX_SIMULATED_ACTIONS,
    SIMULATED_ACTIONS_PER_EXTRA_SERVICE,
    SIMULATED_MAX_ACTIONS,
    EvaluationConfig,
    GRPOTrainingConfig,
    simulated_max_actions,
)
from agent_sre.scenarios import default_catalog, heldout_suite, load_scenarios
from agent_sre.simulator.simulator import Simulator
from agent_sre.training.environment import IncidentEnvironment
from agent_sre.training.gate import load_suite

SCENARIOS = {s.name: s for s in load_scenarios(default_catalog()) + load_scenarios(heldout_suite())}


@pytest.fixture(scope="module")
def simulator() -> Simulator:
    return Simulator(speed=0)


def _budget(simulator: Simulator, scenario: Scenario, **kwargs: object) -> int:
    env = IncidentEnvironment(simulator, scenario, **kwargs)  # type: ignore[arg-type]
    env.reset()
    try:
        return env.require().incident.limits.max_steps
    finally:
        env.close()


def test_the_rule_adds_a_round_per_further_unhealthy_service() -> None:
    assert simulated_max_actions(0) == simulated_max_actions(1) == SIMULATED_MAX_ACTIONS
    assert simulated_max_actions(2) == SIMULATED_MAX_ACTIONS + SIMULATED_ACTIONS_PER_EXTRA_SERVICE
    assert simulated_max_actions(3, base=5, per_extra_service=4) == 13
    assert simulated_max_actions(3, per_extra_service=0) == SIMULATED_MAX_ACTIONS
    assert simulated_max_actions(1000) == MAX_SIMULATED_ACTIONS  # what RemediationLimits accepts
    RemediationLimits(max_steps=simulated_max_actions(1000))
    with pytest.raises(ValueError):
        simulated_max_actions(-1)


def test_the_configs_carry_the_same_rule() -> None:
    for config in (GRPOTrainingConfig(), EvaluationConfig()):
        assert (config.max_turns, config.extra_turns_per_service) == (SIMULATED_MAX_ACTIONS,
                                                                     SIMULATED_ACTIONS_PER_EXTRA_SERVICE)


@pytest.mark.parametrize(("name", "unhealthy"), [
    ("shop-two-faults-oom-cart-image-payment", 2),  # two services down
    ("heldout-one-fault-two-deployments-probe", 2),  # one fault type on two deployments
    ("heldout-hostile-annotation-scaled-payment", 1),  # two faults, but the hostile text breaks nothing
    ("heldout-hostile-event-false-alarm-ledger", 0),  # nothing broken at all
])
def test_the_environment_sizes_the_budget_by_the_services_unhealthy_at_the_alert(
        simulator: Simulator, name: str, unhealthy: int) -> None:
    scenario = SCENARIOS[name]
    assert _budget(simulator, scenario) == simulated_max_actions(unhealthy)
    assert _budget(simulator, scenario, extra_steps_per_service=0) == SIMULATED_MAX_ACTIONS
    custom = RemediationLimits(max_steps=7, settle_s=60.0)
    assert _budget(simulator, scenario, limits=custom, extra_steps_per_service=3) == 7 + 3 * max(unhealthy - 1, 0)


def test_an_episode_ends_at_the_scaled_budget(simulator: Simulator) -> None:
    """The budget is the environment's: a policy that never ends is cut at it, whatever it is."""
    env = IncidentEnvironment(simulator, SCENARIOS["shop-two-faults-oom-cart-image-payment"])
    env.reset()
    turns = 0
    while not env.done:
        env.step('{"tool": "list_pods", "args": {}}')
        turns += 1
    t = env.close()
    assert turns == len(t.steps) == SIMULATED_MAX_ACTIONS + SIMULATED_ACTIONS_PER_EXTRA_SERVICE
    assert t.termination == "step_limit"


def test_an_evaluation_measured_with_another_budget_is_another_suite() -> None:
    """Stored results are reused only for exactly the same measurement (training/gate.py)."""
    suite, _ = load_suite(EvaluationConfig(limit=2))
    other, _ = load_suite(EvaluationConfig(limit=2, extra_turns_per_service=0))
    assert suite != other
