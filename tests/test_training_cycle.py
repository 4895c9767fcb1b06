"""The training cycle with the tiny model, against the session's real Temporal dev server and S3 store:
data validation, the gate, the whole TrainingCycleWorkflow (a real `accelerate launch` training job), the `stop`
signal ending the job's processes, and a retried `train_policy` resuming from its heartbeat checkpoint."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import io
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from isolated_workers import running_workers, terminate_running
from llm_fixtures import runbook_episode
from rich.console import Console
from store_fixtures import settings_with_own_bucket
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError
from temporalio.testing import ActivityEnvironment
from typer.testing import CliRunner, Result

from agent_sre import cas
from agent_sre.activities.training import TrainingActivities
from agent_sre.cli import app
from agent_sre.cli import models as models_cli
from agent_sre.cli import train as train_cli
from agent_sre.config import Settings, get_settings
from agent_sre.faults import FAULTS
from agent_sre.models.episode import OutcomeStats
from agent_sre.models.llm import SamplingConfig
from agent_sre.models.remediation import PolicyRef
from agent_sre.models.training import (
    ArchiveRequest,
    DataManifest,
    EvalReport,
    EvaluationConfig,
    GateRequest,
    GateTolerances,
    SFTConfig,
    TrainHeartbeat,
    TrainingRequest,
    TrainingStatus,
    TrainJob,
)
from agent_sre.policy.llm import LLMPolicy
from agent_sre.registry import Registry, StageError
from agent_sre.scenarios import heldout_suite, load_scenarios
from agent_sre.storage import object_store
from agent_sre.temporal import connect
from agent_sre.training.gate import judge, load_suite
from agent_sre.trajectory_store import write_trajectory
from agent_sre.workers.main import build_activities
from agent_sre.workflows.training import TrainingCycleWorkflow

BASE = "tiny-v0"
QUICK_EVAL = EvaluationConfig(suite=str(heldout_suite()), limit=2, max_turns=2, max_new_tokens=16)
FAST_SFT = SFTConfig(max_steps=4, learning_rate=2e-3, lr_scheduler="constant", max_length=2048)
Store = tuple[Settings, Registry]


@pytest.fixture
def store(s3_store: Settings, tiny_model_dir: Path) -> Iterator[Store]:
    """A bucket of this test's own, with the tiny model registered as BASE."""
    with settings_with_own_bucket(s3_store, "train") as settings:
        registry = Registry.from_settings(settings)
        registry.register(BASE, policy="llm", by="test", weights_dir=tiny_model_dir, reason="tiny test base")
        yield settings, registry


def seed_episodes(settings: Settings, n: int = 3) -> list[str]:
    """n resolved runbook episodes in the trajectory store; returns their keys."""
    faults = ["bad-image", "oom", "none"]
    client = object_store(settings)
    return [write_trajectory(client, settings.s3_bucket,
                             runbook_episode(faults[i % 3], run_id=f"run-{i}")).key for i in range(n)]


def request(**kw: Any) -> TrainingRequest:
    return TrainingRequest.model_validate({"algorithm": "sft", "base": BASE, "sft": FAST_SFT.model_dump(),
                                           "evaluation": QUICK_EVAL.model_dump(), "requested_by": "test", **kw})


def activities() -> TrainingActivities:
    """The training activities as a worker builds them, on the settings of the test's own bucket (`store`)."""
    return build_activities(get_settings()).training


def collect(req: TrainingRequest) -> DataManifest:
    return ActivityEnvironment().run(activities().collect_training_data, req)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def gone(pid: int) -> bool:
    """The process and its whole process group have exited (and were reaped)."""
    for probe in (os.kill, os.killpg):
        try:
            probe(pid, 0)
            return False
        except ProcessLookupError:
            pass
    return True


