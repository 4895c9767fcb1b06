"""The workload model: controllers, scheduler, kubelet, chaos, endpoints, signals and logs, observed through the
store and the official client (in-process), with the wording a real cluster uses."""

from __future__ import annotations

import base64
import json

import pytest
from kubernetes.client import AppsV1Api, CoreV1Api

from agent_sre.apps import catalog
from agent_sre.faults import get_fault, inject
from agent_sre.kube import deployments
from agent_sre.kube.client import Kube
from agent_sre.models.tools import ToolCall
from agent_sre.simulator import workload
from agent_sre.simulator.cluster import SIM_EPOCH, Cluster, SimClock
from agent_sre.simulator.controllers.context import Pass
from agent_sre.simulator.controllers.state import Index, WorkloadState
from agent_sre.simulator.install import install as install_app
from agent_sre.simulator.kubelet import crash_timeline
from agent_sre.simulator.signals import golden_signals, render_prometheus
from agent_sre.simulator.simulator import Simulator
from tests.workload_fixtures import Env, new_env


@pytest.fixture(scope="module")
def sim() -> Simulator:
    return Simulator(speed=1.0)


def _inject(env: Env, fault: str, target: str, /, **params: object) -> None:
    inject(env.api, get_fault(fault).scenario("t", env.app, env.ns, target, dict(params), seed=0))


def _container(pod: dict, name: str | None = None) -> dict:
    statuses = pod["status"].get("containerStatuses") or []
    return next(s for s in statuses if name is None or s["name"] == name)


def _newest(env: Env, service: str) -> dict:
    return max(env.pods(service), key=lambda p: p["metadata"]["creationTimestamp"] + p["metadata"]["name"])


# --- installing ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("app", sorted(catalog.APPS))
def test_an_installed_app_is_healthy_with_history_and_noise(sim: Simulator, app: str) -> None:
    env = new_env(sim, app)
    spec = catalog.get_app(app)
    for svc in spec.services:
        dep = env.get("deployments.apps", svc.name)
        assert dep["status"]["availableReplicas"] == svc.replicas
        assert dep["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"
        rs = [r for r in env.cluster.list("replicasets.apps", env.ns)
              if r["metadata"]["name"].startswith(svc.name + "-")]
        assert sorted(r["metadata"]["annotations"]["deployment.kubernetes.io/revision"] for r in rs) == ["1", "2"]
        endpoints = env.get("endpoints", svc.name)
        assert len(endpoints["subsets"][0]["addresses"]) == svc.replicas
    for pod in env.pods():
        if not pod["metadata"]["name"].startswith("db-backup-"):
            assert pod["status"]["phase"] == "Running" and _container(pod)["ready"], pod["metadata"]["name"]
    backup = next(p for p in env.pods() if p["metadata"]["name"].startswith("db-backup-"))
    assert backup["status"]["phase"] == "Succeeded" and _container(backup)["restartCount"] == 1
    noisy = apps_noise(app)
    last = _container(env.pods(noisy)[0])["lastState"]["terminated"]
    assert last["reason"] == "OOMKilled" and _container(env.pods(noisy)[0])["restartCount"] == 1
    assert any(e["reason"] == "Unhealthy" and "context deadline exceeded" in e["message"] for e in env.events())
    quota = env.get("resourcequotas", "compute-resources")
    assert quota["status"]["used"]["pods"] == str(sum(s.replicas for s in spec.services))
    assert all(gs.error_ratio < 0.01 for gs in golden_signals(env.cluster).values())


def apps_noise(app: str) -> str:
    from agent_sre.simulator.noise import NOISE

    return NOISE[app]["oom"]


def test_installs_are_deterministic_per_seed() -> None:
    def install(seed: int) -> Cluster:
        cluster = Cluster("c", clock=SimClock(speed=0.0))
        workload.attach(cluster)
        install_app(cluster, "shop", seed=seed)
        cluster.sync()
        return cluster

    def names(cluster: Cluster) -> list[tuple[str, str]]:
        return sorted((p["metadata"]["name"], p["metadata"]["uid"]) for p in cluster.list("pods", "shop"))

    a, b, c = install(7), install(7), install(8)
    assert names(a) == names(b)
    assert not {n for n, _ in names(a)} & {n for n, _ in names(c)}, "pod names should differ between seeds"
    assert a.get("secrets", "shop", "postgres-credentials")["data"] != \
        c.get("secrets", "shop", "postgres-credentials")["data"]


def test_installs_share_the_template_and_nothing_leaks_between_them() -> None:
    """Environments installed from one template share its objects until they write them: whatever one does (a
    rollout, crash loops bumping event counts, a deleted pod, a cordoned node) must not show in another."""
    simulator = Simulator(speed=0.0)

    def dump(name: str) -> str:
        return json.dumps({r: {"/".join(k): o for k, o in items.items()}
                           for r, items in simulator.env(name).objects.items()}, sort_keys=True)

    simulator.create_env("a", apps=["shop"], seed=4)
    simulator.create_env("b", apps=["shop"], seed=4)
    pristine = dump("b")
    busy = Env(simulator, "a", "shop")
    _inject(busy, "bad_env", "cart", env="REDIS_ADDR", value="redis-master:6379")
    _inject(busy, "cordoned_node", "payment")
    busy.advance(900)
    CoreV1Api(busy.api).delete_namespaced_pod(busy.pods("catalog")[0]["metadata"]["name"], busy.ns)
    for _ in range(2):  # back and forth: both of the template's ReplicaSets are written
        busy.tools([ToolCall(tool="rollout_undo", args={"deployment": "checkout"})])
        busy.advance(60)
    assert busy.events("BackOff") and len(busy.events("ScalingReplicaSet", "checkout")) == 4
    assert dump("b") == pristine
    simulator.create_env("c", apps=["shop"], seed=4)
    assert dump("c") == pristine


def test_an_install_into_an_empty_cluster_carries_on_from_the_template() -> None:
    """The first sync of a fresh install is no full pass (the template settled on these very objects), and leaves
    the cluster as a full pass, which re-examines every object, does."""
    def install(full: bool) -> Cluster:
        cluster = Cluster("c", clock=SimClock(speed=0.0))
        workload.attach(cluster)
        install_app(cluster, "shop", seed=3)
        state = cluster.model["workload"]
        if full:
            state.seen_revision = -1
        before = state.seen_revision
        cluster.clock.advance(5.0)
        cluster.sync()
        assert (before == cluster.revision) != full
        return cluster

    def dump(cluster: Cluster) -> str:
        objects = {r: {"/".join(k): o for k, o in items.items()} for r, items in cluster.objects.items()}
        return json.dumps([objects, {"/".join(k): dict(v) for k, v in cluster.logs.items()},
                           {"/".join(k): v for k, v in cluster.model["signals"].items()}], sort_keys=True, default=str)

    assert dump(install(full=False)) == dump(install(full=True))

    def index(cluster: Cluster) -> tuple[object, ...]:  # its tables, in their order
        ix = cluster.model["workload"].index
        return tuple([(k, list(v.items()) if isinstance(v, dict) else v) for k, v in table.items()]
                     for table in (ix.live, ix.pods_of, ix.sets_of, ix.set_owner))

    one, two = Cluster("one", clock=SimClock(speed=0.0)), Cluster("two", clock=SimClock(speed=0.0))
    for cluster in (one, two):
        install_app(cluster, "shop", seed=3)  # the template's index, forked: as if built from the objects
        assert index(cluster) == index(Cluster("x", objects=cluster.objects, model={"workload": WorkloadState(
            index=Index.of(cluster.objects))}))
    assert one.model["workload"].index.pods_of is not two.model["workload"].index.pods_of


def test_api_writes_are_looked_at_again_as_a_pass_that_looks_at_everything_would() -> None:
    """After API writes a pass re-examines what they affect (`Cluster.written`); for one scenario of each fault
    type (deployments, Services, config, secrets, quotas, nodes, network policies, chaos, pod deletes), inject,
    settle, fix and settle leave the cluster as passes that re-examine every object after every write do, and as
    passes that re-check every Service's endpoints whenever a pod changed (not only those that may select it)."""
    from agent_sre.faults.oracle import observe, snapshot
    from agent_sre.scenarios import load_scenarios
    from agent_sre.simulator.transport import in_process_api_client
    from agent_sre.tools import ToolContext, execute

    def strip(value: object) -> object:  # uids of objects the API creates are random
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "uid"}
        return [strip(v) for v in value] if isinstance(value, list) else value

    def episode(scenario: object, everything: bool) -> str:
        simulator = Simulator(speed=0)
        cluster = simulator.create_env("e", apps=[scenario.app], seed=scenario.seed)  # type: ignore[attr-defined]
        if everything:  # writes not known one by one: every pass after a write looks at everything
            def wrote(resource: str, namespace: str, name: str) -> None:
                cluster.revision += 1
                cluster.written = None
            cluster._wrote = wrote  # type: ignore[method-assign]
        api = in_process_api_client(simulator, "e")
        inject(api, scenario)  # type: ignore[arg-type]
        simulator.advance("e", 300)
        baseline = snapshot(api, scenario.namespace, scenario.app)  # type: ignore[attr-defined]
        ctx = ToolContext(api=api, namespace=scenario.namespace, approved=True)  # type: ignore[attr-defined]
        for i, call in enumerate(scenario.ground_truth.fix):  # type: ignore[attr-defined]
            ctx.idempotency_key = f"fix-{i}"
            assert execute(call, ctx).ok
        simulator.advance("e", 1800)
        objects = {r: {"/".join(k): strip(o) for k, o in items.items()} for r, items in cluster.objects.items()}
        return json.dumps([objects, {"/".join(k): dict(v) for k, v in cluster.logs.items()},
                           {"/".join(k): v for k, v in cluster.model["signals"].items()},
                           observe(api, scenario, baseline).model_dump()],  # type: ignore[arg-type]
                          sort_keys=True, default=str)

    simulator = Simulator(speed=0)
    cluster = simulator.create_env("w", apps=["shop"])
    AppsV1Api(in_process_api_client(simulator, "w")).patch_namespaced_deployment_scale(
        "cart", "shop", {"spec": {"replicas": 2}})
    assert cluster.written == {("deployments.apps", "shop", "cart")}
    simulator.advance("w", 60)  # passes write pods, ReplicaSets and events: not what the next pass must look at
    assert cluster.written == set()

    class Everything(set):  # type: ignore[type-arg]
        def __contains__(self, item: object) -> bool:
            return True

    init = Pass.__init__

    def every_app(self: Pass, *args: object) -> None:
        init(self, *args)  # type: ignore[arg-type]
        self.touched_apps = Everything()

    one_per_fault = {s.fault: s for s in reversed(load_scenarios())}
    assert len(one_per_fault) >= 15
    for scenario in one_per_fault.values():
        targeted = episode(scenario, everything=False)
        assert targeted == episode(scenario, everything=True), scenario.name
        with pytest.MonkeyPatch.context() as patch:  # every Service's endpoints re-checked whenever a pod changed
            patch.setattr(Pass, "__init__", every_app)
            assert targeted == episode(scenario, everything=False), scenario.name


