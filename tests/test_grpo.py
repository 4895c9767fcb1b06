"""GRPO plumbing with a tiny random model: multi-turn rollouts in the simulator, token alignment, curriculum,
and one real optimisation step through TRL's GRPOTrainer."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from trajectory_factory import finish, make_trajectory, read, step, write

from agent_sre.models.llm import SamplingConfig
from agent_sre.models.reward import RewardConfig
from agent_sre.models.training import GRPOTrainingConfig
from agent_sre.policy.llm.chat import chat_messages
from agent_sre.policy.llm.checkpoint import load_policy_model, tiny_model
from agent_sre.rewards import compute_reward
from agent_sre.scenarios import load_scenarios
from agent_sre.simulator.simulator import Simulator
from agent_sre.training.grpo import (
    Curriculum,
    Rollout,
    episode_return,
    mask_penalised_turns,
    rollout_batch_layout,
    run_rollouts,
    train_grpo,
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def _scenarios(*faults: str):
    return [next(s for s in load_scenarios() if s.fault == f) for f in faults]


def test_rollout_tokens_are_the_rendered_conversation_and_only_answers_are_trained(tiny: Path) -> None:
    loaded = load_policy_model(tiny, device="cpu")
    config = GRPOTrainingConfig(max_turns=3, max_new_tokens=12, group_size=2)
    rollouts = run_rollouts(loaded, _scenarios("bad_image", "bad_image"), config, Simulator(speed=0))
    tok = loaded.tokenizer
    for r in rollouts:
        t = r.trajectory
        assert t is not None and t.verdict is not None and len(t.steps) == 3
        assert len(r.completion_ids) == len(r.logprobs) == len(r.env_mask)
        # What the trainer scores is exactly what the model was shown and said, turn after turn.
        # (Compared without special tokens: a random model may sample e.g. <|im_start|> inside an answer, which
        # the conversation's text drops but the trained token sequence keeps.)
        rendered = tok.apply_chat_template(chat_messages(t.conversation), tokenize=True, return_dict=True)["input_ids"]
        expected = tok.decode(list(rendered), skip_special_tokens=True)
        actual = tok.decode(r.prompt_ids + r.completion_ids, skip_special_tokens=True)
        assert expected.startswith(actual) and len(actual) > len(expected) * 0.9
        # The model's tokens are trained; the tools' answers are context (mask 0, logprob 0).
        model_tokens = [i for i, m in zip(r.completion_ids, r.env_mask, strict=True) if m]
        assert model_tokens == [i for s in t.steps for i in (s.decision.completion_token_ids or [])]
        assert all(lp == 0.0 for lp, m in zip(r.logprobs, r.env_mask, strict=True) if not m)
        assert "Tool result:" in tok.decode([i for i, m in zip(r.completion_ids, r.env_mask, strict=True) if not m])


def test_a_group_shares_its_cached_prompt_and_plays_as_a_lone_rollout_would(tiny: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from agent_sre.policy.llm.backends import ConversationCaches

    loaded = load_policy_model(tiny, device="cpu")
    config, greedy = GRPOTrainingConfig(max_turns=3), SamplingConfig(temperature=0.0, max_new_tokens=12)
    lone = run_rollouts(loaded, _scenarios("bad_image"), config, Simulator(speed=0), greedy)
    reused: list[int] = []  # per generation, how many of its prompt's tokens a kept cache already held
    take = ConversationCaches.take
    monkeypatch.setattr(ConversationCaches, "take",
                        lambda self, ids: (cache := take(self, ids), reused.append(cache.shared_with(ids)))[0])
    group = run_rollouts(loaded, _scenarios("bad_image", "bad_image", "bad_config"), config, Simulator(speed=0), greedy)
    for r in group[:2]:
        assert (r.prompt_ids, r.completion_ids) == (lone[0].prompt_ids, lone[0].completion_ids)
        assert r.logprobs == pytest.approx(lone[0].logprobs, abs=1e-3)
    first, second, other = reused[:3]  # the first turns: nothing kept yet, the group's prompt, the system prompt
    assert first == 0 and second == len(group[1].prompt_ids)
    assert 64 <= other < len(group[2].prompt_ids)


def test_episode_return_adds_step_shaping_to_the_outcome() -> None:
    def scored(steps):
        t = make_trajectory(steps)
        t.reward = compute_reward(t, RewardConfig())
        return t

    clean = scored([read(), write(), finish()])
    sloppy = scored([step(None, None, invalid_reason="not valid JSON"), read(), write(), finish()])
    assert clean.reward.total == sloppy.reward.total  # the same outcome...
    assert episode_return(sloppy) < episode_return(clean)  # ...but the wasted step costs in the group comparison


def test_penalised_turns_of_a_rollout_above_its_group_mean_leave_the_loss() -> None:
    invalid = step(None, None, invalid_reason="not valid JSON")

    def rollout(steps, outcome: str) -> Rollout:
        r = Rollout(prompt_ids=[1, 2])
        for i in range(len(steps)):  # each answer 3 tokens, each tool answer 2
            r.add([10 + i] * 3, None, from_model=True)
            r.add([0, 0], None, from_model=False)
        r.trajectory = make_trajectory(steps, outcome=outcome, alert_resolved=outcome == "resolved")
        r.trajectory.reward = compute_reward(r.trajectory, RewardConfig())
        return r

    sloppy_win = rollout([invalid, read(), write(), finish()], "resolved")
    clean_win = rollout([read(), write(), finish()], "resolved")
    sloppy_loss = rollout([invalid, read(), finish()], "unresolved")
    clean_loss = rollout([read(), finish()], "unresolved")
    group = [sloppy_win, clean_win, sloppy_loss, clean_loss]
    assert sloppy_win.turns == [(0, 3), (5, 8), (10, 13), (15, 18)]
    masks = [list(r.env_mask) for r in group]
    assert mask_penalised_turns(group, group_size=4) == 1
    # the winning rollout's invalid turn no longer counts; its other answers and the losers' turns still do
    assert sloppy_win.env_mask == [0, 0, 0, 0, 0] + masks[0][5:]
    assert [r.env_mask for r in group[1:]] == masks[1:]
    # groups are judged apart: alone in a group of one, nothing beats its own mean
    again = rollout([invalid, read(), write(), finish()], "resolved")
    assert mask_penalised_turns([again], group_size=1) == 0 and sum(again.env_mask) == 12


def test_curriculum_prefers_families_neither_solved_nor_hopeless() -> None:
    scenarios = _scenarios("bad_image", "oom_limit", "network_policy_deny")
    curriculum = Curriculum(scenarios, floor=0.05)
    curriculum.success.update({"bad_image": 0.99, "oom_limit": 0.5, "network_policy_deny": 0.0})
    weights = curriculum.weights()
    assert weights["oom_limit"] == 1.0 and weights["network_policy_deny"] == 0.05
    drawn = [curriculum.draw().fault for _ in range(400)]
    assert drawn.count("oom_limit") > 5 * max(drawn.count("bad_image"), drawn.count("network_policy_deny"))
    assert Curriculum(scenarios, floor=0.05, enabled=False).weights() == {f: 1.0 for f in weights}


def test_one_grpo_step_through_trl_saves_a_servable_policy(tiny: Path, tmp_path: Path) -> None:
    config = GRPOTrainingConfig(max_steps=1, group_size=2, max_turns=2, max_new_tokens=8, device="cpu")
    result = train_grpo(tiny, _scenarios("bad_image", "none"), tmp_path / "policy", config)
    assert [s.step for s in result.steps] == [0] and result.steps[0].generated_tokens > 0
    assert result.logged_rewards == {1: pytest.approx(result.steps[0].mean_group_reward)}
    assert (result.bf16, result.device) == (False, "cpu")  # precision auto on a CPU, recorded with the device
    assert load_policy_model(tmp_path / "policy", device="cpu").model is not None


def test_the_probe_curve_has_every_step_once_across_a_resume(tiny: Path, tmp_path: Path) -> None:
    config = GRPOTrainingConfig(max_steps=2, group_size=2, max_turns=2, max_new_tokens=8, device="cpu",
                                probe_scenarios=3, probe_every=1, mask_penalised_turns=True)
    scenarios = _scenarios("bad_image", "none", "oom_limit")
    full = train_grpo(tiny, scenarios, tmp_path / "full", config, tmp_path / "work", save_steps=1)
    assert [(p.step, p.episodes) for p in full.probes] == [(0, 3), (1, 3), (2, 3)]
    assert all(0.0 <= p.success_rate <= 1.0 for p in full.probes)
    # the probe is the scenarios played greedily, so the untrained model's row is what evaluation would give it
    greedy = run_rollouts(load_policy_model(tiny, device="cpu"), scenarios, config, Simulator(speed=0),
                          SamplingConfig(temperature=0.0, max_new_tokens=config.max_new_tokens))
    assert full.probes[0].mean_return == pytest.approx(
        sum(episode_return(r.trajectory) for r in greedy if r.trajectory) / len(scenarios))

    resumed = train_grpo(tiny, scenarios, tmp_path / "resumed", config, tmp_path / "work-resumed",
                         resume_from=tmp_path / "work" / "checkpoint-1")
    assert [s.step for s in resumed.steps] == [1]  # this process played step 2 only...
    assert [p.step for p in resumed.probes] == [0, 1, 2]  # ...but the curve has every step, step 1 not probed twice
    assert resumed.probes[:2] == full.probes[:2]
    sparse = config.model_copy(update={"max_steps": 3, "probe_every": 3})
    assert [p.step for p in train_grpo(tiny, scenarios, tmp_path / "sparse", sparse, tmp_path / "work-sparse",
                                       save_steps=1).probes] == [0, 3]
    resumed = train_grpo(tiny, scenarios, tmp_path / "sparse-resumed", sparse, tmp_path / "work-sparse-resumed",
                         resume_from=tmp_path / "work-sparse" / "checkpoint-2")
    assert [p.step for p in resumed.probes] == [0, 3]  # the schedule kept: step 2, where it resumed, not probed
    assert train_grpo(tiny, scenarios, tmp_path / "unprobed", config.model_copy(update={"probe_scenarios": 0,
                                                                                         "max_steps": 1})).probes == []


def test_a_cpu_reads_one_unpadded_sequence_per_pass_and_an_accelerator_the_whole_batch() -> None:
    assert rollout_batch_layout(torch.device("cpu"), 8) == {
        "per_device_train_batch_size": 1, "gradient_accumulation_steps": 8, "gradient_checkpointing": False}
    assert rollout_batch_layout(torch.device("cuda"), 8) == {
        "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1}


def test_a_lone_sequence_is_scored_without_the_batch_padding_and_gives_the_padded_result(tiny: Path,
                                                                                        tmp_path: Path) -> None:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from agent_sre.training.grpo import returned_reward
    from agent_sre.training.unpadded import UnpaddedGRPOTrainer, token_span

    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=1, gradient_accumulation_steps=2,
                      num_generations=2, use_cpu=True, report_to=[], bf16=False)
    trainer = UnpaddedGRPOTrainer(model=str(tiny), reward_funcs=[returned_reward], args=args,
                                  train_dataset=Dataset.from_dict({"prompt": ["a", "b"]}))
    # Two rows as TRL pads them: prompts on the left (3 and 5 tokens), completions on the right (4 and 2 tokens).
    prompt_mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    completion_mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    mask = torch.cat([prompt_mask, completion_mask], dim=1)
    ids = torch.randint(5, 200, mask.shape).masked_fill(mask == 0, 0)
    assert token_span(mask[0]) == (2, 9) and token_span(mask[1]) == (0, 7)
    assert token_span(torch.tensor([1, 0, 1])) is None
    model = trainer.model.eval()
    widths: list[int] = []  # what each forward pass read
    model.model.register_forward_pre_hook(lambda _, args, kwargs: widths.append(kwargs["input_ids"].size(1)),
                                          with_kwargs=True)
    with torch.no_grad():
        cut, cut_entropy, _ = trainer._get_per_token_logps_and_entropies(model, ids, mask, 4, batch_size=1,
                                                                         compute_entropy=True)
        assert widths == [7, 7]  # each row alone, without the batch's padding
        whole, whole_entropy, _ = GRPOTrainer._get_per_token_logps_and_entropies(trainer, model, ids, mask, 4,
                                                                                 batch_size=1, compute_entropy=True)
        assert widths[2:] == [9, 9]
    real = completion_mask.bool()
    assert cut.shape == whole.shape == (2, 4)
    torch.testing.assert_close(cut[real], whole[real], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(cut_entropy[real], whole_entropy[real], atol=1e-4, rtol=1e-4)
    assert (cut[~real] == 0).all()


def test_a_lone_rollout_scores_only_the_models_own_tokens_as_trl_would(tiny: Path, tmp_path: Path) -> None:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from agent_sre.training.grpo import returned_reward
    from agent_sre.training.unpadded import UnpaddedGRPOTrainer, scores_own_tokens

    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=1, gradient_accumulation_steps=2,
                      num_generations=2, use_cpu=True, report_to=[], bf16=False, temperature=0.7)
    trainer = UnpaddedGRPOTrainer(model=str(tiny), reward_funcs=[returned_reward], args=args,
                                  train_dataset=Dataset.from_dict({"prompt": ["a", "b"]}))
    model = trainer.model.eval()
    assert scores_own_tokens(model)
    # Two rollouts: prompts of 3 and 5 tokens; completions of 6 and 4 tokens interleaving the model's answers (1)
    # with a tool's (0), the second right-padded.
    prompt_mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    completion_mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    own = [[1, 1, 0, 0, 0, 1], [0, 1, 1, 0]]
    mask = torch.cat([prompt_mask, completion_mask], dim=1)
    ids = torch.randint(5, 200, mask.shape).masked_fill(mask == 0, 0)
    trainer._own_tokens = own
    ours, our_entropy, _ = trainer._get_per_token_logps_and_entropies(model, ids, mask, 6, batch_size=1,
                                                                       compute_entropy=True)
    theirs, their_entropy, _ = GRPOTrainer._get_per_token_logps_and_entropies(trainer, model, ids, mask, 6,
                                                                              batch_size=1, compute_entropy=True)
    scored = torch.tensor([own[0], own[1] + [0, 0]], dtype=torch.bool)
    torch.testing.assert_close(ours[scored], theirs[scored], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(our_entropy[scored], their_entropy[scored], atol=1e-4, rtol=1e-4)
    assert (ours[~scored] == 0).all() and (theirs[~scored] != 0).any()  # the tool's tokens were not scored
    # the gradient the loss sees is TRL's too
    grads = []
    for scoring in (trainer._get_per_token_logps_and_entropies,
                    lambda *a, **k: GRPOTrainer._get_per_token_logps_and_entropies(trainer, *a, **k)):
        model.zero_grad()
        scoring(model, ids, mask, 6, batch_size=1)[0][scored].sum().backward()
        grads.append(model.model.layers[0].mlp.up_proj.weight.grad.clone())
    torch.testing.assert_close(grads[0], grads[1], atol=1e-4, rtol=1e-3)
    # without the rows' masks (another batch), every completion token is scored, as TRL does
    trainer._own_tokens = [[1] * 6]
    unmasked, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, mask, 6, batch_size=1)
    real = completion_mask.bool()
    torch.testing.assert_close(unmasked[real], theirs[real], atol=1e-4, rtol=1e-4)
