"""Stage-1 RL: GRPO on faults injected into simulated clusters, with TRL's `GRPOTrainer`.

TRL owns the algorithm — group-normalised advantages, the clipped importance ratio, the KL penalty to the
reference model, the optimiser. We own the environment, through TRL's `rollout_func`: each group is G rollouts of
the same scenario and seed; a rollout is a whole multi-turn incident in our conversation format (the one the
policy is served with), so its "completion" interleaves the model's tool calls (trained: `env_mask` 1) with the
tools' answers (context only: `env_mask` 0). TRL's own tool loop (`environment_factory`) is not used because it
needs the model's native tool-call template; ours is the strict JSON format shared with serving.

Credit assignment: an episode's return is its outcome reward plus the sum of its per-step shaping rewards
(invalid action, refused action, tool error, repeated useless call; `rewards.steps`). So within a group, the
rollout that fixed the fault without wasted or unsafe steps gets the larger advantage, rather than every step of
every successful rollout being credited alike. TRL's advantages are per sequence, so with `mask_penalised_turns` a
rollout above its group's mean leaves its penalised turns (negative step reward) out of the loss: its invalid or
refused actions are not made likelier with the rest of it, while a rollout below the mean still pushes its own down.

Curriculum: TRL's sampler hands out dataset rows; each row is a slot that the curriculum fills with a scenario,
weighted toward fault families whose recent success rate is neither ~0 nor ~1 (weight ∝ p(1−p), floored).
"""

from __future__ import annotations

import random
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_sre.models.incident import RemediationLimits
from agent_sre.models.llm import SamplingConfig
from agent_sre.models.policy import ChatMessage
from agent_sre.models.reward import RewardConfig
from agent_sre.models.scenario import Scenario
from agent_sre.models.training import GRPOProbe, GRPOResult, GRPOStepStats, GRPOTrainingConfig
from agent_sre.models.trajectory import Trajectory
from agent_sre.policy.llm.backends import ConversationCaches, TransformersBackend
from agent_sre.policy.llm.chat import chat_messages, decode_text, prompt_token_ids, render_chat
from agent_sre.policy.llm.checkpoint import LoadedModel
from agent_sre.simulator.simulator import Simulator
from agent_sre.training.environment import IncidentEnvironment

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase, TrainerCallback, TrainerState

SENTINEL = "\u2063"  # invisible separator: finds where an assistant turn's content ends in the rendered template


def episode_return(t: Trajectory) -> float:
    """Outcome reward plus the per-step shaping rewards: the number GRPO normalises within a group."""
    assert t.reward is not None
    return t.reward.total + sum(t.reward.step_rewards)


@dataclass
class Rollout:
    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    turns: list[tuple[int, int]] = field(default_factory=list)  # [start, end) of each model answer in completion_ids
    trajectory: Trajectory | None = None

    def add(self, ids: list[int], logprobs: list[float] | None, from_model: bool) -> None:
        if from_model:
            self.turns.append((len(self.completion_ids), len(self.completion_ids) + len(ids)))
        self.completion_ids += ids
        self.logprobs += logprobs if logprobs is not None else [0.0] * len(ids)
        self.env_mask += [int(from_model)] * len(ids)


def environment_tokens(tokenizer: PreTrainedTokenizerBase, before: list[ChatMessage], reply: list[ChatMessage],
                       model_ended_turn: bool, end_token_text: str) -> list[int]:
    """The tokens between the model's last answer and its next one (end of turn, the tool's answer, the next
    assistant header), exactly as the chat template renders them."""
    *history, answer = before
    marked = render_chat(tokenizer, chat_messages([*history, ChatMessage(role="assistant",
                                                                         content=answer.content + SENTINEL)]))
    tail = marked[marked.rindex(SENTINEL) + len(SENTINEL):]  # e.g. "<|im_end|>\n"
    if model_ended_turn and tail.startswith(end_token_text):
        tail = tail[len(end_token_text):]  # the model sampled the end-of-turn token itself
    rendered = render_chat(tokenizer, chat_messages(before))
    full = render_chat(tokenizer, chat_messages([*before, *reply]), add_generation_prompt=True)
    if not full.startswith(rendered):
        raise ValueError("the chat template does not render conversations prefix-stably; multi-turn RL needs it")
    return list(tokenizer(tail + full[len(rendered):], add_special_tokens=False)["input_ids"])