def test_a_renewed_log_reads_as_a_new_one() -> None:
    """A pass renews the log of an unchanged run instead of rendering a new one (`LazyLog.renew`): reads then give
    what a new one gives, also in the 7-second bucket of an earlier read (a hang's count grows within one), and a
    log of another run, another clock or from a template (no clock) is not renewed."""
    from agent_sre.apps.software import Outcome
    from agent_sre.simulator import logs
    from agent_sre.simulator.kubelet import Run

    clock = SimClock(speed=0.0)
    pod = {"metadata": {"name": "api-1"}}
    run = Run(Outcome("hang", lines=("waiting for postgres:5432",)), SIM_EPOCH, "busybox:1.36")
    log = logs.render(pod, run, SIM_EPOCH, (), False, (), clock)
    assert log is not None
    clock.advance(57.0)
    before = dict(log)
    clock.advance(4.0)  # the same bucket [56, 63): the log keeps what it read
    assert dict(log) == before
    assert log.renew(clock, clock.now(), run)
    fresh = logs.render(pod, run, clock.now(), (), False, (), clock)
    assert dict(log) == dict(fresh) != before  # type: ignore[arg-type]
    assert not log.renew(SimClock(speed=0.0), clock.now(), run)
    assert not log.renew(clock, clock.now(), Run(run.outcome, run.since, run.image))
    import pickle
    assert not pickle.loads(pickle.dumps(log)).renew(clock, clock.now(), run)


def test_logs_renewed_as_the_minute_moves_on_read_as_new_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """Passes every simulated second through a crash loop: every log reads as it does when each pass renders new
    logs once the minute moved on."""
    from agent_sre.scenarios import load_scenarios
    from agent_sre.simulator import logs
    from agent_sre.simulator.transport import in_process_api_client

    scenario = next(s for s in load_scenarios() if s.fault == "bad_command")

    def reads() -> list[dict[str, object]]:
        simulator = Simulator(speed=0)
        cluster = simulator.create_env("e", apps=[scenario.app], seed=scenario.seed)
        api = in_process_api_client(simulator, "e")
        inject(api, scenario)
        out = []
        for step, seconds in enumerate((50, *[1] * 80, 300)):
            simulator.advance("e", seconds)
            CoreV1Api(api).patch_namespaced_config_map(  # a write: the next sync runs a pass now
                "shop-config", scenario.namespace, {"metadata": {"annotations": {"step": str(step)}}})
            simulator.advance("e", 0)
            out.append({"/".join(k): dict(v) for k, v in sorted(cluster.logs.items())})
        return out

    renewed = reads()
    monkeypatch.setattr(logs.LazyLog, "renew", lambda self, clock, at, run: False)
    assert reads() == renewed


