"""Where completions come from: a local transformers model, or an OpenAI-compatible endpoint (vLLM, Ollama, a
hosted API) for models too big for the worker. Both take our conversations and return the completion text with
the token ids and logprobs the backend gives, so every action can be learned from later."""

from __future__ import annotations

import asyncio
import copy
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import aiohttp

from agent_sre.models.llm import SamplingConfig
from agent_sre.models.policy import ChatMessage
from agent_sre.policy.llm.chat import chat_messages, decode_text, prompt_token_ids
from agent_sre.policy.llm.checkpoint import LoadedModel
from agent_sre.policy.llm.constraint import ActionConstraint, action_grammar, action_json_schema

FinishReason = Literal["stop", "length", "too_long"]


class BackendError(RuntimeError):
    """The backend could not answer (unreachable, an HTTP error, a malformed reply): an infrastructure failure
    to retry, unlike a bad completion, which is the model's mistake and becomes an invalid action."""


@dataclass
class Generation:
    """One completion. `token_ids` and `logprobs` cover the sampled tokens, the end-of-turn token included when
    the model emitted one. Their logprobs: unconstrained, under the distribution actually sampled from (after
    temperature/top-p); constrained, the model's own at the sampling temperature, not renormalised over the tokens
    the action grammar allows (nor by top-p): what the trainers compute for the same tokens. `problem` says why
    there is no completion at all (the prompt does not fit the context)."""

    text: str
    token_ids: list[int] | None
    logprobs: list[float] | None
    finish_reason: FinishReason
    prompt_tokens: int | None = None
    cached_prompt_tokens: int = 0  # of the prompt's tokens, how many were not read again (their KV was kept)
    problem: str | None = None


class Backend(Protocol):
    def generate(self, prompts: Sequence[Sequence[ChatMessage]], sampling: SamplingConfig) -> list[Generation]: ...


class PrefixCache:
    """One conversation's KV cache and the token ids it holds. A conversation only grows, so each turn's prompt
    starts with the previous turn's tokens; should it not (a caller that rewrote history), the cache is cut back
    to the common prefix rather than trusted."""

    def __init__(self) -> None:
        self.kv: Any = None
        self.ids: list[int] = []

    def keep_prefix_of(self, ids: list[int]) -> None:
        common = min(self.shared_with(ids), len(ids) - 1)  # at least one new token must be read to produce the next one
        if self.kv is not None and common < len(self.ids):
            self.kv.crop(common - len(self.ids))  # transformers 5: how many tokens to remove, negative
            self.ids = self.ids[:common]
        if self.kv is not None and common == 0:
            self.kv, self.ids = None, []

    def shared_with(self, ids: list[int]) -> int:
        """How many leading tokens this cache holds of `ids`."""
        return next((i for i, (a, b) in enumerate(zip(self.ids, ids, strict=False)) if a != b),
                    min(len(self.ids), len(ids)))


class ConversationCaches:
    """The KV caches of the conversations served last, so that a conversation's next turn reads only its new
    tokens. Serving asks for one turn per policy call, each turn's prompt extending the previous one's, and all of
    them open with the same system prompt: re-reading that every turn was most of a decision's time on a CPU
    (docs/benchmarks.md, "Serving"). A turn continues the cache holding its whole conversation so far, or else
    starts from a copy of the longest shared prefix of another (at least `min_shared` tokens: the system prompt).
    At most `max_tokens` are kept, the least recently used conversations dropped first."""

    def __init__(self, max_tokens: int, min_shared: int = 64) -> None:
        self.max_tokens, self.min_shared = max_tokens, min_shared
        self._caches: list[PrefixCache] = []  # least recently used first

    @property
    def tokens(self) -> int:
        return sum(len(c.ids) for c in self._caches)

    def take(self, ids: list[int]) -> PrefixCache:
        """The cache to continue for a prompt (out of the store until `put` back); an empty one when none helps.
        A cache that `ids` wholly extends (this conversation's own) goes on, even where another shares more: a
        copy of that one would leave this one in the store unused (a GRPO group's rollouts often answer alike)."""
        own = max((c for c in self._caches if c.ids and c.shared_with(ids) == len(c.ids)),
                  key=lambda c: len(c.ids), default=None)
        if own is not None:
            self._caches.remove(own)
            return own
        best = max(self._caches, key=lambda c: c.shared_with(ids), default=None)
        if best is None or best.shared_with(ids) < self.min_shared:
            return PrefixCache()
        branch = PrefixCache()  # another conversation with the same opening: copy, and keep the original
        branch.kv, branch.ids = copy.deepcopy(best.kv), list(best.ids)
        return branch

    def put(self, cache: PrefixCache) -> None:
        if cache.kv is None or len(cache.ids) > self.max_tokens:
            return
        self._caches.append(cache)
        while self.tokens > self.max_tokens:
            self._caches.pop(0)