def run_rollouts(loaded: LoadedModel, scenarios: Sequence[Scenario], config: GRPOTrainingConfig,
                 simulator: Simulator, sampling: SamplingConfig | None = None,
                 model_version: str = "candidate") -> list[Rollout]:
    """One rollout per scenario (repeat a scenario G times for a group), generated turn by turn: in batches on an
    accelerator; on a CPU one conversation at a time with its KV cache kept across turns, which reads each token
    once instead of once per turn (4-5x less work for 9-turn episodes), and a conversation's first turn starts from
    a copy of another's cached opening (the system prompt; a group's whole prompt). The model continues exactly the
    token sequence it will be trained on (prompt + completion ids). `sampling` defaults to the training temperature;
    evaluation passes greedy decoding."""
    tokenizer = loaded.tokenizer
    backend = TransformersBackend(loaded)
    sampling = sampling or SamplingConfig(temperature=config.temperature, top_p=1.0,
                                          max_new_tokens=config.max_new_tokens)
    envs = [IncidentEnvironment(simulator, s, limits=RemediationLimits(max_steps=config.max_turns, settle_s=60.0),
                                reward=RewardConfig(function=config.reward_function), step_cost_s=config.step_cost_s,
                                model_version=model_version, extra_steps_per_service=config.extra_turns_per_service)
            for s in scenarios]
    prompts = [env.reset() for env in envs]
    rollouts = [Rollout(prompt_ids=prompt_token_ids(tokenizer, p)) for p in prompts]
    conversations = [list(p) for p in prompts]
    active = list(range(len(envs)))
    caches = ConversationCaches(max_tokens=sys.maxsize) if loaded.device.type == "cpu" else None
    while active:
        if caches is not None:  # one conversation at a time, each reading only its new tokens
            generations = [backend.continue_conversation(rollouts[i].prompt_ids + rollouts[i].completion_ids,
                                                         sampling, caches) for i in active]
        else:  # an accelerator: one batch, every conversation re-read
            generations = backend.generate([conversations[i] for i in active], sampling)
        still_active = []
        for i, g in zip(active, generations, strict=True):
            if g.problem is not None:  # the conversation outgrew the context: the episode ends here
                continue
            reply = envs[i].step(g.text, g.token_ids, g.logprobs)
            rollouts[i].add(g.token_ids or [], g.logprobs, from_model=True)
            conversations[i].append(ChatMessage(role="assistant", content=g.text))
            if reply:
                end_text = decode_text(tokenizer, g.token_ids[-1:]) if g.token_ids else ""
                rollouts[i].add(environment_tokens(tokenizer, conversations[i], reply, g.finish_reason == "stop",
                                                   end_text), None, from_model=False)
                conversations[i].extend(reply)
                still_active.append(i)
        active = still_active
    for rollout, env in zip(rollouts, envs, strict=True):
        rollout.trajectory = env.close()
    return rollouts


class Curriculum:
    """Per fault family, an exponential moving average of success; families are drawn ∝ max(floor, 4p(1−p))."""

    def __init__(self, scenarios: Sequence[Scenario], floor: float, enabled: bool = True, seed: int = 0,
                 decay: float = 0.7) -> None:
        self.families: dict[str, list[Scenario]] = defaultdict(list)
        for s in scenarios:
            self.families[s.fault].append(s)
        self.success = {f: 0.5 for f in self.families}
        self.floor, self.enabled, self.decay = floor, enabled, decay
        self.rng = random.Random(seed)

    def weights(self) -> dict[str, float]:
        if not self.enabled:
            return {f: 1.0 for f in self.families}
        return {f: max(self.floor, 4 * p * (1 - p)) for f, p in self.success.items()}

    def draw(self) -> Scenario:
        weights = self.weights()
        family = self.rng.choices(list(weights), weights=list(weights.values()))[0]
        return self.rng.choice(self.families[family])

    def update(self, trajectories: Sequence[Trajectory]) -> None:
        for t in trajectories:
            assert t.incident.scenario is not None and t.verdict is not None
            fault = t.incident.scenario.fault
            resolved = t.verdict.outcome == "resolved"
            self.success[fault] = self.decay * self.success[fault] + (1 - self.decay) * resolved


def step_stats(step: int, rollouts: Sequence[Rollout], seconds: float) -> GRPOStepStats:
    trajectories = [r.trajectory for r in rollouts if r.trajectory is not None]
    steps = sum(len(t.steps) for t in trajectories)
    return GRPOStepStats(
        step=step, mean_group_reward=sum(episode_return(t) for t in trajectories) / len(trajectories),
        success_rate=sum(t.verdict is not None and t.verdict.outcome == "resolved"
                         for t in trajectories) / len(trajectories),
        invalid_rate=sum(s.action is None for t in trajectories for s in t.steps) / max(steps, 1),
        generated_tokens=sum(sum(r.env_mask) for r in rollouts),
        sequence_tokens=sum(len(r.prompt_ids) + len(r.completion_ids) for r in rollouts), rollout_s=seconds)


