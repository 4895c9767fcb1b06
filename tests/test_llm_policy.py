"""The LLM policy: a tiny random model with SmolLM2's tokenizer for the local backend, a local aiohttp server
speaking the OpenAI chat-completions API for the endpoint backend, and (slow) the real SmolLM2 GGUF conversion."""

from __future__ import annotations

import asyncio
import json
import math
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import torch
from aiohttp import web
from isolated_workers import running_workers
from llm_fixtures import runbook_episode

from agent_sre import faults
from agent_sre.config import Settings
from agent_sre.models.incident import Incident, RemediationLimits
from agent_sre.models.llm import SamplingConfig
from agent_sre.models.policy import ChatMessage
from agent_sre.models.remediation import IncidentOutcome, PolicyRef
from agent_sre.models.trajectory import Trajectory
from agent_sre.policy.conversation import pending_messages
from agent_sre.policy.llm import (
    BASE_VERSION,
    BackendError,
    LLMPolicy,
    LocalModels,
    ModelDirError,
    OpenAIBackend,
    backends_from_settings,
    chat_messages,
    convert_gguf,
    load_policy_model,
    local_version_dir,
    prompt_messages,
    prompt_token_ids,
    smollm2_gguf,
    tiny_model,
)
from agent_sre.policy.llm.backends import ConversationCaches, PrefixCache, TransformersBackend
from agent_sre.policy.llm.chat import CHATML_TEMPLATE, TOOL_RESULT_PREFIX, install_chat_template, render_chat
from agent_sre.scenarios import load_scenarios
from agent_sre.simulator.client import SimulatorClient
from agent_sre.storage import object_store
from agent_sre.temporal import connect, start_incident
from agent_sre.tools.client import api_client
from agent_sre.trajectory_store import read_trajectories
from agent_sre.workers.main import build_activities

SHORT = SamplingConfig(temperature=1.0, max_new_tokens=12)
GREEDY = SamplingConfig(temperature=0.0, max_new_tokens=6)


def local_policy(sampling: SamplingConfig = SHORT, max_loaded: int = 2) -> tuple[LLMPolicy, LocalModels]:
    models = LocalModels(lambda version: local_version_dir(version, Path("/nonexistent")), max_loaded=max_loaded)
    return LLMPolicy(models, sampling), models


def ref(version: Path | str) -> PolicyRef:
    return PolicyRef(name="llm", version=str(version))


def opening(t: Trajectory) -> Trajectory:
    """The same incident before any step: the model's first turn."""
    return t.model_copy(update={"steps": [], "conversation": []})


def before_step(t: Trajectory, k: int) -> Trajectory:
    """The trajectory as the workflow holds it when asking for step k."""
    assistant_turns = [i for i, m in enumerate(t.conversation) if m.role == "assistant"]
    upto = assistant_turns[k - 1] + 1 if k else 0
    return t.model_copy(update={"steps": t.steps[:k], "conversation": t.conversation[:upto]})


def test_llm_is_registered_and_loads_nothing_until_used(settings: Settings) -> None:
    """In a fresh interpreter: earlier tests in this session may have served the registered policy already."""
    assert isinstance(build_activities(settings).policy.policies["llm"], LLMPolicy)
    probe = ("import sys; from agent_sre.config import Settings; from agent_sre.workers.main import build_activities; "
             "llm = build_activities(Settings()).policy.policies['llm']; "
             "sys.exit(llm._backends is not None or 'torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", probe], timeout=120).returncode == 0