# --- data validation -----------------------------------------------------------------------------------------------
def test_data_validation_rejects_duplicates_and_incomplete_episodes_with_reasons(store: Store) -> None:
    settings, _ = store
    client, bucket = object_store(settings), settings.s3_bucket
    good = seed_episodes(settings)
    original = runbook_episode("oom", run_id="run-1")
    # the same episode (incident id and run) stored again, under a later model partition: the first read wins
    write_trajectory(client, bucket, original.model_copy(update={"model_version": "runbook-v2"}))
    unjudged = runbook_episode("bad-image", run_id="run-7").model_copy(update={"verdict": None})
    cancelled = runbook_episode("bad-image", run_id="run-8").model_copy(update={"termination": "cancelled"})
    other_policy = runbook_episode("bad-image", run_id="run-9").model_copy(update={"policy": "llm"})
    for t in (unjudged, cancelled, other_policy):
        write_trajectory(client, bucket, t)
    broken = b'{"schema_version": "trajectory.v1", "incident": 42}\n'
    client.put_object(bucket, "trajectories/date=2026-03-14/model=runbook-v1/broken__x.jsonl", io.BytesIO(broken),
                      len(broken))

    manifest = collect(request(data={"trajectories": {"policies": ["runbook"]}}))

    assert (manifest.episodes, manifest.expert_episodes) == (3, 3)
    assert manifest.counts == {"read": 8, "accepted": 3, "filtered: policy": 1, "rejected": 4,
                               "rejected: duplicate": 1, "rejected: incomplete": 2, "rejected: schema": 1}
    reasons = {r.key: r.reasons for r in manifest.rejected}
    assert any("duplicate: incident" in r[0] and "run run-1" in r[0] for r in reasons.values())
    assert any("incomplete: no verdict" in x for r in reasons.values() for x in r)
    assert any("incomplete: the episode was cancelled" in x for r in reasons.values() for x in r)
    assert reasons["trajectories/date=2026-03-14/model=runbook-v1/broken__x.jsonl"][0].startswith("schema:")
    # the accepted objects are pinned by the hash of their bytes
    assert sorted(item.uri for item in manifest.items) == sorted(f"s3://{bucket}/{k}" for k in good)
    for item in manifest.items:
        body, _ = cas.read(client, bucket, item.uri.removeprefix(f"s3://{bucket}/"))
        assert (item.sha256, item.bytes, item.rows) == (hashlib.sha256(body).hexdigest(), len(body), 1)


def test_sft_without_expert_episodes_and_grpo_on_the_evaluation_suite_are_refused(store: Store) -> None:
    settings, _ = store
    write_trajectory(object_store(settings), settings.s3_bucket, runbook_episode(outcome="unresolved"))
    with pytest.raises(ApplicationError, match="no expert episodes for SFT: 1 accepted") as refused:
        collect(request())
    assert refused.value.non_retryable
    with pytest.raises(ApplicationError, match="are in the evaluation suite") as overlap:
        collect(request(algorithm="grpo", sft=None, data={"simulated": {"scenarios": str(heldout_suite())}}))
    assert overlap.value.non_retryable


def test_the_expert_recipe_trains_on_the_demonstrations_the_ground_truth_verified(store: Store) -> None:
    """`train demonstrations` stores the expert's verified episodes; `--recipe expert` is SFT that imitates them."""
    settings, _ = store
    stored = invoke("train", "demonstrations", "--per-family", "1")
    assert stored.exit_code == 0, stored.output
    families = len(FAULTS)  # one demonstration of each fault family
    assert f"stored {families} verified expert demonstrations of {families} played (0 rejected)" in stored.output
    recipe = train_cli.build_request("sft", BASE, 1, "cpu", "recipe", None, ["expert"], None, None, 1, "", "test",
                           resolved_only=True)
    assert recipe.sft is not None and recipe.sft.expert_policies == ["expert"]
    assert recipe.data.trajectories.policies == ["expert"] and recipe.data.trajectories.resolved_only
    write_trajectory(object_store(settings), settings.s3_bucket, runbook_episode("oom", run_id="not-the-teacher"))
    manifest = collect(recipe)
    assert manifest.episodes == families and manifest.expert_episodes == families  # not the runbook's episode
    refused = invoke("train", "--recipe", "runbook")
    assert refused.exit_code != 0 and "--recipe takes expert" in refused.output


