"""Outside traffic: users reach the entry service through the ingress controller, from another namespace, so a
NetworkPolicy on the entry service that does not admit that namespace turns them away (and the observer says so);
one that admits it does not. And the surge and autoscaler families' evidence is readable by the agent."""

from __future__ import annotations

from workload_fixtures import injected, new_env

from agent_sre.faults import get_fault
from agent_sre.models.tools import ToolCall
from agent_sre.simulator.signals import golden_signals
from agent_sre.simulator.simulator import Simulator


def _policy(name: str, peers: list[dict[str, object]]) -> dict[str, object]:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": name},
            "spec": {"podSelector": {"matchLabels": {"app": "frontend"}}, "policyTypes": ["Ingress"],
                     "ingress": [{"from": peers, "ports": [{"port": 8080, "protocol": "TCP"}]}]}}


def test_a_policy_on_the_entry_service_turns_the_users_away() -> None:
    sim = Simulator(speed=1.0)
    scenario = get_fault("ingress_policy_deny").scenario("ingress", "shop", "shop", "frontend", {})
    env, baseline = injected(sim, scenario)
    users = golden_signals(env.cluster)[(env.ns, "frontend")]
    assert users.error_ratio == 1.0 and users.latency_p99_seconds >= 5.0  # the ingress's 504 after its timeout
    assert golden_signals(env.cluster)[(env.ns, "catalog")].requests_per_second == 0.0  # nothing gets further
    assert any("ingress from outside" in r for r in baseline.unhealthy["frontend"])
    assert env.observe(scenario, baseline).outcome == "unresolved"


def test_a_policy_that_admits_the_ingress_namespace_lets_them_in() -> None:
    sim = Simulator(speed=1.0)
    env = new_env(sim)
    admits = _policy("frontend-from-ingress", [{"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "ingress-nginx"}}}])
    env.cluster.create("networkpolicies.networking.k8s.io", {**admits, "metadata": {"name": "frontend-from-ingress",
                                                                                   "namespace": env.ns}})
    env.advance(30)
    assert golden_signals(env.cluster)[(env.ns, "frontend")].error_ratio < 0.01
    assert "frontend" not in env.snapshot().unhealthy


def test_the_agent_reads_the_autoscalers_conditions() -> None:
    sim = Simulator(speed=1.0)
    scenario = get_fault("hpa_quota_exceeded").scenario("hpa", "shop", "shop", "catalog", {})
    env, baseline = injected(sim, scenario)
    assert baseline.unhealthy["catalog"]
    out = env.tool(ToolCall(tool="describe", args={"kind": "horizontalpodautoscaler", "name": "catalog"})).output
    assert "Reference: Deployment/catalog" in out and "(as a percentage of request)" in out and "/ 70%" in out
    assert "ScalingActive" in out and "ValidMetricFound" in out and "SuccessfulRescale" in out
    jobs = env.tool(ToolCall(tool="describe", args={"kind": "cronjob", "name": "db-backup"})).output
    assert "Schedule: 0 2 * * *" in jobs
