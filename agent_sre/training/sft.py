"""SFT warm start: imitate the expert (runbook) policy's successful episodes, with TRL's SFTTrainer.

The training text is each episode's stored conversation in the one chat format the policy is served with
(`policy.llm.chat`), and the loss covers the assistant turns only (the JSON tool calls and their end-of-turn
token): the model learns what to answer, not to predict the alerts and kubectl output it is shown.
"""

from __future__ import annotations

import json
import logging
import math
import tempfile
from collections.abc import Iterable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from agent_sre.models.training import SFTConfig, SFTResult
from agent_sre.models.trajectory import Trajectory
from agent_sre.policy.llm.chat import chat_messages, chat_token_ids
from agent_sre.policy.llm.checkpoint import check_model_dir, device_name, pick_device, save_trained, train_in_bf16
from agent_sre.training.data import escalated_honestly, resolved_cleanly

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase, TrainerCallback
    from trl import SFTTrainer

log = logging.getLogger(__name__)


def is_expert_episode(t: Trajectory, policies: Iterable[str]) -> bool:
    """A demonstration worth imitating: an expert policy's episode that it resolved cleanly, or that it handed to a
    human honestly after its fix failed (so the model learns to check a fix and say when it did not work)."""
    return t.policy in set(policies) and (resolved_cleanly(t) or escalated_honestly(t))


def expert_conversations(trajectories: Iterable[Trajectory], policies: Iterable[str]) -> list[list[dict[str, str]]]:
    """The distinct expert conversations, as chat-template messages. `trajectories` may be a list or
    `trajectory_store.iter_trajectories(...)` over the object store."""
    policies = list(policies)
    seen: set[str] = set()
    conversations = []
    for t in trajectories:
        if not is_expert_episode(t, policies):
            continue
        messages = chat_messages(t.conversation)
        key = json.dumps(messages, sort_keys=True)
        if key not in seen:
            seen.add(key)
            conversations.append(messages)
    return conversations


def build_sft_trainer(model_dir: Path, conversations: list[list[dict[str, str]]], work_dir: Path,
                      config: SFTConfig, save_steps: int | None = None,
                      callbacks: Sequence[TrainerCallback] = ()) -> SFTTrainer:
    """An SFTTrainer over `conversations` with the loss on assistant tokens only. Its tokenized dataset
    (`trainer.train_dataset`: input_ids, labels = -100 outside the assistant turns) is ready on return.
    With `save_steps`, a checkpoint (`work_dir/checkpoint-N`, the last two kept) every that many steps."""
    return _trainer(model_dir, [{"messages": c} for c in conversations], work_dir, config, save_steps, callbacks)


