"""Learning from incidents that happened once: off-policy RL on logged episodes, with TRL.

GRPO compares G rollouts of the same incident; a production incident cannot be replayed G times, and the policy
that acted (the behaviour policy: an earlier version, the runbook) is not the one being trained. Two methods, by
`OffPolicyConfig.method` (the choice is argued in docs/continuous-learning.md):

- `awpg`, an advantage-weighted policy gradient with truncated importance ratios, on TRL's GRPOTrainer. Its
  `rollout_func` replays logged episodes instead of generating: the token ids the model produced (`env_mask` 1)
  and the tools' answers between them (0), exactly as GRPO's rollout of the episode would have been, with the
  behaviour policy's logged logprobs. An episode's advantage is its return minus the mean return of the *other*
  logged episodes of its fault class (leave-one-out), not of a sampled group. Each model token's advantage is
  weighted by the importance ratio π_θ/μ between the current and the behaviour policy, truncated to
  [ratio_min, ratio_max] (TRL applies that correction to logged logprobs only with vLLM, so `_replay_trainer`
  applies it here). Actions logged without logprobs (the runbook's; an endpoint without token ids, whose text is
  re-tokenised) get ratio 1 or are left out (`missing_logprobs`).
- `kto`, TRL's KTOTrainer on single turns: the prompt up to a turn and the answer, desirable when the episode beat
  its baseline, undesirable when it fell short or the step itself was penalised (invalid, refused, failing or
  repeated action). It needs no logprobs: the reference is the starting model.
"""

from __future__ import annotations

import logging
import math
import random
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_sre.models.reward import RewardConfig, RewardRecord
from agent_sre.models.training import OffPolicyConfig, OffPolicyResult, OffPolicyStepStats
from agent_sre.models.trajectory import Trajectory
from agent_sre.policy.llm.chat import chat_messages, decode_text, prompt_token_ids, render_chat
from agent_sre.rewards import compute_reward
from agent_sre.training.data import incident_class
from agent_sre.training.grpo import (
    SENTINEL,
    Rollout,
    environment_tokens,
    episode_return,
    returned_reward,
    rollout_batch_layout,
)

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase, Trainer, TrainerCallback

log = logging.getLogger(__name__)


@dataclass
class ScoredEpisode:
    trajectory: Trajectory
    answers: list[int] = field(repr=False)  # where each step's answer stands in the conversation
    reward: RewardRecord = field(repr=False)
    incident_class: str
    episode_return: float
    advantage: float = 0.0


@dataclass
class Scored:
    episodes: list[ScoredEpisode]
    skipped: Counter[str]


def answer_positions(t: Trajectory) -> list[int]:
    """Where each step's answer stands in the conversation. ValueError when the conversation is not the one the
    steps were decided in, so that no answer is trained against another step's prompt."""
    positions = [i for i, m in enumerate(t.conversation) if m.role == "assistant"]
    if len(positions) != len(t.steps) or any(t.conversation[i].content != s.decision.completion
                                             for i, s in zip(positions, t.steps, strict=False)):
        raise ValueError("its conversation does not match its steps")
    return positions


def has_logprobs(t: Trajectory) -> bool:
    return all(s.decision.completion_token_ids is not None and s.decision.completion_logprobs is not None
               for s in t.steps)


def advantages(returns: Sequence[float], classes: Sequence[str], config: OffPolicyConfig) -> list[float]:
    """Each return minus the mean return of the other episodes of its class: leave-one-out (as RLOO), so an
    episode is never its own baseline and two episodes of a class are simply compared with each other. A class
    with fewer than `min_class_episodes` episodes, or `baseline="global"`, is compared with all other episodes.
    With `negative_advantages="drop"` the worse episodes count for nothing instead of being pushed down; with
    `class_weights="balanced"` a class of many episodes weighs no more in the update than a class of few."""
    members: dict[str, list[int]] = defaultdict(list)
    for i, c in enumerate(classes):
        members[c].append(i)
    everyone = list(range(len(returns)))
    out = []
    for i, c in enumerate(classes):
        own = config.baseline == "fault_class" and len(members[c]) >= config.min_class_episodes
        others = [returns[j] for j in (members[c] if own else everyone) if j != i]
        out.append(returns[i] - sum(others) / len(others))
    if config.negative_advantages == "drop":
        out = [max(a, 0.0) for a in out]
    if config.class_weights == "balanced":
        out = [a * len(returns) / (len(members) * len(members[c])) for a, c in zip(out, classes, strict=True)]
    spread = statistics.pstdev(returns)
    return [a / spread for a in out] if config.scale_advantages and spread > 0 else out


