"""Training data from the expert: many scenarios per fault family, each demonstration verified by the ground truth.

The catalog holds a few scenarios per family; a student needs tens. `training_scenarios` widens each catalog fault
to every app it applies to, every target and every parameter value the catalog uses for it, over fresh seeds, and
leaves out anything an evaluation suite holds (same fault, app, target and parameters, whatever the seed), so no
evaluation scenario is ever trained on. `demonstrations` plays the expert on them and keeps an episode only when the
simulator's privileged knowledge agrees with it: the observer says resolved, nothing was claimed falsely, and what
the expert wrote to is the scenario's root cause (for a false alarm: nothing written, and a `finish`).
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from pydantic import BaseModel

from agent_sre.apps.catalog import APPS
from agent_sre.faults import FaultError, get_fault
from agent_sre.models.remediation import PolicyRef
from agent_sre.models.scenario import Scenario
from agent_sre.models.trajectory import Trajectory
from agent_sre.outcome import incident_outcome
from agent_sre.policy.expert import ExpertPolicy
from agent_sre.scenarios import default_catalog, evaluation_suites, load_scenarios
from agent_sre.simulator.simulator import Simulator
from agent_sre.training.evaluate import play

EXPERT = PolicyRef(name="expert", version="expert")
TRAINING_SEEDS = (1000, 1001, 1002)  # far from the catalog's (0-2), held-out's (1xx-3xx) and variants' seeds


def identity(s: Scenario, with_seed: bool = False) -> str:
    """What makes two scenarios the same incident: the fault, where, with what, where its alert fires (and,
    optionally, the seed)."""
    key: list[object] = [s.fault, s.app, s.target, s.params, s.alert.labels.get("service", "")]
    if with_seed:
        key.append(s.seed)
    return json.dumps(key, sort_keys=True)


def training_scenarios(seeds: Sequence[int] = TRAINING_SEEDS, catalog: Path | None = None,
                       exclude: Iterable[Path] | None = None) -> list[Scenario]:
    """Every catalog fault × app × target × the catalog's parameter values for that fault × `seeds`, minus every
    scenario of the evaluation suites (`exclude`, default: all of them) whatever its seed."""
    held = {identity(s) for suite in (exclude if exclude is not None else evaluation_suites())
            for s in load_scenarios(suite)}
    params_by_fault: dict[str, list[dict[str, object]]] = {}
    for spec in (f for s in load_scenarios(catalog or default_catalog()) for f in s.faults):
        seen = params_by_fault.setdefault(spec.fault, [{}])
        if spec.params and spec.params not in seen:
            seen.append(spec.params)
    out: dict[str, Scenario] = {}
    for fault_name, variants in sorted(params_by_fault.items()):
        fault = get_fault(fault_name)
        for app in APPS.values():
            for target in fault.targets(app):
                for params in variants:
                    for seed in seeds:
                        name = f"train-{fault_name}-{app.name}-{target}-{_slug(params)}s{seed}".replace("_", "-")
                        try:
                            scenario = fault.scenario(name, app.name, app.name, target, dict(params), seed,
                                                      tags=["training", fault_name])
                        except (FaultError, ValueError):
                            continue  # the catalog's value does not apply to this target (a port it lacks, ...)
                        if identity(scenario) not in held and identity(scenario, True) not in out:
                            out[identity(scenario, True)] = scenario
    return sorted(out.values(), key=lambda s: s.name)


def sample_per_family(scenarios: Sequence[Scenario], per_family: int, seed: int = 0) -> list[Scenario]:
    """`per_family` scenarios of each fault, drawn at random (a family's hundreds of variants would drown the rest)."""
    by_fault: dict[str, list[Scenario]] = defaultdict(list)
    for s in scenarios:
        by_fault[s.fault].append(s)
    rng = random.Random(seed)
    return [s for fault in sorted(by_fault) for s in rng.sample(by_fault[fault], min(per_family, len(by_fault[fault])))]


def _slug(params: dict[str, object]) -> str:
    if not params:
        return ""
    text = "-".join(f"{v}" for _, v in sorted(params.items()))
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")[:40] + "-"


def verified(t: Trajectory) -> bool:
    """Privileged verification: resolved by the observer, no false claim, and the conclusion is the ground truth's
    (its writes touch each fault's root cause; a false alarm is finished with nothing written; a fault expecting a
    handover is escalated, its diagnosis naming each root cause)."""
    scenario = t.incident.scenario
    if scenario is None or t.verdict is None:
        return False
    outcome = incident_outcome(t)
    if scenario.false_alarm:
        return t.termination == "finished" and not t.writes and outcome.outcome == "resolved"
    expected = scenario.ground_truth.expected_ending
    if outcome.outcome != "resolved" or outcome.false_positive or t.termination != expected:
        return False
    roots = [f.ground_truth.root_cause.split("/")[-1] for f in scenario.own_faults
             if f.ground_truth.fault_class != "none"]
    if t.termination == "escalated":
        return all(root in (t.diagnosis or "") for root in roots)
    written = [json.dumps(s.action.args) for s in t.writes if s.action is not None]
    return all(any(root in args for args in written) for root in roots)


class Demonstrations(BaseModel):
    trajectories: list[Trajectory]
    played: int
    rejected: list[str]  # scenarios whose expert episode failed verification: bugs in the expert, to be fixed


def demonstrations(scenarios: Sequence[Scenario], on_done: Callable[[int], None] | None = None) -> Demonstrations:
    """The expert on each scenario (in-process, manual clock); the episodes that pass `verified`."""
    simulator, expert = Simulator(speed=0), ExpertPolicy()
    kept, rejected = [], []
    for i, scenario in enumerate(scenarios):
        t = play(expert, EXPERT, scenario, simulator)
        (kept.append(t) if verified(t) else rejected.append(scenario.name))
        if on_done:
            on_done(i + 1)
    return Demonstrations(trajectories=kept, played=len(scenarios), rejected=rejected)