def _trainer(model_dir: Path, rows: list[dict[str, Any]], work_dir: Path, config: SFTConfig,
             save_steps: int | None = None, callbacks: Sequence[TrainerCallback] = ()) -> SFTTrainer:
    """The SFTTrainer over rows of whole conversations (`messages`: loss on every assistant turn) or of
    prompt-completion pairs (`prompt`, `completion`: loss on the completion only, the prompt's assistant turns
    included as context: DAgger's labelled states)."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig as TRLSFTConfig
    from trl import SFTTrainer

    if not rows:
        raise ValueError("no expert conversations to train on")
    whole = "messages" in rows[0]
    check_model_dir(model_dir)
    device = pick_device(config.device)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, local_files_only=True)
    args = TRLSFTConfig(
        output_dir=str(work_dir), max_steps=config.max_steps, learning_rate=config.learning_rate,
        lr_scheduler_type=config.lr_scheduler, warmup_steps=config.warmup_steps, weight_decay=config.weight_decay,
        per_device_train_batch_size=config.batch_size, gradient_accumulation_steps=config.gradient_accumulation_steps,
        max_length=config.max_length, assistant_only_loss=whole, completion_only_loss=None if whole else True,
        packing=False,
        activation_checkpointing=config.activation_checkpointing, bf16=train_in_bf16(device, config.precision),
        use_cpu=device.type == "cpu", seed=config.seed, logging_steps=config.logging_steps,
        save_strategy="steps" if save_steps else "no", save_steps=save_steps or 500, save_total_limit=2,
        report_to="none", disable_tqdm=True, dataloader_num_workers=0)
    peft_config = None
    if config.lora_r is not None:
        from peft import LoraConfig

        peft_config = LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, target_modules="all-linear",
                                 task_type="CAUSAL_LM")
    return SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows),
                      processing_class=tokenizer, peft_config=peft_config, callbacks=list(callbacks))


def train_sft(model_dir: Path, trajectories: Iterable[Trajectory], output_dir: Path,
              config: SFTConfig | None = None, *, work_dir: Path | None = None, save_steps: int | None = None,
              resume_from: Path | None = None, callbacks: Sequence[TrainerCallback] = ()) -> SFTResult:
    """Fine-tune the model in `model_dir` on the expert episodes among `trajectories`; write the result to
    `output_dir` (a new directory: weights in safetensors + tokenizer, loadable by `load_policy_model`).

    `work_dir` keeps the trainer's checkpoints (every `save_steps`) after the run, and `resume_from` continues
    from one of them (a retried training job); without `work_dir` they go to a temporary directory."""
    config = config or SFTConfig()
    if output_dir.exists() and any(output_dir.iterdir()):
        raise FileExistsError(f"{output_dir} already holds files; SFT writes a new model directory")
    conversations = expert_conversations(trajectories, config.expert_policies)
    if not conversations:
        raise ValueError(f"no expert episodes: SFT needs finished, resolved episodes without false positives from "
                         f"{', '.join(config.expert_policies)}")
    rows = [{"messages": c} for c in conversations]
    return _train(model_dir, rows, output_dir, config, work_dir=work_dir, save_steps=save_steps,
                  resume_from=resume_from, callbacks=callbacks)


def train_sft_rows(model_dir: Path, rows: list[dict[str, Any]], output_dir: Path, config: SFTConfig) -> SFTResult:
    """SFT on prompt-completion rows (`prompt`: the chat so far, `completion`: the assistant's answer), the loss on
    the completions only: what a DAgger round trains on (`training/dagger.py`)."""
    if output_dir.exists() and any(output_dir.iterdir()):
        raise FileExistsError(f"{output_dir} already holds files; SFT writes a new model directory")
    return _train(model_dir, rows, output_dir, config)


def _train(model_dir: Path, rows: list[dict[str, Any]], output_dir: Path, config: SFTConfig, *,
           work_dir: Path | None = None, save_steps: int | None = None, resume_from: Path | None = None,
           callbacks: Sequence[TrainerCallback] = ()) -> SFTResult:
    with nullcontext(str(work_dir)) if work_dir else tempfile.TemporaryDirectory(prefix="sft-") as work:
        trainer = _trainer(model_dir, rows, Path(work), config, save_steps, callbacks)
        tokenizer = cast("PreTrainedTokenizerBase", trainer.processing_class)  # the one _trainer loaded
        truncated = sum(len(chat_token_ids(tokenizer, r.get("messages") or [*r["prompt"], *r["completion"]]))
                        > config.max_length for r in rows)
        if truncated:
            log.warning("%d of %d examples exceed max_length=%d: their ends are not trained",
                        truncated, len(rows), config.max_length)
        output = trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
        logs = trainer.state.log_history
        losses = [float(entry["loss"]) for entry in logs if "loss" in entry]
        if not all(math.isfinite(loss) for loss in losses):
            raise FloatingPointError(f"SFT diverged (losses {losses}); try a lower learning rate")
        adapter = save_trained(trainer, output_dir)
    return SFTResult(output_dir=str(output_dir), adapter_dir=str(adapter) if adapter else None,
                     base_model=str(model_dir), examples=len(rows),
                     truncated=truncated,
                     steps=trainer.state.global_step, losses=losses, train_runtime_s=output.metrics["train_runtime"],
                     train_tokens=int(max((entry.get("num_tokens", 0) for entry in logs), default=0)),
                     bf16=trainer.args.bf16, device=device_name(trainer.args.device))
