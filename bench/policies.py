"""The rule-based policies, the runbook and the expert, on the training catalog and both evaluation suites.

Each policy plays every scenario of the catalog, the held-out suite and the variants once, in-process on the
simulator (`training/evaluate.py`'s `run_policy`, high-risk writes approved, the environment's own step budget), and
is judged by the observer. Per suite: success with its 95 % Wilson interval, false positives, escalations, episodes
cut by the step budget, and mean actions. With `--before FILE` (the per-scenario outcomes an earlier run saved with
`--save`), each policy is also paired with its earlier self scenario by scenario: McNemar's exact test on the
scenarios both played (`training/stats.py`), and a second table per fault family (the scenario's fault types, one
per fault: `a+b` for two, `a+a` for one type on two deployments), pooled over the three suites.

    .venv/bin/python bench/policies.py [--save FILE] [--before FILE] [--no-docs]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel, Field

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchdocs import Row, markdown, provenance, show, write_section

from agent_sre.models.evaluation import ScenarioOutcome, SuiteResult
from agent_sre.models.remediation import PolicyName, PolicyRef
from agent_sre.policy.base import Policy
from agent_sre.policy.expert import ExpertPolicy
from agent_sre.policy.runbook import RunbookPolicy
from agent_sre.scenarios import default_catalog, heldout_suite, load_scenarios, variants_suite
from agent_sre.training.comparison import scenario_outcome, success_cell, suite_result
from agent_sre.training.evaluate import run_policy
from agent_sre.training.stats import compare_paired

HEADING = "## Rule-based policies per suite and family (bench/policies.py)"
SUITES: dict[str, Callable[[], Path]] = {"catalog": default_catalog, "heldout": heldout_suite,
                                         "variants": variants_suite}
POLICIES: dict[PolicyName, Callable[[], Policy]] = {"runbook": RunbookPolicy, "expert": ExpertPolicy}


class Saved(BaseModel):
    """Every episode of one run, per policy, and where it came from: what a later run pairs with."""

    commit: str
    command: str
    outcomes: dict[str, list[ScenarioOutcome]] = Field(description="policy -> one outcome per suite and scenario")


def saved_text(saved: Saved) -> str:
    """JSON with one episode a line, so that two saved runs diff scenario by scenario."""
    policies = ",\n".join(f"  {json.dumps(policy)}: [\n" + ",\n".join(f"   {o.model_dump_json()}" for o in outcomes)
                          + "\n  ]" for policy, outcomes in saved.outcomes.items())
    return (f'{{"commit": {json.dumps(saved.commit)}, "command": {json.dumps(saved.command)},\n "outcomes": {{\n'
            f"{policies}\n }}\n}}\n")


def commit() -> str:
    """The checked-out commit, `+` when the working tree differs from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=False).stdout.strip()
    head = git("rev-parse", "--short", "HEAD") or "(no git checkout)"
    return head + ("+" if git("status", "--porcelain", "agent_sre") else "")


def play() -> dict[str, list[ScenarioOutcome]]:
    played: dict[str, list[ScenarioOutcome]] = {}
    for name, make in POLICIES.items():
        ref, outcomes = PolicyRef(name=name, version=name), []
        for suite, where in SUITES.items():
            scenarios = load_scenarios(where())
            family = {s.name: "+".join(f.fault for f in s.faults) for s in scenarios}  # one fault type per fault
            outcomes += [scenario_outcome(suite, r).model_copy(update={"fault": family[r.scenario]})
                         for r in run_policy(make(), ref, scenarios)]
        played[name] = outcomes
    return played


def _key(o: ScenarioOutcome) -> str:
    return f"{o.suite}/{o.scenario}"


def _paired(after: Sequence[ScenarioOutcome], before: Sequence[ScenarioOutcome]) -> str:
    mine, theirs = {_key(o): o.resolved for o in after}, {_key(o): o.resolved for o in before}
    if not mine.keys() & theirs.keys():
        return "–"
    test = compare_paired(mine, theirs)
    p = "< 0.001" if test.p_value < 0.001 else f"{test.p_value:.3f}"
    return f"{p} ({test.only_a}:{test.only_b})"


