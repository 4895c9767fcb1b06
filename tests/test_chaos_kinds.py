"""Chaos Mesh kinds and selector modes beyond the first chaos families, as Chaos Mesh acts:

- `mode`/`value` pick pods as FilterObjectsByMode (pkg/selector/generic/mode.go) does: fixed-percent rounds down
  (40% of two pods is none), fixed caps at the pods there are, and bad values fail with its messages; a `mode: one`
  pod-failure on a two-replica service leaves it degraded but serving, and the observer says which pod is down.
- DNSChaos: Chaos Mesh's DNS server answers the selected pods' lookups of matching names with SERVFAIL (`error`) or a
  random address (`random`); each runtime's client reports it as it would (Go's `server misbehaving`, Node's
  `EAI_AGAIN`), and a pattern only the bare short name matches leaves the search list's FQDN resolving.
- IOChaos: a database's file operations under `volumePath` slowed (its callers slow) or failed with EIO (its log's
  `Input/output error`, its callers' failed queries); a path that is not the data's does nothing.
Each kind is listed and deleted through the chaos tools, a Schedule spawns it as the other kinds, and the expert
resolves every new scenario from what it read."""

from __future__ import annotations

import re

import pytest

from agent_sre.faults import FaultError, get_fault, inject
from agent_sre.kube.chaosmesh import ModeError, mode_count
from agent_sre.kube.client import Kube
from agent_sre.models.tools import ToolCall
from agent_sre.policy.expert import ExpertPolicy
from agent_sre.scenarios import default_catalog, heldout_suite, load_scenarios, variants_suite
from agent_sre.simulator.signals import golden_signals
from agent_sre.simulator.simulator import Simulator
from agent_sre.training.demonstrations import EXPERT, verified
from agent_sre.training.evaluate import play
from tests.workload_fixtures import FIX_SETTLE_S, INJECT_SETTLE_S, Env, injected, new_env

PODCHAOS, DNSCHAOS, IOCHAOS = "podchaos.chaos-mesh.org", "dnschaos.chaos-mesh.org", "iochaos.chaos-mesh.org"


@pytest.fixture(scope="module")
def sim() -> Simulator:
    return Simulator(speed=1.0)


def _create(env: Env, kind: str, name: str, app: str, **spec: object) -> None:
    Kube(env.api).create_chaos(env.ns, kind, {"metadata": {"name": name}, "spec": {
        "selector": {"namespaces": [env.ns], "labelSelectors": {"app": app}}, **spec}})
    env.advance(60)


def _not_ready(env: Env, app: str) -> list[str]:
    return [p["metadata"]["name"] for p in env.pods(app)
            if not any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))]


def _rows(listing: str) -> list[list[str]]:
    """A kubectl-like table's rows, cell by cell."""
    return [re.split(r"\s{2,}", line.strip()) for line in listing.splitlines()[1:]]


def _last_errors(env: Env, app: str) -> list[str]:
    return [line for line in env.logs(env.pods(app)[0]["metadata"]["name"]) if "error" in line.lower()]


# --- mode ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("mode", "value", "pods", "draw", "selected"), [
    ("one", None, 3, 1.0, 1), ("all", None, 3, 1.0, 3), ("fixed", "2", 3, 1.0, 2), ("fixed", "5", 3, 1.0, 3),
    ("fixed-percent", "50", 2, 1.0, 1), ("fixed-percent", "40", 2, 1.0, 0), ("fixed-percent", "100", 3, 1.0, 3),
    ("random-max-percent", "100", 4, 0.0, 0), ("random-max-percent", "100", 4, 0.999, 4),
    ("random-max-percent", "50", 4, 0.4, 0), ("random-max-percent", "50", 4, 0.5, 1), ("one", None, 0, 1.0, 0),
])
def test_a_mode_selects_as_chaos_mesh_counts(mode: str, value: str | None, pods: int, draw: float,
                                             selected: int) -> None:
    assert mode_count(mode, value, pods, draw) == selected


@pytest.mark.parametrize(("mode", "value", "message"), [
    ("fixed", "0", "cannot select any object as value below or equal 0"),
    ("fixed-percent", "0", "cannot select any object as value below or equal 0"),
    ("fixed-percent", "101", "fixed percentage value of 101 is invalid, Must be (0,100]"),
    ("random-max-percent", "-5", "fixed percentage value of -5 is invalid, Must be [0-100]"),
    ("fixed", "two", 'strconv.Atoi: parsing "two": invalid syntax'),
    ("some", None, "mode some not supported"),
])
def test_a_value_chaos_mesh_refuses_fails_with_its_message(mode: str, value: str | None, message: str) -> None:
    with pytest.raises(ModeError) as error:
        mode_count(mode, value, 2)
    assert str(error.value) == message


