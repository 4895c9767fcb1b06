"""Off-policy RL on logged episodes with the tiny model: the replay is exactly the rollout GRPO trains on, the
per-fault-class baselines, the truncated importance ratios, real AWPG and KTO runs through TRL, refusals of
unusable data, and an `offpolicy` training job through the training activities (accelerate launch, registry)."""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import torch
from llm_fixtures import runbook_episode
from pydantic import ValidationError
from safetensors.torch import load_file
from store_fixtures import settings_with_own_bucket
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment
from trajectory_factory import finish, make_trajectory, read, step, write
from transformers import AutoTokenizer

from agent_sre.cli import train as train_cli
from agent_sre.config import Settings
from agent_sre.models.training import (
    DataSelection,
    GRPOTrainingConfig,
    OffPolicyConfig,
    TrainingRequest,
    TrainingStatus,
    TrainJob,
    TrajectoryFilter,
)
from agent_sre.models.trajectory import Trajectory
from agent_sre.policy.llm.chat import chat_messages
from agent_sre.policy.llm.checkpoint import load_policy_model
from agent_sre.registry import Registry
from agent_sre.scenarios import heldout_suite, load_scenarios
from agent_sre.simulator.simulator import Simulator
from agent_sre.storage import object_store
from agent_sre.training.grpo import Rollout, run_rollouts
from agent_sre.training.offpolicy import kto_rows, replay, score_episodes, train_offpolicy, truncated_ratios
from agent_sre.trajectory_store import write_trajectory
from agent_sre.workers.main import build_activities

FAST = {"max_steps": 1, "batch_size": 2, "learning_rate": 1e-3, "device": "cpu"}


@pytest.fixture(scope="module")
def logged(tiny_model_dir: Path) -> list[Rollout]:
    """Two episodes the tiny model played in the simulator: answers logged with token ids and logprobs."""
    scenario = next(s for s in load_scenarios() if s.fault == "bad_image")
    return run_rollouts(load_policy_model(tiny_model_dir, device="cpu"), [scenario, scenario],
                        GRPOTrainingConfig(max_turns=2, max_new_tokens=8, group_size=2), Simulator(speed=0))


def episodes_of(rollouts: list[Rollout]) -> list[Trajectory]:
    return [r.trajectory for r in rollouts if r.trajectory is not None]


def weights_changed(before: Path, after: Path) -> bool:
    old, new = load_file(before / "model.safetensors"), load_file(after / "model.safetensors")
    return any(not torch.equal(old[name], new[name]) for name in old)