def test_decide_records_token_ids_and_the_logprobs_they_were_sampled_with(tiny_model_dir: Path) -> None:
    policy, models = local_policy()
    t = opening(runbook_episode())
    decision = policy.decide(ref(tiny_model_dir), t)

    ids, logprobs = decision.completion_token_ids, decision.completion_logprobs
    assert ids is not None and logprobs is not None
    assert 1 <= len(ids) == len(logprobs) <= SHORT.max_new_tokens
    assert all(math.isfinite(lp) and lp <= 0 for lp in logprobs)
    assert decision.new_messages == pending_messages(t)
    assert decision.model_version == str(tiny_model_dir)
    backend = models(str(tiny_model_dir))
    tokenizer, model = backend.loaded.tokenizer, backend.loaded.model
    stop = backend.loaded.stop_token_ids
    text_ids = ids[:-1] if ids[-1] in stop else ids
    assert tokenizer.decode(text_ids, skip_special_tokens=True) == decision.completion
    # At temperature 1 and top_p 1 the sampling distribution is the model's own: a plain forward pass over
    # prompt + completion must give the same per-token logprobs.
    prompt = prompt_token_ids(tokenizer, prompt_messages(t))
    with torch.inference_mode():
        logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1:-1]
    expected = logits.log_softmax(-1).gather(1, torch.tensor(ids)[:, None]).squeeze(1)
    assert torch.allclose(expected, torch.tensor(logprobs), atol=1e-3)


def test_a_random_model_answers_garbage_and_gets_an_invalid_action_with_the_reason(tiny_model_dir: Path) -> None:
    policy, _ = local_policy(SamplingConfig(temperature=1.0, max_new_tokens=5, constrained=False))
    decision = policy.decide(ref(tiny_model_dir), opening(runbook_episode()))
    assert decision.action is None
    assert decision.invalid_reason is not None and "not valid JSON" in decision.invalid_reason
    if decision.completion_token_ids and len(decision.completion_token_ids) == 5:
        assert "cut off at 5 tokens" in decision.invalid_reason


def test_a_batch_decides_like_single_calls(tiny_model_dir: Path) -> None:
    """Left padding must not change what a shorter prompt generates (greedy, so deterministic)."""
    policy, _ = local_policy(GREEDY)
    episode = runbook_episode("oom")
    trajectories = [before_step(episode, k) for k in (0, 3, 6)]
    batch = policy.decide_batch(ref(tiny_model_dir), trajectories)
    for t, batched in zip(trajectories, batch, strict=True):
        single = policy.decide(ref(tiny_model_dir), t)
        assert batched.completion_token_ids == single.completion_token_ids
        assert batched.completion_logprobs == pytest.approx(single.completion_logprobs, abs=1e-3)


def test_a_prefix_cached_conversation_generates_what_a_fresh_read_does(tiny_model_dir: Path) -> None:
    """Turn by turn with the KV cache kept (the CPU rollout path), greedy answers equal reading the whole
    conversation afresh; a rewritten history cuts a copy of the cache back instead of reusing stale keys."""
    loaded = load_policy_model(tiny_model_dir)
    backend, caches = TransformersBackend(loaded), ConversationCaches(max_tokens=100_000)
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=6)
    ids = prompt_token_ids(loaded.tokenizer, prompt_messages(opening(runbook_episode())))
    read_before = 0
    for turn in range(3):
        cached = backend.continue_conversation(ids, sampling, caches)
        fresh = backend.continue_conversation(ids, sampling, ConversationCaches(max_tokens=0))
        assert cached.token_ids == fresh.token_ids
        assert cached.logprobs == pytest.approx(fresh.logprobs, abs=1e-3)
        assert cached.cached_prompt_tokens == read_before  # all that the last turn read
        assert caches.tokens == len(ids) + len(cached.token_ids or []) - 1  # this turn, but its last token
        read_before = caches.tokens
        ids = ids + (cached.token_ids or []) + loaded.tokenizer(f" tool answer {turn}")["input_ids"]
    rewritten = ids[:70] + [ids[70] + 1] + ids[71:]
    again = backend.continue_conversation(rewritten, sampling, caches)
    assert again.cached_prompt_tokens == 70
    assert again.token_ids == backend.continue_conversation(rewritten, sampling, ConversationCaches(0)).token_ids
    assert backend.continue_conversation(ids, sampling, caches).cached_prompt_tokens == read_before  # kept intact


