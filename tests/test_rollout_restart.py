"""A rollout outlives its infrastructure: mid-bake, the worker is killed and the Temporal dev server is stopped and
started again (its SQLite file keeps the history); a new worker picks the rollout up and it finishes on time."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from isolated_workers import isolated_queues
from rollout_data import BASELINE, GOOD, Profile, episode
from store_fixtures import settings_with_own_bucket
from worker_process import start_worker, stop_worker

from agent_sre import stack
from agent_sre.config import Settings, get_settings
from agent_sre.models.rollout import (
    AnalysisConfig,
    AnalyzeStep,
    BakeStep,
    GuardrailConfig,
    RolloutPlan,
    RolloutRequest,
    RolloutResult,
    SetWeightStep,
)
from agent_sre.registry import Registry
from agent_sre.rollout.client import start_rollout
from agent_sre.stack.isolated import isolated_env
from agent_sre.temporal import connect
from agent_sre.trajectory_store import write_trajectory
from agent_sre.workflows.rollout import ModelRolloutWorkflow

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="session")]
BAKE = timedelta(seconds=45)
PLAN = RolloutPlan(name="restart", steps=[SetWeightStep(weight=50), BakeStep(duration=BAKE), AnalyzeStep()],
                   analysis=AnalysisConfig(min_samples=40, min_ttm_samples=10),
                   guardrails=GuardrailConfig(interval=timedelta(seconds=5), lookback=timedelta(minutes=2),
                                              min_incidents=5))


def seed_window(settings: Settings, registry: Registry, version: str, profile: Profile, start: datetime,
                n: int) -> None:
    """`n` incidents of `profile` spread over the first 40 s of the bake."""
    for i in range(n):
        served = profile.outcomes[i % len(profile.outcomes)]
        at = start + timedelta(seconds=1 + 39 * i / n)
        write_trajectory(registry.client, settings.s3_bucket, episode(version, at, served, profile.ttm_s))


async def test_a_rollout_survives_a_temporal_and_worker_restart_mid_bake(s3_store: Settings, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    own = isolated_env(tmp_path / "data")  # a Temporal dev server of this test's own, to stop and start
    for name in ("AGENT_SRE_TEMPORAL_ADDRESS", "AGENT_SRE_TEMPORAL_UI_PORT", "AGENT_SRE_DATA_DIR"):
        monkeypatch.setenv(name, own[name])
    queues = isolated_queues(s3_store)
    for name, value in {"AGENT_SRE_QUEUE_AGENT": queues.queue_agent, "AGENT_SRE_QUEUE_TOOLS": queues.queue_tools,
                        "AGENT_SRE_QUEUE_POLICY": queues.queue_policy}.items():
        monkeypatch.setenv(name, value)
    log = tmp_path / "worker.log"
    workers = []
    with settings_with_own_bucket(s3_store, "restart") as settings:
        registry = Registry.from_settings(settings)
        registry.register("runbook-v2", policy="runbook", by="sre", reason="stricter rollback rule")
        await stack.up(settings, ["temporal"])
        try:
            workers.append(start_worker(log))
            client = await connect(settings)
            request = RolloutRequest(candidate="runbook-v2", baseline="runbook-v1", plan=PLAN, requested_by="test")
            handle = await start_rollout(client, request, settings)
            for _ in range(100):
                st = await handle.query(ModelRolloutWorkflow.status)
                if st.step is not None and st.step.kind == "bake":
                    break
                await asyncio.sleep(0.1)
            assert st.step is not None and st.step.kind == "bake", st
            weight_set_at = next(d.at for d in st.decisions if d.reason.endswith("set weight 50%"))
            seed_window(settings, registry, "runbook-v2", GOOD, weight_set_at, 60)
            seed_window(settings, registry, "runbook-v1", BASELINE, weight_set_at, 60)
            await asyncio.sleep(8)  # a guardrail check or so

            stop_worker(workers[-1], kill=True)
            (stopped,) = await stack.down(settings, ["temporal"])
            assert stopped.state == "stopped"
            await asyncio.sleep(3)
            await stack.up(settings, ["temporal"])
            workers.append(start_worker(log))

            client = await connect(settings)
            result: RolloutResult = await asyncio.wait_for(
                client.get_workflow_handle(handle.id, result_type=RolloutResult).result(), timeout=180)
            stage = registry.get("runbook-v2").stage
        finally:
            for worker in workers:
                stop_worker(worker)
            await stack.down(settings, ["temporal"])
            get_settings.cache_clear()

    assert result.outcome == "succeeded", result.reason
    steps = [d for d in result.decisions if d.action == "step"]
    assert [d.reason for d in steps] == ["step 1/3: set weight 50%", "step 2/3: bake 45s", "step 3/3: analyze"]
    assert steps[2].at - steps[1].at >= BAKE  # the bake's durable timer held across the restart
    assert [d.action for d in result.decisions].count("analysis passed") == 1
    assert result.latest_analysis is not None and result.latest_analysis.candidate.incidents == 60
    assert stage == "production"