REHEARSAL = "rehearsal"


def score_episodes(trajectories: Iterable[Trajectory], config: OffPolicyConfig,
                   rehearsal: Iterable[Trajectory] = ()) -> Scored:
    """The usable episodes with their returns (recomputed with the config's reward function: late human feedback
    counts, and episodes scored at different times compare) and advantages; the others counted by reason.
    ValueError when fewer than two remain: off-policy RL learns by comparing episodes. Rehearsed expert episodes
    are not compared: each gets `config.rehearsal_advantage` (class `rehearsal:<its class>`)."""
    reward_config = RewardConfig(function=config.reward_function)
    kept = _usable(trajectories, config, reward_config)
    if len(kept.episodes) < 2:
        raise ValueError(f"off-policy RL compares episodes and needs at least 2 usable ones; got {len(kept.episodes)}"
                         + (f" (left out: {dict(kept.skipped)})" if kept.skipped else ""))
    for e, a in zip(kept.episodes, advantages([e.episode_return for e in kept.episodes],
                                              [e.incident_class for e in kept.episodes], config), strict=True):
        e.advantage = a
    rehearsed = _usable(rehearsal, config.model_copy(update={"missing_logprobs": "on_policy"}), reward_config)
    for e in rehearsed.episodes:
        e.incident_class, e.advantage = f"{REHEARSAL}:{e.incident_class}", config.rehearsal_advantage
    kept.skipped.update({f"{REHEARSAL}: {reason}": n for reason, n in rehearsed.skipped.items()})
    return Scored(kept.episodes + rehearsed.episodes, kept.skipped)


def _usable(trajectories: Iterable[Trajectory], config: OffPolicyConfig, reward_config: RewardConfig) -> Scored:
    kept: list[ScoredEpisode] = []
    skipped: Counter[str] = Counter()
    for t in trajectories:
        if t.verdict is None:
            skipped["not judged"] += 1
            continue
        if not t.steps:
            skipped["no actions"] += 1
            continue
        try:
            answers = answer_positions(t)
        except ValueError as exc:
            skipped[str(exc)] += 1
            continue
        if config.method == "awpg" and config.missing_logprobs == "exclude" and not has_logprobs(t):
            skipped["actions logged without logprobs"] += 1
            continue
        reward = compute_reward(t, reward_config)
        kept.append(ScoredEpisode(t, answers, reward, incident_class(t),
                                  episode_return(t.model_copy(update={"reward": reward}))))
    return Scored(kept, skipped)


def check_learnable(trajectories: Iterable[Trajectory], config: OffPolicyConfig,
                    rehearsal: Iterable[Trajectory] = ()) -> Scored:
    """The scored episodes, or ValueError when they hold nothing to learn (checked before a training job starts)."""
    scored = score_episodes(trajectories, config, rehearsal)
    if config.method == "kto":
        if not kto_rows(scored.episodes):
            raise ValueError("no KTO examples: every episode's return equals its baseline and no action was "
                             "penalised")
    elif not any(e.advantage for e in scored.episodes):
        raise ValueError(f"no learning signal: all {len(scored.episodes)} episodes have the same return as the "
                         f"others of their class ({config.baseline} baseline)")
    return scored


# --- awpg: replay through TRL's GRPOTrainer ------------------------------------------------------------------------
def closes_turn_with_eos(tokenizer: PreTrainedTokenizerBase) -> bool:
    """Whether the chat template ends an assistant turn with the EOS token (ChatML's <|im_end|>): then a model
    emits it to stop, and a re-tokenised answer gets it as a trained token too."""
    marked = render_chat(tokenizer, [{"role": "user", "content": "?"}, {"role": "assistant", "content": SENTINEL}])
    return marked[marked.rindex(SENTINEL) + len(SENTINEL):].startswith(str(tokenizer.eos_token))


