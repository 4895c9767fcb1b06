"""The expert teacher: it fixes every fault family, from what it has read, and its data never touches evaluation.

Episodes run in-process on the real simulator (manual clock), one scenario per fault family.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter

import pytest

from agent_sre.faults import get_fault
from agent_sre.models.remediation import PolicyRef
from agent_sre.models.scenario import Scenario
from agent_sre.models.tools import TOOL_SPECS, ToolCall
from agent_sre.models.trajectory import Trajectory
from agent_sre.outcome import incident_outcome
from agent_sre.policy.conversation import incident_message
from agent_sre.policy.expert import ExpertPolicy
from agent_sre.policy.runbook import RunbookPolicy
from agent_sre.scenarios import default_catalog, evaluation_suites, load_scenarios
from agent_sre.simulator.simulator import Simulator
from agent_sre.training.demonstrations import EXPERT, identity, training_scenarios, verified
from agent_sre.training.environment import IncidentEnvironment
from agent_sre.training.evaluate import play

CATALOG = load_scenarios(default_catalog())
# the first single-fault scenario of each fault type (several faults at once are measured apart: issue #40)
ONE_PER_FAMILY = {s.fault: s for s in reversed(CATALOG) if len(s.faults) == 1}
RUNBOOK = PolicyRef(name="runbook", version="runbook")


@pytest.fixture(scope="module")
def simulator() -> Simulator:
    return Simulator(speed=0)


@pytest.fixture(scope="module")
def episodes(simulator: Simulator) -> dict[str, Trajectory]:
    return {fault: play(ExpertPolicy(), EXPERT, s, simulator) for fault, s in sorted(ONE_PER_FAMILY.items())}


def test_every_family_is_resolved_and_verified(episodes: dict[str, Trajectory]) -> None:
    assert len(episodes) == 41
    failed = {fault: (t.verdict.outcome if t.verdict else None, t.termination) for fault, t in episodes.items()
              if not verified(t)}
    assert not failed, failed
    assert not any(incident_outcome(t).false_positive for t in episodes.values())
    assert all(t.termination == "finished" and not t.writes for f, t in episodes.items()
               if ONE_PER_FAMILY[f].false_alarm)


def _quoted(args: dict[str, object]) -> list[str]:
    """The argument values a fix quotes: each scalar, and each `key=value` of a map (a selector, quota limits);
    `kind` is a word of the tool's schema, not a value read anywhere."""
    out: list[str] = []
    for key, value in args.items():
        if key == "kind":
            continue
        out += [f"{k}={v}" for k, v in value.items()] if isinstance(value, dict) else [str(value)]
    return out


def _rule_derived(call: ToolCall, read: str) -> bool:
    """The fix arguments that follow from what was read by a stated rule rather than being quoted from it."""
    if call.tool == "set_resources" and "memory_limit" in call.args:  # four times the limit it was killed at
        seen = re.search(r"Limits:\s+(?:cpu=\S+\s+)?memory=(\d+)Mi", read)
        return seen is not None and call.args["memory_limit"] == f"{max(int(seen[1]) * 4, 512)}Mi"
    if call.tool == "scale" and "CPU(cores)" in read:  # enough pods for 70% of the CPU request each, at today's usage
        request = re.search(r"Requests: cpu=(\d+)m", read)
        pods = re.finditer(r"^(\S+)\s+(\d+)m\s", read, re.MULTILINE)
        usage = sum(int(m[2]) for m in pods if m[1].startswith(f"{call.args['deployment']}-"))
        return request is not None and call.args["replicas"] == math.ceil(usage / (int(request[1]) * 0.7) - 1e-9)
    if call.tool == "patch" and call.args.get("kind") == "networkpolicy":  # the caller appended to the policy's
        ops = call.args["patch"]  # `app In` list, at the path the object read shows
        return isinstance(ops, list) and all(op["op"] == "add" and op["path"].endswith("/values/-")
                                             and op["value"] in read for op in ops) and str(call.args["name"]) in read
    if call.tool == "set_hpa_max":  # what the autoscaler asks for: ceil(current pods x utilization / target)
        metric = re.search(r"\(as a percentage of request\): (\d+)% \(\S+\) / (\d+)%", read)
        pods = re.search(r"^Deployment pods: (\d+) current", read, re.MULTILINE)
        return metric is not None and pods is not None and \
            call.args["max_replicas"] == math.ceil(int(pods[1]) * int(metric[1]) / int(metric[2]) - 1e-9)
    if call.tool == "patch_quota":  # room for every pod running now, twice over
        used = re.search(r"used: pods=(\d+)", read)
        return used is not None and call.args["hard"] == {"pods": str(2 * int(used[1]))}
    return False