def suite_rows(played: dict[str, list[ScenarioOutcome]],
               before: dict[str, list[ScenarioOutcome]] | None) -> list[Row]:
    rows: list[Row] = []
    for policy, outcomes in played.items():
        for suite in [*SUITES, "all"]:
            mine = [o for o in outcomes if suite in ("all", o.suite)]
            r: SuiteResult = suite_result(policy, suite, mine)
            cells = [policy, suite, str(r.episodes), success_cell(r), str(r.false_positives), str(r.escalations),
                     str(sum(o.termination == "step_limit" for o in mine)), f"{r.steps / max(r.episodes, 1):.1f}"]
            if before is not None:
                old = [o for o in before.get(policy, []) if suite in ("all", o.suite)]
                was = suite_result(policy, suite, old)
                cells += [success_cell(was) if old else "–", str(was.false_positives), str(was.escalations),
                          _paired(mine, old)]
            rows.append(tuple(cells))
    return rows


def suite_header(paired: bool) -> Row:
    now = ("policy", "suite", "episodes", "success (95 % CI)", "false positives", "escalations", "step limit",
           "actions / episode")
    return (*now, "before: success (95 % CI)", "before: false positives", "before: escalations",
            "p vs before") if paired else now


def family_rows(played: dict[str, list[ScenarioOutcome]], before: dict[str, list[ScenarioOutcome]]) -> list[Row]:
    """One row per fault family, pooled over the suites: each policy's resolved count before → now, on the scenarios
    both runs played."""
    counts: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0, 0]))
    for policy, outcomes in played.items():
        earlier = {_key(o): o.resolved for o in before.get(policy, [])}
        for o in outcomes:
            if _key(o) not in earlier:  # a scenario the earlier run did not play: nothing to pair it with
                continue
            cell = counts[o.fault][policy]
            cell[0] += 1
            cell[1] += earlier.get(_key(o), False)
            cell[2] += o.resolved
    rows: list[Row] = []
    for family in sorted(counts, key=lambda f: ("+" in f, f)):
        cells = counts[family]
        n = max(c[0] for c in cells.values())
        rows.append((family, str(n), *(f"{cells[p][1]} → {cells[p][2]}" for p in played)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--save", type=Path, help="write every episode's outcome here (JSON)")
    parser.add_argument("--before", type=Path, help="pair with the outcomes an earlier run saved")
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args()

    played = play()
    here = commit()
    if args.save:
        args.save.write_text(saved_text(Saved(commit=here, command=" ".join(sys.argv), outcomes=played)))
    old = Saved.model_validate(json.loads(args.before.read_text())) if args.before else None
    before = old.outcomes if old else None
    per_suite = suite_rows(played, before)
    show(f"The rule-based policies at {here}" + (f", paired with {old.commit}" if old else ""),
         suite_header(old is not None), per_suite, width=200)
    families = family_rows(played, before) if before is not None else []
    family_header = ("fault family", "scenarios", *(f"{p}: resolved before → now" for p in played))
    if families:
        show("Per fault family, the three suites pooled", family_header, families, width=200)
    if args.no_docs:
        return
    intro = __doc__.split("\n\n", 1)[1].split("\n    .venv")[0].strip()
    body = provenance() + f"Policies at {here}" + (f"; before: {old.commit} ({args.before})" if old else "") + ".\n\n"
    body += intro + "\n\n" + markdown(suite_header(old is not None), per_suite)
    if old is not None:
        body += ("\np vs before: exact two-sided McNemar test on the scenarios both runs played; (a:b) = scenarios "
                 "resolved only now : only before.\n\n### Per fault family (catalog, held-out and variants "
                 "pooled)\n\n" + markdown(family_header, families))
    write_section(HEADING, body)


if __name__ == "__main__":
    main()
