"""Chaos Mesh Schedules as the real schedule controllers run them (chaos-mesh/chaos-mesh, controllers/schedule/):
a child experiment `<schedule>-<suffix>` at each tick, labelled `managed-by` and owned by the Schedule; a deleted
child comes back at the next tick; a deleted Schedule takes its children (and the fault) with it, a paused one
pauses them; Forbid spawns nothing while a child runs; historyLimit bounds the children kept. The observer calls a
scheduled fault fixed only when the Schedule is gone or paused."""

from __future__ import annotations

import re

import pytest
from kubernetes.client import CustomObjectsApi

from agent_sre.faults import get_fault, inject
from agent_sre.kube.chaosmesh import PAUSE_ANNOTATION
from agent_sre.kube.client import Kube
from agent_sre.models.remediation import PolicyRef
from agent_sre.models.scenario import Scenario
from agent_sre.models.tools import TOOL_SPECS, ToolCall
from agent_sre.outcome import incident_outcome
from agent_sre.policy.base import Policy
from agent_sre.policy.evidence import CHAOS_ROW
from agent_sre.policy.expert import ExpertPolicy
from agent_sre.policy.runbook import RunbookPolicy
from agent_sre.scenarios import load_scenarios
from agent_sre.simulator import chaos
from agent_sre.simulator.cluster import SIM_EPOCH
from agent_sre.simulator.signals import golden_signals
from agent_sre.simulator.simulator import Simulator
from agent_sre.training.evaluate import play
from tests.workload_fixtures import FIX_SETTLE_S, INJECT_SETTLE_S, Env, new_env

SCHEDULE = "schedules.chaos-mesh.org"


@pytest.fixture(scope="module")
def sim() -> Simulator:
    return Simulator(speed=1.0)


def _scheduled(env: Env, fault: str, target: str, /, **params: object) -> str:
    scenario = get_fault(fault).scenario("t", env.app, env.ns, target, dict(params), seed=0)
    inject(env.api, scenario)
    return scenario.faults[0].ground_truth.root_cause.split("/", 1)[1]


def _children(env: Env, resource: str, schedule: str) -> list[dict]:
    env.cluster.sync()
    return sorted((o for o in env.cluster.list(resource, env.ns)
                   if (o["metadata"].get("labels") or {}).get("managed-by") == schedule),
                  key=lambda o: o["metadata"]["creationTimestamp"])


