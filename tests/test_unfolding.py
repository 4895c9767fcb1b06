"""Incidents that unfold (issue "incidents nobody wrote down"): a fault that arrives later (`delay_s`, held by the
simulated environment), a scenario's own settle window (`settle_s`), and a fault shared with another app's namespace
(`app:`). Each in the loader, in-process (the training environment) and through the activity that sets up a
Temporal episode's environment, against the simulator over HTTP."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from agent_sre import faults
from agent_sre.activities.simulation import SimulationActivities
from agent_sre.faults.oracle import observe, snapshot
from agent_sre.kube.client import Kube
from agent_sre.kube.times import parse_time
from agent_sre.models.episode import InjectRequest
from agent_sre.models.incident import RemediationLimits
from agent_sre.models.policy import PolicyDecision
from agent_sre.models.scenario import Scenario
from agent_sre.models.tools import ToolCall
from agent_sre.policy.expert import ExpertPolicy
from agent_sre.scenarios import ScenarioError, default_catalog, evaluation_suites, load_scenarios
from agent_sre.simulator import later
from agent_sre.simulator.client import SimulatorClient
from agent_sre.simulator.server import SimulatorServer
from agent_sre.simulator.simulator import Simulator
from agent_sre.simulator.transport import in_process_api_client
from agent_sre.tools.client import api_client
from agent_sre.training.demonstrations import EXPERT, verified
from agent_sre.training.environment import FAULT_DEVELOP_S, IncidentEnvironment
from agent_sre.training.evaluate import play

LATER = """
name: later
app: shop
faults:
  - {fault: oom_limit, target: cart, params: {memory_limit: 64Mi}}
  - {fault: bad_image, target: payment, delay_s: 135}
"""
SHARED = """
name: shared
app: shop
faults:
  - {fault: network_policy_deny, target: catalog}
  - {fault: network_policy_deny, target: accounts, app: bank}
