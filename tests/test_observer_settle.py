"""The verdict waits for the liveness probes: a slow starter restarted with a broken liveness probe looks healthy
for its probe's initial delay and failure threshold, longer than the settle window, then the kubelet kills it."""

from __future__ import annotations

import pytest

from agent_sre.faults import get_fault, oracle
from agent_sre.models.remediation import PolicyRef
from agent_sre.models.scenario import Scenario
from agent_sre.models.tools import ToolCall
from agent_sre.policy.scripted import ScriptedPolicy
from agent_sre.simulator.simulator import Simulator
from agent_sre.training.evaluate import play
from tests.workload_fixtures import injected

FINISH = ToolCall(tool="finish", args={"diagnosis": "d", "summary": "s"})


def _slow_starter_with_a_broken_liveness_probe() -> Scenario:
    # shop/payment starts in 25 s: its liveness probe waits 45 s, then fails three times 10 s apart (~75 s)
    return get_fault("readiness_probe").scenario("live-payment", "shop", "shop", "payment",
                                                 {"probe": "liveness", "mode": "port", "port": 9191}, seed=3)


def _played(scenario: Scenario, calls: list[ToolCall]) -> str:
    ref = PolicyRef(name="scripted", version="t", script=[*calls, FINISH])
    verdict = play(ScriptedPolicy(), ref, scenario, Simulator(speed=0)).verdict
    assert verdict is not None
    return verdict.outcome


@pytest.mark.parametrize(("calls", "outcome"), [
    ([ToolCall(tool="rollout_restart", args={"deployment": "payment"})], "unresolved"),
    ([ToolCall(tool="rollout_undo", args={"deployment": "payment"})], "resolved")])
def test_a_restart_does_not_fix_a_liveness_probe_that_kills_a_slow_starter_after_the_settle_window(
        calls: list[ToolCall], outcome: str) -> None:
    assert _played(_slow_starter_with_a_broken_liveness_probe(), calls) == outcome


def test_the_wait_is_read_from_the_pods_liveness_probes() -> None:
    env, _ = injected(Simulator(speed=1.0), _slow_starter_with_a_broken_liveness_probe())
    env.advance(600)
    assert oracle.liveness_wait_s(env.api, env.ns) == 0  # long-running pods; the crash-looping ones have restarted
    env.tools([ToolCall(tool="rollout_restart", args={"deployment": "payment"})])
    env.advance(60)
    wait = oracle.liveness_wait_s(env.api, env.ns)
    assert 0 < wait <= 45 + 10 * 4  # initialDelaySeconds + periodSeconds * (failureThreshold + 1), from the start
    env.advance(wait)
    assert oracle.liveness_wait_s(env.api, env.ns) == 0
