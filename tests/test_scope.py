"""Scope from the configuration: which namespaces the agent may act in, which cluster, and how fast alerts may
start remediations."""

from __future__ import annotations

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from agent_sre.activities.tools import ToolActivities
from agent_sre.alerts.ratelimit import TokenBucket
from agent_sre.config import Settings
from agent_sre.models.tools import ToolCall, ToolInvocation
from agent_sre.scenarios import evaluation_suites, load_scenarios
from agent_sre.scope import ForeignCluster, namespace_allowed, out_of_scope, worker_cluster


@pytest.mark.parametrize(("namespace", "patterns", "allowed"), [
    ("shop", ("shop", "bank"), True),
    ("team-a", ("team-*",), True),
    ("payments", ("shop", "bank"), False),
    ("kube-system", ("*",), False),  # a pattern never admits the cluster's own namespaces
    ("default", ("*",), False),
    ("kube-public", ("kube-*",), False),
    ("kube-system", ("kube-system",), True),  # named exactly, it is admitted
])
def test_namespaces_match_the_allow_list(namespace: str, patterns: tuple[str, ...], allowed: bool) -> None:
    assert namespace_allowed(namespace, patterns) is allowed


def test_the_default_scope_admits_every_simulated_namespace_and_no_system_one(settings: Settings) -> None:
    defaults = settings.model_copy(update={"allowed_namespaces": Settings.model_fields["allowed_namespaces"].default})
    scenarios = [s for root in (None, *evaluation_suites()) for s in load_scenarios(root)]
    assert {s.namespace for s in scenarios if out_of_scope(s.namespace, defaults)} == set()
    assert all(out_of_scope(ns, defaults) for ns in ("kube-system", "default", "kube-public", "other-team"))


def test_the_cluster_is_the_worker_s_own(settings: Settings, tmp_path) -> None:
    assert worker_cluster(None, settings) is None
    env = f"{settings.sim_url}/envs/episode-1"
    assert worker_cluster(env, settings) == env  # an environment of the worker's simulator
    assert worker_cluster(str(settings.sim_kubeconfig), settings) == str(settings.sim_kubeconfig)
    for foreign in ("http://10.0.0.1:6443", f"{settings.sim_url}.evil.example/envs/x", f"{env}/../../x",
                    str(tmp_path / "kubeconfig")):
        with pytest.raises(ForeignCluster, match="is not this worker's cluster"):
            worker_cluster(foreign, settings)


@pytest.mark.asyncio
@pytest.mark.parametrize(("kubeconfig", "namespace", "kind"), [
    ("http://10.0.0.1:6443", "shop", "KubeconfigError"),
    (None, "kube-system", "OutOfScope"),
])
async def test_the_tool_activity_refuses_another_cluster_or_namespace(kubeconfig: str | None, namespace: str,
                                                                      kind: str, settings: Settings) -> None:
    invocation = ToolInvocation(call=ToolCall(tool="scale", args={"deployment": "cart", "replicas": 0}),
                                namespace=namespace, kubeconfig=kubeconfig, idempotency_key="scope-test/0")
    with pytest.raises(ApplicationError) as refused:
        await ActivityEnvironment().run(ToolActivities(settings).run_tool, invocation)
    assert refused.value.type == kind and refused.value.non_retryable


def test_the_token_bucket_refills_at_its_rate() -> None:
    now = [0.0]
    bucket = TokenBucket(per_minute=2, clock=lambda: now[0])
    assert [bucket.take() for _ in range(3)] == [True, True, False]
    now[0] = 30.0  # half a minute: one token back
    assert [bucket.take() for _ in range(2)] == [True, False]
    bucket.give_back()
    assert bucket.take()
