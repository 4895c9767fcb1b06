"""Constrained decoding: the model can only write a tool call that parses against the tool schemas.

An answer is one JSON object `{"tool": NAME, "args": {...}}` (`policy.conversation`). `action_json_schema` is its
JSON schema, built from `TOOL_SPECS` whenever they change: any of the tools, each with its name as a constant and
its argument model's own schema (pydantic's, extra keys forbidden). llguidance compiles that schema against the
tokenizer once; at every generated token, a matcher per answer gives the tokens that keep the answer a prefix of a
valid action, and `ActionConstraint` masks every other token out of the logits (before temperature and top-p).
The end-of-turn token is allowed only once the object is closed, and then it is the only one, so an answer ends
where its object does.

The form is the canonical completion's (`render_action`): `", "` and `": "` between items, no other whitespace, and
an object's keys in the order of its schema's properties (the argument model's fields, the order the teachers write
them). So the model is held to the very text SFT trains it on and cannot spend its token budget on whitespace.

The transformers backend applies it to every generation, serving and training rollouts alike (`SamplingConfig.
constrained`, on by default), and records the logprobs of the model itself (before the mask), which is what the
trainers score; an OpenAI-compatible server that takes a JSON schema as `response_format` (vLLM, SGLang) can be
sent the same schema, whose "x-guidance" options give llguidance there the same form.

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
    from llguidance import LLMatcher, LLTokenizer
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)

# llguidance's JSON options: the separators of `render_action` and no other whitespace; non-ASCII characters may be
# written as \u escapes, as json.dumps writes them.
ACTION_JSON_FORMAT: dict[str, Any] = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": ",
                                      "json_allow_general_unicode_escapes": True}


def action_json_schema() -> dict[str, Any]:
    """The JSON schema of one action, from the tools as they are now: any of them, with its arguments' schema."""
    schema: dict[str, Any] = json.loads(_schema_text(tuple((name, spec.args) for name, spec in TOOL_SPECS.items())))
    return schema


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


class ActionConstraint:
    """A transformers logits processor (`generate(logits_processor=[...])`) holding a batch of answers to the
    action grammar: the tokens it does not allow get -inf, before temperature and top-p. A row is let go once it
    has sampled an end-of-turn token (transformers pads it from then on). Out of place: `generate` keeps the logits
    it passed in (`output_logits`), from which the backend takes the model's own logprobs."""

    def __init__(self, grammar: ActionGrammar, rows: int) -> None:
        import torch

        self.grammar = grammar
        self.matchers = [grammar.matcher() for _ in range(rows)]
        self.free = [False] * rows  # ended, or (never expected) a matcher failed: no mask
        self.bitmask = torch.full((rows, (grammar.vocab_size + 31) // 32), -1, dtype=torch.int32)
        self._bias: torch.Tensor | None = None  # (256, 8): a mask byte's 8 tokens as 0 or -inf, on the logits' device
        self._started = False

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        import torch
        from llguidance.torch import fill_next_token_bitmask

        if self._started:  # each call after the first follows one sampled token per row
            self._consume(input_ids[:, -1].tolist())
        self._started = True
        self.bitmask.fill_(-1)
        for row, matcher in enumerate(self.matchers):
            if self.free[row]:
                continue
            # one row at a time: tens of microseconds each here, less than llguidance's thread pool takes to
            # hand out a batch (which also competes with torch's threads for the cores)
            fill_next_token_bitmask(matcher, self.bitmask, row)
            if not bool(self.bitmask[row].any()):  # never expected: a matcher that allows nothing, not even the end
                log.warning("the action grammar allows no token; that answer goes on unconstrained")
                self.free[row] = True
                self.bitmask[row] = -1
        if self._bias is None or self._bias.device != scores.device:
            bits = (torch.arange(256).unsqueeze(-1) >> torch.arange(8)) & 1  # a byte's bits, the lowest first
            self._bias = torch.where(bits.bool(), 0.0, float("-inf")).to(scores.device)
        # 0 for an allowed token, -inf for the others: one lookup per byte of the mask, then one addition (on a CPU
        # several times faster than unpacking the bits by shifts and masking the logits with booleans)
        rows, width = scores.shape
        bytes_ = self.bitmask.view(torch.uint8).flatten().to(scores.device, torch.long)
        bias = self._bias.index_select(0, bytes_).view(rows, -1)
        if bias.shape[1] < width:  # a model whose embedding is padded beyond the tokenizer: not those tokens
            bias = torch.cat([bias, bias.new_full((rows, width - bias.shape[1]), float("-inf"))], dim=1)
        return scores + bias[:, :width]

    def _consume(self, tokens: list[int]) -> None:
        for row, token in enumerate(tokens):
            if self.free[row]:
                continue
            if token in self.grammar.stop_token_ids:
                self.free[row] = True
            elif not self.matchers[row].consume_token(token):
                error = self.matchers[row].get_error().split("\n", 1)[0]
                log.warning("the action grammar rejected a sampled token; the rest of the answer is unconstrained: "
                            "%s", error)
                self.free[row] = True
