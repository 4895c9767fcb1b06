"""Scenario files: declarative YAML, expanded into `Scenario` objects.

A file holds one or more YAML documents; each is either a single scenario (it has `name`) or a parameterised
family (it has `family`). A family's `matrix` maps `target` and fault parameters to lists of values; every
combination times every seed is one scenario, named `FAMILY-TARGET-VALUES-sSEED`. Whatever a document leaves
out - the namespace (the app's), the alert, the user's symptom, the ground truth - is derived from the fault
type, so a new scenario needs no code. An entry of `faults` may add `delay_s` (it arrives that many simulated
seconds later: the environment holds it) and `app` (it breaks that other app, installed in its own namespace: a
shared fault the incident must leave to the other team); a scenario may add `settle_s`, the least settle window
its verdict needs (docs/architecture.md, "Scenarios that unfold").

The training catalog lives in `catalog/`, the held-out suite (fixed seeds, targets and values the catalog never
uses, false alarms) in `heldout/`, and a second evaluation suite in `variants/`: the held-out families again, with
new seeds, other targets and other values. A success rate near 55 % on the 46 held-out scenarios has a 95 % interval
of ±14 points; on both suites (110 episodes), ±9. Neither evaluation suite repeats a catalog scenario, even with
another seed. Two kinds of variant repeat held-out scenarios with a new seed only: the cordoned nodes (their only
other targets are the catalog's) and the false alarms (every target one can have is in the catalog or the held-out
suite).
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from agent_sre.apps.catalog import AppSpec, get_app
from agent_sre.faults import FaultContext, FaultError, FaultType, get_fault
from agent_sre.faults.base import compose
from agent_sre.models.alert import Alert
from agent_sre.models.scenario import MAX_DELAY_S, MAX_SETTLE_S, GroundTruth, Scenario, ScenarioFamily

CATALOG_DIR = Path(__file__).parent / "catalog"
HELDOUT_DIR = Path(__file__).parent / "heldout"
VARIANTS_DIR = Path(__file__).parent / "variants"
SCENARIO_KEYS = {"name", "app", "namespace", "fault", "faults", "target", "params", "seed", "alert", "alert_on",
                 "symptom", "ground_truth", "tags", "settle_s"}
FAULT_KEYS = {"fault", "target", "params", "ground_truth"}
LATER_KEYS = {"delay_s", "app"}  # only in an entry of `faults`: the one fault at the top is the incident's, at once


class ScenarioError(ValueError):
    """A scenario file that cannot be used; the message names the file, the document and what is wrong."""


def default_catalog() -> Path:
    return CATALOG_DIR


def heldout_suite() -> Path:
    return HELDOUT_DIR


def variants_suite() -> Path:
    """The second evaluation suite: the held-out families with new seeds, other targets and other values."""
    return VARIANTS_DIR


def evaluation_suites() -> list[Path]:
    """Every suite policies are judged on: nothing in them may be trained on."""
    return [HELDOUT_DIR, VARIANTS_DIR]


def _slug(value: Any) -> str:
    text = "-".join(f"{k}-{v}" for k, v in sorted(value.items())) if isinstance(value, dict) else str(value)
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x"


def _pydantic(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'document'}: {e['msg']}" for e in exc.errors())


def _family(doc: dict[str, Any]) -> list[Scenario]:
    fam = ScenarioFamily.model_validate(doc)
    fault = get_fault(fam.fault)
    app = get_app(fam.app)
    matrix = dict(fam.matrix)
    for key, values in matrix.items():
        if not isinstance(values, list) or not values:
            raise FaultError(f"matrix.{key} must be a non-empty list")
    targets = matrix.pop("target", None) or fault.targets(app)
    keys = sorted(matrix)
    out = []
    for target in targets:
        for combo in itertools.product(*(matrix[k] for k in keys)):
            params = dict(zip(keys, combo, strict=True))
            for seed in fam.seeds:
                parts = [fam.family, _slug(target), *(_slug(v) for v in combo), f"s{seed}"]
                out.append(fault.scenario("-".join(parts), fam.app, fam.app, str(target), params, seed,
                                          tags=[*fam.tags, fam.family], alert_on=fam.alert_on))
    return out


def _fault_docs(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The scenario's faults: `faults` (a list of `fault`, `target`, `params`, `ground_truth`), or the one `fault`
    given at the top."""
    if ("fault" in doc) == ("faults" in doc):
        raise FaultError("a scenario has `fault` (one fault) or `faults` (a list of them): exactly one of the two")
    if "fault" in doc:
        return [{k: doc[k] for k in FAULT_KEYS if k in doc}]
    if FAULT_KEYS & doc.keys():
        raise FaultError(f"with `faults`, {', '.join(sorted(FAULT_KEYS & doc.keys()))} go in each fault of the list")
    items = doc["faults"]
    if not isinstance(items, list) or not items or not all(isinstance(i, dict) for i in items):
        raise FaultError("faults must be a non-empty list of mappings")
    for i, item in enumerate(items):
        unknown, missing = set(item) - FAULT_KEYS - LATER_KEYS, {"fault"} - set(item)
        if unknown or missing:
            raise FaultError(f"faults[{i}]: {f'unknown keys {sorted(unknown)}' if unknown else 'missing fault'} "
                             f"(a fault has: {', '.join(sorted(FAULT_KEYS | LATER_KEYS))})")
    return items


