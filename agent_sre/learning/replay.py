"""Sim replay: a production incident whose scenario the simulator knows can be re-created there, so GRPO trains on
"the incidents production saw" and a candidate is evaluated on recent ones offline, before it serves any.

A simulated incident carries its scenario. A scenario from the catalog is re-created from the catalog (the stored
copy went through redaction); another one only when its fault and app are the simulator's and redaction left it
intact. An incident without a scenario (a real alert) has no known fault class and is not replayed.
Scenarios are split within each fault class by a hash of their name, so training and evaluation never share one,
every class production saw more than once is judged (the one a shift in the traffic brings included), and a rerun
splits the same way; training leaves out the scenarios of the evaluation suite (held-out means never trained on).
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache

import yaml

from agent_sre.apps.catalog import get_app
from agent_sre.faults import FaultError, get_fault
from agent_sre.models.scenario import Scenario
from agent_sre.models.trajectory import Trajectory
from agent_sre.redaction import PREFIX as REDACTED
from agent_sre.scenarios import default_catalog, load_scenarios


@cache
def _catalog() -> dict[str, Scenario]:
    return {s.name: s for s in load_scenarios(default_catalog())}


def replay_scenario(t: Trajectory) -> Scenario | str:
    """The scenario that re-creates `t`'s incident, or why there is none."""
    stored = t.incident.scenario
    if stored is None:
        return "no scenario: not a simulated incident, its fault class is unknown"
    known = _catalog().get(stored.name)
    if known is not None and known.fault == stored.fault:
        return known
    try:
        for spec in stored.faults:
            get_fault(spec.fault)
        get_app(stored.app)
    except (FaultError, KeyError):
        return f"unknown to the simulator: fault {stored.fault!r} of app {stored.app!r}"
    if REDACTED in stored.model_dump_json():
        return "redacted: the stored scenario lost values to redaction and is not in the catalog"
    return stored


def _position(name: str) -> float:
    """The scenario's fixed point in [0, 1): which side of the split it falls on."""
    return int(hashlib.sha256(name.encode()).hexdigest()[:12], 16) / 16 ** 12


@dataclass
class Replay:
    train: list[Scenario] = field(default_factory=list)
    evaluate: list[Scenario] = field(default_factory=list)
    not_replayable: Counter[str] = field(default_factory=Counter)


def _evaluated(scenarios: Iterable[Scenario], eval_share: float, eval_limit: int) -> list[Scenario]:
    """Stratified by fault class: each class keeps `eval_share` of its scenarios for evaluation, at least one of a
    class with two or more and never all of them; a class of one goes by its hash. The classes take turns up to
    `eval_limit`, so a small limit still spans them."""
    by_class: defaultdict[str, list[Scenario]] = defaultdict(list)
    for s in sorted(scenarios, key=lambda s: _position(s.name)):
        by_class[s.fault].append(s)
    picked: list[list[Scenario]] = []
    for group in by_class.values():
        if len(group) == 1 or eval_share == 0:
            quota = sum(_position(s.name) < eval_share for s in group)
        else:
            quota = min(max(1, round(len(group) * eval_share)), len(group) - 1)
        picked.append(group[:quota])
    turns = (group[turn] for turn in range(max(map(len, picked), default=0)) for group in picked if turn < len(group))
    return list(turns)[:eval_limit]


def replay_sets(episodes: Iterable[Trajectory], eval_share: float, eval_limit: int,
                held_out: set[str]) -> Replay:
    """Distinct scenarios of the episodes' incidents, split into training and evaluation (at most `eval_limit`;
    the rest train). Training leaves out the scenarios named in `held_out`."""
    out, scenarios, seen = Replay(), {}, Counter[str]()
    for t in episodes:
        found = replay_scenario(t)
        if isinstance(found, str):
            out.not_replayable[found] += 1
        else:
            scenarios[found.name] = found
            seen[found.name] += 1
    chosen = _evaluated(scenarios.values(), eval_share, eval_limit)
    out.evaluate = sorted(chosen, key=lambda s: s.name)
    for s in sorted(set(scenarios) - {c.name for c in chosen}):
        if s in held_out:
            out.not_replayable["in the evaluation suite: never trained on"] += seen[s]
        else:
            out.train.append(scenarios[s])
    return out


def scenario_file(scenarios: Iterable[Scenario]) -> bytes:
    """A scenario file `load_scenarios` reads back as the same scenarios (one YAML document each)."""
    text: str = yaml.safe_dump_all([s.model_dump(mode="json") for s in scenarios], sort_keys=False)
    return text.encode()
