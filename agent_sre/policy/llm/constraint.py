"""Constrained decoding: the model can only write a tool call that parses against the tool schemas.

An answer is one JSON object `{"tool": NAME, "args": {...}}` (`policy.conversation`). `action_json_schema` is its
JSON schema, built from `TOOL_SPECS` whenever they change: any of the tools, each with its name as a constant and
its argument model's own schema (pydantic's, extra keys forbidden). llguidance compiles that schema against the
tokenizer once; at every generated token, a matcher per answer gives the tokens that keep the answer a prefix of a
valid action, and `ActionConstraint` masks every other token out of the logits (before temperature and top-p).
The end-of-turn token is allowed only once the object is closed, and then it is the only one, so an answer ends
where its object does.

The form is the canonical completion's (`render_action`): `", "` and `": "` between items, no other whitespace, and
an object's keys in the order of its schema's properties (the argument model's fields, the order the runbook writes
them). So the model is held to the very text SFT trains it on and cannot spend its token budget on whitespace.

The transformers backend applies it to every generation, serving and training rollouts alike (`SamplingConfig.
constrained`, on by default); an OpenAI-compatible server that takes a JSON schema as `response_format` (vLLM,
SGLang) can be sent the same schema, whose "x-guidance" options give llguidance there the same form.

torch and llguidance are imported where they are used: importing the policy must not load them.
"""

from __future__ import annotations

import json
import logging
import threading
import weakref
from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from agent_sre.models.tools import TOOL_SPECS

if TYPE_CHECKING:
    import torch
    from llguidance import LLExecutor, LLMatcher, LLTokenizer
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)

# llguidance's JSON options: the separators of `render_action` and no other whitespace; non-ASCII characters may be
# written as \u escapes, as json.dumps writes them.
ACTION_JSON_FORMAT: dict[str, Any] = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": ",
                                      "json_allow_general_unicode_escapes": True}


def action_json_schema() -> dict[str, Any]:
    """The JSON schema of one action, from the tools as they are now: any of them, with its arguments' schema."""
    return json.loads(_schema_text(tuple((name, spec.args) for name, spec in TOOL_SPECS.items())))


@lru_cache(maxsize=8)
def _schema_text(tools: tuple[tuple[str, type[BaseModel]], ...]) -> str:
    definitions: dict[str, Any] = {}
    branches = []
    for name, args in tools:
        schema = args.model_json_schema()
        for key, definition in schema.pop("$defs", {}).items():  # pydantic refers to them as #/$defs/KEY
            if definitions.setdefault(key, definition) != definition:
                raise ValueError(f"two tools' argument schemas define {key!r} differently")
        branches.append({"type": "object", "properties": {"tool": {"const": name}, "args": schema},
                         "required": ["tool", "args"], "additionalProperties": False})
    root: dict[str, Any] = {"anyOf": branches, "x-guidance": ACTION_JSON_FORMAT}
    if definitions:
        root["$defs"] = definitions
    return json.dumps(root)