def replay(tokenizer: PreTrainedTokenizerBase, episode: ScoredEpisode) -> Rollout:
    """The logged episode as GRPO's rollout of it would have been: the first prompt, then each answer's token ids
    (env_mask 1, with the behaviour policy's logprobs) and the template's tokens up to the next answer (0). An
    answer logged without token ids is re-tokenised from its text; its logprobs are unknown (NaN)."""
    t, answers = episode.trajectory, episode.answers
    conversation = t.conversation
    rollout = Rollout(prompt_ids=prompt_token_ids(tokenizer, conversation[:answers[0]]), trajectory=t)
    eos = [tokenizer.eos_token_id] if closes_turn_with_eos(tokenizer) else []
    special = set(tokenizer.all_special_ids)
    for k, (at, step) in enumerate(zip(answers, t.steps, strict=True)):
        ids, logprobs = step.decision.completion_token_ids, step.decision.completion_logprobs
        if ids is None:
            ids, logprobs = tokenizer(step.decision.completion, add_special_tokens=False)["input_ids"] + eos, None
        if logprobs is None or len(logprobs) != len(ids):
            logprobs = [math.nan] * len(ids)
        rollout.add(ids, logprobs, from_model=True)
        if k + 1 < len(answers):
            ended = bool(ids) and ids[-1] in special  # the model sampled its end-of-turn token itself
            rollout.add(environment_tokens(tokenizer, conversation[:at + 1], conversation[at + 1:answers[k + 1]],
                                           ended, decode_text(tokenizer, ids[-1:])), None, from_model=False)
    return rollout


def fit(rollout: Rollout, max_length: int) -> bool:
    """Cut the completion so that the episode fits `max_length` tokens; returns whether anything was cut."""
    room = max_length - len(rollout.prompt_ids)
    if len(rollout.completion_ids) <= room:
        return False
    rollout.completion_ids, rollout.logprobs, rollout.env_mask = (
        rollout.completion_ids[:room], rollout.logprobs[:room], rollout.env_mask[:room])
    return True


@dataclass
class Replayed:
    rollout: Rollout
    episode: ScoredEpisode


class LoggedRollouts:
    """TRL's `rollout_func`: instead of generating, hands out logged episodes in a shuffled order per epoch. The
    position follows the trainer's step, so a resumed run continues with the episodes it had not reached."""

    def __init__(self, replayed: Sequence[Replayed], seed: int) -> None:
        self.replayed, self.seed = list(replayed), seed

    def at(self, position: int) -> Replayed:
        epoch, index = divmod(position, len(self.replayed))
        order = random.Random(self.seed + epoch).sample(range(len(self.replayed)), len(self.replayed))
        return self.replayed[order[index]]

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        n, acc = len(prompts), trainer.accelerator
        start = (trainer.state.global_step * acc.num_processes + acc.process_index) * n
        batch = [self.at(start + j) for j in range(n)]
        return {"prompt_ids": [b.rollout.prompt_ids for b in batch],
                "completion_ids": [b.rollout.completion_ids for b in batch],
                "logprobs": [b.rollout.logprobs for b in batch], "env_mask": [b.rollout.env_mask for b in batch],
                "episode_return": [b.episode.episode_return for b in batch],
                "advantage": [b.episode.advantage for b in batch]}


def truncated_ratios(current: torch.Tensor, behaviour: torch.Tensor, mask: torch.Tensor, low: float,
                     high: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(weight, ratio, known) per token: the ratio π_θ/μ = exp(current − behaviour logprob) where the behaviour
    logprob is known on a model token (mask 1, not NaN), 1 elsewhere; the weight is the ratio truncated to
    [low, high] (TRL's `token_truncate` importance sampling, which TRL applies only to vLLM's logprobs)."""
    import torch

    known = mask.bool() & ~torch.isnan(behaviour)
    ratio = torch.exp(torch.where(known, current - torch.nan_to_num(behaviour), 0.0))
    return ratio.clamp(low, high), ratio, known


def _replay_trainer(config: OffPolicyConfig, stats: list[OffPolicyStepStats], **kwargs: Any) -> Trainer:
    """A GRPOTrainer whose advantages are the logged episodes' own (TRL's would be relative to the batch), and
    whose tokens weigh by the truncated importance ratio against the behaviour policy's logged logprobs."""
    import torch

    from agent_sre.training.unpadded import UnpaddedGRPOTrainer

    class ReplayGRPOTrainer(UnpaddedGRPOTrainer):
        def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
            out = super()._generate_and_score_completions(inputs)  # fills `inputs` with the rollout's fields
            device = self.accelerator.device
            mask = out["completion_mask"] * out["tool_mask"]
            with torch.no_grad():
                current, _, _ = self._get_per_token_logps_and_entropies(
                    self.model, torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1),
                    torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1), out["completion_ids"].size(1),
                    batch_size=self.args.per_device_train_batch_size)
            weight, ratio, known = truncated_ratios(current, out["sampling_per_token_logps"], mask,
                                                    config.ratio_min, config.ratio_max)
            advantage = torch.tensor([row["advantage"] for row in inputs], dtype=weight.dtype, device=device)
            out["advantages"] = advantage[:, None] * weight
            clipped = known & ((ratio < config.ratio_min) | (ratio > config.ratio_max))
            read = out["prompt_mask"].sum() + out["completion_mask"].sum()
            local = [ratio[known].sum().item(), clipped.sum().item(), known.sum().item(), mask.sum().item(),
                     read.item(), sum(row["episode_return"] for row in inputs), len(inputs)]
            sums = self.accelerator.gather(torch.tensor([local], device=device)).sum(dim=0).tolist()
            ratio_sum, clipped_n, scored, trained, sequence, return_sum, episodes = sums
            stats.append(OffPolicyStepStats(
                step=self.state.global_step, episodes=int(episodes), mean_return=return_sum / episodes,
                importance_ratio_mean=ratio_sum / scored if scored else None,
                clipped_fraction=clipped_n / scored if scored else 0.0, scored_tokens=int(scored),
                trained_tokens=int(trained), sequence_tokens=int(sequence)))
            if scored:
                self._metrics["train"]["importance_ratio/mean"].append(ratio_sum / scored)
                self._metrics["train"]["importance_ratio/clipped_fraction"].append(clipped_n / scored)
            return out

    return ReplayGRPOTrainer(**kwargs)