def test_fixed_percent_rounds_down_to_no_pod_and_one_fails_one_pod_of_two(sim: Simulator) -> None:
    """40% of frontend's two pods is none (floor(0.8)); `one` takes one pod out of the endpoints and leaves the
    other serving: the service is degraded, the users mostly served, and the observer names the pod that is down."""
    env = new_env(sim)
    env.advance(INJECT_SETTLE_S)
    baseline = env.snapshot()
    _create(env, "PodChaos", "forty", "frontend", action="pod-failure", mode="fixed-percent", value="40")
    assert _not_ready(env, "frontend") == []
    status = env.get(PODCHAOS, "forty")["status"]
    assert {c["type"]: c["status"] for c in status["conditions"]}["Selected"] == "False"
    Kube(env.api).remove("PodChaos", env.ns, "forty")
    _create(env, "PodChaos", "one", "frontend", action="pod-failure", mode="one")
    [down] = _not_ready(env, "frontend")
    assert [r["id"] for r in env.get(PODCHAOS, "one")["status"]["experiment"]["containerRecords"]] == \
        [f"{env.ns}/{down}"]
    endpoints = env.get("endpoints", "frontend")["subsets"][0]
    assert len(endpoints["addresses"]) == 1 and [a["targetRef"]["name"] for a in endpoints["notReadyAddresses"]] == \
        [down]
    assert env.get("deployments.apps", "frontend")["status"]["availableReplicas"] == 1
    assert golden_signals(env.cluster)[(env.ns, "frontend")].error_ratio < 0.05  # degraded, still serving
    scenario = get_fault("chaos_pod_failure").scenario("t", "shop", "shop", "frontend", {"mode": "one"}, seed=0)
    reasons = env.observe(scenario, baseline).reasons
    assert f"frontend: pod {down} is Running but not Ready" in reasons
    assert "frontend: deployment/frontend: 1/2 replicas available" in reasons


def test_the_mode_is_a_checked_fault_parameter() -> None:
    fault = get_fault("chaos_pod_failure")
    spec = fault.context("shop", "shop", "frontend", {"mode": "fixed", "value": 1})
    assert {k: v for k, v in fault.spec(spec).items() if k in ("mode", "value")} == {"mode": "fixed", "value": "1"}
    assert fault.spec(fault.context("shop", "shop", "frontend", {}))["mode"] == "all"  # the default stays
    assert get_fault("chaos_pod_kill").spec(get_fault("chaos_pod_kill").context("shop", "shop", "cart", {}))[
        "mode"] == "one"
    for params, message in (
            ({"mode": "fixed"}, "mode 'fixed' needs a value (a number of pods)"),
            ({"mode": "fixed-percent"}, "mode 'fixed-percent' needs a value (a percentage)"),
            ({"mode": "one", "value": 1}, "mode 'one' takes no value"),
            ({"value": 1}, "mode 'the default' takes no value"),
            ({"mode": "fixed-percent", "value": 150}, "value 150 is out of range (a percentage in 1..100)"),
            ({"mode": "fixed", "value": 0}, "value 0 is out of range (at least 1 pod)"),
            ({"mode": "most"}, "mode: Input should be 'one', 'all', 'fixed', 'fixed-percent' or 'random-max-percent'"),
            ({"mode": "fixed-percent", "value": 40}, "mode 'fixed-percent' value 40 selects no pod of frontend's 2"),
            ({"mode": "random-max-percent", "value": 100}, "mode 'random-max-percent' may select no pod")):
        with pytest.raises(FaultError) as error:
            fault.context("shop", "shop", "frontend", params)
        assert message in str(error.value), (params, str(error.value))


