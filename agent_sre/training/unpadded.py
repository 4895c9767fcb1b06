"""TRL's `GRPOTrainer`, scoring a sequence that is alone in its pass without its padding.

TRL pads a rollout batch to its longest sequence and every slice of the batch keeps that width. With one sequence
per pass (the CPU layout, `grpo.rollout_batch_layout`) each pass would still read the batch's padding, and the
attention mask that padding needs takes attention off its causal kernel onto a masked full matrix. Multi-turn
episodes differ in length by thousands of tokens: cutting the padding took one GRPO step's trainer (4 rollouts
from the SFT model, on this CPU, timed once by a trainer callback) from 214 s to 156 s. This module imports TRL at
the top: import it where TRL is imported, inside the training functions.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from trl import GRPOTrainer


def token_span(mask: torch.Tensor) -> tuple[int, int] | None:
    """[start, end) of a row's tokens when they are contiguous (left-padded prompt, right-padded completion)."""
    kept = mask.nonzero().flatten()
    if not len(kept):
        return None
    start, end = int(kept[0]), int(kept[-1]) + 1
    return (start, end) if int(mask[start:end].sum()) == end - start else None


class UnpaddedGRPOTrainer(GRPOTrainer):
    """Cuts a lone row to its tokens before the forward pass and pads the per-token results back to the batch's
    width, so the loss reads the same tensors it would have (padded positions are masked out of it either way)."""

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
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size,
                compute_entropy=compute_entropy, compute_aux_loss=compute_aux_loss, **inputs)
        logps, entropies = [], []
        for row, mask, (start, end) in zip(input_ids, attention_mask, cuttable, strict=True):
            kept = end - completion_start
            row_logps, row_entropies, _ = super()._get_per_token_logps_and_entropies(
                model, row[None, start:end], mask[None, start:end], kept, batch_size=1,
                compute_entropy=compute_entropy)
            logps.append(F.pad(row_logps, (0, logits_to_keep - kept)))
            if row_entropies is not None:
                entropies.append(F.pad(row_entropies, (0, logits_to_keep - kept)))
        return torch.cat(logps), torch.cat(entropies) if entropies else None, None