def test_two_apps_share_the_nodes_and_install_rejects_duplicates() -> None:
    simulator = Simulator()
    cluster = simulator.create_env("both", apps=["shop", "bank"])
    assert {n["metadata"]["name"] for n in cluster.list("nodes")} == {"worker-1", "worker-2", "worker-3"}
    for ns in ("shop", "bank"):
        assert all(d["status"].get("availableReplicas") == d["spec"]["replicas"]
                   for d in cluster.list("deployments.apps", ns))
    with pytest.raises(ValueError, match="already exists"):
        install_app(cluster, "shop")
    with pytest.raises(KeyError, match="unknown app"):
        install_app(cluster, "bookstore")


# --- rollouts -----------------------------------------------------------------------------------------------------

def test_a_template_change_is_a_new_revision_and_undo_goes_back(sim: Simulator) -> None:
    env = new_env(sim)
    AppsV1Api(env.api).patch_namespaced_deployment("cart", env.ns, {"spec": {"template": {"spec": {"containers": [
        {"name": "cart", "image": "registry.acme.internal/shop/cart:2.3.0"}]}}}})
    env.advance(120)
    dep = env.get("deployments.apps", "cart")
    assert dep["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "3"
    assert dep["status"]["updatedReplicas"] == dep["status"]["availableReplicas"] == dep["status"]["replicas"] == 1
    assert {c["type"]: c["reason"] for c in dep["status"]["conditions"]}["Progressing"] == "NewReplicaSetAvailable"
    assert _container(env.pods("cart")[0])["image"].endswith(":2.3.0")
    scaling = [e["message"] for e in env.events("ScalingReplicaSet", "cart")]
    new, old = (f"cart-{h}" for h in _hashes(env, "cart", "3", "2"))
    assert f"Scaled up replica set {new} to 1" in scaling
    assert f"Scaled down replica set {old} to 0 from 1" in scaling
    env.tools([ToolCall(tool="rollout_undo", args={"deployment": "cart"})])
    env.advance(120)
    dep = env.get("deployments.apps", "cart")
    assert dep["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "4"
    assert _container(env.pods("cart")[0])["image"].endswith(":2.4.1")
    sets = [r for r in env.cluster.list("replicasets.apps", env.ns) if r["metadata"]["name"].startswith("cart-")]
    assert len(sets) == 3, "undo reuses the old ReplicaSet instead of creating a new one"
    reused = env.get("replicasets.apps", old)
    assert reused["metadata"]["annotations"]["deployment.kubernetes.io/revision-history"] == "2"


def test_rolling_back_long_after_a_finished_rollout_does_not_time_out(sim: Simulator) -> None:
    """DeploymentTimedOut: a Progressing condition whose reason is NewReplicaSetAvailable never times out, so a
    rollback long after the last rollout finished counts its deadline from its own progress, not from then."""
    env = new_env(sim)
    env.advance(3600)  # far beyond progressDeadlineSeconds (600) since the install's rollout finished
    env.tools([ToolCall(tool="rollout_undo", args={"deployment": "cart"})])
    for _ in range(120):
        progressing = next(c for c in env.get("deployments.apps", "cart")["status"]["conditions"]
                           if c["type"] == "Progressing")
        assert progressing["reason"] != "ProgressDeadlineExceeded"
        env.advance(1)
    assert (progressing["status"], progressing["reason"]) == ("True", "NewReplicaSetAvailable")


def test_a_resumed_rollout_counts_its_deadline_from_the_resume(sim: Simulator) -> None:
    """DeploymentTimedOut measures from the Progressing condition's last update, which resuming renews."""
    env = new_env(sim)
    _inject(env, "bad_image", "frontend")
    env.advance(60)
    apps = AppsV1Api(env.api)
    apps.patch_namespaced_deployment("frontend", env.ns, {"spec": {"paused": True}})
    env.advance(3600)
    apps.patch_namespaced_deployment("frontend", env.ns, {"spec": {"paused": False}})
    env.advance(599)
    progressing = next(c for c in env.get("deployments.apps", "frontend")["status"]["conditions"]
                       if c["type"] == "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("Unknown", "DeploymentResumed")
    env.advance(2)
    progressing = next(c for c in env.get("deployments.apps", "frontend")["status"]["conditions"]
                       if c["type"] == "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("False", "ProgressDeadlineExceeded")


def _hashes(env: Env, deployment: str, *revisions: str) -> list[str]:
    """The pod-template-hash of each given revision of a deployment."""
    sets = {r["metadata"]["annotations"]["deployment.kubernetes.io/revision"]: r["metadata"]["labels"]
            ["pod-template-hash"] for r in env.cluster.list("replicasets.apps", env.ns)
            if r["metadata"]["name"].startswith(deployment + "-")}
    return [sets[r] for r in revisions]


def test_rollout_restart_replaces_the_pods(sim: Simulator) -> None:
    env = new_env(sim)
    before = {p["metadata"]["name"] for p in env.pods("catalog")}
    env.tools([ToolCall(tool="rollout_restart", args={"deployment": "catalog"})])
    env.advance(120)
    after = {p["metadata"]["name"] for p in env.pods("catalog")}
    assert len(after) == 2 and not before & after
    assert env.get("deployments.apps", "catalog")["status"]["availableReplicas"] == 2


def test_a_broken_rollout_surges_and_keeps_the_old_pods_serving(sim: Simulator) -> None:
    """The default 25%/25% of two replicas is a surge of one and no unavailability: the new pod comes first, and
    while it cannot start the old ones stay; after progressDeadlineSeconds the rollout is reported stuck."""
    env = new_env(sim)
    _inject(env, "bad_image", "frontend")
    env.advance(300)
    status = env.get("deployments.apps", "frontend")["status"]
    assert (status["replicas"], status["updatedReplicas"], status["availableReplicas"]) == (3, 1, 2)
    assert status["unavailableReplicas"] == 1
    conditions = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert conditions == {"Available": ("True", "MinimumReplicasAvailable"),
                          "Progressing": ("True", "ReplicaSetUpdated")}
    assert len(env.get("endpoints", "frontend")["subsets"][0]["addresses"]) == 2
    new, old = _hashes(env, "frontend", "3", "2")
    assert [e["message"] for e in env.events("ScalingReplicaSet", "frontend")
            if e["lastTimestamp"] >= "2026"] == [f"Scaled up replica set frontend-{new} to 1"]
    assert not env.events("SuccessfulDelete", f"frontend-{old}")
    env.advance(400)
    progressing = next(c for c in env.get("deployments.apps", "frontend")["status"]["conditions"]
                       if c["type"] == "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("False", "ProgressDeadlineExceeded")
    assert progressing["message"] == f'ReplicaSet "frontend-{new}" has timed out progressing.'
    assert progressing["lastTransitionTime"] == "2026-01-01T00:10:00Z"  # 600 s after the last progress
    env.tools([ToolCall(tool="rollout_undo", args={"deployment": "frontend"})])
    env.advance(60)
    status = env.get("deployments.apps", "frontend")["status"]
    assert (status["replicas"], status["updatedReplicas"], status["availableReplicas"]) == (2, 2, 2)
    assert {c["type"]: c["reason"] for c in status["conditions"]}["Progressing"] == "NewReplicaSetAvailable"
    assert f"Scaled down replica set frontend-{new} to 0 from 1" in [
        e["message"] for e in env.events("ScalingReplicaSet", "frontend")]


@pytest.mark.parametrize(("service", "serving", "available"), [
    ("catalog", 1, "True"),  # maxSurge 0, maxUnavailable 1: one old pod makes room, one keeps serving
    ("payment", 0, "False"),  # Recreate: the old pod goes first, and nothing replaces it
])
def test_the_strategy_decides_what_a_broken_rollout_costs(sim: Simulator, service: str, serving: int,
                                                         available: str) -> None:
    env = new_env(sim)
    _inject(env, "bad_image", service)
    env.advance(120)
    status = env.get("deployments.apps", service)["status"]
    assert status.get("availableReplicas", 0) == serving
    assert {c["type"]: c["status"] for c in status["conditions"]}["Available"] == available
    subsets = env.get("endpoints", service).get("subsets") or []
    assert sum(len(s.get("addresses") or []) for s in subsets) == serving


def test_recreate_scales_the_old_set_down_before_the_new_one_up(sim: Simulator) -> None:
    env = new_env(sim)
    _inject(env, "bad_image", "payment")
    env.advance(30)
    new, old = _hashes(env, "payment", "3", "2")
    scaling = [e["message"] for e in sorted(env.events("ScalingReplicaSet", "payment"),
                                            key=lambda e: e["metadata"]["resourceVersion"].zfill(12))
               if e["lastTimestamp"] >= "2026"]
    assert scaling == [f"Scaled down replica set payment-{old} to 0 from 1",
                       f"Scaled up replica set payment-{new} to 1"]


def test_a_scaled_deployment_mid_rollout_scales_its_sets_in_proportion(sim: Simulator) -> None:
    env = new_env(sim)
    _inject(env, "bad_image", "frontend")
    env.advance(60)
    env.tools([ToolCall(tool="scale", args={"deployment": "frontend", "replicas": 6})])
    env.advance(60)
    new, old = _hashes(env, "frontend", "3", "2")
    sizes = {r["metadata"]["name"]: r["spec"]["replicas"] for r in env.cluster.list("replicasets.apps", env.ns)}
    # 6 replicas + a surge of 2 (25% rounded up): the 8 pods are shared 2:1 as the sets were (old 2, new 1 of 3)
    assert (sizes[f"frontend-{old}"], sizes[f"frontend-{new}"]) == (5, 3)
    assert env.get("replicasets.apps", f"frontend-{old}")["metadata"]["annotations"][
        "deployment.kubernetes.io/desired-replicas"] == "6"


def test_min_ready_seconds_delays_availability(sim: Simulator) -> None:
    env = new_env(sim)
    AppsV1Api(env.api).patch_namespaced_deployment("cart", env.ns, {"spec": {"minReadySeconds": 60, "template": {
        "spec": {"containers": [{"name": "cart", "image": "registry.acme.internal/shop/cart:2.3.0"}]}}}})
    env.advance(30)
    status = env.get("deployments.apps", "cart")["status"]
    assert (status["replicas"], status["readyReplicas"], status["availableReplicas"]) == (2, 2, 1)
    env.advance(60)
    status = env.get("deployments.apps", "cart")["status"]
    assert (status["replicas"], status["availableReplicas"]) == (1, 1)


def test_the_rollout_arithmetic_follows_the_deployment_controller() -> None:
    def spec(replicas: int, surge: object = "25%", unavailable: object = "25%") -> dict:
        return {"replicas": replicas, "strategy": {"type": "RollingUpdate", "rollingUpdate": {
            "maxSurge": surge, "maxUnavailable": unavailable}}}

    assert deployments.fenceposts(spec(1)) == (1, 0)  # 25% of 1: surge rounds up, unavailability down
    assert deployments.fenceposts(spec(10)) == (3, 2)
    assert deployments.fenceposts(spec(3, "10%", "10%")) == (1, 0)
    assert deployments.fenceposts(spec(3, 0, "10%")) == (0, 1)  # both zero after rounding: one may go
    assert deployments.max_unavailable(spec(2, 0, 5)) == 2
    assert deployments.max_unavailable({"replicas": 3, "strategy": {"type": "Recreate"}}) == 0
    assert [deployments.rollout_impact(s) for s in (spec(2), spec(2, 0, 1), spec(1, 0, 1),
                                                    {"replicas": 1, "strategy": {"type": "Recreate"}})] == \
        ["none", "partial", "outage", "outage"]
    figures = deployments.ReplicaSetFigures
    old, new = figures("old", 4, 4, ("1", "old")), figures("new", 0, 0, ("2", "new"))
    assert deployments.new_replicas(spec(4), [old, new], new) == 1  # a surge of 1 (25% of 4)
    new = figures("new", 1, 0, ("2", "new"))
    # 5 pods, 3 must stay available, the new one is not: one old pod may go, and then another once it is
    assert deployments.scale_down_olds(spec(4), new, [old]) == {"old": 3}
    assert deployments.scale_down_olds(spec(4), figures("new", 1, 1, ("2", "new")), [old]) == {"old": 2}
    broken = figures("broken", 2, 0, ("1", "broken"))  # unhealthy replicas of an older set go first
    assert deployments.scale_down_olds(spec(4), new, [broken, old]) == {"broken": 0, "old": 3}
    # 2 -> 6 replicas mid-rollout (old 2, new 1, of a maximum of 3): 8 pods allowed now, shared 2:1 as before
    sets = [figures("old", 2, 2, ("1", "old"), 3), figures("new", 1, 0, ("2", "new"), 3)]
    assert deployments.proportional(spec(6), sets, 3) == {"old": 5, "new": 3}


# --- the kubelet --------------------------------------------------------------------------------------------------

def test_crash_loop_back_off_follows_the_kubelet_schedule() -> None:
    assert crash_timeline(0.5, 1.0)[:2] == (0, True)
    assert crash_timeline(5.0, 1.0)[:2] == (0, False)
    assert crash_timeline(11.5, 1.0)[:2] == (1, True)  # restarted after 10s back-off
    assert crash_timeline(1 + 10 + 1 + 20 + 0.5, 1.0)[:2] == (2, True)  # then 20s
    k, _, _, _ = crash_timeline(3600.0, 1.0)
    assert 14 <= k <= 16  # capped at 5 minutes: about 12 restarts an hour after the first few


def test_a_bad_env_var_crash_loops_with_a_telling_log_line(sim: Simulator) -> None:
    env = new_env(sim)
    _inject(env, "bad_env", "cart", env="REDIS_ADDR", value="redis-master:6379")
    env.advance(120)
    pod = _newest(env, "cart")
    status = _container(pod)
    assert status["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert status["restartCount"] >= 3
    assert status["lastState"]["terminated"]["exitCode"] == 1
    name = pod["metadata"]["name"]
    assert any("lookup redis-master on 10.96.0.10:53: no such host" in line for line in env.logs(name))
    assert any("lookup redis-master" in line for line in env.logs(name, which="previous"))
    backoff = env.events("BackOff", name)[0]
    assert backoff["message"].startswith(f"Back-off restarting failed container cart in pod {name}_shop(")
    assert backoff["type"] == "Warning" and backoff["count"] >= 3


def test_oom_kill_when_the_limit_is_below_the_working_set(sim: Simulator) -> None:
    env = new_env(sim)
    _inject(env, "oom_limit", "catalog", memory_limit="64Mi")
    env.advance(200)
    crashed = [_container(p) for p in env.pods("catalog") if _container(p)["restartCount"] > 0]
    assert crashed
    assert crashed[0]["lastState"]["terminated"]["reason"] == "OOMKilled"
    assert crashed[0]["lastState"]["terminated"]["exitCode"] == 137


def test_a_leaking_build_grows_in_kubectl_top_until_the_limit_kills_it_minutes_apart(sim: Simulator) -> None:
    """cAdvisor's working set of a leaking process climbs at every metrics-server scrape (15 s) until the cgroup's
    limit OOM-kills it (lastState terminated, reason OOMKilled, exit code 137); the kubelet restarts it with back-off
    and it leaks again, so the restart count climbs over minutes, not at once."""
    env = new_env(sim)
    _inject(env, "memory_leak", "cart")
    env.advance(40)
    pod = _newest(env, "cart")["metadata"]["name"]
    seen = []
    for _ in range(3):
        seen.append(env.cluster.model["usage"][(env.ns, pod)]["cart"][1])
        env.advance(15)
    assert seen[0] < seen[1] < seen[2] < 256 * 1024 ** 2
    assert _container(_newest(env, "cart"))["restartCount"] == 0  # 85 s in: it has not reached its limit yet
    env.advance(60)
    killed = _container(_newest(env, "cart"))
    assert killed["restartCount"] == 1
    assert killed["lastState"]["terminated"]["reason"] == "OOMKilled"
    assert killed["lastState"]["terminated"]["exitCode"] == 137
    env.advance(300)
    assert 2 <= _container(_newest(env, "cart"))["restartCount"] <= 4


def test_the_build_before_a_leak_holds_its_working_set(sim: Simulator) -> None:
    env = new_env(sim)
    _inject(env, "memory_leak", "cart")
    env.advance(120)
    env.tools([ToolCall(tool="rollout_undo", args={"deployment": "cart"})])
    env.advance(600)
    pod = _newest(env, "cart")
    assert _container(pod)["image"].endswith(":2.4.1") and _container(pod)["restartCount"] == 0
    assert env.cluster.model["usage"][(env.ns, pod["metadata"]["name"])]["cart"][1] < 128 * 1024 ** 2


def test_a_missing_image_tag_backs_off_pulling(sim: Simulator) -> None:
    env = new_env(sim)
    _inject(env, "bad_image", "checkout", tag="3.3.0")
    env.advance(120)
    pod = _newest(env, "checkout")
    waiting = _container(pod)["state"]["waiting"]
    assert waiting["reason"] == "ImagePullBackOff"
    assert pod["status"]["phase"] == "Pending"
    failed = [e["message"] for e in env.events("Failed", pod["metadata"]["name"])]
    assert ('Failed to pull image "registry.acme.internal/shop/checkout:3.3.0": rpc error: code = NotFound desc = '
            'failed to pull and unpack image "registry.acme.internal/shop/checkout:3.3.0": failed to resolve reference '
            '"registry.acme.internal/shop/checkout:3.3.0": registry.acme.internal/shop/checkout:3.3.0: not found'
            ) in failed
    assert "Error: ImagePullBackOff" in failed


@pytest.mark.parametrize(("params", "missing"), [
    ({"secret": "acme-registry-v2"}, "acme-registry-v2"), ({"secret": "acme-registry-old", "expired": True}, None),
    ({}, "acme-registry")])
def test_the_private_registry_refuses_a_pull_without_its_credentials(sim: Simulator, params: dict,
                                                                     missing: str | None) -> None:
    """containerd's HEAD of the manifest answers 401 (ErrImagePull, then ImagePullBackOff) whether the pull secret is
    missing or holds credentials the registry revoked; a secret the kubelet cannot read is named in a warning, as
    getPullSecretsForPod names it. Public images (redis) pull with no credentials at all."""
    env = new_env(sim)
    _inject(env, "image_pull_secret", "cart", **params)
    env.advance(120)
    pod = _newest(env, "cart")
    assert _container(pod)["state"]["waiting"]["reason"] == "ImagePullBackOff" and pod["status"]["phase"] == "Pending"
    failed = [e["message"] for e in env.events("Failed", pod["metadata"]["name"])]
    assert ('Failed to pull image "registry.acme.internal/shop/cart:2.4.1": rpc error: code = Unknown desc = failed '
            'to pull and unpack image "registry.acme.internal/shop/cart:2.4.1": failed to resolve reference '
            '"registry.acme.internal/shop/cart:2.4.1": unexpected status from HEAD request to '
            'https://registry.acme.internal/v2/shop/cart/manifests/2.4.1: 401 Unauthorized') in failed
    assert "Error: ErrImagePull" in failed and "Error: ImagePullBackOff" in failed
    warnings = [e["message"] for e in env.events("FailedToRetrieveImagePullSecret", pod["metadata"]["name"])]
    assert warnings == ([f"Unable to retrieve some image pull secrets ({missing}); attempting to pull the image may "
                         f"not succeed."] if missing else [])
    env.tools([ToolCall(tool="rollout_restart", args={"deployment": "redis"})])
    env.advance(120)
    assert _container(_newest(env, "redis"))["state"].get("running")


def test_the_tools_name_a_pull_secrets_registries_and_never_show_its_credentials(sim: Simulator) -> None:
    env = new_env(sim)
    user, token = catalog.SHOP.registry_login(0)  # new_env's seed
    shown = [result.output for result in env.tools([
        ToolCall(tool="get_resource", args={"kind": "secret", "name": "acme-registry"}),
        ToolCall(tool="describe", args={"kind": "secret", "name": "acme-registry"})])]
    assert ".dockerconfigjson: '<redacted: credentials for registry.acme.internal>'" in shown[0]
    assert "Type: kubernetes.io/dockerconfigjson" in shown[1]
    encoded = base64.b64encode(f"{user}:{token}".encode()).decode()
    assert not [text for text in shown if token in text or encoded in text]


def test_a_wrong_password_secret_fails_authentication_and_the_database_logs_it(sim: Simulator) -> None:
    env = new_env(sim)
    _inject(env, "secret_password", "checkout")
    env.advance(120)
    pod = _newest(env, "checkout")
    lines = env.logs(pod["metadata"]["name"])
    assert any('password authentication failed for user \\"shop\\"' in line for line in lines)
    db = env.pods("postgres")[0]["metadata"]["name"]
    assert any('FATAL:  password authentication failed for user "shop"' in line for line in env.logs(db))
    # catalog reads the same secret but keeps the password it started with until it restarts
    assert all(_container(p)["ready"] for p in env.pods("catalog"))


def test_a_bad_command_cannot_start(sim: Simulator) -> None:
    env = new_env(sim)
    _inject(env, "bad_command", "postgres")
    env.advance(60)
    status = _container(_newest(env, "postgres"))
    assert status["lastState"]["terminated"]["reason"] == "StartError"
    assert 'exec: "postgres-server": executable file not found in $PATH' in status["lastState"]["terminated"]["message"]
    _inject(env, "bad_command", "cart")
    env.advance(60)
    assert any('Error: unknown command "server" for "cart"' in line
               for line in env.logs(_newest(env, "cart")["metadata"]["name"]))


def test_a_missing_secret_is_a_config_error(sim: Simulator) -> None:
    env = new_env(sim)
    CoreV1Api(env.api).delete_namespaced_secret("payment-psp", env.ns)
    env.tools([ToolCall(tool="rollout_restart", args={"deployment": "payment"})])
    env.advance(60)
    waiting = _container(_newest(env, "payment"))["state"]["waiting"]
    assert waiting == {"reason": "CreateContainerConfigError", "message": 'secret "payment-psp" not found'}


def test_a_broken_readiness_probe_keeps_the_pod_unready(sim: Simulator) -> None:
    env = new_env(sim)
    _inject(env, "readiness_probe", "cart", mode="path", path="/health")
    env.advance(120)
    pod = _newest(env, "cart")
    assert pod["status"]["phase"] == "Running" and not _container(pod)["ready"]
    messages = [e["message"] for e in env.events("Unhealthy", pod["metadata"]["name"])]
    assert "Readiness probe failed: HTTP probe failed with statuscode: 404" in messages
    _inject(env, "readiness_probe", "catalog", mode="port", port=8081)
    env.advance(120)
    pod = _newest(env, "catalog")
    messages = [e["message"] for e in env.events("Unhealthy", pod["metadata"]["name"])]
    ip = pod["status"]["podIP"]
    assert f'Readiness probe failed: Get "http://{ip}:8081/ready": dial tcp {ip}:8081: connect: connection refused' \
        in messages


def test_init_containers_hang_or_crash_loop(sim: Simulator) -> None:
    env = new_env(sim)
    _inject(env, "init_container_hang", "cart")
    _inject(env, "init_container_fail", "checkout")
    env.advance(120)
    hang = _newest(env, "cart")
    assert hang["status"]["phase"] == "Pending"
    assert "running" in hang["status"]["initContainerStatuses"][0]["state"]
    assert _container(hang)["state"]["waiting"]["reason"] == "PodInitializing"
    assert env.logs(hang["metadata"]["name"], "wait-for-migrations")[-1] == "waiting for db-migrations:5432"
    fail = _newest(env, "checkout")
    init = fail["status"]["initContainerStatuses"][0]
    assert init["state"]["waiting"]["reason"] == "CrashLoopBackOff" and init["restartCount"] >= 2
    assert "schema v42 required, found v41" in env.logs(fail["metadata"]["name"], "check-schema")


# --- the scheduler and admission ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("fault", "target", "params", "message"), [
    ("node_selector_missing", "cart", {}, "0/3 nodes are available: 3 node(s) didn't match Pod's node "
     "affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."),
    ("cpu_unschedulable", "cart", {}, "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are "
     "available: 3 No preemption victims found for incoming pod."),
    ("cordoned_node", "payment", {}, "0/3 nodes are available: 1 node(s) were unschedulable, 2 node(s) didn't "
     "match Pod's node affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful for "
     "scheduling."),
    ("pvc_missing", "postgres", {"claim": "postgres-data-v2"}, '0/3 nodes are available: persistentvolumeclaim '
     '"postgres-data-v2" not found. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.'),
    ("pvc_missing", "redis", {}, '0/3 nodes are available: persistentvolumeclaim "redis-data" not found. preemption: '
     '0/3 nodes are available: 3 Preemption is not helpful for scheduling.'),
])
def test_unschedulable_pods_say_why(sim: Simulator, fault: str, target: str, params: dict, message: str) -> None:
    env = new_env(sim)
    _inject(env, fault, target, **params)
    env.advance(60)
    pending = [p for p in env.pods(target) if p["status"]["phase"] == "Pending"]
    assert pending
    condition = next(c for c in pending[0]["status"]["conditions"] if c["type"] == "PodScheduled")
    assert condition["status"] == "False" and condition["reason"] == "Unschedulable"
    assert condition["message"] == message
    event = env.events("FailedScheduling", pending[0]["metadata"]["name"])[0]
    assert event["message"] == message and event["source"]["component"] == "default-scheduler"


def test_a_claim_is_bound_by_its_class_or_left_pending_and_its_pods_with_it(sim: Simulator) -> None:
    """The apps' claims are Bound by the default class's provisioner; one of a class the cluster lacks stays
    Pending, and the VolumeBinding PreFilter keeps a pod that mounts it off every node; the database's callers fail
    while it is gone."""
    env = new_env(sim)
    bound = env.get("persistentvolumeclaims", "postgres-data")
    assert bound["status"]["phase"] == "Bound" and bound["spec"]["volumeName"].startswith("pvc-")
    assert bound["status"]["capacity"] == {"storage": "10Gi"}
    _inject(env, "pvc_missing", "postgres", claim="postgres-fast", storage_class="fast-ssd")
    assert env.get("persistentvolumeclaims", "postgres-fast")["status"] == {"phase": "Pending"}
    assert "volumeName" not in env.get("persistentvolumeclaims", "postgres-fast")["spec"]
    env.advance(60)
    pending = next(p for p in env.pods("postgres") if p["status"]["phase"] == "Pending")
    assert env.events("FailedScheduling", pending["metadata"]["name"])[0]["message"] == (
        "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/3 nodes are "
        "available: 3 Preemption is not helpful for scheduling.")
    assert golden_signals(env.cluster)[("shop", "checkout")].error_ratio > 0.99
    provisioning = env.events("ProvisioningFailed", "postgres-fast")[0]
    assert provisioning["message"] == 'storageclass.storage.k8s.io "fast-ssd" not found'
    assert provisioning["type"] == "Warning" and provisioning["source"]["component"] == "persistentvolume-controller"
    assert provisioning["count"] >= 4  # one a sync, every 15 s


def test_a_cordoned_node_carries_the_unschedulable_taint(sim: Simulator) -> None:
    env = new_env(sim)
    Kube(env.api, shared=True).cordon("worker-1", True)
    env.advance(1)
    taints = env.cluster.get("nodes", "", "worker-1")["spec"]["taints"]
    assert {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}.items() <= taints[0].items()
    env.tools([ToolCall(tool="uncordon", args={"node": "worker-1"})])
    env.advance(1)
    assert "taints" not in env.cluster.get("nodes", "", "worker-1")["spec"]


def test_the_quota_refuses_new_pods(sim: Simulator) -> None:
    env = new_env(sim)
    _inject(env, "quota_exceeded", "cart")
    env.advance(60)
    running = [p for p in env.pods("cart") if p["status"]["phase"] == "Running"]
    assert len(running) == 1 and running[0]["metadata"]["name"].startswith(f"cart-{_hashes(env, 'cart', '2')[0]}-")
    event = env.events("FailedCreate")[0]
    assert "is forbidden: exceeded quota: compute-resources, requested: pods=1, used: pods=10, limited: pods=9" \
        in event["message"]
    assert event["message"].startswith('Error creating: pods "cart-')
    conditions = env.get("deployments.apps", "cart")["status"]["conditions"]
    assert any(c["type"] == "ReplicaFailure" and c["reason"] == "FailedCreate" for c in conditions)


# --- services, network policies, chaos ----------------------------------------------------------------------------

def test_endpoints_follow_selector_and_target_port(sim: Simulator) -> None:
    env = new_env(sim)
    _inject(env, "service_selector", "cart")
    _inject(env, "service_target_port", "catalog", target_port=9090)
    _inject(env, "service_target_port", "payment", target_port="grpc")
    env.advance(5)
    assert "subsets" not in env.get("endpoints", "cart")
    assert env.get("endpoints", "catalog")["subsets"][0]["ports"][0]["port"] == 9090
    assert "subsets" not in env.get("endpoints", "payment")
    signals = golden_signals(env.cluster)
    assert signals[("shop", "cart")].error_ratio == 1.0
    assert signals[("shop", "catalog")].error_ratio == 1.0
    assert signals[("shop", "frontend")].error_ratio > 0.5  # catalog is on every page


def test_errors_and_latency_climb_the_call_graph(sim: Simulator) -> None:
    env = new_env(sim)
    healthy = golden_signals(env.cluster)
    _inject(env, "chaos_network_delay", "payment", latency="2s", jitter="100ms")
    env.advance(10)
    slow = golden_signals(env.cluster)
    assert slow[("shop", "payment")].latency_p99_seconds > 2.0
    assert slow[("shop", "checkout")].latency_p99_seconds > 2.0
    assert slow[("shop", "frontend")].latency_p99_seconds > healthy[("shop", "frontend")].latency_p99_seconds + 1
    assert slow[("shop", "catalog")] == healthy[("shop", "catalog")]  # not on the path
    _inject(env, "network_policy_deny", "cart")
    env.advance(10)
    blocked = golden_signals(env.cluster)
    assert blocked[("shop", "cart")].error_ratio == 1.0
    assert blocked[("shop", "checkout")].error_ratio > 0.99
    checkout = env.pods("checkout")[0]["metadata"]["name"]
    env.advance(60)
    assert any("upstream=cart" in line and "i/o timeout" in line for line in env.logs(checkout))


def test_a_soft_dependency_degrades_without_failing(sim: Simulator) -> None:
    env = new_env(sim)
    _inject(env, "scaled_to_zero", "recommendation")
    env.advance(120)
    signals = golden_signals(env.cluster)
    assert signals[("shop", "recommendation")].error_ratio == 1.0
    assert signals[("shop", "frontend")].error_ratio < 0.01
    frontend = env.pods("frontend")[0]["metadata"]["name"]
    assert any("recommendation unavailable" in line for line in env.logs(frontend))


def test_chaos_pod_kill_replaces_a_pod_every_tick_until_removed(sim: Simulator) -> None:
    env = new_env(sim)
    _inject(env, "chaos_pod_kill", "catalog", every="1m")
    seen = set()
    for _ in range(4):
        env.advance(61)
        seen |= {p["metadata"]["name"] for p in env.pods("catalog")}
        assert len(env.pods("catalog")) == 2
    assert len(seen) >= 5, "a pod should have been killed and replaced at every tick"
    env.tools([ToolCall(tool="delete_chaos_experiment", args={"kind": "Schedule", "name": "catalog-pod-kill"})])
    env.advance(30)
    stable = {p["metadata"]["name"] for p in env.pods("catalog")}
    env.advance(300)
    assert {p["metadata"]["name"] for p in env.pods("catalog")} == stable


def test_chaos_pod_failure_swaps_in_pause_and_recovers(sim: Simulator) -> None:
    env = new_env(sim)
    _inject(env, "chaos_pod_failure", "cart")
    env.advance(30)
    status = _container(env.pods("cart")[0])
    assert status["image"] == "gcr.io/google-containers/pause:latest" and not status["ready"]
    assert status["restartCount"] == 1
    Kube(env.api, shared=True).remove("PodChaos", env.ns, "cart-pod-failure")
    env.advance(30)
    status = _container(env.pods("cart")[0])
    assert status["ready"] and status["restartCount"] == 2 and status["image"].endswith(":2.4.1")


def test_stress_shows_in_kubectl_top_and_in_latency(sim: Simulator) -> None:
    env = new_env(sim)
    healthy = golden_signals(env.cluster)[("shop", "checkout")].latency_p99_seconds
    _inject(env, "chaos_stress", "checkout", workers=2, load=100)
    env.advance(10)
    pod = env.pods("checkout")[0]["metadata"]["name"]
    cpu, _ = env.cluster.model["usage"][(env.ns, pod)]["checkout"]
    assert cpu > 2000
    assert golden_signals(env.cluster)[("shop", "checkout")].latency_p99_seconds > healthy + 0.05
    node_cpu, node_memory = env.cluster.model["node_usage"][env.pods("checkout")[0]["spec"]["nodeName"]]
    assert node_cpu > 2000 and node_memory > 1e9


def test_a_cpu_limit_below_the_need_pins_top_at_it_and_slows_the_service_and_its_callers(sim: Simulator) -> None:
    """The CFS quota: a container never uses more than its limit per period (cAdvisor's usage, so `kubectl top`,
    stays at it), and what it cannot run now waits for the next period: no errors, a p99 past a second, which the
    callers inherit. A limit above the need throttles nothing."""
    env = new_env(sim)
    healthy = golden_signals(env.cluster)
    _inject(env, "cpu_throttled", "catalog", cpu_limit="4m")
    env.advance(120)
    for pod in env.pods("catalog"):
        cpu, _ = env.cluster.model["usage"][(env.ns, pod["metadata"]["name"])]["catalog"]
        assert cpu == pytest.approx(4.0)
    slow = golden_signals(env.cluster)
    assert slow[("shop", "catalog")].latency_p99_seconds > 1.0
    assert slow[("shop", "frontend")].latency_p99_seconds > healthy[("shop", "frontend")].latency_p99_seconds + 0.8
    assert slow[("shop", "catalog")].error_ratio < 0.01
    env.tools([ToolCall(tool="set_resources", args={"deployment": "catalog", "container": "catalog",
                                                    "cpu_request": "100m", "cpu_limit": "200m"})])
    env.advance(120)
    assert golden_signals(env.cluster)[("shop", "catalog")].latency_p99_seconds == pytest.approx(
        healthy[("shop", "catalog")].latency_p99_seconds)


def test_http_abort_fails_every_request(sim: Simulator) -> None:
    env = new_env(sim)
    _inject(env, "chaos_http_abort", "catalog")
    env.advance(10)
    signals = golden_signals(env.cluster)
    assert signals[("shop", "catalog")].error_ratio > 0.99
    assert signals[("shop", "frontend")].error_ratio > 0.99


# --- time, determinism, cost ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("fault", "target"), [("oom_limit", "cart"), ("chaos_pod_kill", "frontend"),
                                               ("readiness_probe", "catalog"), ("cpu_unschedulable", "cart"),
                                               ("quota_exceeded", "checkout"), ("bad_image", "payment")])
def test_state_depends_on_simulated_time_not_on_how_often_anyone_looked(fault: str, target: str) -> None:
    def run(steps: list[float]) -> tuple[list[tuple], list[tuple]]:
        simulator = Simulator(speed=1e-9)
        cluster = simulator.create_env("e", apps=["shop"], seed=1)
        env = Env(simulator, "e", "shop")
        _inject(env, fault, target)
        for step in steps:
            env.advance(step)
        pods = sorted((p["metadata"]["name"], p["spec"].get("nodeName"), p["status"]["phase"],
                       [(c["restartCount"], tuple(c["state"]), c["ready"]) for c in
                        p["status"].get("containerStatuses") or []]) for p in cluster.list("pods", "shop"))
        events = sorted((e["metadata"]["name"], e["count"]) for e in cluster.list("events", "shop"))
        return pods, events

    one_jump = run([900.0])
    assert one_jump == run([10.0] * 90) == run([7.0, 93.0, 250.0, 1.0, 549.0])


def test_sync_is_skipped_when_nothing_changed(sim: Simulator) -> None:
    env = new_env(sim)
    env.cluster.sync()
    revision = env.cluster.revision
    state = env.cluster.model["workload"]
    passes = state.last_pass
    for _ in range(50):
        env.cluster.sync()
    assert env.cluster.revision == revision and state.last_pass == passes


def test_the_clock_starts_at_the_simulated_epoch() -> None:
    cluster = Simulator().create_env("e")
    started = [p for p in cluster.list("pods", "shop") if p["status"].get("startTime")]
    assert all(p["status"]["startTime"] < "2026-01-01T00:00:00Z" for p in started)
    assert cluster.clock.now() >= SIM_EPOCH


def test_a_wall_clock_environment_starts_now_with_its_history_before_it() -> None:
    """`clock="wall"` (the served default environment, for kubectl's own ages): the clock starts at the wall
    clock's present and the apps' history (releases, restarts, events) is dated before it as at SIM_EPOCH; the
    fixed clock, which episodes use, is unchanged."""
    import time

    from agent_sre.kube.times import parse_time

    sim = Simulator()
    wall, fixed = sim.create_env("wall", clock="wall"), sim.create_env("fixed")
    assert abs(wall.clock.now() - time.time()) < 30 and fixed.clock.now() < SIM_EPOCH + 60

    def ages(cluster: Cluster) -> list[float]:  # of its pods (but last night's backup, at 02:00) and events
        now = cluster.clock.now()
        return sorted([now - (parse_time(p["metadata"]["creationTimestamp"]) or 0) for p in cluster.list("pods")
                       if p["metadata"]["labels"].get("app") != "db-backup"]
                      + [now - (parse_time(e["lastTimestamp"]) or 0) for e in cluster.list("events")])

    wall_ages, fixed_ages = ages(wall), ages(fixed)
    assert len(wall_ages) == len(fixed_ages) and wall.list("events")
    assert all(abs(w - f) < 30 for w, f in zip(wall_ages, fixed_ages, strict=True)), (wall_ages, fixed_ages)
    with pytest.raises(ValueError, match="clock must be one of"):
        sim.create_env("other", clock="sundial")


def test_prometheus_exposition(sim: Simulator) -> None:
    env = new_env(sim)
    _inject(env, "oom_limit", "cart")
    env.advance(120)
    text = render_prometheus({env.name: env.cluster})
    assert f'agent_sre_sim_requests_per_second{{env="{env.name}",namespace="shop",service="frontend"}} 120.0' in text
    assert "# TYPE agent_sre_sim_error_ratio gauge" in text
    assert "agent_sre_sim_latency_p99_seconds{" in text
    assert f'kube_deployment_status_replicas_available{{deployment="cart",env="{env.name}",namespace="shop"}} 0.0' \
        in text
    assert 'kube_pod_container_status_restarts_total{container="cart"' in text
    assert 'reason="CrashLoopBackOff"' in text