def _fault(item: dict[str, Any], app: AppSpec, namespace: str, seed: int
           ) -> tuple[FaultType, FaultContext, GroundTruth | None]:
    """One fault of a scenario; with `app`, it breaks that other app, installed in its own namespace."""
    fault = get_fault(str(item["fault"]))
    if item.get("app") not in (None, app.name):
        app = get_app(str(item["app"]))
        namespace = app.name
    target = item.get("target") or (fault.targets(app) or [""])[0]
    params = item.get("params") or {}
    if not isinstance(params, dict):
        raise FaultError("params must be a mapping")
    truth = GroundTruth.model_validate(item["ground_truth"]) if item.get("ground_truth") else None
    return fault, fault.context(app.name, namespace, str(target), params, seed), truth


def _seconds(value: Any, what: str, most: float, zero: bool = True) -> float:
    """A number of seconds up to `most` (0 allowed when `zero`): a clear error for a word, a negative or an absurd
    value."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FaultError(f"{what} must be a number of seconds, not {value!r}")
    if value < 0 or value > most or (value == 0 and not zero):
        raise FaultError(f"{what} must be {'between 0 and' if zero else 'above 0 and at most'} {most:g} seconds, "
                         f"not {value:g}")
    return float(value)


def _single(doc: dict[str, Any]) -> Scenario:
    unknown = set(doc) - SCENARIO_KEYS
    if unknown:
        raise FaultError(f"unknown keys {sorted(unknown)} (a scenario has: {', '.join(sorted(SCENARIO_KEYS))})")
    for key in ("name", "app"):
        if key not in doc:
            raise FaultError(f"missing {key!r}")
    app = get_app(str(doc["app"]))
    namespace, seed = str(doc.get("namespace") or app.name), int(doc.get("seed", 0))
    if doc.get("alert_on", "target") not in ("target", "caller"):
        raise FaultError(f"alert_on must be target or caller, not {doc['alert_on']!r}")
    items = _fault_docs(doc)
    if items[0].get("app") not in (None, app.name):
        raise FaultError(f"the first fault is the incident's own, in {app.name}: a fault of another app comes after it")
    delays = [_seconds(item.get("delay_s", 0), f"faults[{i}].delay_s", MAX_DELAY_S) for i, item in enumerate(items)]
    settle = doc.get("settle_s")
    settle_s = None if settle is None else _seconds(settle, "settle_s", MAX_SETTLE_S, zero=False)
    return compose(str(doc["name"]), [_fault(item, app, namespace, seed) for item in items],
                   tags=list(doc.get("tags") or []),
                   alert=Alert.model_validate(doc["alert"]) if doc.get("alert") else None, symptom=doc.get("symptom"),
                   alert_on=doc.get("alert_on", "target"), delays=delays, settle_s=settle_s)


def _load_file(path: Path) -> list[Scenario]:
    try:
        docs = list(yaml.safe_load_all(path.read_text()))
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{path}: not valid YAML: {exc}") from None
    out: list[Scenario] = []
    for i, doc in enumerate(d for d in docs if d is not None):
        where = f"{path}: document {i + 1}"
        if not isinstance(doc, dict):
            raise ScenarioError(f"{where}: expected a mapping with `name` (a scenario) or `family` (a family), "
                                f"got {type(doc).__name__}")
        try:
            out.extend(_family(doc) if "family" in doc else [_single(doc)])
        except ValidationError as exc:
            raise ScenarioError(f"{where}: {_pydantic(exc)}") from None
        except (FaultError, KeyError, TypeError, ValueError) as exc:
            message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
            raise ScenarioError(f"{where}: {message}") from None
    return out


def load_scenarios(path: Path | str | None = None) -> list[Scenario]:
    """Every scenario in a file, or in the `*.yaml` files under a directory (the catalog when None)."""
    root = Path(path) if path is not None else CATALOG_DIR
    if not root.exists():
        raise ScenarioError(f"{root}: no such file or directory")
    files = sorted(root.rglob("*.yaml")) if root.is_dir() else [root]
    if not files:
        raise ScenarioError(f"{root}: no scenario files (*.yaml) in it")
    scenarios: list[Scenario] = []
    seen: dict[str, Path] = {}
    for file in files:
        for scenario in _load_file(file):
            if scenario.name in seen:
                raise ScenarioError(f"{file}: scenario name {scenario.name!r} is already used in {seen[scenario.name]}")
            seen[scenario.name] = file
            scenarios.append(scenario)
    if not scenarios:
        raise ScenarioError(f"{root}: holds no scenarios (its YAML is empty)")
    return scenarios


def pick_scenario(path: Path | str, name: str | None) -> Scenario:
    """The scenario called `name` in `path`, or the only one there when `name` is None."""
    loaded = load_scenarios(path)
    chosen = [s for s in loaded if name is None or s.name == name]
    if len(chosen) != 1:
        what = f"no scenario named {name!r}" if name else f"{len(loaded)} scenarios"
        names = ", ".join(s.name for s in loaded[:20]) + (" ..." if len(loaded) > 20 else "")
        raise ScenarioError(f"{path} holds {what}; pick one with --name ({names})")
    return chosen[0]


__all__ = ["CATALOG_DIR", "HELDOUT_DIR", "VARIANTS_DIR", "ScenarioError", "default_catalog", "evaluation_suites",
           "heldout_suite",
           "load_scenarios", "pick_scenario", "variants_suite"]
