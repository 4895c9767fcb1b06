"""TRL's `GRPOTrainer`, scoring a sequence that is alone in its pass without its padding, and scoring only the
model's own tokens of a multi-turn rollout.

TRL pads a rollout batch to its longest sequence and every slice of the batch keeps that width. With one sequence
per pass (the CPU layout, `grpo.rollout_batch_layout`) each pass would still read the batch's padding, and the
attention mask that padding needs takes attention off its causal kernel onto a masked full matrix. Multi-turn
episodes differ in length by thousands of tokens: cutting the padding took one GRPO step's trainer (4 rollouts
from the SFT model, on this CPU, timed once by a trainer callback) from 214 s to 156 s.

A rollout's completion is mostly the environment's tokens (tool results: `env_mask` 0), which the loss masks out.
TRL's fused LM head projects only labelled positions on a GPU, but on a CPU it scores every position of the
completion against the whole vocabulary; so a lone row's log-probabilities (and entropies) are computed here for
the model's tokens only, in fp32, from the backbone's hidden states (bench/grpo_scoring.py measures it).

This module imports TRL at the top: import it where TRL is imported, inside the training functions.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from accelerate.utils import is_peft_model
from trl import GRPOTrainer

LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "output_multiplier", "lm_head_multiplier",
                    "logits_scaling")  # what TRL's fused head applies beyond the temperature: those models use TRL's


def token_span(mask: torch.Tensor) -> tuple[int, int] | None:
    """[start, end) of a row's tokens when they are contiguous (left-padded prompt, right-padded completion)."""
    kept = mask.nonzero().flatten()
    if not len(kept):
        return None
    start, end = int(kept[0]), int(kept[-1]) + 1
    return (start, end) if int(mask[start:end].sum()) == end - start else None


def scores_own_tokens(model: Any) -> bool:
    """Whether `model`'s next-token distribution is its LM head's logits over the temperature, nothing more."""
    config = model.config.get_text_config()
    return not is_peft_model(model) and all(getattr(config, name, None) is None for name in LOGIT_TRANSFORMS)


class UnpaddedGRPOTrainer(GRPOTrainer):
    """Cuts a lone row to its tokens before the forward pass and pads the per-token results back to the batch's
    width, so the loss reads the same tensors it would have (padded positions are masked out of it either way).
    The rows' `env_mask` (TRL's `tool_mask`) is kept from the rollout and from each training slice so that a lone
    row's LM head runs only where the model wrote; elsewhere the log-probabilities are 0, as TRL's are at padding."""

    _own_tokens: list[list[int]] | None = None  # per row of the next scoring passes: 1 where the model wrote

    def _generate(self, prompts: list[Any]) -> Any:
        generated = super()._generate(prompts)
        self._own_tokens = generated[2]  # tool_mask of the generation batch, one unpadded row per rollout
        return generated

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        mask = inputs.get("tool_mask")
        self._own_tokens = mask.tolist() if mask is not None else None
        # trl leaves _compute_loss unannotated, and mypy's untyped_calls_exclude does not see through super()
        loss: torch.Tensor = super()._compute_loss(model, inputs)  # type: ignore[no-untyped-call]
        return loss

    def _get_per_token_logps_and_entropies(self, model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                                           logits_to_keep: int, batch_size: int | None = None,
                                           compute_entropy: bool = False, compute_aux_loss: bool = False,
                                           **inputs: Any) -> tuple[torch.Tensor, torch.Tensor | None,
                                                                   torch.Tensor | None]:
        completion_start = input_ids.size(1) - logits_to_keep
        spans = [token_span(row) for row in attention_mask]
        cuttable = [s for s in spans if s is not None and s[0] < completion_start < s[1]]
        lone = (batch_size or input_ids.size(0)) == 1 and not compute_aux_loss
        if not lone or any(v is not None for v in inputs.values()) or len(cuttable) != len(spans):
            # batched passes, images, or a row without both prompt and completion tokens: TRL's own path
            theirs: tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None] = (
                super()._get_per_token_logps_and_entropies(
                    model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size,
                    compute_entropy=compute_entropy, compute_aux_loss=compute_aux_loss, **inputs))
            return theirs
        own = self._own_tokens if self._own_tokens is not None and len(self._own_tokens) == len(spans) else None
        unwrapped = self.accelerator.unwrap_model(model)
        logps, entropies = [], []
        for i, (row, mask, (start, end)) in enumerate(zip(input_ids, attention_mask, cuttable, strict=True)):
            kept = end - completion_start
            if own is not None and scores_own_tokens(unwrapped):
                scored = torch.tensor(own[i][:kept], dtype=torch.bool, device=row.device)
                row_logps, row_entropies = self._score_own_tokens(unwrapped, row[None, start:end],
                                                                  mask[None, start:end], scored, compute_entropy)
            else:
                row_logps, row_entropies, _ = super()._get_per_token_logps_and_entropies(
                    model, row[None, start:end], mask[None, start:end], kept, batch_size=1,
                    compute_entropy=compute_entropy)
            logps.append(F.pad(row_logps, (0, logits_to_keep - kept)))
            if row_entropies is not None:
                entropies.append(F.pad(row_entropies, (0, logits_to_keep - kept)))
        return torch.cat(logps), torch.cat(entropies) if entropies else None, None

    def _score_own_tokens(self, model: Any, ids: torch.Tensor, mask: torch.Tensor, scored: torch.Tensor,
                          compute_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probabilities (and entropies) of the last `len(scored)` tokens of `ids` where `scored`, else 0.
        The LM head runs in fp32 outside autocast: a bf16 logit of 20 is off by up to 0.06."""
        with self.accelerator.autocast():
            hidden = model.base_model(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
        targets = ids.size(1) - len(scored) + scored.nonzero().flatten()  # positions of the scored tokens
        head = model.get_output_embeddings()
        with torch.autocast(ids.device.type, enabled=False):
            logits = F.linear(hidden[0, targets - 1].float(), head.weight.float(),
                              None if head.bias is None else head.bias.float())
            logp = (logits / self.temperature).log_softmax(-1)
        row_logps = logp.gather(-1, ids[0, targets, None]).squeeze(-1)
        zeros = torch.zeros(1, len(scored), dtype=logp.dtype, device=ids.device)
        logps = zeros.masked_scatter(scored[None], row_logps)
        if not compute_entropy:
            return logps, None
        return logps, zeros.masked_scatter(scored[None], -(logp.exp() * logp).sum(-1))
