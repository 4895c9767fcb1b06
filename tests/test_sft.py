"""SFT warm start on runbook episodes with the tiny model: the expert filter, the assistant-only loss mask, and a
short real training run from the object store (the session's SeaweedFS) whose checkpoint the LLM policy serves."""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from llm_fixtures import runbook_episode
from minio import Minio

from agent_sre.config import Settings
from agent_sre.models.llm import SamplingConfig
from agent_sre.models.remediation import PolicyRef
from agent_sre.models.tools import ToolCall
from agent_sre.models.training import SFTConfig
from agent_sre.policy.llm import (
    LLMPolicy,
    LocalModels,
    chat_messages,
    load_policy_model,
    local_version_dir,
    prompt_token_ids,
)
from agent_sre.policy.llm.checkpoint import ModelDirError, merge_adapter, train_in_bf16
from agent_sre.storage import ensure_bucket, object_store
from agent_sre.training.sft import build_sft_trainer, expert_conversations, is_expert_episode, train_sft
from agent_sre.trajectory_store import iter_trajectories, write_trajectory


def test_expert_data_is_clean_resolutions_and_honest_escalations_without_false_positives() -> None:
    good = runbook_episode("bad-image")
    false_alarm_done_right = runbook_episode("none")
    escalated = runbook_episode("oom", outcome="unresolved", fix_rolls_out=False)  # and it said so
    assert escalated.termination == "escalated" and escalated.steps[-2].action == ToolCall(
        tool="rollout_status", args={"deployment": "cart"})
    unresolved = good.model_copy(update={"verdict": escalated.verdict})  # claimed a fix that did not work
    other_policy = good.model_copy(update={"policy": "llm"})
    cut_short = good.model_copy(update={"termination": "step_limit"})
    # acting on a false alarm is a false positive even when nothing broke
    acted_on_false_alarm = good.model_copy(update={"incident": false_alarm_done_right.incident})
    escalated_a_fix_that_worked = escalated.model_copy(update={"verdict": good.verdict})  # a needless page
    for t in (good, false_alarm_done_right, escalated):
        assert is_expert_episode(t, ["runbook"])
    for t in (unresolved, other_policy, cut_short, acted_on_false_alarm, escalated_a_fix_that_worked):
        assert not is_expert_episode(t, ["runbook"])
    duplicate = runbook_episode("bad-image", run_id="run-0002")
    conversations = expert_conversations([good, unresolved, duplicate, false_alarm_done_right, escalated],
                                         ["runbook"])
    assert conversations == [chat_messages(t.conversation) for t in (good, false_alarm_done_right, escalated)]


def test_the_loss_covers_exactly_the_assistant_turns(tiny_model_dir: Path, tmp_path: Path) -> None:
    episodes = [runbook_episode("bad-image"), runbook_episode("oom")]
    trainer = build_sft_trainer(tiny_model_dir, expert_conversations(episodes, ["runbook"]), tmp_path,
                                SFTConfig(max_steps=1, max_length=4096))
    tokenizer = load_policy_model(tiny_model_dir).tokenizer
    for episode, row in zip(episodes, trainer.train_dataset, strict=True):
        ids, labels = row["input_ids"], row["labels"]
        trained = tokenizer.decode([i for i, label in zip(ids, labels, strict=True) if label != -100])
        answers = [m.content for m in episode.conversation if m.role == "assistant"]
        assert trained == "".join(a + "<|im_end|>" for a in answers)
        # each answer is trained right where serving prompts the model for it
        for k, step in enumerate(episode.steps):
            upto = [i for i, m in enumerate(episode.conversation) if m.role == "assistant"][k]
            prompt = prompt_token_ids(tokenizer, episode.conversation[:upto])
            assert ids[:len(prompt)] == prompt
            assert labels[len(prompt) - 1] == -100 and labels[len(prompt)] == ids[len(prompt)]
            assert tokenizer.decode(ids[len(prompt):]).startswith(step.decision.completion + "<|im_end|>")


@pytest.fixture
def bucket(s3_store: Settings) -> Iterator[tuple[Minio, str]]:
    client = object_store(s3_store)
    name = f"sft-{uuid.uuid4().hex[:12]}"
    ensure_bucket(client, name)
    yield client, name
    for obj in client.list_objects(name, recursive=True):
        client.remove_object(name, obj.object_name)
    client.remove_bucket(name)