def _awpg(model_dir: Path, scored: Scored, work: Path, config: OffPolicyConfig, save_steps: int | None,
          callbacks: Sequence[TrainerCallback]) -> tuple[Trainer, dict[str, Any]]:
    """The replaying trainer; episodes whose first prompt alone exceeds max_length leave `scored`."""
    from datasets import Dataset
    from trl import GRPOConfig

    from agent_sre.policy.llm.checkpoint import pick_device, train_in_bf16

    device = pick_device(config.device)
    tokenizer = _tokenizer(model_dir)
    replayed, truncated = [], 0
    for e in scored.episodes:
        rollout = replay(tokenizer, e)
        if len(rollout.prompt_ids) >= config.max_length:
            scored.skipped["first prompt longer than max_length"] += 1
            continue
        truncated += fit(rollout, config.max_length)
        replayed.append(Replayed(rollout, e))
    if not replayed:
        raise ValueError(f"every episode's first prompt is longer than max_length={config.max_length} tokens")
    scored.episodes = [r.episode for r in replayed]
    if truncated:
        log.warning("%d of %d episodes exceed max_length=%d: their later turns are not trained", truncated,
                    len(replayed), config.max_length)
    stats: list[OffPolicyStepStats] = []
    args = GRPOConfig(
        output_dir=str(work), max_steps=config.max_steps, learning_rate=config.learning_rate,
        **rollout_batch_layout(device, config.batch_size * config.gradient_accumulation_steps),
        num_generations=config.batch_size, beta=config.beta, temperature=config.temperature,
        max_completion_length=config.max_length, logging_steps=1,
        save_strategy="steps" if save_steps else "no", save_steps=save_steps or 500, save_total_limit=2,
        report_to=[], seed=config.seed, use_cpu=device.type == "cpu", bf16=train_in_bf16(device, config.precision),
        disable_tqdm=True)
    slots = Dataset.from_dict({"prompt": [f"slot-{i}" for i in
                                          range(config.max_steps * config.gradient_accumulation_steps)]})
    trainer = _replay_trainer(config, stats, model=str(model_dir), reward_funcs=[returned_reward], args=args,
                              train_dataset=slots, processing_class=tokenizer,
                              rollout_func=LoggedRollouts(replayed, config.seed), callbacks=list(callbacks))
    return trainer, {"examples": len(replayed), "truncated": truncated, "step_stats": stats}


# --- kto: TRL's KTOTrainer on single turns -------------------------------------------------------------------------
def kto_rows(episodes: Sequence[ScoredEpisode]) -> list[dict[str, Any]]:
    """One example per turn: the conversation up to the answer, the answer, and whether it is desirable. A step
    with a shaping penalty (invalid, refused, failing or repeated action) is undesirable wherever it happened;
    otherwise the turn follows its episode's advantage, and a turn of an episode no better or worse than its
    baseline teaches nothing and is left out."""
    rows = []
    for e in episodes:
        conversation = e.trajectory.conversation
        for at, shaping in zip(e.answers, e.reward.step_rewards, strict=True):
            if shaping >= 0 and e.advantage == 0:
                continue
            rows.append({"prompt": chat_messages(conversation[:at]), "completion": chat_messages([conversation[at]]),
                         "label": shaping >= 0 and e.advantage > 0})
    return rows