def test_generation_attends_with_the_chosen_kernels_and_leaves_the_global_choice_alone(tiny_model_dir: Path) -> None:
    """Generation may not use cuDNN attention (slow at decode on a GPU); the restriction holds only around
    `generate`, and on this CPU it changes no answer."""
    loaded = load_policy_model(tiny_model_dir)
    assert loaded.generation_kernels is not None and "cudnn" not in loaded.generation_kernels
    with loaded.generation_attention():
        assert not torch.backends.cuda.cudnn_sdp_enabled() and torch.backends.cuda.mem_efficient_sdp_enabled()
    assert torch.backends.cuda.cudnn_sdp_enabled()
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=6)
    prompts = [prompt_messages(opening(runbook_episode(fault))) for fault in ("oom", "bad-image")]
    ours = TransformersBackend(loaded).generate(prompts, sampling)
    loaded.generation_kernels = None
    assert [g.token_ids for g in TransformersBackend(loaded).generate(prompts, sampling)] == [g.token_ids for g in ours]


def test_served_turns_continue_their_conversation_and_copy_a_shared_opening(tiny_model_dir: Path) -> None:
    """Serving (one prompt per call) with conversations' KV caches kept: two incidents' turns interleaved answer
    exactly as re-reading everything does, each turn after the first reads only what its previous turn did not,
    and a new incident starts from a copy of the other's opening without spoiling that one's cache."""
    loaded = load_policy_model(tiny_model_dir)
    kept, fresh = TransformersBackend(loaded, cached_tokens=50_000), TransformersBackend(loaded)
    episodes = [runbook_episode("oom"), runbook_episode("bad-image", run_id="run-0002")]
    read_before: dict[int, int] = {}
    for k in range(4):
        for n, episode in enumerate(episodes):
            prompt = prompt_messages(before_step(episode, k))
            [got], [want] = kept.generate([prompt], GREEDY), fresh.generate([prompt], GREEDY)
            assert got.token_ids == want.token_ids
            assert got.logprobs == pytest.approx(want.logprobs, abs=1e-3)
            assert want.cached_prompt_tokens == 0 and got.prompt_tokens == want.prompt_tokens
            if k:  # the whole previous prompt was kept
                assert got.cached_prompt_tokens >= read_before[n]
            elif n:  # the other incident's opening: the system prompt at least
                system = len(prompt_token_ids(loaded.tokenizer, prompt[:1]))
                assert system - 5 <= got.cached_prompt_tokens < (got.prompt_tokens or 0)
            else:
                assert got.cached_prompt_tokens == 0
            read_before[n] = got.prompt_tokens or 0


def test_kept_caches_are_bounded_in_tokens_and_the_least_recent_conversation_goes_first() -> None:
    caches = ConversationCaches(max_tokens=10, min_shared=2)

    def cache(ids: list[int]) -> PrefixCache:
        c = PrefixCache()
        c.kv, c.ids = object(), ids
        return c

    first, second = cache([1, 2, 3, 4, 5, 6]), cache([1, 2, 7, 8])
    caches.put(first)
    caches.put(second)
    assert caches.tokens == 10
    caches.put(cache([9, 9, 9]))  # 13 tokens: the least recently used conversation is dropped
    assert caches.tokens == 7
    assert caches.take([1, 2, 7, 8, 5]) is second  # its own conversation: continued, out of the store
    assert caches.tokens == 3
    assert caches.take([1, 5]).kv is None  # nothing shares 2 tokens with it
    caches.put(cache(list(range(11))))  # longer than the bound: not kept
    assert caches.tokens == 3
    # A conversation goes on in its own cache even where another conversation, alike so far, shares more of it:
    # copying that one would leave its own in the store for nothing.
    caches = ConversationCaches(max_tokens=100, min_shared=2)
    mine, alike = cache([1, 2, 3]), cache([1, 2, 3, 4, 5, 6])
    caches.put(mine)
    caches.put(alike)
    assert caches.take([1, 2, 3, 4, 5, 7]) is mine and caches.tokens == 6


def test_a_conversation_longer_than_the_context_is_an_invalid_action_not_a_crash(tiny_model_dir: Path) -> None:
    policy, _ = local_policy(SamplingConfig(max_new_tokens=8000))
    decision = policy.decide(ref(tiny_model_dir), before_step(runbook_episode(), 6))
    assert decision.action is None and decision.completion == ""
    assert decision.invalid_reason is not None and "exceeds the model's context of 8192" in decision.invalid_reason