def test_sft_from_stored_episodes_lowers_the_loss_and_the_checkpoint_serves(
        tiny_model_dir: Path, tmp_path: Path, bucket: tuple[Minio, str]) -> None:
    client, name = bucket
    for i, fault in enumerate(["bad-image", "oom", "none", "oom"]):
        write_trajectory(client, name, runbook_episode(fault, outcome="unresolved" if i == 3 else "resolved",
                                                       run_id=f"run-{i}"))
    out = tmp_path / "sft"
    result = train_sft(tiny_model_dir, iter_trajectories(client, name), out,
                       SFTConfig(max_steps=4, learning_rate=2e-3, lr_scheduler="constant", max_length=2048))

    assert (result.examples, result.truncated, result.steps, len(result.losses)) == (3, 0, 4, 4)
    assert all(math.isfinite(loss) for loss in result.losses)
    assert result.losses[-1] < result.losses[0]
    assert result.train_tokens > 0
    with pytest.raises(FileExistsError):
        train_sft(tiny_model_dir, [runbook_episode()], out, SFTConfig(max_steps=1))

    policy = LLMPolicy(LocalModels(lambda version: local_version_dir(version, tmp_path)),
                       SamplingConfig(max_new_tokens=4))
    t = runbook_episode().model_copy(update={"steps": [], "conversation": []})
    decision = policy.decide(PolicyRef(name="llm", version=str(out)), t)
    ids, logprobs = decision.completion_token_ids, decision.completion_logprobs
    assert ids and logprobs is not None and len(ids) == len(logprobs)


def test_sft_without_expert_episodes_says_so(tiny_model_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no expert episodes"):
        train_sft(tiny_model_dir, [runbook_episode(outcome="unresolved")], tmp_path / "out")


def test_lora_sft_saves_a_merged_plain_model_and_reports_truncation(tiny_model_dir: Path, tmp_path: Path) -> None:
    episodes = [runbook_episode("bad-image"), runbook_episode("none")]
    tokenizer = load_policy_model(tiny_model_dir).tokenizer
    lengths = [len(tokenizer.apply_chat_template(chat_messages(t.conversation), tokenize=True,
                                                 return_dict=True)["input_ids"]) for t in episodes]
    max_length = (min(lengths) + max(lengths)) // 2  # the longer one is cut, the shorter one is not
    out = tmp_path / "lora"
    result = train_sft(tiny_model_dir, episodes, out,
                       SFTConfig(max_steps=2, learning_rate=1e-2, lora_r=4, max_length=max_length))
    assert (result.examples, result.truncated, result.steps) == (2, 1, 2)
    assert (result.bf16, result.device) == (False, "cpu")  # precision auto on a CPU, recorded with the device
    assert not (out / "adapter_config.json").exists()
    base, tuned = load_policy_model(tiny_model_dir).model, load_policy_model(out).model
    assert type(tuned) is type(base)
    changed = [name for name, w in tuned.state_dict().items() if not torch.equal(w, base.state_dict()[name])]
    assert changed and all("proj" in name for name in changed)  # LoRA touched the linear layers only
    # The adapter alone, beside it: a few files that can ship, and the base plus it is the same model again.
    assert result.adapter_dir == str(tmp_path / "lora-adapter")
    assert (tmp_path / "lora-adapter" / "adapter_config.json").is_file()
    rebuilt = load_policy_model(merge_adapter(tiny_model_dir, tmp_path / "lora-adapter", tmp_path / "rebuilt")).model
    assert all(torch.allclose(w, rebuilt.state_dict()[name], atol=1e-6) for name, w in tuned.state_dict().items())
    with pytest.raises(ModelDirError, match="not a LoRA adapter"):
        merge_adapter(tiny_model_dir, tmp_path / "rebuilt", tmp_path / "other")


def test_training_precision_is_fp32_on_a_cpu_unless_bf16_is_asked(tiny_model_dir: Path, tmp_path: Path) -> None:
    native = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    cpu = torch.device("cpu")
    assert (train_in_bf16(cpu), train_in_bf16(cpu, "fp32")) == (False, False)
    with pytest.raises(ValueError, match="no native bf16"):
        train_in_bf16(torch.device("meta"), "bf16")
    conversations = expert_conversations([runbook_episode("bad-image")], ["runbook"])
    asked = (("auto", False), ("fp32", False)) + ((("bf16", True),) if native else ())
    for precision, bf16 in asked:
        trainer = build_sft_trainer(tiny_model_dir, conversations, tmp_path / precision,
                                    SFTConfig(max_steps=1, precision=precision, device="cpu"))
        assert trainer.args.bf16 is bf16
