"""The HorizontalPodAutoscaler: upstream's replica calculator and its rules (the cases of kube-controller-manager's
podautoscaler tests), and the controller on a simulated cluster, fed by the pods' CPU, which follows the traffic."""

from __future__ import annotations

import shutil

import pytest
from sim_fixtures import Served, call

from agent_sre.apps.traffic import LOADGEN_NAMESPACE
from agent_sre.simulator.controllers.autoscaling import (
    MetricError,
    PodSample,
    limit,
    replicas_for_average_value,
    replicas_for_utilization,
    stabilize,
)
from agent_sre.simulator.signals import golden_signals
from agent_sre.simulator.simulator import Simulator

HPA = "horizontalpodautoscalers.autoscaling"


def _pods(usage: list[float], requests: list[float], groups: list[str] | None = None) -> list[PodSample]:
    groups = groups or ["ready"] * len(usage)
    return [PodSample(f"pod-{i}", g, r, u) for i, (u, r, g) in enumerate(zip(usage, requests, groups, strict=True))]  # type: ignore[arg-type]


def test_scale_up_to_the_ratio_of_utilization_to_target() -> None:  # TestReplicaCalcScaleUp
    assert replicas_for_utilization(3, _pods([300, 500, 700], [1000] * 3), 30) == (5, 50, 500.0)


def test_unready_pods_count_as_idle_on_a_scale_up() -> None:  # TestReplicaCalcScaleUpUnreadyLessScale
    pods = _pods([300, 500, 700], [1000] * 3, ["unready", "ready", "ready"])
    assert replicas_for_utilization(3, pods, 30)[:2] == (4, 60)


def test_scale_down() -> None:  # TestReplicaCalcScaleDown
    pods = _pods([100, 300, 500, 250, 250], [1000] * 5)
    assert replicas_for_utilization(5, pods, 50)[:2] == (3, 28)


def test_within_tolerance_nothing_changes() -> None:  # TestReplicaCalcTolerance
    pods = _pods([1010, 1030, 1020], [900, 1000, 1100])
    assert replicas_for_utilization(3, pods, 100)[0] == 3


def test_missing_metrics_that_would_reverse_the_direction_change_nothing() -> None:  # ...MissingMetricsNoChangeGt
    pods = _pods([1900, 0], [1000, 1000], ["ready", "missing"])
    assert replicas_for_utilization(2, pods, 100)[0] == 2


def test_missing_metrics_count_as_their_request_on_a_scale_down() -> None:
    pods = _pods([400, 95, 0, 0], [1000] * 4, ["ready", "ready", "missing", "missing"])
    # 24% of 2 pods alone would be 1 pod; with the missing two at 100% the ratio is 1.49 of 4 - no scale-down
    assert replicas_for_utilization(4, pods, 50)[0] == 4


def test_errors_as_upstream_words_them() -> None:
    with pytest.raises(MetricError, match="missing request for cpu in container app of Pod pod-0"):
        replicas_for_utilization(1, [PodSample("pod-0", "ready", None, 10.0, "app")], 50)
    with pytest.raises(MetricError, match="did not receive metrics for targeted pods"):
        replicas_for_utilization(1, _pods([0], [100], ["unready"]), 50)
    with pytest.raises(MetricError, match="no pods returned by selector"):
        replicas_for_utilization(1, [], 50)


def test_average_value_target() -> None:  # GetRawResourceReplicas: total usage over the per-pod target
    assert replicas_for_average_value(2, _pods([300, 500], [0, 0]), 200.0) == (4, 400.0)


def test_scale_down_stabilization_keeps_the_highest_recommendation_of_five_minutes() -> None:
    history: tuple[tuple[int, float], ...] = ()
    value, history = stabilize(history, 6, 0.0)
    assert value == 6
    value, history = stabilize(history, 3, 120.0)
    assert value == 6  # 6 was recommended two minutes ago
    value, history = stabilize(history, 3, 301.0)
    assert value == 3 and len(history) == 2  # the old sample is replaced, not appended


def test_rules_limit_the_step_and_the_range() -> None:
    assert limit(1, 10, 1, 20) == (4, "ScaleUpLimit", "the desired replica count is increasing faster than the "
                                                      "maximum scale rate")
    assert limit(4, 10, 1, 8)[:2] == (8, "TooManyReplicas")
    assert limit(4, 1, 2, 8)[:2] == (2, "TooFewReplicas")
    assert limit(4, 5, 1, 8)[:2] == (5, "DesiredWithinRange")


# --- on a simulated cluster --------------------------------------------------------------------------------------

