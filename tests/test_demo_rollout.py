"""The rollout part of `agent-sre demo`, against real servers: a compressed ModelRolloutWorkflow driven by simulated
incidents that the routing activity assigns, promoting a new version and rolling back a degraded one."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta

import pytest
import pytest_asyncio
from isolated_workers import running_workers, terminate_running
from store_fixtures import settings_with_own_bucket
from temporalio.client import Client

from agent_sre.config import Settings
from agent_sre.models.episode import OutcomeStats
from agent_sre.models.rollout import BakeStep, RolloutRequest, RolloutResult, SetWeightStep
from agent_sre.registry import Registry
from agent_sre.rollout.client import RolloutRunningError, start_rollout
from agent_sre.rollout.demo import (
    DEMO_BY,
    DEMO_PLAN,
    end_previous_demo_rollout,
    next_version,
    register_candidate,
    register_degraded,
    reliably_resolved,
    run_rollout,
)
from agent_sre.rollout.routing import read_table
from agent_sre.scenarios import load_scenarios
from agent_sre.temporal import connect

ON_THE_SESSION_LOOP = pytest.mark.asyncio(loop_scope="session")
# Fault types the runbook resolves every time (what the demo measures in its batch before the rollouts).
RESOLVED_BY_THE_RUNBOOK = {"bad_image", "bad_command", "bad_env", "oom_limit", "init_container_fail",
                           "scaled_to_zero"}


@dataclass
class Demo:
    client: Client
    settings: Settings
    registry: Registry
    workflow_id: str


@pytest_asyncio.fixture(loop_scope="session")
async def demo(stack: Settings) -> AsyncIterator[Demo]:
    """A bucket (registry, routing table, trajectories), task queues and a rollout workflow id of this test's own."""
    with settings_with_own_bucket(stack, "demo") as own:
        client = await connect(own)
        async with running_workers(client, own) as settings:
            found = Demo(client, settings, Registry.from_settings(own), f"model-rollout-{uuid.uuid4().hex[:8]}")
            try:
                yield found
            finally:
                await terminate_running(client, [found.workflow_id])


def row(group: str, success_rate: float) -> OutcomeStats:
    return OutcomeStats(group=group, episodes=2, success_rate=success_rate, mean_time_to_mitigate_s=None,
                        mean_steps=1, false_positive_rate=0, harmful_rate=0, invalid_action_rate=0, mean_reward=0)


def test_rollout_traffic_is_the_fault_types_the_batch_always_resolved() -> None:
    scenarios = load_scenarios()
    chosen = reliably_resolved(scenarios, [row("bad_image", 1.0), row("oom_limit", 0.5), row("all", 1.0)])
    assert chosen and {s.fault for s in chosen} == {"bad_image"}
    assert reliably_resolved(scenarios, [row("oom_limit", 0.5)]) == scenarios  # nothing reliable: everything


@ON_THE_SESSION_LOOP
async def test_versions_are_numbered_on_and_a_leftover_demo_rollout_is_aborted(demo: Demo) -> None:
    assert next_version(demo.registry, "runbook") == "runbook-v2"  # the built-in runbook-v1 is taken
    assert next_version(demo.registry, "noop") == "noop-v1"
    candidate = register_candidate(demo.registry)
    assert candidate == "runbook-v2" and next_version(demo.registry, "runbook") == "runbook-v3"
    card = demo.registry.card(candidate)
    assert card.policy == "runbook" and card.parent == "runbook-v1" and card.created_by == DEMO_BY

    # Someone else's rollout is left alone; an interrupted demo's is aborted.
    waiting = DEMO_PLAN.model_copy(update={"steps": [SetWeightStep(weight=10), BakeStep(duration=timedelta(hours=1)),
                                                     *DEMO_PLAN.steps[2:]]})
    for by in ("alice", DEMO_BY):
        request = RolloutRequest(candidate=candidate, baseline="runbook-v1", plan=waiting, requested_by=by)
        await start_rollout(demo.client, request, demo.settings, demo.workflow_id)
        if by == "alice":
            with pytest.raises(RolloutRunningError, match="not the demo's"):
                await end_previous_demo_rollout(demo.client, demo.workflow_id)
            await demo.client.get_workflow_handle(demo.workflow_id).terminate(reason="test: next case")
            assert demo.registry.get(candidate).stage == "canary"
            demo.registry.end_canary(candidate, "candidate", by="test", reason="the terminated rollout's canary")
    assert (await end_previous_demo_rollout(demo.client, demo.workflow_id) or "").startswith(demo.workflow_id)
    result = await demo.client.get_workflow_handle(demo.workflow_id, result_type=RolloutResult).result()
    assert result.outcome == "aborted" and result.reason == "a new demo run replaces this one"
    assert demo.registry.get(candidate).stage == "candidate"
    assert await end_previous_demo_rollout(demo.client, demo.workflow_id) is None  # nothing running now


@pytest.mark.slow
@ON_THE_SESSION_LOOP
async def test_the_demo_promotes_a_new_version_then_rolls_a_degraded_one_back(demo: Demo) -> None:
    traffic = [s for s in load_scenarios() if s.fault in RESOLVED_BY_THE_RUNBOOK]
    candidate = register_candidate(demo.registry)
    good = await run_rollout(demo.client, demo.settings, demo.registry, candidate, traffic,
                             workflow_id=demo.workflow_id)

    assert good.result is not None and good.result.outcome == "succeeded", good.result
    assert [d.action for d in good.result.decisions].count("analysis passed") == 1
    analysis = good.result.latest_analysis
    assert analysis is not None and analysis.candidate.incidents >= DEMO_PLAN.analysis.min_samples
    # The routing activity split real incidents between the two versions; both fixed them.
    assert len(good.served_by(candidate)) >= DEMO_PLAN.analysis.min_samples
    assert len(good.served_by("runbook-v1")) >= DEMO_PLAN.analysis.min_samples
    assert {r.outcome.model_version for r in good.served} == {candidate, "runbook-v1"}
    assert (good.success_rate(candidate) or 0) >= 0.6 and (good.success_rate("runbook-v1") or 0) >= 0.6
    assert demo.registry.production().version == candidate
    assert demo.registry.get("runbook-v1").stage == "archived"

    degraded = register_degraded(demo.registry)
    bad = await run_rollout(demo.client, demo.settings, demo.registry, degraded, traffic,
                            workflow_id=demo.workflow_id)

    assert bad.result is not None and bad.result.outcome == "rolled_back", bad.result
    assert bad.result.reason.startswith(("guardrail breached: success rate", "analysis failed: success_rate"))
    assert bad.result.decisions[-1].by in ("rollout:guardrail", "rollout:analysis")
    assert bad.baseline == candidate and len(bad.served_by(degraded)) >= DEMO_PLAN.guardrails.min_incidents
    assert bad.success_rate(degraded) == 0 and (bad.success_rate(candidate) or 0) >= 0.6
    assert demo.registry.get(degraded).stage == "rolled_back"
    assert demo.registry.production().version == candidate
    table = read_table(demo.registry.client, demo.registry.bucket)
    assert table is not None and table.candidate is None and table.weight == 0