def _kto(model_dir: Path, scored: Scored, work: Path, config: OffPolicyConfig, save_steps: int | None,
         callbacks: Sequence[TrainerCallback]) -> tuple[Trainer, dict[str, Any]]:
    from datasets import Dataset
    from trl import KTOConfig, KTOTrainer

    from agent_sre.policy.llm.checkpoint import pick_device, train_in_bf16

    rows = kto_rows(scored.episodes)
    random.Random(config.seed).shuffle(rows)  # KTO reads in order, and pairs neighbours for its KL estimate
    desirable = sum(r["label"] for r in rows)
    undesirable = len(rows) - desirable
    device = pick_device(config.device)
    args = KTOConfig(
        output_dir=str(work), max_steps=config.max_steps, learning_rate=config.learning_rate,
        per_device_train_batch_size=config.batch_size, gradient_accumulation_steps=config.gradient_accumulation_steps,
        beta=config.beta, max_length=config.max_length,
        # the KTO paper's balance (its eq. 8): desirable and undesirable examples weigh alike in total
        desirable_weight=undesirable / desirable if desirable and undesirable else 1.0,
        logging_steps=1, save_strategy="steps" if save_steps else "no", save_steps=save_steps or 500,
        save_total_limit=2, report_to="none", seed=config.seed, use_cpu=device.type == "cpu",
        bf16=train_in_bf16(device, config.precision), disable_tqdm=True, dataloader_num_workers=0,
        include_num_input_tokens_seen="non_padding")
    trainer = KTOTrainer(model=str(model_dir), args=args, train_dataset=Dataset.from_list(rows),
                         processing_class=_tokenizer(model_dir), callbacks=list(callbacks))
    kept: Dataset = trainer.train_dataset  # the rows above, tokenised; too long ones left out
    truncated = len(rows) - len(kept) + sum(len(p) + len(c) > config.max_length
                                            for p, c in zip(kept["prompt_ids"], kept["completion_ids"], strict=True))
    if truncated:
        log.warning("%d of %d turns exceed max_length=%d: cut or left out", truncated, len(rows), config.max_length)
    return trainer, {"examples": len(rows), "desirable": desirable, "undesirable": undesirable,
                     "truncated": truncated}


# --- the entry point -----------------------------------------------------------------------------------------------
def _tokenizer(model_dir: Path) -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def train_offpolicy(model_dir: Path, episodes: Iterable[Trajectory], output_dir: Path, config: OffPolicyConfig,
                    work_dir: Path | None = None, *, rehearsal: Iterable[Trajectory] = (),
                    save_steps: int | None = None, resume_from: Path | None = None,
                    callbacks: Sequence[TrainerCallback] = ()) -> OffPolicyResult:
    """Off-policy RL from `model_dir` on logged `episodes` (a list, or `trajectory_store.iter_trajectories`), and
    on `rehearsal`, expert episodes imitated at a fixed advantage; saves the policy to `output_dir`. `work_dir`
    holds the trainer's own files (default: beside `output_dir`): a checkpoint every `save_steps` (the last two
    kept), from which `resume_from` continues."""
    from agent_sre.policy.llm.checkpoint import check_model_dir, save_trained

    if output_dir.exists() and any(output_dir.iterdir()):
        raise FileExistsError(f"{output_dir} already holds files; off-policy RL writes a new model directory")
    check_model_dir(model_dir)
    scored = check_learnable(episodes, config, rehearsal)
    work = work_dir or output_dir.with_name(output_dir.name + ".work")
    build = _awpg if config.method == "awpg" else _kto
    trainer, figures = build(model_dir, scored, work, config, save_steps, callbacks)
    began = time.perf_counter()
    trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    runtime = time.perf_counter() - began
    tokens = (sum(s.sequence_tokens for s in figures["step_stats"]) if config.method == "awpg"
              else int(trainer.state.num_input_tokens_seen))
    losses = [float(row["loss"]) for row in trainer.state.log_history if "loss" in row]
    if not all(math.isfinite(loss) for loss in losses):
        raise FloatingPointError(f"off-policy RL diverged (losses {losses}); try a lower learning rate")
    save_trained(trainer, output_dir)
    return OffPolicyResult(output_dir=str(output_dir), base_model=str(model_dir), method=config.method,
                           episodes=len(scored.episodes), skipped=dict(scored.skipped),
                           classes=dict(Counter(e.incident_class for e in scored.episodes)),
                           steps=trainer.state.global_step, losses=losses, train_runtime_s=runtime,
                           train_tokens=tokens, **figures)