def play_in_training(model: Any, tokenizer: PreTrainedTokenizerBase, work_dir: Path, scenarios: Sequence[Scenario],
                     config: GRPOTrainingConfig, simulator: Simulator,
                     sampling: SamplingConfig | None = None) -> list[Rollout]:
    """`run_rollouts` with the model being trained, in eval mode for the episodes (no dropout) and back after."""
    was_training = model.training
    model.eval()
    try:
        return run_rollouts(LoadedModel(path=work_dir, model=model, tokenizer=tokenizer, device=model.device),
                            scenarios, config, simulator, sampling)
    finally:
        model.train(was_training)


PROBE_KEYS = ("probe/success", "probe/return", "probe/episodes")


def probe_callback(scenarios: Sequence[Scenario], config: GRPOTrainingConfig) -> TrainerCallback:
    """A TrainerCallback playing the first `config.probe_scenarios` of `scenarios` (one fault family after another)
    greedily before the first step and every `probe_every` steps. Its rows go into the trainer's log history, so a
    checkpoint keeps them and a resumed run's curve has every step; a step already probed is not probed again."""
    from transformers import TrainerCallback

    from agent_sre.episodes import interleave_by_fault

    probes = interleave_by_fault(scenarios)[:config.probe_scenarios]
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=config.max_new_tokens)
    simulator = Simulator(speed=0)

    def probe(args: Any, state: Any, model: Any, tokenizer: PreTrainedTokenizerBase) -> None:
        probed = any(row.get("step") == state.global_step and PROBE_KEYS[0] in row for row in state.log_history)
        if probed or not state.is_world_process_zero:  # one process probes: the others' rows would not be saved
            return
        played = step_stats(state.global_step, play_in_training(model, tokenizer, Path(args.output_dir), probes,
                                                                 config, simulator, greedy), 0.0)
        state.log_history.append({"step": state.global_step, PROBE_KEYS[0]: played.success_rate,
                                  PROBE_KEYS[1]: played.mean_group_reward, PROBE_KEYS[2]: len(probes)})

    # a resumed run keeps the schedule: no extra probe at the step it resumed from
    def due(state: TrainerState) -> bool:
        return state.global_step % config.probe_every == 0 or state.global_step == state.max_steps

    class Probe(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None,
                           processing_class: Any = None, **_: Any) -> None:
            if due(state):
                probe(args, state, model, processing_class)

        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None,
                        processing_class: Any = None, **_: Any) -> None:
            if due(state):
                probe(args, state, model, processing_class)

    return Probe()


def logged_probes(log_history: Sequence[dict[str, Any]]) -> list[GRPOProbe]:
    return [GRPOProbe(step=int(row["step"]), success_rate=row[PROBE_KEYS[0]], mean_return=row[PROBE_KEYS[1]],
                      episodes=int(row[PROBE_KEYS[2]])) for row in log_history if PROBE_KEYS[0] in row]


def mask_penalised_turns(rollouts: Sequence[Rollout], group_size: int) -> int:
    """In each group (`group_size` rollouts in a row), the rollouts whose return beats the group's mean lose the
    loss mask of their turns with a negative step reward: TRL's advantage is one number per sequence, so otherwise
    an invalid or refused action inside a successful episode would be made likelier along with the rest of it.
    Returns how many turns were masked."""
    masked = 0
    for start in range(0, len(rollouts), group_size):
        group = [(r, r.trajectory) for r in rollouts[start:start + group_size] if r.trajectory is not None]
        mean = sum(episode_return(t) for _, t in group) / max(len(group), 1)
        for rollout, t in group:
            if episode_return(t) <= mean:
                continue
            assert t.reward is not None
            for (begin, end), reward in zip(rollout.turns, t.reward.step_rewards, strict=True):
                if reward < 0:
                    rollout.env_mask[begin:end] = [0] * (end - begin)
                    masked += 1
    return masked


