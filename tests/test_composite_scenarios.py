"""What the scenario format can say since issue #40: several faults in one namespace, an alert on a caller,
transient and benign events, hostile text, liveness probes. Each new catalog scenario is a real incident of its
kind (injected it shows, its fix mends it, its wrong fix does not, its destructive action makes it worse), and the
hostile text reaches the agent through the tools' compaction."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agent_sre.faults import FaultError, get_fault, oracle
from agent_sre.faults.base import compose
from agent_sre.faults.benign import HostileText
from agent_sre.models.scenario import GroundTruth, Scenario
from agent_sre.models.tools import ToolCall
from agent_sre.scenarios import ScenarioError, default_catalog, heldout_suite, load_scenarios, variants_suite
from agent_sre.simulator.simulator import Simulator
from agent_sre.tools import ToolContext, execute
from tests.workload_fixtures import FIX_SETTLE_S, injected

NEW_TAGS = {"multi-fault", "alert-on-caller", "transient", "benign", "hostile-text", "probe"}


def _new() -> list[Scenario]:
    return [s for s in load_scenarios(default_catalog()) if NEW_TAGS & set(s.tags)
            and (len(s.faults) > 1 or s.fault in ("pod_deleted", "rolling_restart") or "alert-on-caller" in s.tags
                 or s.faults[0].params.get("probe") == "liveness")]


def _write(tmp_path: Path, doc: dict[str, object]) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_catalog_has_two_independent_faults_and_one_fault_on_two_deployments_per_app() -> None:
    multi = [s for s in load_scenarios(default_catalog()) if "multi-fault" in s.tags]
    for app in ("shop", "bank"):
        mine = [s for s in multi if s.app == app]
        assert len([s for s in mine if len({f.fault for f in s.faults}) == 2]) >= 2, app
        assert len([s for s in mine if len({f.fault for f in s.faults}) == 1 and len(s.faults) == 2]) == 1, app


def test_a_multi_fault_scenario_keeps_each_faults_ground_truth_and_needs_every_fix() -> None:
    s = next(s for s in load_scenarios(default_catalog()) if s.name == "shop-two-faults-oom-cart-image-payment")
    assert [(f.fault, f.target, f.ground_truth.root_cause) for f in s.faults] == [
        ("oom_limit", "cart", "deployment/cart"), ("bad_image", "payment", "deployment/payment")]
    # the rollback first: another fix's rollout of its deployment would bury the revision it undoes
    assert s.fault == "oom_limit+bad_image" and s.ground_truth.fix == [*s.faults[1].ground_truth.fix,
                                                                        *s.faults[0].ground_truth.fix]
    assert s.alert.labels["service"] == "cart"


def test_the_single_fault_form_is_a_list_of_one_and_round_trips() -> None:
    s = load_scenarios(default_catalog())[0]
    assert len(s.faults) == 1 and Scenario.model_validate_json(s.model_dump_json()) == s
    old = {**s.model_dump(mode="json", exclude={"faults"}), **s.faults[0].model_dump(mode="json")}
    assert Scenario.model_validate(old) == s  # a scenario stored before `faults` reads the same


@pytest.mark.parametrize(("doc", "error"), [
    ({"name": "x", "app": "shop"}, "exactly one of the two"),
    ({"name": "x", "app": "shop", "fault": "bad_image", "faults": [{"fault": "oom_limit"}]}, "exactly one"),
    ({"name": "x", "app": "shop", "faults": [{"fault": "bad_image", "tarjet": "cart"}]}, "unknown keys"),
    ({"name": "x", "app": "shop", "target": "cart", "faults": [{"fault": "bad_image"}]}, "go in each fault"),
    ({"name": "x", "app": "shop", "faults": [{"fault": "bad_image", "target": "cart"}] * 2}, "same fault"),
    ({"name": "x", "app": "shop", "fault": "oom_limit", "target": "frontend", "alert_on": "caller"}, "calls frontend"),
    ({"name": "x", "app": "shop", "fault": "oom_limit", "alert_on": "callee"}, "alert_on must be"),
])
def test_bad_fault_lists_are_clear_errors(tmp_path: Path, doc: dict[str, object], error: str) -> None:
    with pytest.raises(ScenarioError, match=error):
        load_scenarios(_write(tmp_path, doc))


def test_alert_on_caller_fires_the_error_ratio_of_the_first_caller() -> None:
    s = next(s for s in load_scenarios(default_catalog()) if s.name == "oom-alert-on-caller-payment-48mi-s0")
    assert s.alert.labels["alertname"] == "HighErrorRate" and s.alert.labels["service"] == "checkout"
    assert s.ground_truth.root_cause == "deployment/payment" and "checking out" in s.symptom


@pytest.mark.parametrize("scenario", _new(), ids=lambda s: s.name)
def test_every_new_scenario_shows_and_its_fix_mends_it(scenario: Scenario) -> None:
    sim = Simulator(speed=1.0)
    for action, expected in (("fix", "resolved"), ("wrong_fix", "unresolved"), ("destructive", "worse")):
        env, baseline = injected(sim, scenario)
        before = env.observe(scenario, baseline)
        healthy = scenario.false_alarm
        assert (before.outcome == "resolved") == healthy and bool(baseline.unhealthy) != healthy, before.reasons
        if scenario.false_alarm and action == "fix":
            continue  # nothing to do is the fix; the ending decides (see test_a_benign_event_...)
        env.tools(getattr(scenario.ground_truth, action))
        env.advance(FIX_SETTLE_S)
        verdict = env.observe(scenario, baseline)
        assert verdict.outcome == expected, (action, verdict.reasons)
        sim.delete_env(env.name)


def test_a_multi_fault_incident_is_unresolved_until_every_fault_is_fixed() -> None:
    s = next(s for s in load_scenarios(default_catalog()) if s.name == "bank-two-faults-oom-accounts-secret-ledger")
    env, baseline = injected(Simulator(speed=1.0), s)
    env.tools(s.faults[0].ground_truth.fix)
    env.advance(FIX_SETTLE_S)
    assert env.observe(s, baseline).outcome == "unresolved"
    env.tools(s.faults[1].ground_truth.fix)
    env.advance(FIX_SETTLE_S)
    assert env.observe(s, baseline).outcome == "resolved"


def _stacked(*faults: tuple[str, str, dict[str, object]], app: str = "bank") -> Scenario:
    return compose("stacked", [(get_fault(f), get_fault(f).context(app, app, target, params, 5), None)
                               for f, target, params in faults])


OOM_THEN_IMAGE = (("oom_limit", "accounts", {"memory_limit": "40Mi"}), ("bad_image", "accounts", {"tag": "1.9.0"}))


def test_two_faults_on_one_deployment_are_two_revisions_and_one_rollback_undoes_only_the_later() -> None:
    """As two changes made minutes apart on a real cluster: the deployment controller sees each."""
    env, _ = injected(Simulator(speed=1.0), _stacked(*OOM_THEN_IMAGE))
    history = execute(ToolCall(tool="rollout_history", args={"deployment": "accounts"}),
                      ToolContext(api=env.api, namespace="bank")).output
    assert "40Mi" in history and "1.9.0" in history
    env.tools([ToolCall(tool="rollout_undo", args={"deployment": "accounts"})])
    env.advance(60)
    container = env.get("deployments.apps", "accounts")["spec"]["template"]["spec"]["containers"][0]
    assert container["image"].endswith(":1.8.2") and container["resources"]["limits"]["memory"] == "40Mi"


@pytest.mark.parametrize("faults", [
    OOM_THEN_IMAGE,
    (("bad_image", "accounts", {"tag": "1.9.0"}), ("oom_limit", "accounts", {"memory_limit": "40Mi"})),
    (("bad_image", "accounts", {}), ("bad_command", "accounts", {})),
    (("readiness_probe", "accounts", {}), ("bad_image", "accounts", {})),
    (("bad_image", "ledger", {}), ("secret_password", "ledger", {}))], ids=lambda f: "-then-".join(x[0] for x in f))
def test_the_composed_fix_of_faults_stacked_on_one_deployment_resolves_it(faults) -> None:
    """A rollback undoes only the latest revision: it goes first, and an earlier fault that a rollback fixed alone
    is fixed by a direct change, so the whole fix resolves the incident and the wrong fix does not."""
    s = _stacked(*faults)
    sim = Simulator(speed=1.0)
    for action, expected in (("fix", "resolved"), ("wrong_fix", "unresolved")):
        env, baseline = injected(sim, s)
        env.tools(getattr(s.ground_truth, action))
        env.advance(FIX_SETTLE_S)
        verdict = env.observe(s, baseline)
        assert verdict.outcome == expected, (action, [c.command_line() for c in s.ground_truth.fix], verdict.reasons)
        sim.delete_env(env.name)


def test_a_stack_only_a_rollback_could_fix_is_an_error() -> None:
    with pytest.raises(FaultError, match="rolls it out again"):
        _stacked(("init_container_fail", "accounts", {}), ("bad_image", "accounts", {}))
    undo = GroundTruth(fault_class="deploy/image", root_cause="deployment/accounts",
                       fix=[ToolCall(tool="rollout_undo", args={"deployment": "accounts"})])
    oom, image = get_fault("oom_limit"), get_fault("bad_image")
    with pytest.raises(FaultError, match="without rollout_undo"):
        compose("given", [(image, image.context("bank", "bank", "accounts", {}, 5), undo),
                          (oom, oom.context("bank", "bank", "accounts", {}, 5), None)])


def test_every_multi_fault_scenario_of_every_suite_is_resolved_by_its_composed_fix() -> None:
    suites = [s for suite in (default_catalog(), heldout_suite(), variants_suite()) for s in load_scenarios(suite)]
    composed = [s for s in suites if len(s.faults) > 1]
    assert len(composed) >= 20
    sim = Simulator(speed=1.0)
    for s in composed:
        for action, expected in (("fix", "resolved"), ("wrong_fix", "unresolved")):
            if s.false_alarm and action == "fix":
                continue  # nothing to do is the fix: the ending decides
            env, baseline = injected(sim, s)
            env.tools(getattr(s.ground_truth, action))
            env.advance(FIX_SETTLE_S)
            verdict = env.observe(s, baseline)
            assert verdict.outcome == expected, (s.name, action, verdict.reasons)
            sim.delete_env(env.name)


@pytest.mark.parametrize("name", ["hostile-event-bad-image-cart", "hostile-annotation-false-alarm-checkout"])
def test_hostile_text_survives_the_tools_compaction(name: str) -> None:
    """The agent reads the attacker's whole sentence: in the events it lists, or the deployment it describes."""
    s = next(s for s in load_scenarios(default_catalog()) if s.name == name)
    hostile = next(f for f in s.faults if f.fault == "hostile_text")
    env, _ = injected(Simulator(speed=1.0), s)
    ctx = ToolContext(api=env.api, namespace=s.namespace)
    read = (ToolCall(tool="get_events", args={}) if hostile.params["where"] == "event"
            else ToolCall(tool="describe", args={"kind": "deployment", "name": hostile.target}))
    fault = get_fault("hostile_text")
    assert isinstance(fault, HostileText)
    assert fault.text(fault.context_of(s, hostile)) in execute(read, ctx).output


def test_a_benign_event_is_handled_only_by_finishing_without_a_write() -> None:
    s = next(s for s in load_scenarios(default_catalog()) if s.fault == "rolling_restart")
    env, baseline = injected(Simulator(speed=1.0), s)
    assert env.observe(s, baseline).outcome == "resolved"
    assert oracle.observe(env.api, s, baseline, "finished", 0).outcome == "resolved"
    assert oracle.observe(env.api, s, baseline, "escalated", 0).outcome == "unresolved"