class TransformersBackend:
    """Batched generation with a local model (KV cache on, left padding), under the action grammar when the
    sampling config says so (`policy.llm.constraint`). One batch at a time per model: the activity worker runs
    decisions in threads, and interleaving them on one model only thrashes the CPU."""

    def __init__(self, loaded: LoadedModel, cached_tokens: int = 0) -> None:
        """`cached_tokens`: how many tokens of served conversations to keep the KV cache of (0: none)."""
        self.loaded = loaded
        self.conversations = ConversationCaches(cached_tokens) if cached_tokens > 0 else None
        self._lock = threading.Lock()

    def generate(self, prompts: Sequence[Sequence[ChatMessage]], sampling: SamplingConfig) -> list[Generation]:
        """A batch of one (a served turn) continues its conversation's cache; a bigger batch reads afresh."""
        with self._lock:  # also guards the tokenizer: a fast tokenizer is not safe to share between threads
            encoded = [prompt_token_ids(self.loaded.tokenizer, p) for p in prompts]
            fitting = [i for i, ids in enumerate(encoded) if self._fits(ids, sampling)]
            if len(fitting) == 1 and self.conversations is not None:
                generated = [self._continue(encoded[fitting[0]], sampling, self.conversations)]
            else:
                generated = self._generate([encoded[i] for i in fitting], sampling) if fitting else []
        results = dict(zip(fitting, generated, strict=True))
        return [results.get(i) or self._too_long(ids, sampling) for i, ids in enumerate(encoded)]

    def continue_conversation(self, ids: list[int], sampling: SamplingConfig,
                              conversations: ConversationCaches) -> Generation:
        """The next answer of one conversation given as token ids, continuing the cache in `conversations` that
        holds its earlier turns (or a copy of another's opening, e.g. a GRPO group's shared prompt): only the new
        tokens (the tool's answer, the next header) are read, instead of the whole conversation at every turn. On
        a CPU this beats batching several conversations that re-read everything."""
        if not self._fits(ids, sampling):
            return self._too_long(ids, sampling)
        with self._lock:
            return self._continue(ids, sampling, conversations)

    def _continue(self, ids: list[int], sampling: SamplingConfig, conversations: ConversationCaches) -> Generation:
        cache = conversations.take(ids)
        cache.keep_prefix_of(ids)
        generation = self._generate([ids], sampling, cache)[0]
        conversations.put(cache)  # not after a failure: a half-written cache is dropped with the conversation
        return generation

    def _fits(self, ids: list[int], sampling: SamplingConfig) -> bool:
        return len(ids) + sampling.max_new_tokens <= self.loaded.context_length

    def _too_long(self, ids: list[int], sampling: SamplingConfig) -> Generation:
        return Generation(text="", token_ids=[], logprobs=[], finish_reason="too_long", prompt_tokens=len(ids),
                          problem=f"the conversation is {len(ids)} tokens and with {sampling.max_new_tokens} new "
                                  f"tokens exceeds the model's context of {self.loaded.context_length} tokens")

    def _generate(self, batch: list[list[int]], sampling: SamplingConfig,
                  cache: PrefixCache | None = None) -> list[Generation]:
        import torch
        from transformers import GenerationConfig

        tokenizer = self.loaded.tokenizer
        generate: Any = self.loaded.model.generate  # GenerationMixin's: AutoModelForCausalLM's classes mix it in
        pad = tokenizer.pad_token_id
        width = max(len(ids) for ids in batch)
        input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in batch], device=self.loaded.device)
        attention = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in batch],
                                 device=self.loaded.device)
        sample = sampling.temperature > 0
        stops = self.loaded.stop_token_ids
        # Constrained, the logprobs are the model's own at the temperature: from the logits before the grammar's
        # mask (what the trainers compute for the same tokens), not from the scores renormalised over its tokens.
        constraint = ActionConstraint(action_grammar(tokenizer, stops), len(batch)) if sampling.constrained else None
        config = GenerationConfig(
            do_sample=sample, temperature=sampling.temperature if sample else None,
            top_p=sampling.top_p if sample else None, top_k=0 if sample else None,
            max_new_tokens=sampling.max_new_tokens, eos_token_id=stops, pad_token_id=pad, use_cache=True,
            return_dict_in_generate=True, output_scores=constraint is None, output_logits=constraint is not None)
        with torch.inference_mode(), self.loaded.generation_attention():
            reuse = {"past_key_values": cache.kv} if cache is not None and cache.kv is not None else {}
            out = generate(input_ids=input_ids, attention_mask=attention, generation_config=config,
                           logits_processor=[constraint] if constraint is not None else None, **reuse)
        new = out.sequences[:, width:]
        cached = len(cache.ids) if cache is not None else 0
        if cache is not None:
            cache.kv = out.past_key_values
            cache.ids = out.sequences[0, :cache.kv.get_seq_length()].tolist()
        if constraint is None:  # scores are the processed logits each token was drawn from: sampling probabilities
            steps = out.scores
        else:  # the raw logits at the sampling temperature (greedy: as they are)
            steps = tuple(step / sampling.temperature for step in out.logits) if sample else out.logits
        logprobs = torch.stack([step.float().log_softmax(-1).gather(1, new[:, t:t + 1]).squeeze(1)
                                for t, step in enumerate(steps)], dim=1)
        generations = []
        for row, ids in enumerate(new.tolist()):
            end = next((t + 1 for t, token in enumerate(ids) if token in stops), None)
            kept = ids[:end] if end is not None else ids
            text_ids = kept[:-1] if end is not None else kept
            generations.append(Generation(
                text=decode_text(tokenizer, text_ids, skip_special_tokens=True), token_ids=kept,
                logprobs=logprobs[row, :len(kept)].tolist(), finish_reason="stop" if end is not None else "length",
                prompt_tokens=len(batch[row]), cached_prompt_tokens=cached))
        return generations