def test_an_unknown_or_rule_based_base_is_refused_before_any_data_is_read_or_any_cycle_started(store: Store) -> None:
    settings, registry = store
    registry.register("rules-v1", policy="runbook", by="test", reason="a rule-based version")
    for base, message in (("nope", "unknown model version 'nope'; registered:"),
                          ("rules-v1", "base rules-v1 is a rule-based policy")):
        with pytest.raises(ApplicationError, match=re.escape(message)) as refused:
            collect(request(base=base))  # no episodes stored: the base is what it refuses
        assert refused.value.non_retryable
        started = invoke("train", "--algorithm", "sft", "--base", base, "--version", f"from-{base}")
        assert started.exit_code == 1 and message in " ".join(started.output.split()), started.output
        assert "started" not in started.output


# --- the gate ------------------------------------------------------------------------------------------------------
def stats(success: float, false_positive: float = 0.0, harmful: float = 0.0, invalid: float = 0.0) -> OutcomeStats:
    return OutcomeStats(group="all", episodes=10, success_rate=success, mean_time_to_mitigate_s=30.0, mean_steps=4.0,
                        false_positive_rate=false_positive, harmful_rate=harmful, invalid_action_rate=invalid,
                        mean_reward=0.0)


def test_the_gate_allows_the_tolerances_and_nothing_more() -> None:
    parent = stats(0.6, false_positive=0.1, harmful=0.0, invalid=0.2)
    tolerances = GateTolerances(success_rate=0.05, false_positive_rate=0.0, harmful_rate=0.0,
                                invalid_action_rate=0.1)
    assert judge(stats(0.56, 0.1, 0.0, 0.3), parent, tolerances)[0]  # within every tolerance
    passed, reasons = judge(stats(0.5, 0.2, 0.1, 0.2), parent, tolerances)
    assert not passed
    assert [r.endswith(": ok") for r in reasons] == [False, False, False, True]
    assert reasons[0] == "success rate 50.0% vs parent 60.0% (tolerance 5.0%): worse beyond tolerance"


def test_a_limited_suite_takes_one_scenario_of_each_fault_type_before_a_second_of_any() -> None:
    faults = {s.fault for s in load_scenarios(heldout_suite())}
    suite_id, scenarios = load_suite(EvaluationConfig(limit=len(faults)))
    assert sorted(s.fault for s in scenarios) == sorted(faults)  # the suite's first files hold a few families
    assert suite_id.startswith(f"heldout-{len(faults)}-")


def test_a_failing_gate_archives_the_candidate_with_the_reason_and_a_passing_one_stays_candidate(
        store: Store, tmp_path: Path) -> None:
    _, registry = store
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "model.safetensors").write_bytes(b"weights")
    for name in ("worse", "fine"):
        registry.register(name, policy="llm", by="test", weights_dir=tmp_path / "w", parent=BASE)

    def report(version: str, success: float) -> EvalReport:
        return EvalReport(version=version, suite="heldout-2-abc", scenarios=2, rows=[stats(success)], stored=True)

    env = ActivityEnvironment()
    failed = env.run(activities().register_if_better, GateRequest(candidate=report("worse", 0.2),
                                                                   parent=report(BASE, 0.6),
                                                                   tolerances=GateTolerances(), by="gate"))
    assert (failed.passed, failed.stage) == (False, "archived")
    last = registry.get("worse").history[-1]
    assert (last.to_stage, last.by) == ("archived", "gate")
    assert "failed the training gate against tiny-v0" in last.reason and "success rate 20.0%" in last.reason
    with pytest.raises(Exception, match="only a candidate can start a rollout"):
        registry.start_canary("worse", by="test", reason="must not roll out")
    passed = env.run(activities().register_if_better, GateRequest(candidate=report("fine", 0.6),
                                                                   parent=report(BASE, 0.6),
                                                                   tolerances=GateTolerances(), by="gate"))
    assert (passed.passed, passed.stage, registry.get("fine").stage) == (True, "candidate", "candidate")
    with pytest.raises(ApplicationError, match="different suites"):
        env.run(activities().register_if_better, GateRequest(
            candidate=report("fine", 0.6), parent=report(BASE, 0.6).model_copy(update={"suite": "other"}),
            tolerances=GateTolerances(), by="gate"))