class ActionGrammar:
    """The action schema compiled for one tokenizer and its end-of-turn tokens. Compiling takes about a second
    (most of it the tokenizer's trie); a new answer's matcher is a copy of a fresh one (microseconds)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, stop_token_ids: Sequence[int], schema: str) -> None:
        import llguidance
        import llguidance.hf

        self.tokenizer: LLTokenizer = llguidance.hf.from_tokenizer(tokenizer,  # type: ignore[arg-type]
                                                                   eos_token=list(stop_token_ids))
        self.stop_token_ids = frozenset(stop_token_ids)
        self._fresh = llguidance.LLMatcher(self.tokenizer, llguidance.LLMatcher.grammar_from_json_schema(schema),
                                           log_level=0)
        if self._fresh.is_error():
            raise ValueError(f"the action schema does not compile: {self._fresh.get_error()}")

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def matcher(self) -> LLMatcher:
        """A matcher at the start of an answer."""
        return self._fresh.deep_copy()

    def accepts(self, token_ids: Sequence[int]) -> bool:
        """Whether these tokens are a whole action, after which the grammar allows only the end of the turn."""
        matcher = self.matcher()
        return matcher.consume_tokens(list(token_ids)) and matcher.is_accepting()


_grammars: weakref.WeakKeyDictionary[Any, dict[tuple[frozenset[int], str], ActionGrammar]] = \
    weakref.WeakKeyDictionary()
_grammars_lock = threading.Lock()


def action_grammar(tokenizer: PreTrainedTokenizerBase, stop_token_ids: Sequence[int]) -> ActionGrammar:
    """The action grammar for a tokenizer, compiled on first use and kept while the tokenizer lives (recompiled
    should the tools change)."""
    schema = _schema_text(tuple((name, spec.args) for name, spec in TOOL_SPECS.items()))
    key = (frozenset(stop_token_ids), schema)
    with _grammars_lock:
        compiled = _grammars.setdefault(tokenizer, {})
        if key not in compiled:
            compiled.clear()  # an older schema's grammar is no longer used
            compiled[key] = ActionGrammar(tokenizer, stop_token_ids, schema)
        return compiled[key]


_executor: LLExecutor | None = None


def _parallel() -> LLExecutor:
    global _executor
    if _executor is None:
        from llguidance import LLExecutor

        _executor = LLExecutor()
    return _executor


class ActionConstraint:
    """A transformers logits processor (`generate(logits_processor=[...])`) holding a batch of answers to the
    action grammar. A row is let go once it has sampled an end-of-turn token (transformers pads it from then on).

    It also records, per step and row, the log of the probability that the model at `temperature` gives the
    tokens the grammar allows (`log_allowed_mass`). Sampling renormalises over those tokens, so a sampled token's
    logprob under the model itself is its logprob under the masked distribution plus that mass: the backend
    records the model's own (what the trainers compute for the same tokens; exact at top-p 1)."""

    def __init__(self, grammar: ActionGrammar, rows: int, temperature: float) -> None:
        import torch

        self.grammar = grammar
        self.matchers = [grammar.matcher() for _ in range(rows)]
        self.free = [False] * rows  # ended, or (never expected) a matcher failed: no mask
        self.temperature = temperature if temperature > 0 else 1.0  # greedy: the scores are the raw logits
        self.bitmask = torch.full((rows, (grammar.vocab_size + 31) // 32), -1, dtype=torch.int32)
        self.log_allowed_mass: list[torch.Tensor] = []
        self._started = False

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        import torch
        from llguidance.torch import fill_next_token_bitmask_par

        if self._started:  # each call after the first follows one sampled token per row
            self._consume(input_ids[:, -1].tolist())
        self._started = True
        held = [(m, row) for row, m in enumerate(self.matchers) if not self.free[row]]
        self.bitmask.fill_(-1)
        if held:
            fill_next_token_bitmask_par(_parallel(), held, self.bitmask)
        allowed = _unpack(self.bitmask.to(scores.device), scores.shape[-1])
        stuck = ~allowed.any(-1)
        if bool(stuck.any()):  # never expected: a matcher that allows nothing, not even the end of the turn
            log.warning("the action grammar allows no token; that answer goes on unconstrained")
            allowed[stuck] = True
            for row in stuck.nonzero().flatten().tolist():
                self.free[row] = True
        scaled = scores.float() / self.temperature
        self.log_allowed_mass.append(
            (scaled.masked_fill(~allowed, float("-inf")).logsumexp(-1) - scaled.logsumexp(-1)).cpu())
        return scores.masked_fill(~allowed, float("-inf"))

    def _consume(self, tokens: list[int]) -> None:
        for row, token in enumerate(tokens):
            if self.free[row]:
                continue
            if token in self.grammar.stop_token_ids:
                self.free[row] = True
            elif not self.matchers[row].consume_token(token):
                log.warning("the action grammar rejected a sampled token; the rest of the answer is unconstrained: "
                            "%s", self.matchers[row].get_error())
                self.free[row] = True

    def logprob_offsets(self) -> torch.Tensor:
        """(rows, steps): what to add to the masked distribution's logprobs to get the model's own."""
        import torch

        return torch.stack(self.log_allowed_mass, dim=1)


def _unpack(bitmask: torch.Tensor, width: int) -> torch.Tensor:
    """(rows, words) int32 bitmask, one bit per token, to (rows, width) booleans; tokens past the grammar's vocabulary
    (a model whose embedding is padded beyond the tokenizer) are not allowed."""
    import torch

    shifts = torch.arange(32, dtype=torch.int32, device=bitmask.device)
    bits = ((bitmask.unsqueeze(-1) >> shifts) & 1).bool().flatten(1)
    if bits.shape[1] >= width:
        return bits[:, :width]
    return torch.cat([bits, bits.new_zeros((bits.shape[0], width - bits.shape[1]))], dim=1)