# --- DNSChaos -----------------------------------------------------------------------------------------------------
def test_dns_error_fails_lookups_as_each_runtime_reports_servfail(sim: Simulator) -> None:
    env = new_env(sim)
    env.advance(INJECT_SETTLE_S)
    _create(env, "DNSChaos", "no-catalog", "frontend", action="error", mode="all", patterns=["catalog.shop.svc.*"])
    _create(env, "DNSChaos", "no-postgres", "checkout", action="error", mode="all", patterns=["postgres.*"])
    env.advance(60)
    assert any("error: request to catalog failed: getaddrinfo EAI_AGAIN catalog" in line
               for line in _last_errors(env, "frontend"))  # node
    assert any('error="dial tcp: lookup postgres on 10.96.0.10:53: server misbehaving"' in line
               for line in _last_errors(env, "checkout"))  # go
    signals = golden_signals(env.cluster)
    assert signals[(env.ns, "checkout")].error_ratio == 1.0
    assert signals[(env.ns, "cart")].error_ratio < 0.01  # nobody else's lookups fail
    Kube(env.api).remove("DNSChaos", env.ns, "no-postgres")
    env.advance(60)
    assert golden_signals(env.cluster)[(env.ns, "checkout")].error_ratio < 0.05  # frontend's lookups still fail


def test_dns_patterns_match_the_name_the_resolver_asks_for(sim: Simulator) -> None:
    """The resolver asks for `cart.shop.svc.cluster.local` first (the search list), which exists: a pattern for
    the bare `cart` never matches it; `random` hands out an address whose connection times out."""
    env = new_env(sim)
    env.advance(INJECT_SETTLE_S)
    _create(env, "DNSChaos", "bare", "checkout", action="error", mode="all", patterns=["cart"])
    assert golden_signals(env.cluster)[(env.ns, "checkout")].error_ratio < 0.05
    _create(env, "DNSChaos", "random", "checkout", action="random", mode="all",
            patterns=["cart.shop.svc.cluster.l?cal"])
    signals = golden_signals(env.cluster)[(env.ns, "checkout")]
    assert signals.error_ratio == 1.0 and signals.latency_p99_seconds >= 5.0
    env.advance(60)
    assert any("upstream=cart error=\"dial tcp " in line and ":8080: i/o timeout" in line
               for line in _last_errors(env, "checkout"))


def test_a_scheduled_dns_chaos_spawns_children_like_the_other_kinds(sim: Simulator) -> None:
    env = new_env(sim)
    scenario = get_fault("chaos_dns").scenario("t", "shop", "shop", "checkout", {"schedule": "@every 1m"}, seed=0)
    inject(env.api, scenario)
    env.advance(65)
    [child] = [o for o in env.cluster.list(DNSCHAOS, env.ns)]
    assert child["metadata"]["name"].startswith("checkout-dns-")
    assert child["metadata"]["ownerReferences"][0]["kind"] == "Schedule"
    listing = env.tool(ToolCall(tool="list_chaos_experiments")).output
    assert _rows(listing) == [
        ["Schedule", "checkout-dns", "DNSChaos dns error cart.shop.svc.* @ @every 1m", "app=checkout (mode all)",
         "<none>", "65s", "<none>"],
        ["DNSChaos", child["metadata"]["name"], "dns error cart.shop.svc.*", "app=checkout (mode all)", "<none>", "5s",
         "schedule/checkout-dns"]]
    assert scenario.ground_truth.fix == [ToolCall(tool="delete_chaos_experiment",
                                                  args={"kind": "Schedule", "name": "checkout-dns"})]


def test_the_dns_host_must_be_a_dependency() -> None:
    with pytest.raises(FaultError, match="checkout does not depend on 'redis'; its dependencies: cart, payment"):
        get_fault("chaos_dns").context("shop", "shop", "checkout", {"host": "redis"})
    assert "redis" not in get_fault("chaos_dns").targets(get_fault("chaos_dns").context(
        "shop", "shop", "cart", {}).app)  # nothing a data store calls


# --- IOChaos ------------------------------------------------------------------------------------------------------
def test_io_latency_slows_the_database_and_its_callers(sim: Simulator) -> None:
    env = new_env(sim)
    env.advance(INJECT_SETTLE_S)
    before = golden_signals(env.cluster)
    _create(env, "IOChaos", "elsewhere", "postgres", action="latency", mode="one", volumePath="/tmp", delay="500ms")
    assert golden_signals(env.cluster) == before  # no file of the database's under /tmp
    assert env.get(IOCHAOS, "elsewhere")["status"]["experiment"]["containerRecords"] == []
    _create(env, "IOChaos", "slow", "postgres", action="latency", mode="one", volumePath="/var/lib/postgresql/data",
            delay="500ms", percent=100)
    after = golden_signals(env.cluster)
    assert after[(env.ns, "postgres")].latency_p99_seconds >= 1.5  # a read, the WAL write and its sync
    assert after[(env.ns, "checkout")].latency_p99_seconds > 1.0  # the HighLatency alert's threshold
    assert after[(env.ns, "cart")] == before[(env.ns, "cart")]