def test_an_unjudged_candidate_of_this_training_is_archived_and_nothing_else(store: Store, tmp_path: Path) -> None:
    _, registry = store
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "model.safetensors").write_bytes(b"weights")
    ours, theirs = request(version="ours").model_dump(mode="json"), request(version="theirs").model_dump(mode="json")
    registry.register("ours", policy="llm", by="test", weights_dir=tmp_path / "w", training_request=ours)
    registry.register("theirs", policy="llm", by="test", weights_dir=tmp_path / "w", training_request=theirs)
    env = ActivityEnvironment()

    def archive(version: str, training_request: dict[str, Any]) -> str | None:
        return env.run(activities().archive_version, ArchiveRequest(
            version=version, training_request=training_request, by="cycle", reason="stopped before the gate"))

    assert archive("ours", ours) == "archived"
    assert registry.get("ours").history[-1].reason == "stopped before the gate"
    assert archive("theirs", ours) is None and registry.get("theirs").stage == "candidate"
    assert archive("never-registered", ours) is None
    with pytest.raises(StageError, match="only a candidate can be archived"):
        registry.archive("runbook-v1", by="test", reason="production is not archived this way")


# --- the workflow --------------------------------------------------------------------------------------------------
async def pending_heartbeat(client: Client, handle: WorkflowHandle) -> TrainHeartbeat | None:
    for pending in (await handle.describe()).raw_description.pending_activities:
        if pending.activity_type.name == "train_policy" and pending.heartbeat_details.payloads:
            details = await client.data_converter.decode(pending.heartbeat_details.payloads)
            return TrainHeartbeat.model_validate(details[0])
    return None