class OpenAIBackend:
    """`POST {base_url}/chat/completions` with `logprobs: true`, one request per conversation, concurrently.

    `base_url` is the API root, as in the OpenAI SDK (e.g. `http://vllm:8000/v1`); `model` is the served model name.
    OpenAI-compatible servers return per-token logprobs but not token ids; vLLM does with
    `return_tokens_as_token_ids` (set `token_ids=True`). `json_schema=True` sends the action's JSON schema as the
    `response_format` of a constrained sampling config, for servers that decode under it (vLLM, SGLang); the
    logprobs such a server returns are those of its constrained distribution."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout_s: float = 120.0,
                 token_ids: bool = False, json_schema: bool = False) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.token_ids = token_ids
        self.json_schema = json_schema

    def generate(self, prompts: Sequence[Sequence[ChatMessage]], sampling: SamplingConfig) -> list[Generation]:
        """Blocking; call from a thread (the activity worker's), not from a running event loop."""
        return asyncio.run(self.agenerate(prompts, sampling))

    async def agenerate(self, prompts: Sequence[Sequence[ChatMessage]],
                        sampling: SamplingConfig) -> list[Generation]:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        async with aiohttp.ClientSession(headers=headers, timeout=timeout) as session:
            return list(await asyncio.gather(*(self._complete(session, p, sampling) for p in prompts)))

    def request_body(self, messages: Sequence[ChatMessage], sampling: SamplingConfig) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": chat_messages(messages),
                                "temperature": sampling.temperature, "top_p": sampling.top_p,
                                "max_tokens": sampling.max_new_tokens, "logprobs": True, "n": 1}
        if self.token_ids:
            body["return_tokens_as_token_ids"] = True
        if self.json_schema and sampling.constrained:
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "tool_call", "schema": action_json_schema()}}
        return body

    async def _complete(self, session: aiohttp.ClientSession, messages: Sequence[ChatMessage],
                        sampling: SamplingConfig) -> Generation:
        try:
            async with session.post(self.url, json=self.request_body(messages, sampling)) as response:
                text = await response.text()
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise BackendError(f"cannot reach the model endpoint {self.url}: {exc or type(exc).__name__}") from exc
        if status != 200:
            raise BackendError(f"the model endpoint {self.url} answered HTTP {status}: {text[:500]}")
        try:
            return self._parse(json.loads(text))
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise BackendError(f"the model endpoint {self.url} sent a malformed chat completion "
                               f"({type(exc).__name__}: {exc}): {text[:500]}") from exc

    def _parse(self, reply: dict[str, Any]) -> Generation:
        choice = reply["choices"][0]
        content = choice["logprobs"]["content"] if choice.get("logprobs") else None
        ids = None
        if self.token_ids:
            if content is None or not all(str(t["token"]).startswith("token_id:") for t in content):
                raise ValueError("no token ids in the logprobs (return_tokens_as_token_ids is a vLLM option)")
            ids = [int(str(t["token"]).removeprefix("token_id:")) for t in content]
        usage = reply.get("usage") or {}
        return Generation(text=choice["message"].get("content") or "", token_ids=ids,
                          logprobs=[float(t["logprob"]) for t in content] if content is not None else None,
                          finish_reason="length" if choice.get("finish_reason") == "length" else "stop",
                          prompt_tokens=usage.get("prompt_tokens"))