def _hpa(target: str, low: int, high: int, utilization: int = 70) -> dict[str, object]:
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": target},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                     "minReplicas": low, "maxReplicas": high,
                     "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
                         "type": "Utilization", "averageUtilization": utilization}}}]}}


def _surge(sim: Simulator, env: str, ns: str, factors: dict[str, str]) -> None:
    cluster = sim.env(env)
    if cluster.get("namespaces", "", LOADGEN_NAMESPACE) is None:
        cluster.create("namespaces", {"metadata": {"name": LOADGEN_NAMESPACE}})
    cluster.create("configmaps", {"metadata": {"name": ns, "namespace": LOADGEN_NAMESPACE}, "data": factors})


@pytest.fixture
def sim() -> Simulator:
    return Simulator(speed=0)


def test_a_surge_raises_cpu_and_the_hpa_scales_out_until_it_is_served(sim: Simulator) -> None:
    cluster = sim.create_env("hpa", apps=["shop"])
    status, created = call(sim, "POST", "/envs/hpa/apis/autoscaling/v2/namespaces/shop/horizontalpodautoscalers",
                           _hpa("frontend", 2, 8))
    assert status == 201 and created["spec"]["minReplicas"] == 2
    sim.advance("hpa", 15)
    hpa = cluster.get(HPA, "shop", "frontend")
    assert hpa["status"]["desiredReplicas"] == 2  # a normal day: about 60% of the request, within range
    assert {c["type"]: c["reason"] for c in hpa["status"]["conditions"]}["ScalingActive"] == "ValidMetricFound"
    _surge(sim, "hpa", "shop", {"frontend": "3"})
    sim.advance("hpa", 1)
    assert golden_signals(cluster)[("shop", "frontend")].error_ratio > 0.1  # 360 rps on two pods: overloaded
    sim.advance("hpa", 15)
    hpa = cluster.get(HPA, "shop", "frontend")
    used = hpa["status"]["currentMetrics"][0]["resource"]["current"]["averageUtilization"]
    assert used > 150  # three times the traffic, three times the CPU
    sim.advance("hpa", 60)
    hpa = cluster.get(HPA, "shop", "frontend")
    dep = cluster.get("deployments.apps", "shop", "frontend")
    assert 5 <= dep["spec"]["replicas"] <= 7 and dep["status"]["availableReplicas"] == dep["spec"]["replicas"]
    assert hpa["status"]["currentReplicas"] == dep["spec"]["replicas"]
    rescales = [e for e in cluster.list("events", "shop") if e["reason"] == "SuccessfulRescale"]
    assert rescales and rescales[0]["message"].startswith("New size: ")
    assert "cpu resource utilization (percentage of request) above target" in rescales[0]["message"]
    assert golden_signals(cluster)[("shop", "frontend")].error_ratio < 0.01


def test_a_quota_stops_the_scale_out_and_the_hpa_says_so(sim: Simulator) -> None:
    cluster = sim.create_env("quota", apps=["shop"])
    running = len([p for p in cluster.list("pods", "shop") if p["status"]["phase"] == "Running"])
    quota = cluster.get("resourcequotas", "shop", "compute-resources")
    cluster.replace("resourcequotas", {**quota, "spec": {"hard": {**quota["spec"]["hard"], "pods": str(running)}}})
    call(sim, "POST", "/envs/quota/apis/autoscaling/v2/namespaces/shop/horizontalpodautoscalers",
         _hpa("frontend", 2, 8))
    _surge(sim, "quota", "shop", {"frontend": "3"})
    sim.advance("quota", 120)
    dep = cluster.get("deployments.apps", "shop", "frontend")
    hpa = cluster.get(HPA, "shop", "frontend")
    assert dep["spec"]["replicas"] > 2 and dep["status"]["availableReplicas"] == 2
    assert hpa["status"]["desiredReplicas"] > hpa["status"]["currentReplicas"] == 2
    failed = [e["message"] for e in cluster.list("events", "shop") if e["reason"] == "FailedCreate"]
    assert any("exceeded quota: compute-resources" in m for m in failed)
    assert golden_signals(cluster)[("shop", "frontend")].error_ratio > 0.1
    # raising the quota lets the HPA's scale through
    quota = cluster.get("resourcequotas", "shop", "compute-resources")
    cluster.replace("resourcequotas", {**quota, "spec": {"hard": {**quota["spec"]["hard"], "pods": "30"}}})
    sim.advance("quota", 120)
    dep = cluster.get("deployments.apps", "shop", "frontend")
    assert dep["status"]["availableReplicas"] == dep["spec"]["replicas"] > 2
    assert golden_signals(cluster)[("shop", "frontend")].error_ratio < 0.01