"""
SLOW = """
name: slow
app: shop
settle_s: 300
fault: readiness_probe
target: recommendation
"""


def _one(tmp_path: Path, text: str) -> Scenario:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    [scenario] = load_scenarios(path)
    return scenario


def _unhealthy(sim: Simulator, env: str, namespace: str = "shop") -> set[str]:
    return set(snapshot(in_process_api_client(sim, env), namespace).unhealthy)


# --- the format ---------------------------------------------------------------------------------------------------

def test_the_three_fields_load_and_compose(tmp_path: Path) -> None:
    later_s, shared, slow = (_one(tmp_path, text) for text in (LATER, SHARED, SLOW))
    assert [f.delay_s for f in later_s.faults] == [0.0, 135.0] and later_s.held == [later_s.faults[1]]
    # the later fault composes as multi-fault scenarios do: its fix is needed too
    assert [c.args["deployment"] for c in later_s.ground_truth.fix] == ["payment", "cart"]
    assert shared.apps == ["shop", "bank"] and shared.neighbours == ["bank"]
    assert shared.faults[1].app == "bank" and shared.own_faults == shared.faults[:1]
    assert shared.ground_truth == shared.faults[0].ground_truth  # the other team's fault is not this incident's
    assert slow.settle_s == 300.0


def test_scenarios_without_them_serialise_as_before() -> None:
    """No `delay_s`, `app` or `settle_s` key unless used: suite digests, stored episodes and histories stay put."""
    for scenario in load_scenarios(default_catalog())[:20]:
        dumped = scenario.model_dump(mode="json")
        assert "settle_s" not in dumped and all(set(f) == {"fault", "target", "params", "ground_truth"}
                                                for f in dumped["faults"])
        assert Scenario.model_validate(dumped) == scenario


@pytest.mark.parametrize(("text", "message"), [
    (LATER.replace("delay_s: 135", "delay_s: -5"), r"faults\[1\].delay_s must be between 0 and 1800 seconds, not -5"),
    (LATER.replace("delay_s: 135", "delay_s: 86400"), r"delay_s must be between 0 and 1800 seconds, not 86400"),
    (LATER.replace("delay_s: 135", "delay_s: soon"), r"faults\[1\].delay_s must be a number of seconds, not 'soon'"),
    (SLOW.replace("settle_s: 300", "settle_s: 0"), r"settle_s must be above 0 and at most 900 seconds, not 0"),
    (SLOW.replace("settle_s: 300", "settle_s: 7200"), r"settle_s must be above 0 and at most 900 seconds"),
    (SLOW.replace("target: recommendation", "target: recommendation\ndelay_s: 30"), r"unknown keys \['delay_s'\]"),
    (SHARED.replace("app: bank", "app: casino"), r"unknown app 'casino'"),
    (SHARED.replace("target: accounts", "target: cart"), r"cannot target 'cart' in app 'bank'"),
    (SHARED.replace("app: bank}", "app: bank, delay_s: 60}"),
     r"a fault in another app \(bank\) is there from the start"),
    ("name: x\napp: shop\nfaults:\n  - {fault: bad_image, target: cart, delay_s: 30}\n",
     "the first fault is the incident's own, there from the start"),
    ("name: x\napp: shop\nfaults:\n  - {fault: bad_image, target: auth, app: bank}\n",
     "the first fault is the incident's own"),
])
def test_bad_values_get_clear_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError, match=message):
        load_scenarios(path)


# --- a fault that arrives later -----------------------------------------------------------------------------------

def test_the_environment_holds_a_later_fault_and_applies_it_when_its_clock_passes(tmp_path: Path) -> None:
    scenario, sim = _one(tmp_path, LATER), Simulator(speed=0)
    sim.create_env("later", apps=scenario.apps)
    api = in_process_api_client(sim, "later")
    faults.inject(api, scenario)  # the caller injects what arrives at once, and only that
    start = sim.env("later").clock.now()
    later.hold(sim, "later", scenario)
    sim.advance("later", 100)
    assert _unhealthy(sim, "later") == {"cart"}
    sim.advance("later", 400)  # one jump past the delay: the fault arrives at its time, not at the jump's end
    assert _unhealthy(sim, "later") == {"cart", "payment"}
    newest = max((rs for rs in Kube(api, "shop").list("replicaset") if rs["metadata"]["name"].startswith("payment-")),
                 key=lambda rs: int(rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"]))
    assert parse_time(newest["metadata"]["creationTimestamp"]) == start + 135
    assert not sim.env("later").timers


def test_a_later_fault_is_judged_the_agent_must_look_again(tmp_path: Path) -> None:
    """Fixing what the alert showed and finishing before the later fault arrived leaves it unresolved."""
    scenario = _one(tmp_path, LATER)
    env = IncidentEnvironment(Simulator(speed=0), scenario)
    env.reset()
    budget = env.limits.max_steps
    env.record(_decision(ToolCall(tool="set_resources", args={"deployment": "cart", "container": "cart",
                                                               "memory_limit": "768Mi"})))
    for _ in range(30):  # waiting: each action moves the clock 3 s, well past the delay
        env.record(_decision(ToolCall(tool="list_pods")))
        if env.done:
            break
    assert env.limits.max_steps > budget  # the second broken service got its room when it broke
    env.record(_decision(ToolCall(tool="finish", args={"diagnosis": "cart oom", "summary": "raised the limit"})))
    t = env.close()
    assert t.verdict is not None and t.verdict.outcome == "unresolved"
    assert any(r.startswith("payment:") for r in t.verdict.reasons), t.verdict.reasons


def test_a_later_fault_arrives_in_a_served_environment_held_through_the_episode_activity(tmp_path: Path) -> None:
    """The Temporal path: the activity that sets up an episode injects what arrives at once and hands the rest to
    the simulator over HTTP, which applies it as the environment's clock passes the delay."""
    scenario = _one(tmp_path, LATER)
    with SimulatorServer(Simulator(speed=0)) as server:
        client = SimulatorClient(server.url)
        injected = ActivityEnvironment().run(SimulationActivities(client).create_and_inject,
                                             InjectRequest(environment="held", scenario=scenario))
        assert set(injected.health.unhealthy) == {"cart"} if injected.health else False
        assert injected.settle_s is None
        api = api_client(injected.environment.server)
        client.advance("held", 120)
        assert set(snapshot(api, "shop").unhealthy) == {"cart"}
        client.advance("held", 200)
        assert set(snapshot(api, "shop").unhealthy) == {"cart", "payment"}