def test_the_replay_is_the_rollout_grpo_trained_on_and_runbook_answers_are_retokenised(
        logged: list[Rollout], tiny_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    for rollout, episode in zip(logged, score_episodes(episodes_of(logged), OffPolicyConfig()).episodes,
                                strict=True):
        replayed = replay(tokenizer, episode)
        # token for token, mask for mask, logprob for logprob: the model's answers trained, the tools' not
        assert (replayed.prompt_ids, replayed.completion_ids, replayed.env_mask, replayed.logprobs) == (
            rollout.prompt_ids, rollout.completion_ids, rollout.env_mask, rollout.logprobs)
        steps = episode.trajectory.steps
        assert sum(replayed.env_mask) == sum(len(s.decision.completion_token_ids or []) for s in steps)

    for episode in score_episodes([runbook_episode("bad-image"), runbook_episode("oom")], OffPolicyConfig()).episodes:
        t, replayed = episode.trajectory, replay(tokenizer, episode)
        rendered = tokenizer.apply_chat_template(chat_messages(t.conversation), tokenize=False)
        assert tokenizer.decode(replayed.prompt_ids + replayed.completion_ids) + "\n" == rendered
        trained = [(i, lp) for i, m, lp in zip(replayed.completion_ids, replayed.env_mask, replayed.logprobs,
                                                strict=True) if m]
        assert tokenizer.decode([i for i, _ in trained]) == "".join(s.decision.completion + "<|im_end|>"
                                                                    for s in t.steps)
        assert all(math.isnan(lp) for _, lp in trained)  # the runbook logs no logprobs: unknown, not 0
        assert all(lp == 0.0 for lp, m in zip(replayed.logprobs, replayed.env_mask, strict=True) if not m)


def test_per_fault_class_baselines_credit_the_better_episode_of_each_class() -> None:
    clean = make_trajectory([read(), write(), finish()])
    sloppy = make_trajectory([step(None, None, invalid_reason="not valid JSON"), read(), write(), finish()])
    oom_fixed = make_trajectory([read(), write(), finish()], fault="oom")
    oom_failed = make_trajectory([read(), finish()], fault="oom", outcome="unresolved", alert_resolved=False)
    data = [clean, sloppy, oom_fixed, oom_failed]

    def advantages(**config: object) -> list[float]:
        return [e.advantage for e in score_episodes(data, OffPolicyConfig(**config)).episodes]

    per_class = score_episodes(data, OffPolicyConfig(scale_advantages=False)).episodes
    returns = [e.episode_return for e in per_class]
    assert [e.incident_class for e in per_class] == ["bad-image", "bad-image", "oom", "oom"]
    # two episodes of a class are compared with each other (leave-one-out)
    assert [e.advantage for e in per_class] == pytest.approx([returns[0] - returns[1], returns[1] - returns[0],
                                                              returns[2] - returns[3], returns[3] - returns[2]])
    assert per_class[0].advantage > 0 > per_class[1].advantage and per_class[2].advantage > 0 > per_class[3].advantage
    # against every other incident, the failed OOM makes the sloppy fix look good
    assert advantages(baseline="global", scale_advantages=False)[1] > 0
    assert advantages(min_class_episodes=3) == advantages(baseline="global")  # classes of 2 are too small
    spread = torch.tensor(returns).std(unbiased=False).item()
    assert advantages() == pytest.approx([e.advantage / spread for e in per_class])
    # dropping the negatives: the better episode of each class keeps its advantage, the worse one counts for nothing
    assert advantages(scale_advantages=False, negative_advantages="drop") == pytest.approx(
        [per_class[0].advantage, 0.0, per_class[2].advantage, 0.0])
    # balanced classes: a third bad-image episode makes that class's episodes weigh 5/(2*3) each, OOM's 5/(2*2)
    again = make_trajectory([read(), write(), finish()])
    balanced = score_episodes([*data, again], OffPolicyConfig(scale_advantages=False, class_weights="balanced"))
    plain = score_episodes([*data, again], OffPolicyConfig(scale_advantages=False))
    assert [b.advantage for b in balanced.episodes] == pytest.approx(
        [p.advantage * w for p, w in zip(plain.episodes, [5 / 6, 5 / 6, 5 / 4, 5 / 4, 5 / 6], strict=True)])


def test_rehearsed_expert_episodes_get_the_fixed_advantage_and_leave_the_new_ones_as_they_were() -> None:
    data = [make_trajectory([read(), write(), finish()]),
            make_trajectory([read(), finish()], outcome="unresolved", alert_resolved=False)]
    experts = [make_trajectory([read(), write(), finish()], fault="oom"),
               make_trajectory([read(), read(), write(), finish()], fault="bad-config")]
    config = OffPolicyConfig(missing_logprobs="exclude", rehearsal_advantage=0.5)
    alone = score_episodes(data, config.model_copy(update={"missing_logprobs": "on_policy"}))
    both = score_episodes(data, config.model_copy(update={"missing_logprobs": "on_policy"}), experts)
    assert [e.advantage for e in both.episodes[:2]] == pytest.approx([e.advantage for e in alone.episodes])
    assert [(e.incident_class, e.advantage) for e in both.episodes[2:]] == [("rehearsal:oom", 0.5),
                                                                           ("rehearsal:bad-config", 0.5)]
    # demonstrations have no behaviour logprobs to correct by; `exclude` leaves out only the new episodes without
    with pytest.raises(ValueError, match="needs at least 2 usable ones; got 0"):
        score_episodes(data, config, experts)
    logged = [t.model_copy(deep=True) for t in data]
    for t in logged:
        for s in t.steps:
            s.decision.completion_token_ids, s.decision.completion_logprobs = [1, 2], [-0.1, -0.2]
    assert [e.incident_class for e in score_episodes(logged, config, experts).episodes] == [
        "bad-image", "bad-image", "rehearsal:oom", "rehearsal:bad-config"]


def test_importance_ratios_are_truncated_and_unknown_logprobs_count_as_on_policy() -> None:
    current = torch.log(torch.tensor([[0.5, 0.5, 0.9, 0.1, 0.3, 0.2]]))
    behaviour = torch.log(torch.tensor([[0.05, 0.5, 0.3, 0.4, 0.3, 0.9]]))
    behaviour[0, 4] = math.nan  # an answer logged without logprobs
    mask = torch.tensor([[1, 1, 1, 1, 1, 0]])  # the last token is a tool's output
    weight, ratio, known = truncated_ratios(current, behaviour, mask, 0.5, 2.0)
    assert known.tolist() == [[True, True, True, True, False, False]]
    assert ratio[0].tolist() == pytest.approx([10.0, 1.0, 3.0, 0.25, 1.0, 1.0])
    assert weight[0].tolist() == pytest.approx([2.0, 1.0, 2.0, 0.5, 1.0, 1.0])


def test_awpg_replays_logged_episodes_through_trl_and_saves_a_servable_policy(
        logged: list[Rollout], tiny_model_dir: Path, tmp_path: Path) -> None:
    data = [*episodes_of(logged), runbook_episode("bad-image")]  # one batch: every episode in the first step
    config = OffPolicyConfig(**{**FAST, "batch_size": 3}, baseline="global", beta=0.0)
    result = train_offpolicy(tiny_model_dir, data, tmp_path / "policy", config)
    assert (result.method, result.episodes, result.examples, result.steps) == ("awpg", 3, 3, 1)
    [stats] = result.step_stats
    assert stats.episodes == 3 and stats.scored_tokens == sum(sum(r.env_mask) for r in logged)
    assert stats.trained_tokens > stats.scored_tokens  # the runbook's answers train without logprobs
    # the passes read the tool outputs too (TRL's own token count leaves them out)
    assert result.train_tokens == stats.sequence_tokens > stats.trained_tokens + sum(len(r.prompt_ids) for r in logged)
    # before the first update the trainer's logprobs are the logged ones: the replay lines up token for token
    assert stats.importance_ratio_mean == pytest.approx(1.0, abs=1e-3) and stats.clipped_fraction == 0.0
    assert len(result.losses) == 1 and math.isfinite(result.losses[0]) and result.train_tokens > 0
    assert weights_changed(tiny_model_dir, tmp_path / "policy")
    assert load_policy_model(tmp_path / "policy", device="cpu").model is not None


def test_kto_labels_turns_by_advantage_and_penalised_steps() -> None:
    good, bad = runbook_episode("bad-image"), runbook_episode("bad-image", outcome="unresolved", run_id="run-2")
    sloppy = make_trajectory([step(None, None, invalid_reason="not valid JSON"), read(), write(), finish()])
    rows = kto_rows(score_episodes([good, bad, sloppy], OffPolicyConfig(method="kto")).episodes)
    labels = [r["label"] for r in rows]
    n = len(good.steps)
    assert labels == [True] * n + [False] * n + [False, True, True, True]  # the invalid answer, even in a fix
    assert rows[2 * n]["completion"] == [{"role": "assistant", "content": "not json"}]
    turns = [(k, episode) for episode in (good, bad, sloppy) for k in range(len(episode.steps))]
    for row, (k, t) in zip(rows, turns, strict=True):
        at = [i for i, m in enumerate(t.conversation) if m.role == "assistant"][k]
        assert row["prompt"] == chat_messages(t.conversation[:at])


def test_kto_trains_on_desirable_and_undesirable_turns(tiny_model_dir: Path, tmp_path: Path) -> None:
    good, bad = runbook_episode("oom"), runbook_episode("oom", outcome="unresolved", run_id="run-2")
    result = train_offpolicy(tiny_model_dir, [good, bad], tmp_path / "policy", OffPolicyConfig(method="kto", **FAST))
    assert (result.method, result.episodes, result.steps) == ("kto", 2, 1)
    assert (result.desirable, result.undesirable) == (len(good.steps), len(bad.steps))
    assert result.examples == len(good.steps) + len(bad.steps) and result.train_tokens > 0
    assert weights_changed(tiny_model_dir, tmp_path / "policy")
    assert load_policy_model(tmp_path / "policy", device="cpu").model is not None


def test_bad_configs_and_unusable_data_are_refused_with_the_reason(tiny_model_dir: Path,
                                                                    tmp_path: Path) -> None:
    for bad in ({"ratio_max": 0.5}, {"ratio_min": 1.5}, {"method": "ppo"}, {"batch_size": 1},
                {"min_class_episodes": 1}, {"steps": 3}):
        with pytest.raises(ValidationError):
            OffPolicyConfig.model_validate(bad)
    with pytest.raises(ValidationError, match="no offpolicy stage"):
        TrainingRequest(algorithm="sft", base="base", offpolicy=OffPolicyConfig())
    both = TrainingRequest(algorithm="offpolicy+grpo", base="base")
    assert both.stages == ["offpolicy", "grpo"] and both.offpolicy is not None and both.grpo is not None
    assert both.needs_episodes and not TrainingRequest(algorithm="grpo", base="base").needs_episodes

    config = OffPolicyConfig(**FAST)
    out = tmp_path / "policy"
    with pytest.raises(ValueError, match="at least 2 usable ones; got 0"):
        train_offpolicy(tiny_model_dir, [], out, config)
    unjudged = runbook_episode().model_copy(update={"verdict": None})
    rewritten = runbook_episode(run_id="run-2").model_copy(update={"conversation": []})
    with pytest.raises(ValueError, match=r"got 1 \(left out: \{'not judged': 1, 'its conversation does not match"):
        train_offpolicy(tiny_model_dir, [runbook_episode(run_id="run-3"), unjudged, rewritten], out, config)
    with pytest.raises(ValueError, match="no learning signal: all 2 episodes have the same return"):
        train_offpolicy(tiny_model_dir, [runbook_episode("oom"), runbook_episode("oom", run_id="run-2")], out, config)
    with pytest.raises(ValueError, match="actions logged without logprobs"):
        train_offpolicy(tiny_model_dir, [runbook_episode("oom"), runbook_episode("oom", outcome="unresolved")], out,
                        config.model_copy(update={"missing_logprobs": "exclude"}))
    out.mkdir()
    (out / "config.json").write_text("{}")
    with pytest.raises(FileExistsError):
        train_offpolicy(tiny_model_dir, [runbook_episode("oom"), runbook_episode("oom", outcome="unresolved")], out,
                        config)


BASE = "tiny-v0"


@pytest.fixture
def store(s3_store: Settings, tiny_model_dir: Path) -> Iterator[tuple[Settings, Registry]]:
    with settings_with_own_bucket(s3_store, "offpolicy") as settings:
        registry = Registry.from_settings(settings)
        registry.register(BASE, policy="llm", by="test", weights_dir=tiny_model_dir, reason="tiny test base")
        yield settings, registry


async def test_an_offpolicy_training_job_runs_through_the_training_activities(
        store: tuple[Settings, Registry]) -> None:
    """What TrainingCycleWorkflow runs for `algorithm: offpolicy`: data from the trajectory store, refused while it
    holds nothing to learn; then the job under `accelerate launch` and the candidate registered with its result."""
    settings, registry = store
    training = build_activities(settings).training
    client = object_store(settings)
    request = TrainingRequest(algorithm="offpolicy", base=BASE, offpolicy=OffPolicyConfig(**FAST), requested_by="test")
    for i in range(2):
        write_trajectory(client, settings.s3_bucket, runbook_episode("oom", run_id=f"run-{i}"))
    with pytest.raises(ApplicationError, match="no learning signal") as refused:
        ActivityEnvironment().run(training.collect_training_data, request)
    assert refused.value.non_retryable
    for i, outcome in enumerate(["resolved", "unresolved"]):
        write_trajectory(client, settings.s3_bucket, runbook_episode("bad-image", outcome, run_id=f"run-{i + 2}"))
    manifest = ActivityEnvironment().run(training.collect_training_data, request)
    assert manifest.episodes == 4 and len(manifest.items) == 4

    job = TrainJob(request=request, data=manifest, version=f"offpolicy-{uuid.uuid4().hex[:6]}")
    trained = await ActivityEnvironment().run(training.train_policy, job)
    assert trained.launcher.startswith("accelerate launch --config_file infra/accelerate/cpu.yaml")
    assert trained.offpolicy is not None and (trained.offpolicy.episodes, trained.offpolicy.steps) == (4, 1)
    assert trained.offpolicy.classes == {"oom": 2, "bad-image": 2}
    assert trained.metrics is not None and trained.metrics.stage == "offpolicy" and trained.metrics.step == 1
    card = registry.get(job.version).card
    assert card.parent == BASE and card.training_request == request.model_dump(mode="json")
    assert sorted(i.uri for i in card.data_manifest) == sorted(i.uri for i in manifest.items)


async def test_a_job_rehearses_expert_episodes_of_other_fault_types_pinned_in_its_manifest(
        store: tuple[Settings, Registry], monkeypatch: pytest.MonkeyPatch) -> None:
    """data.rehearsal: expert episodes beside the new ones, at most `per_fault_class` of each type, never one of the
    new episodes nor of an evaluation scenario (nor are new ones of those); trained on and recorded in the version's
    lineage."""
    settings, registry = store
    training = build_activities(settings).training
    client, bucket = object_store(settings), settings.s3_bucket
    new = [runbook_episode(fault, outcome, run_id=f"run-{i}").model_copy(update={"model_version": "prod-v1"})
           for i, (fault, outcome) in enumerate([("bad-image", "resolved"), ("bad-image", "unresolved"),
                                                 ("oom", "resolved"), ("oom", "unresolved")])]
    held_out = runbook_episode("bad-image", run_id="run-14")
    assert held_out.incident.scenario is not None
    held_out.incident.scenario.name = load_scenarios(heldout_suite())[0].name
    experts = [runbook_episode("oom", run_id="run-10"), runbook_episode("oom", run_id="run-11"),
               runbook_episode("none", run_id="run-12"), runbook_episode("bad-image", "unresolved", run_id="run-13"),
               new[0].model_copy(update={"model_version": "runbook-v1"}), held_out]
    # production served one held-out scenario, and one that a learning cycle's production gate re-creates
    replayed = runbook_episode("oom", run_id="run-15").model_copy(update={"model_version": "prod-v1"})
    assert replayed.incident.scenario is not None
    replayed.incident.scenario.name = "oom-replayed-s9"
    not_new = [held_out.model_copy(update={"model_version": "prod-v1", "run_id": "run-16"}), replayed]
    for t in new + experts + not_new:
        write_trajectory(client, bucket, t)
    rehearse = TrajectoryFilter(model_versions=["runbook-v1"], resolved_only=True, per_fault_class=1)
    trajectories = TrajectoryFilter(model_versions=["prod-v1"], exclude_scenarios=["oom-replayed-s9"])
    request = TrainingRequest(algorithm="offpolicy", base=BASE, offpolicy=OffPolicyConfig(**FAST), requested_by="test",
                              data=DataSelection(trajectories=trajectories, rehearsal=rehearse))

    manifest = ActivityEnvironment().run(training.collect_training_data, request)
    assert manifest.episodes == 4 and manifest.counts["filtered: evaluation scenario"] == 2
    assert manifest.rehearsal is not None
    assert manifest.rehearsal.counts == {"read": 6, "accepted": 2, "filtered: fault class full": 1,
                                         "filtered: not resolved cleanly": 1, "filtered: evaluation scenario": 1,
                                         "rejected": 1, "rejected: duplicate": 1}
    assert "already read from the training episodes" in manifest.rehearsal.rejected[0].reasons[0]
    # what was stored after `written_until` (a learning cycle's window end) is not rehearsed: S3 keeps whole seconds
    time.sleep(1.1)
    cutoff = datetime.now(UTC)
    time.sleep(1.1)
    write_trajectory(client, bucket, runbook_episode("none", run_id="run-17"))
    for until, listed in ((cutoff, 6), (None, 7)):
        bounded = request.model_copy(update={"data": DataSelection(
            trajectories=trajectories, rehearsal=rehearse.model_copy(update={"written_until": until}))})
        again = ActivityEnvironment().run(training.collect_training_data, bounded).rehearsal
        assert again is not None and again.counts["read"] == listed and again.episodes == 2
    monkeypatch.setattr(train_cli.console, "width", 300)  # one line per row
    with train_cli.console.capture() as shown:
        train_cli.print_status(TrainingStatus(workflow_id="w", phase="training", algorithm="offpolicy", base=BASE,
                                              data=manifest))
    assert ("rehearsal │ 2 expert episodes from 2 object(s); filtered: evaluation scenario 1, filtered: fault class "
            "full 1, filtered: not resolved cleanly 1, rejected: duplicate 1") in shown.get()

    job = TrainJob(request=request, data=manifest, version=f"rehearsal-{uuid.uuid4().hex[:6]}")
    trained = await ActivityEnvironment().run(training.train_policy, job)
    assert trained.offpolicy is not None
    assert trained.offpolicy.classes == {"bad-image": 2, "oom": 2, "rehearsal:oom": 1, "rehearsal:none": 1}
    assert sorted(i.uri for i in registry.get(job.version).card.data_manifest) == sorted(
        i.uri for i in manifest.items + manifest.rehearsal.items) and len(manifest.learnt_from) == 6

    nothing = request.model_copy(update={"data": DataSelection(
        trajectories=request.data.trajectories, rehearsal=rehearse.model_copy(update={"model_versions": ["none-v0"]}))})
    with pytest.raises(ApplicationError, match="no expert episodes to rehearse") as refused:
        ActivityEnvironment().run(training.collect_training_data, nothing)
    assert refused.value.non_retryable
    for wrong, why in ((dict(algorithm="sft"), "has no offpolicy stage"),
                       (dict(data={"rehearsal": {"model_versions": ["runbook-v1"]}}), "must set resolved_only")):
        with pytest.raises(ValidationError, match=why):
            TrainingRequest.model_validate({"algorithm": "offpolicy", "base": BASE,
                                            "data": {"rehearsal": rehearse.model_dump()}, **wrong})
