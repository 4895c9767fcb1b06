"""ModelRolloutWorkflow in Temporal's time-skipping test server: weeks of rollout in seconds.

The activities are the real ones, against the session's real S3 store (a bucket per test): the registry, the
routing table, and the trajectories the analysis reads, seeded by each test through the trajectory store.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import pytest_asyncio
from aiohttp import web
from aiohttp.test_utils import TestServer
from prometheus_client import REGISTRY
from rollout_data import BASELINE, GOOD, HARMFUL, SPARSE, WEAK, Profile, seed
from store_fixtures import settings_with_own_bucket
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from agent_sre.config import Settings
from agent_sre.models.rollout import RolloutControl, RolloutPlan, RolloutRequest, RolloutResult, RolloutStatus
from agent_sre.registry import Registry
from agent_sre.rollout import routing
from agent_sre.rollout.client import start_rollout
from agent_sre.rollout.plans import DEFAULT_PLAN
from agent_sre.rollout.routing import read_table
from agent_sre.stack.ports import pick_free_ports
from agent_sre.workflows.rollout import ModelRolloutWorkflow
from tests.isolated_workers import running_workers

pytestmark = pytest.mark.asyncio(loop_scope="session")
DAY = timedelta(days=1)


@dataclass
class Rollout:
    env: WorkflowEnvironment
    client: Client
    settings: Settings
    registry: Registry
    candidate: str
    t0: datetime

    def seed(self, version: str, profile: Profile, days: int = 24) -> int:
        return seed(self.registry.client, self.settings.s3_bucket, version, profile, self.t0, days)

    async def start(self, plan: RolloutPlan = DEFAULT_PLAN, **kw: object) -> WorkflowHandle:
        request = RolloutRequest(candidate=self.candidate, baseline="runbook-v1", plan=plan, requested_by="test",
                                 reason="test rollout", **kw)
        return await start_rollout(self.client, request, self.settings, workflow_id=f"rollout-{uuid.uuid4().hex[:8]}")

    def routing(self):
        return read_table(self.registry.client, self.settings.s3_bucket)


@pytest_asyncio.fixture(loop_scope="session")
async def rollout(s3_store: Settings, time_skipping_env, tmp_path: Path) -> AsyncIterator[Rollout]:
    with settings_with_own_bucket(s3_store, "rollout") as settings:
        registry = Registry.from_settings(settings)
        candidate = "smol-grpo-7"
        (tmp_path / "w").mkdir()
        (tmp_path / "w" / "model.safetensors").write_bytes(b"weights")
        registry.register(candidate, policy="llm", by="trainer", weights_dir=tmp_path / "w", parent="runbook-v1")
        env = await time_skipping_env()
        client = Client(**{**env.client.config(), "data_converter": pydantic_data_converter})
        async with running_workers(client, settings) as isolated:
            yield Rollout(env, client, isolated, registry, candidate, await env.get_current_time())


async def status(handle: WorkflowHandle) -> RolloutStatus:
    return await handle.query(ModelRolloutWorkflow.status)


def actions(result: RolloutResult | RolloutStatus) -> list[str]:
    return [d.action for d in result.decisions]


async def test_the_default_plan_promotes_a_good_candidate_after_three_weeks(rollout: Rollout) -> None:
    rollout.seed(rollout.candidate, GOOD)
    rollout.seed("runbook-v1", BASELINE)
    handle = await rollout.start()
    result: RolloutResult = await handle.result()

    assert result.outcome == "succeeded", result.reason
    assert actions(result).count("analysis passed") == 3
    assert actions(result).count("step") == len(DEFAULT_PLAN.steps)
    took = result.decisions[-1].at - result.decisions[0].at
    assert 3 * 7 * DAY <= took < 3 * 7 * DAY + DAY  # A/B week, 10 % week, 50 % week
    analysis = result.latest_analysis
    assert analysis is not None and analysis.judgement == "pass"
    assert analysis.candidate.incidents == analysis.baseline.incidents == 70  # one week, ten a day each
    assert {m.metric: m.judgement for m in analysis.metrics} == {
        "success_rate": "pass", "time_to_mitigate": "pass", "false_positive_rate": "pass", "harmful_rate": "pass"}

    assert rollout.registry.get(rollout.candidate).stage == "production"
    assert rollout.registry.get("runbook-v1").stage == "archived"
    table = rollout.routing()
    assert table is not None and table.candidate is None and table.baseline.version == rollout.candidate
    # Continue-as-new ran after every step that waited, and the final run still holds the whole history.
    latest = rollout.client.get_workflow_handle(handle.id)
    assert (await latest.describe()).run_id != handle.first_execution_run_id
    assert (await status(latest)).runs == 6


async def test_a_harmful_candidate_is_rolled_back_by_a_guardrail_mid_step(rollout: Rollout) -> None:
    rollout.seed(rollout.candidate, HARMFUL, days=8)
    rollout.seed("runbook-v1", BASELINE, days=8)
    before = REGISTRY.get_sample_value("agent_sre_model_rollbacks_total",
                                       {"candidate": rollout.candidate, "trigger": "guardrail"}) or 0.0
    [nobody] = pick_free_ports(1, "127.0.0.1")
    handle = await rollout.start(notify_url=f"http://127.0.0.1:{nobody}/hook")
    result: RolloutResult = await handle.result()

    assert result.outcome == "rolled_back"
    assert result.reason.startswith("guardrail breached: harmful actions:")
    # The webhook is down: the rollback happened all the same, and the failed notification is on record.
    assert actions(result)[-2:] == ["notification failed", "rolled back"]
    rolled_back_at = result.decisions[-1].at - result.decisions[0].at
    assert rolled_back_at < 2 * DAY  # mid A/B test (a week long), within the first day's guardrail checks
    assert "analysis passed" not in actions(result)
    version = rollout.registry.get(rollout.candidate)
    assert version.stage == "rolled_back" and version.history[-1].reason == result.reason
    table = rollout.routing()
    assert table is not None and table.candidate is None and table.weight == 0
    assert table.baseline.version == "runbook-v1" and rollout.registry.production().version == "runbook-v1"
    assert REGISTRY.get_sample_value("agent_sre_model_rollbacks_total",
                                     {"candidate": rollout.candidate, "trigger": "guardrail"}) == before + 1


async def test_a_failed_analysis_rolls_back(rollout: Rollout) -> None:
    rollout.seed(rollout.candidate, WEAK, days=8)
    rollout.seed("runbook-v1", BASELINE, days=8)
    result: RolloutResult = await (await rollout.start()).result()
    assert result.outcome == "rolled_back"
    assert result.reason.startswith("analysis failed: success_rate: candidate 50.0% (35/70) vs baseline 70.0%")
    assert result.latest_analysis is not None and result.latest_analysis.judgement == "fail"
    assert rollout.registry.get(rollout.candidate).stage == "rolled_back"


async def test_an_inconclusive_analysis_extends_then_pauses_and_never_promotes(rollout: Rollout) -> None:
    rollout.seed(rollout.candidate, SPARSE, days=10)
    rollout.seed("runbook-v1", BASELINE, days=16)
    handle = await rollout.start()
    await rollout.env.sleep(11 * DAY)  # the A/B week and its three one-day extensions are over

    st = await status(handle)
    assert st.phase == "paused" and st.step_index == 0 and st.weight == 50
    assert st.pause_reason is not None and "still inconclusive after 3 extensions" in st.pause_reason
    assert "low traffic: the candidate served 20" in st.pause_reason
    assert actions(st).count("extended") == 3
    assert rollout.registry.get(rollout.candidate).stage == "canary"

    await rollout.env.sleep(5 * DAY)  # a pause waits for a human, however long
    st = await status(handle)
    assert st.phase == "paused" and st.step_index == 0

    await handle.execute_update(ModelRolloutWorkflow.resume, RolloutControl(by="alice", reason="one more look"))
    await rollout.env.sleep(DAY / 2)
    st = await status(handle)
    assert actions(st)[-2:] == ["resumed", "extended"]  # a fresh round of extensions, not a promotion
    await handle.execute_update(ModelRolloutWorkflow.abort,
                                RolloutControl(by="alice", reason="not enough traffic to judge"))
    result: RolloutResult = await handle.result()
    assert result.outcome == "aborted" and result.reason == "not enough traffic to judge"
    assert rollout.registry.get(rollout.candidate).stage == "candidate"
    table = rollout.routing()
    assert table is not None and table.candidate is None


async def test_a_rollback_signal_mid_bake_rolls_back_at_once(rollout: Rollout,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    rollout.seed(rollout.candidate, GOOD, days=12)
    rollout.seed("runbook-v1", BASELINE, days=12)
    received: list[dict] = []

    async def hook(request: web.Request) -> web.Response:
        received.append(await request.json())
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", hook)
    async with TestServer(app) as webhook:
        handle = await rollout.start(notify_url=str(webhook.make_url("/hook")))
        await _signal_mid_bake(rollout, handle, caplog)
    (event,) = received
    assert event["event"] == "model_rollback" and event["trigger"] == "signal"
    assert event["candidate"] == rollout.candidate and event["reason"] == "alice: customers report slow fixes"


async def _signal_mid_bake(rollout: Rollout, handle: WorkflowHandle, caplog: pytest.LogCaptureFixture) -> None:
    await rollout.env.sleep(10 * DAY)  # A/B passed; three days into the 10 % bake

    st = await status(handle)
    assert st.step is not None and st.step.kind == "bake" and st.weight == 10
    table = rollout.routing()
    assert table is not None and table.candidate is not None and table.weight == 10
    # Continue-as-new kept the state: the A/B test's analysis and the step's deadline came over.
    assert st.runs >= 2 and "analysis passed" in actions(st)
    assert st.time_left_s is not None and 3.5 * 86400 < st.time_left_s < 4.5 * 86400
    shown = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)  # the UI's view
    assert "**running**" in shown.current_details and "step 3/8: bake 7d" in shown.current_details

    caplog.set_level(logging.WARNING, logger="agent_sre.rollout")
    await handle.signal(ModelRolloutWorkflow.rollback, "alice: customers report slow fixes")
    result: RolloutResult = await handle.result()
    assert result.outcome == "rolled_back" and result.reason == "alice: customers report slow fixes"
    assert result.decisions[-1].at - result.decisions[0].at < 10 * DAY + timedelta(hours=1)
    table = rollout.routing()
    assert table is not None and table.candidate is None
    assert rollout.registry.get(rollout.candidate).stage == "rolled_back"
    (line,) = [json.loads(r.getMessage()) for r in caplog.records if r.name == "agent_sre.rollout"]
    assert line["event"] == "model_rollback" and line["rollout_id"] == result.rollout_id


async def test_controls_are_validated_and_take_effect(rollout: Rollout) -> None:
    rollout.seed(rollout.candidate, GOOD, days=10)
    rollout.seed("runbook-v1", BASELINE, days=10)
    handle = await rollout.start()
    await rollout.env.sleep(DAY)
    alice = RolloutControl(by="alice", reason="checking")

    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(ModelRolloutWorkflow.resume, alice)
    refusal = refused.value.cause
    assert isinstance(refusal, ApplicationError) and refusal.type == "Refused"
    assert refusal.message == "cannot resume: the rollout is not paused" and refusal.non_retryable  # not retried

    paused = await handle.execute_update(ModelRolloutWorkflow.pause, alice)
    assert paused.phase == "paused" and paused.time_left_s is not None
    await rollout.env.sleep(3 * DAY)
    st = await status(handle)
    assert st.phase == "paused" and st.time_left_s == paused.time_left_s  # the A/B clock stopped
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(ModelRolloutWorkflow.pause, alice)
    assert "already paused" in str(refused.value.cause)

    promoted = await handle.execute_update(ModelRolloutWorkflow.promote,
                                           RolloutControl(by="alice", reason="enough data"))
    assert promoted.phase == "running"
    await rollout.env.sleep(timedelta(hours=1))
    st = await status(handle)
    assert st.step_index == 2 and st.weight == 10  # the A/B test was ended by a human, then 10 %
    assert [(d.action, d.by) for d in st.decisions if d.by == "alice"] == [("paused", "alice"), ("promoted", "alice")]

    await handle.execute_update(ModelRolloutWorkflow.abort, RolloutControl(by="alice", reason="wrong candidate"))
    with pytest.raises((WorkflowUpdateFailedError, RPCError)) as refused:
        await handle.execute_update(ModelRolloutWorkflow.promote, alice)
    # Refused by the validator while the abort is under way, or by Temporal once the rollout has ended.
    error = refused.value
    message = str(error.cause) if isinstance(error, WorkflowUpdateFailedError) else str(error)
    assert "cannot promote: the rollout is being aborted" in message or "completed" in message, message
    result: RolloutResult = await handle.result()
    assert result.outcome == "aborted"


@dataclass
class HeldRouting:
    """The routing activity stops before writing a table of `weight`, until released: the rollout's loop is then
    busy carrying out a control while the next ones arrive."""

    weight: float
    entered: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        write = routing.write_table

        def held(client, bucket, table):
            if table.candidate is not None and table.weight == self.weight:
                self.entered.set()
                self.release.wait(timeout=60)
            return write(client, bucket, table)

        monkeypatch.setattr(routing, "write_table", held)

    async def reached(self) -> None:
        assert await asyncio.to_thread(self.entered.wait, 30), f"the rollout never routed {self.weight:g}%"


async def _refusal(handle: WorkflowHandle, update: str, control: RolloutControl) -> str:
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(update, control)
    return str(refused.value.cause)


async def test_an_abort_outranks_a_concurrent_promotion_to_100_percent(rollout: Rollout,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The promotion is routing 100 % when the abort arrives: the abort is accepted, every promote after it is
    refused with its reason, and the candidate never becomes production."""
    held = HeldRouting(weight=100)
    held.install(monkeypatch)
    handle = await rollout.start()
    await rollout.env.sleep(DAY)
    alice, bob = RolloutControl(by="alice", reason="ship it"), RolloutControl(by="bob", reason="bad model")
    await handle.execute_update(ModelRolloutWorkflow.promote_full, alice)
    await held.reached()
    try:
        await handle.execute_update(ModelRolloutWorkflow.abort, bob)
        for update in ("promote", "promote_full"):
            assert "being aborted (by bob: bad model)" in await _refusal(handle, update, alice)
    finally:
        held.release.set()
    result: RolloutResult = await handle.result()
    assert result.outcome == "aborted" and result.reason == "bad model"
    assert rollout.registry.get(rollout.candidate).stage == "candidate"
    assert rollout.routing().candidate is None  # every incident served by the baseline again


async def test_retry_withdraws_an_abort_not_yet_carried_out(rollout: Rollout,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    held = HeldRouting(weight=50)  # the A/B test's first routing
    held.install(monkeypatch)
    handle = await rollout.start()
    await held.reached()
    alice = RolloutControl(by="alice", reason="wrong candidate?")
    try:
        assert "no abort is pending" in await _refusal(handle, "retry", alice)
        await handle.execute_update(ModelRolloutWorkflow.abort, alice)
        assert "being aborted (by alice: wrong candidate?)" in await _refusal(handle, "promote", alice)
        await handle.execute_update(ModelRolloutWorkflow.retry,
                                    RolloutControl(by="alice", reason="it was the right one"))
        await handle.execute_update(ModelRolloutWorkflow.promote, alice)  # accepted again
    finally:
        held.release.set()
    await rollout.env.sleep(timedelta(hours=1))
    st = await status(handle)
    assert st.phase == "running" and st.step_index == 2 and st.weight == 10  # the A/B test was promoted, then 10 %
    assert [d.action for d in st.decisions if d.by == "alice"] == ["abort requested", "abort withdrawn", "promoted"]
    await handle.terminate(reason="test finished")