async def test_a_training_cycle_trains_evaluates_gates_and_registers_with_lineage(
        temporal_server: Settings, store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Started and followed through the CLI (`train --request FILE --wait`, `train status ID`), as an operator does."""
    settings, registry = store
    keys = seed_episodes(settings)
    client = await connect(settings)
    req = request(version=f"sft-{uuid.uuid4().hex[:6]}", checkpoint_steps=2,
                  evaluation={**QUICK_EVAL.model_dump(), "tolerances": {"success_rate": 1, "false_positive_rate": 1,
                                                                        "harmful_rate": 1, "invalid_action_rate": 1}})
    (tmp_path / "request.json").write_text(req.model_dump_json())
    monkeypatch.setattr(train_cli, "console", Console(width=250))
    monkeypatch.chdir(tmp_path)  # a relative data dir, as `make demo` has: the job must find its files
    async with running_workers(client, settings.model_copy(update={"data_dir": Path("data")})) as isolated:
        monkeypatch.setenv("AGENT_SRE_QUEUE_TRAINING", isolated.queue_training)
        monkeypatch.setenv("AGENT_SRE_DATA_DIR", "data")
        get_settings.cache_clear()
        cli = asyncio.create_task(asyncio.to_thread(invoke, "train", "--request", str(tmp_path / "request.json"),
                                                    "--wait"))
        handle = client.get_workflow_handle(f"training-{req.version}", result_type=TrainingStatus)
        try:
            seen: list[TrainingStatus] = []
            while not cli.done():
                with contextlib.suppress(RPCError):  # not started yet
                    seen.append(await handle.query(TrainingCycleWorkflow.progress))
                await asyncio.sleep(0.3)
            followed = await cli
            status = await handle.result()
            shown = await asyncio.to_thread(invoke, "train", "status", handle.id)
            details = (await handle.query("__temporal_workflow_metadata",
                                          result_type=WorkflowMetadata)).current_details
        finally:
            await terminate_running(client, [handle.id])

    # progress: the phases in order, and the training step while it trained
    phases = list(dict.fromkeys(s.phase for s in seen))
    assert phases[0] in ("collecting", "training") and "training" in phases and "evaluating" in phases
    assert any(s.phase == "training" and s.metrics is not None and s.metrics.step >= 1 for s in seen)
    assert (status.phase, status.registered, status.candidate) == ("registered", True, req.version)
    assert status.data is not None and status.data.episodes == 3
    assert status.trained is not None and status.trained.sft is not None
    assert status.trained.launcher.startswith("accelerate launch --config_file infra/accelerate/cpu.yaml")
    assert status.trained.sft.steps == 4 and status.metrics is not None and status.metrics.step == 4
    assert status.gate is not None and status.gate.passed and len(status.gate.reasons) == 4
    candidate_eval, parent_eval = status.evaluation
    assert (candidate_eval.version, parent_eval.version) == (req.version, BASE)
    assert candidate_eval.suite == parent_eval.suite and candidate_eval.scenarios == 2
    assert candidate_eval.stored and parent_eval.stored
    assert details.startswith("**registered**") and "passed the gate" in details
    for output in (followed, shown):
        assert output.exit_code == 0, output.output
        text = re.sub(r"\s+", " ", output.output)
        assert "phase │ registered" in text and f"{req.version} is candidate" in text
        assert f"{req.version} on {candidate_eval.suite}" in text
    assert f"training cycle training-{req.version} started" in followed.output
    # The follower polls, so which phase it catches at the last step depends on timing; the final status
    # it prints always carries the progress line.
    assert "sft step 4/4" in re.sub(r"\s+", " ", followed.output)

    # the registry: a candidate with its lineage, its data pinned by hash, its results stored beside it
    version = registry.get(req.version)
    card = version.card
    assert version.stage == "candidate" and card.parent == BASE and card.created_by == "test"
    assert card.training_request == req.model_dump(mode="json")
    client_s3 = object_store(settings)
    assert sorted(i.uri for i in card.data_manifest) == sorted(f"s3://{settings.s3_bucket}/{k}" for k in keys)
    for item in card.data_manifest:
        body, _ = cas.read(client_s3, settings.s3_bucket, item.uri.split("/", 3)[3])
        assert item.sha256 == hashlib.sha256(body).hexdigest()
    assert {f.path for f in card.files} >= {"config.json", "model.safetensors", "tokenizer.json"}
    assert registry.eval_results(req.version)[candidate_eval.suite] == candidate_eval.rows
    assert registry.eval_results(BASE)[parent_eval.suite] == parent_eval.rows
    assert not list(client_s3.list_objects(settings.s3_bucket, prefix="training/", recursive=True))

    # the LLM policy serves the new version by its registered name
    policy = LLMPolicy(registry=registry.local_path, sampling=SamplingConfig(max_new_tokens=4))
    t = runbook_episode().model_copy(update={"steps": [], "conversation": []})
    decision = policy.decide(PolicyRef(name="llm", version=req.version), t)
    assert decision.model_version == req.version and decision.completion_token_ids


def test_eval_prints_the_table_and_stores_the_results_with_the_version(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    _, registry = store
    wide = Console(width=250)
    monkeypatch.setattr(train_cli, "console", wide)
    monkeypatch.setattr(models_cli, "console", wide)
    first = invoke("eval", "--version", BASE, "--limit", "1", "--max-turns", "1")
    assert first.exit_code == 0, first.output
    [(suite, rows)] = registry.eval_results(BASE).items()
    assert suite.startswith("heldout-1-") and [r.group for r in rows][-1] == "all" and rows[-1].episodes == 1
    assert f"{BASE} on {suite} · 1 scenarios · stored with the version" in first.output
    assert "reused stored results" in invoke("eval", "--version", BASE, "--limit", "1", "--max-turns", "1").output
    unstored = invoke("eval", "--version", BASE, "--limit", "2", "--max-turns", "1", "--no-store")
    assert "· 2 scenarios · not stored (--no-store)" in unstored.output and list(registry.eval_results(BASE)) == [suite]
    assert f"evaluation · {suite}" in invoke("models", "show", BASE).output
    unknown = invoke("eval", "--version", "nope")
    assert unknown.exit_code == 1 and "unknown model version 'nope'" in unknown.output


@pytest.mark.asyncio(loop_scope="session")
async def test_stop_cancels_the_training_job_and_ends_the_cycle_stopped(temporal_server: Settings,
                                                                        store: Store) -> None:
    settings, registry = store
    seed_episodes(settings)
    client = await connect(settings)
    long = request(version=f"long-{uuid.uuid4().hex[:6]}", checkpoint_steps=1000,
                   sft={**FAST_SFT.model_dump(), "max_steps": 10_000})
    async with running_workers(client, settings) as isolated:
        handle = await client.start_workflow(TrainingCycleWorkflow.run, long, id=f"training-{long.version}",
                                             task_queue=isolated.queue_training)
        try:
            pid = None
            for _ in range(600):  # until the job trains (a step is logged) and its pid is in the heartbeat
                progress = await handle.query(TrainingCycleWorkflow.progress)
                beat = await pending_heartbeat(client, handle)
                if progress.metrics is not None and beat is not None and beat.pid is not None:
                    pid = beat.pid
                    break
                await asyncio.sleep(0.2)
            assert pid is not None and not gone(pid)
            await handle.signal(TrainingCycleWorkflow.stop, "enough")
            status = await asyncio.wait_for(handle.result(), timeout=60)
        finally:
            await terminate_running(client, [handle.id])
    assert (status.phase, status.stop_reason, status.registered) == ("stopped", "enough", False)
    assert status.metrics is not None and status.metrics.step < 10_000
    assert gone(pid)
    assert long.version not in registry.index().versions


# --- resuming ------------------------------------------------------------------------------------------------------
@pytest.mark.slow  # ~2 min on 2 cores: SFT + GRPO twice
async def test_a_retried_train_activity_resumes_from_the_heartbeat_checkpoint(store: Store) -> None:
    """SFT then GRPO; the first attempt is cancelled in GRPO, once a GRPO checkpoint is stored. The retry gets the
    finished SFT model and that checkpoint from the object store and trains only the GRPO steps still to do."""
    settings, registry = store
    seed_episodes(settings)
    req = request(algorithm="sft+grpo", checkpoint_steps=1, sft={**FAST_SFT.model_dump(), "max_steps": 2},
                  grpo={"max_steps": 3, "group_size": 2, "max_turns": 2, "max_new_tokens": 8, "device": "cpu"})
    job = TrainJob(request=req, data=collect(req), version=f"resumed-{uuid.uuid4().hex[:6]}")

    first = ActivityEnvironment()
    beats: list[TrainHeartbeat] = []
    first.on_heartbeat = lambda *details: beats.append(details[0].model_copy(deep=True))
    attempt = asyncio.create_task(first.run(activities().train_policy, job))
    while not any(b.checkpoint and "/grpo/" in b.checkpoint.prefix for b in beats) and not attempt.done():
        await asyncio.sleep(0.2)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await attempt
    last = beats[-1]
    assert last.pid is not None and gone(last.pid)  # the cancelled attempt's job is gone
    assert list(last.finished) == ["sft"] and last.checkpoint is not None
    saved = last.checkpoint.prefix
    step = int(saved.rsplit("-", 1)[1])
    assert saved == f"training/{job.version}/grpo/checkpoint-{step}" and step < 3
    stored = {o.object_name for o in object_store(settings).list_objects(settings.s3_bucket,
                                                                       prefix=f"training/{job.version}/",
                                                                       recursive=True)}
    assert {f"{saved}/trainer_state.json", f"{saved}/model.safetensors",
            f"training/{job.version}/sft/model/model.safetensors"} <= stored

    # the retry: the server hands it the last heartbeat's details (as plain JSON)
    second = ActivityEnvironment()
    second.info = dataclasses.replace(second.info, attempt=2, heartbeat_details=[last.model_dump(mode="json")])
    resumed: list[TrainHeartbeat] = []
    second.on_heartbeat = lambda *details: resumed.append(details[0].model_copy(deep=True))
    trained = await second.run(activities().train_policy, job)

    assert trained.resumed_from == saved
    # until GRPO finishes, a retry of this attempt could resume too: the checkpoint stays in the heartbeat
    assert all(b.checkpoint is not None for b in resumed if "grpo" not in b.finished)
    logged = sorted({(b.metrics.stage, b.metrics.step) for b in resumed
                     if b.metrics is not None and b.metrics != last.metrics})
    assert logged == [("grpo", n) for n in range(step + 1, 4)]  # no SFT again, GRPO after the checkpoint
    assert trained.sft is not None and trained.sft.steps == 2  # SFT's result came back with its model
    assert trained.grpo is not None and [s.step for s in trained.grpo.steps] == list(range(step, 3))  # its curve too
    card = registry.get(job.version).card
    assert card.parent == BASE and card.training_request == req.model_dump(mode="json")
    assert not list(object_store(settings).list_objects(settings.s3_bucket, prefix="training/", recursive=True))