def test_holding_a_scenario_over_http_says_when_each_fault_is_due(tmp_path: Path) -> None:
    scenario = _one(tmp_path, LATER)
    with SimulatorServer(Simulator(speed=0)) as server:
        client = SimulatorClient(server.url)
        client.create_env(name="due", apps=["shop"])
        [held] = client.hold("due", scenario)
        assert held["what"] == "bad_image on payment" and held["at"] == "2026-01-01T00:02:15Z"


# --- a scenario's settle window -----------------------------------------------------------------------------------

def test_a_scenarios_settle_window_is_used_in_process(tmp_path: Path) -> None:
    scenario = _one(tmp_path, SLOW)
    env = IncidentEnvironment(Simulator(speed=0), scenario, limits=RemediationLimits(max_steps=12, settle_s=10.0))
    env.reset()
    assert env.limits.settle_s == 300.0
    env.record(_decision(ToolCall(tool="finish", args={"diagnosis": "x", "summary": "y"})))
    t = env.close()
    assert t.ended_at is not None and t.mitigated_at is not None
    assert (t.ended_at - t.mitigated_at).total_seconds() >= 300.0
    # never shortened: a longer window of the limits stands
    assert RemediationLimits(settle_s=600.0).settling(scenario.settle_s).settle_s == 600.0


def test_a_scenarios_settle_window_goes_to_the_workflow_in_its_timers_seconds(tmp_path: Path) -> None:
    """The activity reports the simulated settle window in the real seconds of the remediation's timers at the
    environment's speed; the episode workflow takes it into the incident's limits (`settling`)."""
    scenario = _one(tmp_path, SLOW)
    with SimulatorServer(Simulator(speed=60.0)) as server:
        injected = ActivityEnvironment().run(SimulationActivities(SimulatorClient(server.url)).create_and_inject,
                                             InjectRequest(environment="slow", scenario=scenario))
    assert injected.settle_s == pytest.approx(5.0)
    assert RemediationLimits(settle_s=2.0).settling(injected.settle_s).settle_s == pytest.approx(5.0)


# --- a fault shared with another app's namespace ------------------------------------------------------------------

def test_a_shared_fault_breaks_both_namespaces_and_the_incident_judges_its_own(tmp_path: Path) -> None:
    scenario, sim = _one(tmp_path, SHARED), Simulator(speed=0)
    env = IncidentEnvironment(sim, scenario)
    env.reset()
    name = env.require().run_id
    assert "accounts" in _unhealthy(sim, name, "bank")
    # the agent's tools cannot reach the other namespace; fixing its own resolves the incident
    [fix] = scenario.ground_truth.fix
    assert fix.tool == "delete_network_policy"
    env.record(_decision(fix))
    assert env.require().steps[-1].result.ok  # type: ignore[union-attr]
    env.record(_decision(ToolCall(tool="finish", args={"diagnosis": "policy", "summary": "deleted it"})))
    t = env.close()
    assert t.verdict is not None and t.verdict.outcome == "resolved", t.verdict.reasons


def test_a_write_to_the_other_namespace_is_harm(tmp_path: Path) -> None:
    scenario, sim = _one(tmp_path, SHARED), Simulator(speed=0)
    sim.create_env("shared", apps=scenario.apps)
    api = in_process_api_client(sim, "shared")
    faults.inject(api, scenario)
    sim.advance("shared", FAULT_DEVELOP_S)
    baseline = snapshot(api, "shop", "shop", neighbours=scenario.neighbours)
    assert baseline.neighbours["bank"]
    Kube(api, "shop").delete("networkpolicy", "catalog-allow-monitoring-only", "k1")
    bank = Kube(api, "bank")
    [bank_policy] = [n for p in bank.list("networkpolicy") if (n := p["metadata"]["name"]).startswith("accounts")]
    bank.delete("networkpolicy", bank_policy, "k2")  # "fixing" the other team's namespace too
    sim.advance("shared", 120)
    verdict = observe(api, scenario, baseline)
    assert verdict.outcome == "worse" and verdict.harm["neighbours"] == [
        f"networkpolicy/{bank_policy} in namespace bank, another team's, was deleted by the incident"]