def test_every_fix_argument_comes_from_what_was_read(episodes: dict[str, Trajectory]) -> None:
    """What makes the expert imitable: a student that sees the same conversation can produce the same fix."""
    checked = 0
    for fault, t in episodes.items():
        read = incident_message(t.incident)
        for step in t.steps:
            assert step.action is not None
            if step.result is None:  # the closing finish
                continue
            if TOOL_SPECS[step.action.tool].write:
                call = step.action
                if not _rule_derived(call, read):
                    missing = [leaf for leaf in _quoted(call.args) if leaf not in read]
                    assert not missing, f"{fault}: {call.command_line()} uses {missing}, which nothing it read shows"
                checked += 1
            read += "\n" + step.result.output
    assert checked >= 24  # every family but the false alarm wrote its fix


@pytest.mark.parametrize("fault", ["pvc_missing", "image_pull_secret"])
def test_a_family_whose_ending_follows_the_evidence_is_resolved_in_every_suite(simulator: Simulator,
                                                                               fault: str) -> None:
    """A missing claim or pull secret is rolled back where the store's own claim or the app's own pull secret is
    still there, and handed over where it is gone: the expert reads which, in the catalog and both evaluation
    suites (other targets, apps and names), and ends as each scenario expects."""
    scenarios = [s for path in (default_catalog(), *evaluation_suites()) for s in load_scenarios(path)
                 if [f.fault for f in s.faults] == [fault]]
    endings = Counter(s.ground_truth.expected_ending for s in scenarios)
    assert endings["finished"] and endings["escalated"]
    for scenario in scenarios:
        t = play(ExpertPolicy(), EXPERT, scenario, simulator)
        assert verified(t) and t.termination == scenario.ground_truth.expected_ending, scenario.name


def test_it_labels_states_another_policy_reached(simulator: Simulator) -> None:
    """DAgger needs a teacher that can act from any state: after the runbook's wrong fix (a restart of the caller
    for a Service pointed at the wrong port), the expert still finds and makes the right one."""
    scenario = ONE_PER_FAMILY["service_target_port"]
    env = IncidentEnvironment(simulator, scenario, policy="expert", model_version="expert")
    env.reset()
    runbook, expert = RunbookPolicy(), ExpertPolicy()
    while not env.done:
        wrote = any(TOOL_SPECS[s.action.tool].write for s in env.require().steps if s.action is not None)
        policy, ref = (expert, EXPERT) if wrote else (runbook, RUNBOOK)
        decision = policy.decide(ref, env.require())
        if not wrote and decision.action is not None and decision.action.tool in ("finish", "escalate"):
            decision = expert.decide(EXPERT, env.require())
        env.record(decision)
    t = env.close()
    writes = [s.action.tool for s in t.writes if s.action is not None]
    assert writes[0] != "patch_service" and "patch_service" in writes, writes
    assert t.verdict is not None and t.verdict.outcome == "resolved"


def test_verification_keeps_only_what_the_ground_truth_agrees_with(simulator: Simulator) -> None:
    scenario = ONE_PER_FAMILY["service_target_port"]
    runbook = play(RunbookPolicy(), RUNBOOK, scenario, simulator)  # restarts something and claims a fix
    assert not verified(runbook)
    false_alarm = ONE_PER_FAMILY["none"]
    assert verified(play(ExpertPolicy(), EXPERT, false_alarm, simulator))


def _identities(scenarios: list[Scenario]) -> set[str]:
    return {identity(s) for s in scenarios}


def test_training_scenarios_cover_every_family_and_never_an_evaluation_one() -> None:
    training = training_scenarios()
    by_fault = Counter(s.fault for s in training)
    assert set(by_fault) == {f.fault for s in CATALOG for f in s.faults} and len(training) >= 1000
    assert min(by_fault.values()) >= 6, by_fault
    assert len({s.name for s in training}) == len(training)
    for suite in evaluation_suites():
        evaluation = load_scenarios(suite)
        assert not _identities(training) & _identities(evaluation), suite
        assert not {s.name for s in training} & {s.name for s in evaluation}
    assert all(s.seed >= 1000 for s in training)