class SimulatorRollouts:
    """TRL's `rollout_func`: fills each group's slot with a curriculum scenario and plays the rollouts."""

    def __init__(self, scenarios: Sequence[Scenario], config: GRPOTrainingConfig) -> None:
        self.config = config
        self.curriculum = Curriculum(scenarios, config.curriculum_floor, config.curriculum, config.seed)
        self.simulator = Simulator(speed=0)
        self.stats: list[GRPOStepStats] = []

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        # TRL's sampler repeats each slot G times in a row: each run of G becomes one group of one scenario.
        size = self.config.group_size
        if len(prompts) % size:
            raise ValueError(f"{len(prompts)} rollouts requested, not a multiple of the group size {size}")
        scenarios = [s for _ in range(len(prompts) // size) for s in [self.curriculum.draw()] * size]
        began = time.perf_counter()
        rollouts = play_in_training(trainer.accelerator.unwrap_model(trainer.model), trainer.processing_class,
                                    Path(trainer.args.output_dir), scenarios, self.config, self.simulator)
        trajectories = [r.trajectory for r in rollouts if r.trajectory is not None]
        self.curriculum.update(trajectories)
        # the trainer's step, not a count of this process's calls: a run resumed from a checkpoint carries on from it
        self.stats.append(step_stats(trainer.state.global_step, rollouts, time.perf_counter() - began))
        if self.config.mask_penalised_turns:
            mask_penalised_turns(rollouts, size)
        return {"prompt_ids": [r.prompt_ids for r in rollouts], "completion_ids": [r.completion_ids for r in rollouts],
                "logprobs": [r.logprobs for r in rollouts], "env_mask": [r.env_mask for r in rollouts],
                "episode_return": [episode_return(t) for t in trajectories]}


def returned_reward(prompts: list[Any], completions: list[Any], episode_return: list[float],
                    **_: Any) -> list[float | None]:
    """The reward TRL normalises per group: the environment already scored each episode."""
    return list(episode_return)


def rollout_batch_layout(device: torch.device, sequences: int) -> dict[str, Any]:
    """TRL arguments for one optimizer step over a rollout batch of `sequences`. On a CPU, one sequence per forward
    pass (gradient accumulation over the batch; `UnpaddedGRPOTrainer` cuts the batch's padding off each pass) and no
    activation checkpointing: a padded batch makes attention leave its causal kernel for masked full matrices (1.8x
    slower for two episodes, bench/precision.py), a CPU gains nothing from batching, and a 135M model's activations
    fit in memory without recomputing them."""
    if device.type == "cpu":
        return {"per_device_train_batch_size": 1, "gradient_accumulation_steps": sequences,
                "gradient_checkpointing": False}
    return {"per_device_train_batch_size": sequences, "gradient_accumulation_steps": 1}


def train_grpo(model_dir: Path, scenarios: Sequence[Scenario], output_dir: Path, config: GRPOTrainingConfig,
               work_dir: Path | None = None, *, save_steps: int | None = None, resume_from: Path | None = None,
               callbacks: Sequence[TrainerCallback] = ()) -> GRPOResult:
    """GRPO from `model_dir` (e.g. the SFT checkpoint) on `scenarios`; saves the policy to `output_dir`.
    `work_dir` holds the trainer's own files (default: beside `output_dir`): a checkpoint every `save_steps`
    (the last two kept), from which `resume_from` continues. A resumed run's curriculum starts afresh; its
    `GRPOResult.steps` (numbered by the trainer's step) cover the resumed steps only, its `logged_rewards` and
    `probes` every step."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig

    from agent_sre.policy.llm.checkpoint import check_model_dir, device_name, pick_device, save_trained, train_in_bf16
    from agent_sre.training.unpadded import UnpaddedGRPOTrainer

    check_model_dir(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    rollouts = SimulatorRollouts(scenarios, config)
    device = pick_device(config.device)
    batch = config.group_size * config.groups_per_step
    args = GRPOConfig(
        output_dir=str(work_dir or output_dir.with_name(output_dir.name + ".work")), max_steps=config.max_steps,
        learning_rate=config.learning_rate,
        **rollout_batch_layout(device, batch), num_generations=config.group_size,
        beta=config.beta, epsilon=config.epsilon, scale_rewards=config.scale_rewards, temperature=config.temperature,
        max_completion_length=config.max_turns * (config.max_new_tokens + 1024), logging_steps=1,
        save_strategy="steps" if save_steps else "no", save_steps=save_steps or 500, save_total_limit=2,
        report_to=[], seed=config.seed, use_cpu=device.type == "cpu",
        bf16=train_in_bf16(device, config.precision), disable_tqdm=True)
    slots = Dataset.from_dict({"prompt": [f"slot-{i}" for i in range(config.max_steps * config.groups_per_step)]})
    trainer = UnpaddedGRPOTrainer(model=str(model_dir), reward_funcs=[returned_reward], args=args,
                                  train_dataset=slots, processing_class=tokenizer, rollout_func=rollouts,
                                  callbacks=[*callbacks, *([probe_callback(scenarios, config)]
                                                           if config.probe_scenarios else [])])
    began = time.perf_counter()
    trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    runtime = time.perf_counter() - began
    save_trained(trainer, output_dir)
    losses = [row["loss"] for row in trainer.state.log_history if "loss" in row]
    logged = {int(row["step"]): float(row["reward"]) for row in trainer.state.log_history if "reward" in row}
    return GRPOResult(output_dir=str(output_dir), base_model=str(model_dir), steps=rollouts.stats,
                      logged_rewards=logged,
                      train_runtime_s=runtime, generated_tokens=sum(s.generated_tokens for s in rollouts.stats),
                      losses=losses, probes=logged_probes(trainer.state.log_history), bf16=args.bf16,
                      device=device_name(device))