def test_a_maximum_below_the_load_is_scaling_limited_and_takes_a_manual_scale_back(sim: Simulator) -> None:
    """autoscaling/v2 as upstream reports a cap: desiredReplicas at maxReplicas, ScalingLimited True with reason
    TooManyReplicas ("the desired replica count is more than the maximum replica count"); a deployment scaled past
    the maximum by hand is set back to it at the next sync (SuccessfulRescale, "Current number of replicas above
    Spec.MaxReplicas"). Raising the maximum lets it scale on."""
    cluster = sim.create_env("max", apps=["shop"])
    call(sim, "POST", "/envs/max/apis/autoscaling/v2/namespaces/shop/horizontalpodautoscalers", _hpa("frontend", 2, 3))
    _surge(sim, "max", "shop", {"frontend": "5"})
    sim.advance("max", 120)
    hpa = cluster.get(HPA, "shop", "frontend")
    assert hpa["status"]["currentReplicas"] == hpa["status"]["desiredReplicas"] == 3
    limited = next(c for c in hpa["status"]["conditions"] if c["type"] == "ScalingLimited")
    assert (limited["status"], limited["reason"], limited["message"]) == (
        "True", "TooManyReplicas", "the desired replica count is more than the maximum replica count")
    assert golden_signals(cluster)[("shop", "frontend")].error_ratio > 0.1  # 600 rps on three pods
    dep = cluster.get("deployments.apps", "shop", "frontend")
    cluster.replace("deployments.apps", {**dep, "spec": {**dep["spec"], "replicas": 7}})
    sim.advance("max", 30)
    assert cluster.get("deployments.apps", "shop", "frontend")["spec"]["replicas"] == 3
    assert any(e["message"] == "New size: 3; reason: Current number of replicas above Spec.MaxReplicas"
               for e in cluster.list("events", "shop") if e["reason"] == "SuccessfulRescale")
    hpa = cluster.get(HPA, "shop", "frontend")
    cluster.replace(HPA, {**hpa, "spec": {**hpa["spec"], "maxReplicas": 10}})
    sim.advance("max", 120)
    dep = cluster.get("deployments.apps", "shop", "frontend")
    assert dep["status"]["availableReplicas"] == dep["spec"]["replicas"] > 3
    assert golden_signals(cluster)[("shop", "frontend")].error_ratio < 0.01


def test_a_missing_target_and_a_missing_request_are_conditions(sim: Simulator) -> None:
    cluster = sim.create_env("bad", apps=["shop"])
    call(sim, "POST", "/envs/bad/apis/autoscaling/v2/namespaces/shop/horizontalpodautoscalers", _hpa("nothing", 1, 3))
    sim.advance("bad", 15)
    hpa = cluster.get(HPA, "shop", "nothing")
    able = next(c for c in hpa["status"]["conditions"] if c["type"] == "AbleToScale")
    assert able["status"] == "False" and able["reason"] == "FailedGetScale"
    assert 'deployments.apps "nothing" not found' in able["message"]
    status, body = call(sim, "POST", "/envs/bad/apis/autoscaling/v2/namespaces/shop/horizontalpodautoscalers",
                        {**_hpa("cart", 3, 2), "metadata": {"name": "cart"}})
    assert status == 422 and "must be less than or equal to maxReplicas" in body["message"]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_gets_and_describes_hpas(served: Served) -> None:
    sim = served.simulator
    sim.create_env("hpa-kubectl", apps=["shop"], speed=0)
    call(sim, "POST", "/envs/hpa-kubectl/apis/autoscaling/v2/namespaces/shop/horizontalpodautoscalers",
         _hpa("frontend", 2, 8))
    sim.advance("hpa-kubectl", 15)
    kubeconfig = served.kubeconfig_for("hpa-kubectl")
    try:
        rows = [line.split() for line in served.kubectl("get", "hpa", "-n", "shop",
                                                        kubeconfig=kubeconfig).stdout.splitlines()]
        assert rows[0] == ["NAME", "REFERENCE", "TARGETS", "MINPODS", "MAXPODS", "REPLICAS", "AGE"]
        assert rows[1][:3] == ["frontend", "Deployment/frontend", "cpu:"] and rows[1][4:7] == ["2", "8", "2"]
        assert rows[1][3].endswith("%/70%")
        described = served.kubectl("describe", "hpa", "frontend", "-n", "shop", kubeconfig=kubeconfig).stdout
        assert "ValidMetricFound" in described and "Min replicas:" in described
    finally:
        sim.delete_env("hpa-kubectl")