def test_training_scenarios_leave_out_what_they_are_told_to(tmp_path: object) -> None:
    catalog = load_scenarios(default_catalog())
    excluded = catalog[0]
    narrowed = training_scenarios(seeds=(1000,), exclude=[default_catalog()])
    assert identity(excluded) not in _identities(narrowed)
    assert json.loads(identity(excluded))[0] in {s.fault for s in narrowed}  # other targets of that fault remain


def test_a_least_privilege_policy_of_a_healthy_service_is_left_alone() -> None:
    """postgres-ingress admits postgres's callers by name: not a policy that shuts outside traffic out. A false
    alarm about postgres (an attacker's event asking for a write) ends with nothing changed."""
    scenario = get_fault("hostile_text").scenario(
        "hostile-postgres", "shop", "shop", "postgres",
        {"where": "event", "demand": "scale_to_zero", "victim": "redis"}, seed=1002)
    played = play(ExpertPolicy(), PolicyRef(name="expert"), scenario, Simulator(speed=0))
    assert played.verdict is not None and played.verdict.outcome == "resolved", played.verdict
    assert not [s for s in played.steps if s.action.tool == "delete_network_policy"]


SUITES = [s for path in (default_catalog(), *evaluation_suites()) for s in load_scenarios(path)]


def _fixes_from_reads(t: Trajectory) -> list[str]:
    """The writes of `t` quoting a value nothing read before them shows (empty: every fix came from a read)."""
    read, missing = incident_message(t.incident), []
    for step in t.steps:
        if step.action is not None and step.result is not None:
            if TOOL_SPECS[step.action.tool].write and not _rule_derived(step.action, read):
                missing += [f"{step.action.command_line()}: {leaf}" for leaf in _quoted(step.action.args)
                            if leaf not in read]
            read += "\n" + step.result.output
    return missing


@pytest.mark.parametrize("scenario", [s for s in SUITES if "hidden-service" in s.tags], ids=lambda s: s.name)
def test_a_service_only_its_callers_show_broken_is_mended_before_finishing(scenario: Scenario,
                                                                           simulator: Simulator) -> None:
    """A crash (alerted) and, elsewhere, a Service that reaches no pod or the wrong port: once the crash is mended
    every pod runs, but the entry tier's logs still blame the other service, and the expert mends it too (it used
    to finish there, claiming a fix)."""
    t = play(ExpertPolicy(), EXPERT, scenario, simulator)
    assert t.verdict is not None and t.verdict.outcome == "resolved", (t.verdict, t.termination)
    assert not incident_outcome(t).false_positive
    hidden = next(f.target for f in scenario.faults if f.fault.startswith("service_"))
    reads = [s.action for s in t.steps if s.action is not None]
    assert ToolCall(tool="list_pods", args={"selector": "tier=web"}) in reads
    assert any(a.tool == "patch_service" and a.args["service"] == hidden for a in reads), reads
    assert not _fixes_from_reads(t)


@pytest.mark.parametrize("scenario", [s for s in SUITES if "stacked-rollout" in s.tags], ids=lambda s: s.name)
def test_an_undo_does_not_land_on_a_revision_that_fails_too(scenario: Scenario, simulator: Simulator) -> None:
    """Two bad rollouts on one deployment: one rollout_undo lands on the earlier bad one. A revision under the
    current one that limits memory below what the serving pods use (top) is skipped before the undo; one that fails
    its rollout after the undo is gone past with a second undo. Either way, back to the revision before both."""
    t = play(ExpertPolicy(), EXPERT, scenario, simulator)
    assert t.verdict is not None and t.verdict.outcome == "resolved", (t.verdict, t.termination)
    assert not incident_outcome(t).false_positive and t.termination == "finished"
    undos = [s.action for s in t.writes if s.action is not None and s.action.tool == "rollout_undo"]
    assert undos[-1].args.get("to_revision") == 2, undos
    oom = scenario.faults[0].fault == "oom_limit"
    assert len(undos) == (1 if oom else 2), undos  # the memory is checked before the undo; a crash shows after it
    assert not _fixes_from_reads(t)


def test_a_single_rollout_is_still_undone_one_revision(episodes: dict[str, Trajectory]) -> None:
    """One bad rollout: the plain undo, as before (the history's revision under it sets no memory limit)."""
    undos = [s.action for s in episodes["bad_image"].writes if s.action is not None]
    assert undos == [ToolCall(tool="rollout_undo", args={"deployment": undos[0].args["deployment"]})]
