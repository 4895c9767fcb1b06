"""`agent-sre drill` with the tiny model and a small budget, against the session's real stack (Temporal, S3, the
cluster simulator): production serves simulated incidents, the mix shifts, the learning schedule's cycles run on
its interval and train on what production saw (GRPO on the re-created incidents), and every cycle is recorded in
the drill's report; the incidents production leaves unhealthy go to the on-call (the runbook), whose episodes are
stored for the cycles. The mechanics only: a tiny random model resolves nothing, so no figure here says it learns.
A rollout that waits for a human is aborted by the drill (it has none), and how it ended is recorded. The demo's
drill stage runs as `make demo` runs it, from the tiny model instead of the demo's trained one."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from isolated_workers import running_workers, terminate_running
from llm_fixtures import runbook_episode
from rich.console import Console
from store_fixtures import settings_with_own_bucket
from temporalio.service import RPCError
from typer.testing import CliRunner

from agent_sre.activities.training import can_rehearse
from agent_sre.cli import app
from agent_sre.cli import demo as demo_cli
from agent_sre.cli import drill as drill_cli
from agent_sre.config import Settings, get_settings
from agent_sre.episodes import interleave_by_fault
from agent_sre.learning import demo as drill_demo
from agent_sre.learning import store as streams
from agent_sre.learning.drill import Rollouts, Traffic, families, production_model, window
from agent_sre.models.episode import OutcomeStats
from agent_sre.models.learning import CycleRecord, DrillCycle, DrillPlan, DrillReport, LearningConfig, RolloutStarted
from agent_sre.models.rollout import AbTestStep, PauseStep, RolloutPlan, RolloutRequest
from agent_sre.models.training import TrajectoryFilter
from agent_sre.registry import Registry
from agent_sre.rollout.client import start_rollout
from agent_sre.scenarios import default_catalog, heldout_suite, load_scenarios
from agent_sre.storage import object_store
from agent_sre.temporal import connect
from agent_sre.trajectory_store import trajectory_objects, write_trajectory

LENIENT = {"success_rate": 1, "false_positive_rate": 1, "harmful_rate": 1, "invalid_action_rate": 1}
TINY_TRAINING = {"settle_s": 5, "training": {"algorithm": "grpo", "base": "base", "requested_by": "drill test",
                              "grpo": {"max_steps": 1, "group_size": 2, "max_turns": 1, "max_new_tokens": 8,
                                       "device": "cpu"},
                              "evaluation": {"max_turns": 1, "max_new_tokens": 8, "tolerances": LENIENT}}}


async def test_the_drill_serves_production_shifts_the_mix_and_records_the_scheduled_cycles(
        stack: Settings, tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(drill_cli, "console", Console(width=250))
    (tmp_path / "learning.json").write_text(json.dumps(TINY_TRAINING))
    name = f"drill-{uuid.uuid4().hex[:6]}"
    with settings_with_own_bucket(stack, "drill") as settings:
        client = await connect(settings)
        async with running_workers(client, settings) as isolated:
            for queue in ("queue_agent", "queue_tools", "queue_policy", "queue_training"):
                monkeypatch.setenv(f"AGENT_SRE_{queue.upper()}", getattr(isolated, queue))
            get_settings.cache_clear()
            try:
                result = await asyncio.to_thread(CliRunner().invoke, app, [
                    "drill", "--model", str(tiny_model_dir), "--cycles", "1", "--every", "15s",
                    "--incidents-per-cycle", "4", "--concurrency", "2", "--max-steps", "2", "--mix", "bad-image",
                    "--shifted", "bad-image-tag", "--shift-after", "2", "--min-episodes", "2", "--eval-limit", "1",
                    "--plan", "none", "--config", str(tmp_path / "learning.json"), "--time-limit", "8m",
                    "--escalate", "runbook", "--name", name, "--no-stack", "--no-workers"])
            finally:
                query = 'ExecutionStatus="Running"'
                await terminate_running(client, [w.id async for w in client.list_workflows(query)
                                                 if name in w.id])
                get_settings.cache_clear()
        assert result.exit_code == 0, result.output
        report = DrillReport.model_validate_json((settings.data_dir / "drill" / name / "report.json").read_text())
        stored = streams.list_records(object_store(settings), settings.s3_bucket, name)
        stages = {v: e.stage for v, e in Registry.from_settings(settings).index().versions.items()}
        written = (settings.data_dir / "drill" / name / "report.md").read_text()
        escalations = [key for key, _ in trajectory_objects(object_store(settings), settings.s3_bucket,
                                                             model_version="runbook-v1")]

    model = report.plan.model
    assert model.startswith("drill-tiny-smollm2-") and report.production_at_end == model
    # the gate judges with production's step budget (--max-steps), not the config's tighter one
    assert report.plan.learning.training.evaluation.max_turns == 2
    # incidents were served by production throughout, and the mix shifted
    windows = [c.before for c in report.cycles] + [report.after]
    assert report.after is not None and report.after.incidents >= 4 and not report.notes
    assert report.shifted_at is not None and sum(w.shifted for w in windows) >= 1
    assert all(set(w.served_by) <= {model} for w in windows) and sum(w.incidents for w in windows) >= 6
    # what production left unhealthy (with this model, every incident) the runbook took over, and its episodes were
    # stored as the runbook's; production's figures stay production's own
    handed = sum(w.escalated for w in windows)
    assert handed == sum(w.incidents for w in windows) and sum(w.escalations_resolved for w in windows) >= 1
    assert len(escalations) >= handed and all("-escalated-remediation" in key for key in escalations)
    assert not any(w.success for w in windows) and "escalated" in written
    # the cycles ran on the schedule (its runs' ids and interval-aligned times), one of them trained on production's
    # incidents re-created in the simulator, and each is recorded in the report and in the store
    assert [c.record for c in report.cycles] == stored and stored
    assert all(r.cycle_id.startswith(f"learning-{name}-") and r.cutoff.timestamp() % 15 == 0 for r in stored)
    # --cycles 1 pauses the schedule once a cycle has trained; a cycle that had already started finishes too
    trained, *late = [c.record for c in report.cycles if c.record.training is not None]
    assert trained.ended_at is not None and len(late) <= 1 and all(r.started_at >= trained.ended_at for r in late)
    assert trained.status == "registered" and trained.data is not None and trained.data.replay.train
    assert stages[trained.version] == "candidate" and stages[model] == "production"
    assert "| cycle | incidents before it |" in written
    assert f"drill {name}" in result.output and "registered" in result.output
    # the progress line, every 20 s
    assert re.search(r"\d+ incidents served \(\d+ shifted, \d+ failed\) · \d+ cycles ended", result.output)
    # the terminal table: a column per cycle, a row per figure
    assert any(line.startswith("│ served by") and model in line for line in result.output.splitlines())
    assert all(f"cycle {n}" in result.output for n in range(1, len(report.cycles) + 1)) and "after" in result.output
    with pytest.raises(RPCError, match="not found"):  # the drill deletes its schedule
        await client.get_schedule_handle(name).describe()


def test_a_drill_whose_cycles_rehearse_refuses_to_start_on_a_store_with_nothing_to_rehearse(
        stack: Settings, tmp_path: Path) -> None:
    """Rehearsal reads expert episodes from the store; on a fresh one every cycle would serve a window and then
    refuse to train. The drill says so before it serves, registers or schedules anything."""
    rehearse = {"policies": ["runbook"], "resolved_only": True, "per_fault_class": 2}
    (tmp_path / "learning.json").write_text(json.dumps({"training": {
        "algorithm": "offpolicy", "base": "base", "requested_by": "drill test", "data": {"rehearsal": rehearse}}}))
    name = f"drill-{uuid.uuid4().hex[:6]}"
    with settings_with_own_bucket(stack, "rehearse") as settings:
        refused = CliRunner().invoke(app, ["drill", "--config", str(tmp_path / "learning.json"), "--name", name,
                                           "--no-stack", "--no-workers"])
        client, bucket = object_store(settings), settings.s3_bucket
        registered = Registry.from_settings(settings).index().versions
        request = LearningConfig.model_validate_json((tmp_path / "learning.json").read_text()).training
        assert not can_rehearse(client, bucket, request)
        held_out = runbook_episode("oom", run_id="held-out")
        assert held_out.incident.scenario is not None
        held_out.incident.scenario.name = load_scenarios(heldout_suite())[0].name  # never rehearsed
        write_trajectory(client, bucket, held_out)
        assert not can_rehearse(client, bucket, request)
        write_trajectory(client, bucket, runbook_episode("oom"))
        assert can_rehearse(client, bucket, request)
        other = TrajectoryFilter(**{**rehearse, "policies": ["scripted"]})
        assert not can_rehearse(client, bucket, request.model_copy(update={"data": request.data.model_copy(
            update={"rehearsal": other})}))
    assert refused.exit_code == 1 and "holds none it selects" in " ".join(refused.output.split())
    assert not any(v.startswith("drill-") for v in registered) and not (settings.data_dir / "drill" / name).exists()


async def test_the_drill_aborts_a_rollout_that_waits_for_a_human_and_records_how_it_ended(
        temporal_server: Settings, s3_store: Settings) -> None:
    with settings_with_own_bucket(s3_store, "drillrollout") as settings:
        Registry.from_settings(settings).register("runbook-v2", policy="runbook", by="test", reason="a candidate")
        client = await connect(settings)
        async with running_workers(client, settings) as isolated:
            plan = RolloutPlan(name="waits", steps=[PauseStep(reason="a human looks first"),
                                                    AbTestStep(weight=50, duration=timedelta(hours=1))])
            request = RolloutRequest(candidate="runbook-v2", baseline="runbook-v1", plan=plan, requested_by="test")
            handle = await start_rollout(client, request, isolated, workflow_id=f"rollout-{uuid.uuid4().hex[:6]}")
            now = datetime.now(UTC)
            cycle = DrillCycle(before=window([]), record=CycleRecord(
                name="d", cycle_id="c", run_id="r", cutoff=now, started_at=now, status="registered",
                rollout=RolloutStarted(workflow_id=handle.id, first_execution_run_id=handle.first_execution_run_id,
                                       request=request)))
            rollouts = Rollouts(client)
            rollouts.track(cycle)
            try:
                for _ in range(60):
                    if not await rollouts.running():
                        break
                    await asyncio.sleep(0.5)
            finally:
                await terminate_running(client, [handle.id])
    assert cycle.rollout_outcome == "aborted"
    assert cycle.rollout_reason is not None and "the drill has no human to decide" in cycle.rollout_reason


def test_the_drill_serves_every_family_of_the_usual_mix_beside_the_shifted_one() -> None:
    catalog = load_scenarios(default_catalog())
    mix = ["bad-image", "scaled-to-zero", "oom", "false-alarm"]
    plan = DrillPlan(model="m", mix=mix, shifted="init-fail", shift_after=2, learning=LearningConfig(name="d"))
    traffic = Traffic(None, get_settings(), plan, interleave_by_fault(families(catalog, mix)),  # type: ignore[arg-type]
                      interleave_by_fault(families(catalog, ["init-fail"])))
    usual = {s.fault for s in families(catalog, mix)}
    served = []
    for _ in range(2 + 2 * len(usual)):  # enough draws of the usual mix to meet each of its faults
        served.append(traffic._next())
        traffic.started += 1
    assert [shifted for _, shifted in served] == [False, False] + [False, True] * len(usual)  # half, after two
    assert {s.fault for s, shifted in served if not shifted} == usual


def stats(group: str, success_rate: float, episodes: int = 2) -> OutcomeStats:
    return OutcomeStats(group=group, episodes=episodes, success_rate=success_rate, mean_time_to_mitigate_s=None,
                        mean_steps=1, false_positive_rate=0, harmful_rate=0, invalid_action_rate=0, mean_reward=0)


def test_the_demo_drill_shifts_to_the_fault_type_production_did_worst_on() -> None:
    batch = [stats("bad_image", 1.0, 4), stats("quota_exceeded", 0.0, 2), stats("cordoned_node", 0.0, 3),
             stats("dependency_down", 0.5, 2), stats("all", 0.6, 11)]
    assert drill_demo.worst_fault(batch) == "cordoned_node"  # lowest success, then the most episodes
    assert drill_demo.worst_fault([stats("bad_image", 1.0), stats("all", 1.0)]) is None


@pytest.mark.slow
@pytest.mark.timeout(900)  # the schedule's first whole minute, the cycle, two windows of incidents
async def test_the_demo_drill_stage_runs_a_scheduled_cycle_on_what_production_served(
        stack: Settings, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    catalog = load_scenarios(default_catalog())
    batch = [stats("bad_image", 1.0), stats("service_target_port", 0.0)]  # what the runbook does on them
    shown = Console(record=True, width=250)
    monkeypatch.setattr(demo_cli, "console", shown)
    with settings_with_own_bucket(stack, "demodrill") as settings:
        client = await connect(settings)
        registry = Registry.from_settings(settings)
        base = production_model(registry, str(tiny_model_dir), settings.models_dir)
        async with running_workers(client, settings) as isolated:
            try:
                report = await demo_cli.drill_stage(client, isolated, registry, base, catalog, batch, concurrency=4)
            finally:
                query = 'ExecutionStatus="Running"'
                await terminate_running(client, [w.id async for w in client.list_workflows(query)
                                                 if "demo-drill" in w.id])
        assert report is not None
        stored = streams.list_records(object_store(settings), settings.s3_bucket, report.plan.learning.name)

    plan = report.plan
    assert (plan.model, plan.mix, plan.shifted) == ("runbook-v1", ["bad_image"], "service_target_port")
    assert not report.notes and report.production_at_end == "runbook-v1"
    # production served both windows, half of the incidents shifted after the first six
    [first, *_] = [c.before for c in report.cycles]
    assert report.after is not None and report.after.incidents >= drill_demo.INCIDENTS_PER_WINDOW
    assert first.served_by == {"runbook-v1": first.incidents} and first.shifted >= 1
    # one cycle, started by the schedule, trained from the base on those episodes and was judged
    assert [c.record for c in report.cycles] == stored
    assert all(r.cycle_id.startswith(f"learning-{plan.learning.name}-") for r in stored)
    [trained] = [r for r in stored if r.training is not None]
    assert trained.base == base and trained.data is not None
    assert trained.data.usable >= drill_demo.MIN_EPISODES
    assert trained.training is not None and trained.training.trained is not None
    assert trained.training.trained.offpolicy is not None and trained.training.trained.offpolicy.steps
    assert [e.overall.episodes for e in trained.training.evaluation] == [drill_demo.EVAL_SCENARIOS] * 2
    assert trained.status in ("registered", "rejected")
    # and the demo printed the per-cycle table
    text = re.sub(r"\s+", " ", shown.export_text())
    assert "5. Production drill" in text and "service_target_port (resolved 0% above)" in text
    assert f"drill {plan.learning.name}" in text and trained.status in text