def test_io_fault_fails_queries_with_eio_in_the_database_log(sim: Simulator) -> None:
    scenario = get_fault("chaos_io").scenario("t", "bank", "bank", "db", {"action": "fault", "percent": 60}, seed=0)
    env, baseline = injected(sim, scenario)
    spec = env.get(IOCHAOS, "db-io")["spec"]
    assert (spec["action"], spec["errno"], spec["percent"], spec["volumePath"]) == \
        ("fault", 5, 60, "/var/lib/postgresql/data")
    db_log = env.logs(env.pods("db")[0]["metadata"]["name"])
    assert any(line.endswith('ERROR:  could not read block 7 in file "base/16384/16397": Input/output error')
               for line in db_log)
    assert any('pq: could not read block 7 in file "base/16384/16397": Input/output error' in line
               for line in _last_errors(env, "accounts"))
    assert 0.4 < golden_signals(env.cluster)[(env.ns, "db")].error_ratio < 0.8
    assert scenario.alert.labels["service"] == "auth"  # its callers notice
    env.tools([ToolCall(tool="delete_chaos_experiment", args={"kind": "IOChaos", "name": "db-io"})])
    env.advance(FIX_SETTLE_S)
    assert env.observe(scenario, baseline).outcome == "resolved"
    assert not any("Input/output error" in line for line in env.logs(env.pods("db")[0]["metadata"]["name"])[-5:])


def test_the_volume_path_must_hold_the_databases_files() -> None:
    with pytest.raises(FaultError, match="postgres keeps its files in /var/lib/postgresql/data; volume_path /tmp"):
        get_fault("chaos_io").context("shop", "shop", "postgres", {"volume_path": "/tmp"})
    get_fault("chaos_io").context("shop", "shop", "postgres", {"volume_path": "/var/lib/postgresql/data/pgdata"})


# --- the tools and the expert -------------------------------------------------------------------------------------
def test_the_kinds_are_listed_and_deleted_through_the_chaos_tools(sim: Simulator) -> None:
    env = new_env(sim)
    env.advance(INJECT_SETTLE_S)
    _create(env, "DNSChaos", "no-redis", "cart", action="error", mode="all", patterns=["redis.*"])
    _create(env, "IOChaos", "slow", "postgres", action="latency", mode="one", volumePath="/var/lib/postgresql/data",
            delay="100ms", percent=50)
    listing = env.tool(ToolCall(tool="list_chaos_experiments")).output
    assert _rows(listing) == [
        ["DNSChaos", "no-redis", "dns error redis.*", "app=cart (mode all)", "<none>", "2m"],
        ["IOChaos", "slow", "io latency 100ms 50% on /var/lib/postgresql/data", "app=postgres (mode one)", "<none>",
         "60s"]]
    env.tools([ToolCall(tool="delete_chaos_experiment", args={"kind": "DNSChaos", "name": "no-redis"}),
               ToolCall(tool="delete_chaos_experiment", args={"kind": "IOChaos", "name": "slow"})])
    assert env.tool(ToolCall(tool="list_chaos_experiments")).output == f"No chaos experiments in {env.ns} namespace."


NEW = [s for suite in (default_catalog(), heldout_suite(), variants_suite()) for s in load_scenarios(suite)
       if s.fault in ("chaos_dns", "chaos_io") or "partial" in s.tags and s.fault == "chaos_pod_failure"]


def test_every_new_scenario_is_in_catalog_heldout_and_variants() -> None:
    names = [s.name for s in NEW]
    assert len(NEW) == 16
    for fault in ("chaos_dns", "chaos_io", "chaos_pod_failure"):
        assert {"catalog" if not s.tags or s.tags[0] not in ("heldout", "variant") else s.tags[0]
                for s in NEW if s.fault == fault} == {"catalog", "heldout", "variant"}, names


def test_the_expert_resolves_every_new_scenario_from_the_listing() -> None:
    """It deletes the experiment `list_chaos_experiments` named, by its kind and name as listed."""
    simulator = Simulator(speed=0)
    for scenario in NEW:
        episode = play(ExpertPolicy(), EXPERT, scenario, simulator)
        assert verified(episode), (scenario.name, episode.verdict)
        reads = [s.result.output for s in episode.steps if s.action and s.action.tool == "list_chaos_experiments"]
        [fix] = [s.action for s in episode.steps if s.action and s.action.tool == "delete_chaos_experiment"]
        assert [fix.args["kind"], fix.args["name"]] in [row[:2] for row in _rows(reads[0])], scenario.name