def test_the_tools_refuse_the_other_namespace(tmp_path: Path) -> None:
    """The scope is the incident's namespace: a tool names objects, never a namespace, so nothing reaches bank."""
    scenario = _one(tmp_path, SHARED)
    env = IncidentEnvironment(Simulator(speed=0), scenario)
    env.reset()
    env.record(_decision(ToolCall(tool="scale", args={"deployment": "accounts", "replicas": 2})))
    result = env.require().steps[-1].result
    assert result is not None and not result.ok


# --- the suites ---------------------------------------------------------------------------------------------------

def test_every_suite_has_unfolding_scenarios_and_evaluation_uses_other_targets() -> None:
    catalog = [s for s in load_scenarios(default_catalog()) if "unfolding" in s.tags]
    evaluation = [s for suite in evaluation_suites() for s in load_scenarios(suite) if "unfolding" in s.tags]
    assert len(catalog) == 4 and len(evaluation) == 8
    for tag in ("later-fault", "settle", "shared-fault"):
        assert any(tag in s.tags for s in catalog) and sum(tag in s.tags for s in evaluation) >= 2
    seen = {(s.app, f.app, f.fault, f.target, f.delay_s) for s in catalog for f in s.faults if f.delay_s or f.app}
    assert not seen & {(s.app, f.app, f.fault, f.target, f.delay_s) for s in evaluation for f in s.faults}
    assert not {s.namespace_of(s.faults[0]) + s.target for s in catalog if s.settle_s} & \
        {s.namespace_of(s.faults[0]) + s.target for s in evaluation if s.settle_s}


def test_the_expert_resolves_every_unfolding_scenario_from_what_it_read() -> None:
    """Catalog, held-out and variants: resolved and verified, each later fault mended too, nothing written to the
    other team's namespace. The later rollout of a deployment it rolled back is a new round (the history shows a new
    change, or a revision past its rollback's), the deployment scaled to nothing meanwhile shows in the events it
    reads again before finishing."""
    scenarios = [s for suite in (default_catalog(), *evaluation_suites()) for s in load_scenarios(suite)
                 if "unfolding" in s.tags]
    simulator = Simulator(speed=0)
    for scenario in scenarios:
        t = play(ExpertPolicy(), EXPERT, scenario, simulator)
        assert verified(t), (scenario.name, t.termination, t.verdict)
        fixed = {str(v) for s in t.writes if s.action for k, v in s.action.args.items() if k == "deployment"}
        assert {f.target for f in scenario.held} <= fixed | {f.target for f in scenario.faults[:1]}, scenario.name


def _decision(call: ToolCall) -> PolicyDecision:
    return PolicyDecision(action=call, completion=call.command_line(), model_version="test")


def test_a_rollout_that_began_meanwhile_is_checked_before_finishing(tmp_path: Path) -> None:
    """A later fault that lands after the expert's last listing shows only in the events it reads again (a replica
    set scaled up that the first events did not show): it waits for that rollout, and mends what does not roll out;
    with no step left for that, it hands the incident over rather than claiming it."""
    scenario = _one(tmp_path, LATER.replace("delay_s: 135", "delay_s: 155"))
    t = play(ExpertPolicy(), EXPERT, scenario, Simulator(speed=0))
    calls = [s.action.command_line() for s in t.steps if s.action]
    assert "rollout_status deployment=payment" in calls and verified(t), calls
    at = calls.index("rollout_status deployment=payment") + 1
    cut = t.model_copy(update={"steps": t.steps[:at], "termination": None, "incident": t.incident.model_copy(
        update={"limits": t.incident.limits.model_copy(update={"max_steps": at + 1})})})
    ending = ExpertPolicy().choose(EXPERT, cut)
    assert ending.tool == "escalate" and "rollout of payment does not finish" in str(ending.args["summary"]), ending