def test_serving_prompts_are_the_training_conversation_token_for_token(tiny_model_dir: Path) -> None:
    """At every step the served prompt is a prefix of the stored conversation as training renders it, ending
    exactly where the assistant's answer starts."""
    tokenizer = load_policy_model(tiny_model_dir).tokenizer
    assert tokenizer.chat_template == CHATML_TEMPLATE
    episode = runbook_episode("bad-image")
    full = tokenizer.apply_chat_template(chat_messages(episode.conversation), tokenize=True,
                                         return_dict=True)["input_ids"]
    for k, step in enumerate(episode.steps):
        t = before_step(episode, k)
        served = prompt_messages(t)
        assert served == episode.conversation[:len(served)]
        assert episode.conversation[len(served)] == ChatMessage(role="assistant", content=step.decision.completion)
        ids = prompt_token_ids(tokenizer, served)
        assert full[:len(ids)] == ids
        answer = tokenizer.encode(step.decision.completion, add_special_tokens=False)
        assert full[len(ids):len(ids) + len(answer)] == answer
    tool_turn = chat_messages([ChatMessage(role="tool", content="NAME READY")])
    assert tool_turn == [{"role": "user", "content": TOOL_RESULT_PREFIX + "NAME READY"}]


def test_our_chat_template_goes_only_onto_a_tokenizer_that_renders_the_same_text(tiny_model_dir: Path) -> None:
    tokenizer = load_policy_model(tiny_model_dir).tokenizer
    install_chat_template(tokenizer)  # already ours: a no-op
    assert tokenizer.chat_template == CHATML_TEMPLATE
    other = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
    assert render_chat(tokenizer, [{"role": "user", "content": "hi"}], chat_template=other) == "[user] hi\n"
    tokenizer.chat_template = other
    with pytest.raises(ValueError, match="not SmolLM2's ChatML"):
        install_chat_template(tokenizer)
    assert tokenizer.chat_template == other  # left as it was


def test_loaded_versions_are_kept_in_an_lru_and_new_versions_serve_without_a_restart(
        tiny_model_dir: Path, tmp_path: Path) -> None:
    loads: list[Path] = []

    def counting_loader(path: Path, device: str) -> Any:
        loads.append(path)
        return load_policy_model(path, device)

    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(tiny_model_dir, a)
    tiny_model(b, tokenizer_source=tiny_model_dir, seed=1)
    models = LocalModels(lambda version: local_version_dir(version, tmp_path), max_loaded=2, loader=counting_loader)
    policy = LLMPolicy(models, GREEDY)
    t = opening(runbook_episode())

    first = policy.decide(ref(a), t)
    policy.decide(ref(a), t)
    policy.decide(ref(str(a) + "/"), t)  # another name for the same directory shares the loaded copy
    assert loads == [a]
    second = policy.decide(ref(b), t)
    assert first.completion_logprobs != second.completion_logprobs  # different weights: b really was loaded
    assert models.loaded == [a, b]

    c = tmp_path / "c"  # registered after the worker started: servable at once
    tiny_model(c, tokenizer_source=tiny_model_dir, seed=2)
    policy.decide(ref(a), t)  # a becomes the most recent, so c evicts b
    policy.decide(ref(c), t)
    assert models.loaded == [a, c]
    policy.decide(ref(b), t)
    assert loads == [a, b, c, b]
    assert models.loaded == [c, b]


def test_unknown_or_broken_versions_are_clear_errors(tiny_model_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ModelDirError, match="unknown model version 'sft-v9'"):
        local_version_dir("sft-v9", tmp_path)
    registry = {"sft-v1": tiny_model_dir, "sft-v2": tmp_path / "gone"}.__getitem__
    assert local_version_dir("sft-v1", tmp_path, registry) == tiny_model_dir
    with pytest.raises(ModelDirError, match="gone does not exist"):
        local_version_dir("sft-v2", tmp_path, registry)
    broken = tmp_path / "broken"
    shutil.copytree(tiny_model_dir, broken)
    (broken / "model.safetensors").unlink()
    with pytest.raises(ModelDirError, match=r"missing \*\.safetensors"):
        local_version_dir(str(broken), tmp_path)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ModelDirError, match="cannot load the model"):
        load_policy_model(broken)
    with pytest.raises(ValueError, match="max_loaded"):
        LocalModels(lambda v: tmp_path, max_loaded=0)


