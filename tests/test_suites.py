"""The evaluation suites: the held-out suite and its variants are disjoint from each other and from the training
catalog, cover every fault type, and every variant breaks what it says and is fixed by its ground truth."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from agent_sre.faults import FAULTS
from agent_sre.models.scenario import Scenario
from agent_sre.scenarios import default_catalog, heldout_suite, load_scenarios, variants_suite
from agent_sre.simulator.simulator import Simulator
from tests.workload_fixtures import FIX_SETTLE_S, injected

Identity = tuple[str, str, str, str, str]


def _without_seed(s: Scenario) -> Identity:
    return s.fault, s.app, s.target, json.dumps(s.params, sort_keys=True), s.alert.labels.get("service", "")


def _identity(s: Scenario) -> tuple[Identity, int]:
    return _without_seed(s), s.seed


@pytest.fixture(scope="module")
def suites() -> dict[str, list[Scenario]]:
    return {"catalog": load_scenarios(default_catalog()), "heldout": load_scenarios(heldout_suite()),
            "variants": load_scenarios(variants_suite())}


def _types(suite: list[Scenario]) -> set[str]:
    return {f.fault for s in suite for f in s.faults}


def test_the_variants_bring_the_evaluation_to_a_hundred_episodes_of_every_fault_type(suites) -> None:
    heldout, variants = suites["heldout"], suites["variants"]
    assert len(heldout) == 106 and len(variants) >= 64 and len(heldout) + len(variants) >= 120
    assert _types(variants) == _types(heldout) == set(FAULTS)
    assert Counter(s.fault for s in variants)["none"] >= 5  # false alarms, as in the held-out suite
    for tag in ("multi-fault", "alert-on-caller", "hostile-text"):  # issue #40's shapes, in both suites
        assert all(any(tag in s.tags for s in suite) for suite in (heldout, variants)), tag
    assert all(s.seed >= 400 for s in variants) and all("variant" in s.tags for s in variants)


def test_no_scenario_is_in_two_suites(suites) -> None:
    """Across the catalog and both evaluation suites, no two scenarios share a name or an identity (fault, app,
    target, parameters and seed): a model is never evaluated on an episode it was trained on, and the two
    evaluation suites count no episode twice."""
    names = Counter(s.name for suite in suites.values() for s in suite)
    assert not [name for name, n in names.items() if n > 1]
    identities = Counter(_identity(s) for suite in suites.values() for s in suite)
    assert not [i for i, n in identities.items() if n > 1]


def test_neither_evaluation_suite_repeats_a_training_scenario_even_with_another_seed(suites) -> None:
    trained = {_without_seed(s) for s in suites["catalog"]}
    for suite in ("heldout", "variants"):
        assert not [s.name for s in suites[suite] if _without_seed(s) in trained], suite


def test_variants_repeat_heldout_scenarios_only_where_no_other_target_is_left(suites) -> None:
    """A cordoned node can only be under a service pinned to a node, and a false alarm only on a non-data service:
    the catalog has the others, so those variants are held-out scenarios with new seeds. All others are new."""
    heldout = {_without_seed(s) for s in suites["heldout"]}
    repeated = {s.fault for s in suites["variants"] if _without_seed(s) in heldout}
    assert repeated == {"cordoned_node", "none"}


def test_a_suite_loads_from_any_directory(tmp_path: Path, suites) -> None:
    copy = tmp_path / "my-suite"
    shutil.copytree(variants_suite(), copy)
    assert load_scenarios(copy) == suites["variants"]
    assert load_scenarios(copy / "false-alarms.yaml") == [s for s in suites["variants"] if s.fault == "none"]


def test_every_variant_breaks_its_target_and_its_fix_mends_it() -> None:
    """Injection shows (a service unhealthy, the verdict unresolved; a false alarm healthy), the ground truth's fix
    resolves it, its wrong fix does not, and its destructive action makes it worse: each variant is a real incident
    of its fault type."""
    sim = Simulator(speed=1.0)
    for scenario in load_scenarios(variants_suite()):
        for action, expected in (("fix", "resolved"), ("wrong_fix", "unresolved"), ("destructive", "worse")):
            env, baseline = injected(sim, scenario)
            before = env.observe(scenario, baseline)
            if scenario.false_alarm:
                assert before.outcome == "resolved" and not baseline.unhealthy, (scenario.name, before.reasons)
            else:
                assert before.outcome == "unresolved" and baseline.unhealthy, (scenario.name, before.reasons)
            if scenario.false_alarm and action == "fix":
                continue  # nothing to do is the fix: finishing without a write (the ending, judged elsewhere)
            env.tools(getattr(scenario.ground_truth, action))
            env.advance(FIX_SETTLE_S)
            verdict = env.observe(scenario, baseline)
            assert verdict.outcome == expected, (scenario.name, action, verdict.reasons)
            sim.delete_env(env.name)