def test_a_tick_spawns_a_child_named_labelled_and_owned_like_chaos_mesh_does(sim: Simulator) -> None:
    env = new_env(sim)
    name = _scheduled(env, "chaos_network_delay", "catalog", schedule="@every 2m", latency="900ms")
    assert name == "catalog-network-delay"
    env.advance(119)
    assert _children(env, "networkchaos.chaos-mesh.org", name) == []  # @every: the first tick is 2m after creation
    env.advance(2)
    [child] = _children(env, "networkchaos.chaos-mesh.org", name)
    schedule = env.get(SCHEDULE, name)
    assert re.fullmatch(rf"{name}-[bcdfghjklmnpqrstvwxz2456789]{{5}}", child["metadata"]["name"])
    assert child["metadata"]["labels"] == {"managed-by": name}
    assert child["metadata"]["ownerReferences"] == [{
        "apiVersion": "chaos-mesh.org/v1alpha1", "kind": "Schedule", "name": name,
        "uid": schedule["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]
    assert child["spec"] == schedule["spec"]["networkChaos"]
    active = [(a["kind"], a["name"]) for a in schedule["status"]["active"]]
    assert active == [("NetworkChaos", child["metadata"]["name"])]
    assert schedule["status"]["time"] == child["metadata"]["creationTimestamp"]
    assert [e["message"] for e in env.events("Spawned", name)] == [f"Create new object: {child['metadata']['name']}"]
    assert golden_signals(env.cluster)[("shop", "catalog")].latency_p99_seconds > 0.9  # the child acts


def test_deleting_only_the_child_brings_the_fault_back_at_the_next_tick(sim: Simulator) -> None:
    env = new_env(sim)
    name = _scheduled(env, "chaos_pod_failure", "cart", schedule="@every 2m")
    env.advance(125)
    [first] = _children(env, "podchaos.chaos-mesh.org", name)
    env.tools([ToolCall(tool="delete_chaos_experiment", args={"kind": "PodChaos", "name": first["metadata"]["name"]})])
    env.advance(5)
    assert _children(env, "podchaos.chaos-mesh.org", name) == []
    assert all(c["ready"] for p in env.pods("cart") for c in p["status"]["containerStatuses"])  # recovered...
    env.advance(120)
    [second] = _children(env, "podchaos.chaos-mesh.org", name)  # ...until the next tick spawns it again
    assert second["metadata"]["name"] != first["metadata"]["name"]
    env.advance(30)
    assert not any(c["ready"] for p in env.pods("cart") for c in p["status"]["containerStatuses"])


def test_deleting_the_schedule_collects_its_children_and_ends_the_fault(sim: Simulator) -> None:
    env = new_env(sim)
    name = _scheduled(env, "chaos_http_abort", "catalog", schedule="* * * * *")
    env.advance(130)
    assert _children(env, "httpchaos.chaos-mesh.org", name)
    env.tools([ToolCall(tool="delete_chaos_experiment", args={"kind": "Schedule", "name": name})])
    env.advance(600)
    assert _children(env, "httpchaos.chaos-mesh.org", name) == []
    assert env.cluster.list("httpchaos.chaos-mesh.org", env.ns) == []


def test_a_cron_schedule_ticks_on_the_wall_clock_minute() -> None:
    base = SIM_EPOCH - SIM_EPOCH % 3600  # an hour boundary
    assert chaos.next_run("*/5 * * * *", base + 61) == base + 300
    assert chaos.next_run("*/5 * * * *", base + 300) == base + 600
    assert chaos.next_run("7 * * * *", base + 500) == base + 3600 + 420
    assert chaos.next_run("@every 90s", base + 10.4) == base + 100
    assert chaos.next_run("0 0 1 * *", base) is None  # day-of-month schedules are not understood


def test_forbid_spawns_nothing_while_a_child_runs_and_the_missed_tick_follows_its_end(sim: Simulator) -> None:
    env = new_env(sim)
    name = _scheduled(env, "chaos_stress", "checkout", schedule="@every 1m")  # no duration: runs until deleted
    env.advance(61 + 240)
    [child] = _children(env, "stresschaos.chaos-mesh.org", name)
    forbid = env.events("Forbid", name)
    assert forbid and forbid[0]["message"] == f"Forbid spawning new job because: {child['metadata']['name']} is " \
                                              f"still running"
    Kube(env.api).remove("StressChaos", env.ns, child["metadata"]["name"])
    env.advance(1)
    [again] = _children(env, "stresschaos.chaos-mesh.org", name)  # the missed tick is still due: at once
    assert again["metadata"]["name"] != child["metadata"]["name"]


def test_allow_spawns_at_every_tick_and_history_limit_keeps_the_running_ones(sim: Simulator) -> None:
    env = new_env(sim)
    name = _scheduled(env, "chaos_pod_failure", "payment", schedule="@every 1m", concurrency="Allow",
                      duration="150s", history_limit=2)
    env.advance(60 * 6 + 1)
    children = _children(env, "podchaos.chaos-mesh.org", name)
    # six ticks; a child lasts 150s, so the ones from the last three ticks run; the older ones are collected
    assert len(children) == 3 and env.get(SCHEDULE, name)["status"]["active"][0]["kind"] == "PodChaos"


def test_pausing_the_schedule_pauses_its_children_and_stops_spawning(sim: Simulator) -> None:
    env = new_env(sim)
    name = _scheduled(env, "chaos_network_loss", "cart", schedule="@every 1m", loss=70)
    env.advance(65)
    _annotate(env, name, "true")
    env.advance(300)
    [child] = _children(env, "networkchaos.chaos-mesh.org", name)
    assert child["metadata"]["annotations"][PAUSE_ANNOTATION] == "true"
    _annotate(env, name, "false")
    env.advance(1)
    assert _children(env, "networkchaos.chaos-mesh.org", name)[0]["metadata"]["annotations"][PAUSE_ANNOTATION] \
        == "false"


def _annotate(env: Env, name: str, value: str) -> None:
    CustomObjectsApi(env.api).patch_namespaced_custom_object(
        "chaos-mesh.org", "v1alpha1", env.ns, "schedules", name,
        {"metadata": {"annotations": {PAUSE_ANNOTATION: value}}})


@pytest.mark.parametrize("fault", ["chaos_pod_failure", "chaos_network_delay", "chaos_network_loss", "chaos_stress",
                                   "chaos_http_abort", "chaos_pod_kill"])
def test_the_observer_calls_a_scheduled_fault_fixed_only_with_its_schedule_gone_or_paused(
        sim: Simulator, fault: str) -> None:
    target = "cart" if fault != "chaos_http_abort" else "catalog"
    scenario = get_fault(fault).scenario("t", "shop", "shop", target, {"schedule": "@every 1m"}, seed=0)
    env = new_env(sim)
    inject(env.api, scenario)
    env.advance(INJECT_SETTLE_S)
    baseline = env.snapshot()
    name = scenario.faults[0].ground_truth.root_cause.split("/", 1)[1]
    assert scenario.faults[0].ground_truth.root_cause == f"schedule/{name}"
    kind = get_fault(fault).kind
    resource = f"{kind.lower()}.chaos-mesh.org"
    children = _children(env, resource, name)
    assert children, "the Schedule should have spawned a child by now"
    for child in children:
        Kube(env.api).remove(kind, env.ns, child["metadata"]["name"])
    env.advance(5)
    verdict = env.observe(scenario, baseline)
    assert verdict.outcome == "unresolved", verdict.reasons
    assert any(f"Schedule/{name} is acting" in r for r in verdict.reasons), verdict.reasons
    _annotate(env, name, "true")
    env.advance(FIX_SETTLE_S)
    assert env.observe(scenario, baseline).outcome == "resolved"
    _annotate(env, name, "false")
    env.advance(120)
    assert env.observe(scenario, baseline).outcome == "unresolved"
    env.tools(scenario.ground_truth.fix)
    env.advance(FIX_SETTLE_S)
    assert env.observe(scenario, baseline).outcome == "resolved"
    assert _children(env, resource, name) == []


SCHEDULED = [s for s in load_scenarios() if "schedule" in s.tags]


@pytest.mark.parametrize("name", ["runbook", "expert"])
@pytest.mark.parametrize("scenario", SCHEDULED, ids=[s.name for s in SCHEDULED])
def test_the_rule_based_policies_delete_the_schedule_not_its_child(name: str, scenario: Scenario) -> None:
    """`list_chaos_experiments` shows the Schedule first and its children with their OWNER: the policies act on
    the Schedule, and the incident is resolved."""
    policy: Policy = RunbookPolicy() if name == "runbook" else ExpertPolicy()
    t = play(policy, PolicyRef(name=name, version=name), scenario, Simulator(speed=0))
    listing = next(s.result.output for s in t.steps if s.action and s.action.tool == "list_chaos_experiments"
                   and s.result)
    schedule = scenario.ground_truth.root_cause.split("/", 1)[1]
    assert f"schedule/{schedule}" in listing  # a spawned child, with its owner, was there to be misread
    writes = [s.action for s in t.steps if s.action is not None and TOOL_SPECS[s.action.tool].write]
    assert writes == scenario.ground_truth.fix, writes
    assert incident_outcome(t).outcome == "resolved"


def test_a_spawned_childs_row_is_not_read_as_the_experiment_to_delete() -> None:
    listing = "\n".join([
        "KIND           NAME               ACTION        TARGET               DURATION   AGE   OWNER",
        "NetworkChaos   cart-delay-x7k2p   delay 900ms   app=cart (mode all)   <none>     1m    schedule/cart-delay",
        "Schedule       cart-delay         NetworkChaos  app=cart (mode all)   <none>     3m    <none>"])
    found = CHAOS_ROW.search(listing)
    assert found is not None and (found["kind"], found["name"]) == ("Schedule", "cart-delay")