@dataclass
class FakeEndpoint:
    """A local OpenAI-compatible chat-completions server: answers with the queued replies, records requests."""

    url: str
    replies: list[tuple[int, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)

    def answer(self, content: str, finish_reason: str = "stop") -> None:
        tokens = [{"token": f"token_id:{100 + i}", "logprob": -0.5 - i, "bytes": None, "top_logprobs": []}
                  for i in range(3)]
        self.replies.append((200, {"id": "c1", "object": "chat.completion", "model": "m",
                                   "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                                "logprobs": {"content": tokens}, "finish_reason": finish_reason}],
                                   "usage": {"prompt_tokens": 42, "completion_tokens": 3, "total_tokens": 45}}))


@pytest_asyncio.fixture(loop_scope="session")
async def endpoint() -> AsyncIterator[FakeEndpoint]:
    fake = FakeEndpoint(url="")

    async def completions(request: web.Request) -> web.Response:
        fake.requests.append({"body": await request.json(), "auth": request.headers.get("Authorization")})
        status, body = fake.replies.pop(0)
        return web.Response(status=status, text=body if isinstance(body, str) else json.dumps(body),
                            content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    fake.url = f"http://{host}:{port}/v1"
    yield fake
    await runner.cleanup()


def test_settings_choose_the_backend(settings: Settings) -> None:
    endpoint = settings.model_copy(update={"llm_endpoint": "http://vllm:8000/v1", "llm_endpoint_token_ids": True})
    remote = backends_from_settings(endpoint)("sre-sft-v3")
    assert isinstance(remote, OpenAIBackend)
    assert (remote.url, remote.model, remote.token_ids) == ("http://vllm:8000/v1/chat/completions", "sre-sft-v3", True)
    local = backends_from_settings(settings.model_copy(update={"llm_cache_size": 3}))
    assert isinstance(local, LocalModels) and local.max_loaded == 3 and local.loaded == []


async def test_the_openai_compatible_backend_sends_our_format_and_records_logprobs(endpoint: FakeEndpoint) -> None:
    policy = LLMPolicy(lambda version: OpenAIBackend(endpoint.url, model=version, api_key="k3y", token_ids=True),
                       SamplingConfig(temperature=0.7, top_p=0.9, max_new_tokens=64))
    episode = runbook_episode()
    t = before_step(episode, 2)
    endpoint.answer('{"tool": "get_logs", "args": {"pod": "cart-7d9f8c6b5d-x2k4q", "previous": true}}')

    decision = await asyncio.to_thread(policy.decide, ref("sre-sft-v3"), t)

    sent = endpoint.requests[-1]
    assert sent["auth"] == "Bearer k3y"
    assert sent["body"]["model"] == "sre-sft-v3"
    assert sent["body"]["messages"] == chat_messages(prompt_messages(t))
    assert sent["body"]["messages"][-1]["content"].startswith(TOOL_RESULT_PREFIX)
    assert {k: sent["body"][k] for k in ("temperature", "top_p", "max_tokens", "logprobs",
                                         "return_tokens_as_token_ids")} == {
        "temperature": 0.7, "top_p": 0.9, "max_tokens": 64, "logprobs": True, "return_tokens_as_token_ids": True}
    assert decision.action is not None and decision.action.tool == "get_logs"
    assert decision.completion_token_ids == [100, 101, 102]
    assert decision.completion_logprobs == [-0.5, -1.5, -2.5]


@pytest.mark.parametrize(("content", "finish", "reason"), [
    ("I think the cart deployment is broken.", "stop", "not valid JSON"),
    ('{"tool": "kubectl_exec", "args": {}}', "stop", "unknown tool 'kubectl_exec'"),
    ('{"tool": "scale", "args": {"deployment": "cart"}}', "stop", "bad arguments for scale: replicas: Field required"),
    ('{"tool": "scale", "args": ["cart"]}', "stop", '"args" must be an object'),
    ('{"tool": "finish", "args": {"diagnosis": "cart', "length", "cut off at 64 tokens"),
])
async def test_garbage_from_the_endpoint_becomes_an_invalid_action_with_its_reason(
        endpoint: FakeEndpoint, content: str, finish: str, reason: str) -> None:
    policy = LLMPolicy(lambda version: OpenAIBackend(endpoint.url, model=version), SamplingConfig(max_new_tokens=64))
    endpoint.answer(content, finish)
    decision = await asyncio.to_thread(policy.decide, ref("m"), opening(runbook_episode()))
    assert decision.action is None and decision.completion == content
    assert decision.invalid_reason is not None and reason in decision.invalid_reason
    assert "return_tokens_as_token_ids" not in endpoint.requests[-1]["body"]
    assert decision.completion_token_ids is None and decision.completion_logprobs == [-0.5, -1.5, -2.5]


async def test_endpoint_failures_are_backend_errors_naming_the_cause(endpoint: FakeEndpoint) -> None:
    backend = OpenAIBackend(endpoint.url, model="m")
    messages = prompt_messages(opening(runbook_episode()))
    endpoint.replies.append((503, "model is loading"))
    with pytest.raises(BackendError, match="answered HTTP 503: model is loading"):
        await backend.agenerate([messages], SHORT)
    endpoint.replies.append((200, {"choices": []}))
    with pytest.raises(BackendError, match="malformed chat completion"):
        await backend.agenerate([messages], SHORT)
    unreachable = OpenAIBackend("http://127.0.0.1:9/v1", model="m", timeout_s=5)
    with pytest.raises(BackendError, match="cannot reach the model endpoint"):
        await unreachable.agenerate([messages], SHORT)


@pytest.mark.slow
def test_the_base_gguf_converts_once_to_safetensors_with_the_same_weights(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    started = time.perf_counter()
    out = convert_gguf(smollm2_gguf(), tmp_path / "base")
    converted_s = time.perf_counter() - started
    config = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in config and any(out.glob("*.safetensors"))

    loaded = load_policy_model(out)
    gguf = smollm2_gguf()
    reference = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    for name, tensor in reference.state_dict().items():
        assert torch.equal(tensor, loaded.model.state_dict()[name]), name

    policy = LLMPolicy(LocalModels(lambda version: local_version_dir(version, tmp_path / "models")), GREEDY)
    shutil.copytree(out, tmp_path / "models" / "base-smollm2-135m")  # the cache "base" resolves to
    decision = policy.decide(ref(BASE_VERSION), opening(runbook_episode()))
    ids, logprobs = decision.completion_token_ids, decision.completion_logprobs
    assert ids and logprobs is not None and len(ids) == len(logprobs)
    print(f"GGUF -> safetensors conversion: {converted_s:.1f} s")


async def test_an_incident_served_by_the_llm_policy_runs_through_temporal(stack: Settings,
                                                                          tiny_model_dir: Path) -> None:
    """The registered `llm` policy behind the real workflow: a random model's garbage (decoded without the action
    grammar) is two invalid steps (not a crash), and the stored trajectory keeps each step's token ids and
    logprobs."""
    scenario = next(s for s in load_scenarios() if s.fault == "bad_image")
    env = SimulatorClient(stack.sim_url).create_env(apps=[scenario.app], seed=scenario.seed)
    faults.inject(api_client(env["server"]), scenario)
    incident = Incident(id=uuid.uuid4().hex[:12], source="sdk", alert=scenario.alert, namespace=scenario.namespace,
                        kubeconfig=env["server"], scenario=scenario,
                        limits=RemediationLimits(max_steps=2, settle_s=1.0))
    client = await connect(stack)
    unconstrained = stack.model_copy(update={"llm_sampling": SamplingConfig(constrained=False)})
    async with running_workers(client, unconstrained) as settings:
        started = await start_incident(client, incident, policy=ref(tiny_model_dir), settings=settings)
        outcome: IncidentOutcome = await started.handle.result()
    assert (outcome.termination, outcome.steps, outcome.invalid) == ("step_limit", 2, 2)
    assert outcome.model_version == str(tiny_model_dir)
    stored = read_trajectories(object_store(stack), stack.s3_bucket, outcome.trajectory_key or "")[0]
    for step in stored.steps:
        assert step.decision.invalid_reason and step.decision.completion_token_ids
        assert len(step.decision.completion_token_ids) == len(step.decision.completion_logprobs or [])
    assert stored.conversation[-2].role == "tool" and "invalid action" in stored.conversation[-2].content
