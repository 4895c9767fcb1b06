"""Constrained decoding: the action grammar built from the tool schemas accepts every canonical completion, and
under it even the untrained SmolLM2 only answers tool calls that parse (its unconstrained answers mostly do not)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from llm_fixtures import runbook_episode

from agent_sre.models.llm import SamplingConfig
from agent_sre.models.remediation import PolicyRef
from agent_sre.models.tools import TOOL_SPECS, Describe, ToolCall, _spec
from agent_sre.models.tools import Risk as ToolRisk
from agent_sre.models.training import MAX_ACTION_TOKENS
from agent_sre.models.trajectory import Trajectory
from agent_sre.policy.conversation import parse_action, render_action
from agent_sre.policy.expert import ExpertPolicy
from agent_sre.policy.llm import ensure_base_model, load_policy_model, prompt_messages, prompt_token_ids
from agent_sre.policy.llm.backends import OpenAIBackend, TransformersBackend
from agent_sre.policy.llm.checkpoint import LoadedModel
from agent_sre.policy.llm.constraint import ActionGrammar, action_grammar, action_json_schema
from agent_sre.policy.runbook import RunbookPolicy
from agent_sre.scenarios import load_scenarios
from agent_sre.simulator.simulator import Simulator
from agent_sre.training.evaluate import play

# Calls of every tool the teachers never make, and the awkward values: nested and listed patches, escapes,
# non-ASCII text (json.dumps writes it as \u escapes), nulls, a string where an int may be.
HAND_MADE = [
    ToolCall(tool="get_logs", args={"pod": "cart-7d9f-x2k4q", "container": "cart", "tail": 200, "previous": False,
                                    "namespace": "shop"}),
    ToolCall(tool="get_events", args={"namespace": None, "object_name": "pod/cart-1"}),
    ToolCall(tool="top", args={"kind": "pods", "namespace": "shop"}),
    ToolCall(tool="rollout_history", args={"deployment": "cart"}),
    ToolCall(tool="get_resource", args={"kind": "configmap", "name": "cart-config"}),
    ToolCall(tool="patch", args={"kind": "deployment", "name": "cart",
                                 "patch": {"spec": {"replicas": 2, "template": {"metadata": {"labels": {"a": "b"}}}}},
                                 "patch_type": "merge"}),
    ToolCall(tool="patch", args={"kind": "service", "name": "cart",
                                 "patch": [{"op": "replace", "path": "/spec/ports/0/port", "value": 80}],
                                 "patch_type": "json"}),
    ToolCall(tool="set_image", args={"deployment": "cart", "container": "cart", "image": "ghcr.io/shop/cart:v1.2"}),
    ToolCall(tool="rollout_undo", args={"deployment": "cart", "to_revision": 3}),
    ToolCall(tool="rollout_restart", args={"deployment": "cart"}),
    ToolCall(tool="patch_service", args={"service": "cart", "port": 80, "target_port": "http",
                                         "selector": {"app": "cart"}}),
    ToolCall(tool="patch_service", args={"service": "cart", "target_port": 8080}),
    ToolCall(tool="set_resources", args={"deployment": "cart", "container": "cart", "memory_limit": "256Mi",
                                         "cpu_request": "100m"}),
    ToolCall(tool="set_env", args={"deployment": "cart", "container": "cart", "name": "DB_URL",
                                   "value": 'postgres://db:5432/shop?opt="a\\b"\ttab'}),
    ToolCall(tool="uncordon", args={"node": "node-2"}),
    ToolCall(tool="delete_pod", args={"pod": "cart-7d9f-x2k4q"}),
    ToolCall(tool="set_config_key", args={"kind": "secret", "name": "cart", "key": "db.password", "value": "s3cr€t"}),
    ToolCall(tool="delete_network_policy", args={"name": "deny-all"}),
    ToolCall(tool="patch_quota", args={"name": "compute", "hard": {"pods": "20", "limits.memory": "8Gi"}}),
    ToolCall(tool="finish", args={"diagnosis": "deployment/cart: OOMKilled → raised the limit",
                                  "summary": "line one\nline two"}),
    ToolCall(tool="escalate", args={"diagnosis": "cart: CrashLoopBackOff", "summary": "rolled back; still failing"}),
]


def completion_ids(loaded: LoadedModel, call: ToolCall) -> list[int]:
    """The tokens SFT trains on for this action: its canonical text, then the end of the turn."""
    return [*loaded.tokenizer(render_action(call), add_special_tokens=False)["input_ids"], loaded.stop_token_ids[0]]


def teacher_calls() -> list[ToolCall]:
    """Every action of the teachers (the runbook, the expert) on the training catalog: what SFT learns from."""
    simulator = Simulator(speed=0)
    return [s.decision.action for policy, ref in ((RunbookPolicy(), PolicyRef(name="runbook", version="runbook")),
                                                  (ExpertPolicy(), PolicyRef(name="expert", version="expert")))
            for scenario in load_scenarios()
            for s in play(policy, ref, scenario, simulator).steps if s.decision.action is not None]


def test_the_action_schema_is_any_tool_with_its_own_arguments_and_follows_the_tools(
        tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    schema = action_json_schema()
    branches = {b["properties"]["tool"]["const"]: b for b in schema["anyOf"]}
    assert list(branches) == list(TOOL_SPECS)
    for name, branch in branches.items():
        assert branch["required"] == ["tool", "args"] and branch["additionalProperties"] is False
        assert branch["properties"]["args"] == TOOL_SPECS[name].args.model_json_schema()
        assert branch["properties"]["args"]["additionalProperties"] is False  # the argument models forbid extras
    loaded = load_policy_model(tiny_model_dir, device="cpu")
    grammar = action_grammar(loaded.tokenizer, loaded.stop_token_ids)
    assert action_grammar(loaded.tokenizer, loaded.stop_token_ids) is grammar  # compiled once per tokenizer

    def opens(grammar: ActionGrammar, tool: str) -> bool:
        ids = loaded.tokenizer(f'{{"tool": "{tool}", "args": {{', add_special_tokens=False)["input_ids"]
        return grammar.matcher().try_consume_tokens(ids) == len(ids)

    assert all(opens(grammar, name) for name in TOOL_SPECS) and not opens(grammar, "kubectl_exec")
    # A tool added to the specs is in the next generation's grammar, without anyone writing it into one.
    monkeypatch.setitem(TOOL_SPECS, "kubectl_exec", _spec("kubectl_exec", Describe, ToolRisk.READ, "run a command"))
    added = action_grammar(loaded.tokenizer, loaded.stop_token_ids)
    assert added is not grammar and opens(added, "kubectl_exec")
    assert "kubectl_exec" in [b["properties"]["tool"]["const"] for b in action_json_schema()["anyOf"]]


def test_every_canonical_completion_is_a_whole_action_under_the_grammar(tiny_model_dir: Path) -> None:
    """What SFT trains on must be what the grammar allows, token for token as the tokenizer splits it, the end of
    the turn allowed right after the object closes and nothing else there: the teachers' every action on the
    training catalog, and a call of each tool they never make."""
    loaded = load_policy_model(tiny_model_dir, device="cpu")
    grammar = action_grammar(loaded.tokenizer, loaded.stop_token_ids)
    calls = teacher_calls()
    assert len(calls) > 1000 and len({c.tool for c in calls}) >= 12
    calls += HAND_MADE
    for call in calls:
        assert parse_action(render_action(call))[0] == call
        ids = completion_ids(loaded, call)
        matcher = grammar.matcher()
        assert matcher.consume_tokens(ids[:-1]) and matcher.is_accepting(), (render_action(call),
                                                                            matcher.get_error())
        assert matcher.is_stopped()  # the object is closed: only the end of the turn may follow
        assert matcher.consume_token(ids[-1]), render_action(call)
    # ... and not the same actions written otherwise (the whitespace, the key order, an extra key)
    for text in ['{"tool":"list_pods","args":{}}', '{"args": {}, "tool": "list_pods"}',
                 '{"tool": "describe", "args": {"name": "cart", "kind": "pod"}}',
                 '{"tool": "list_pods", "args": {"force": true}}', '```json\n{"tool": "list_pods", "args": {}}']:
        assert not grammar.accepts(loaded.tokenizer(text, add_special_tokens=False)["input_ids"]), text


def test_constrained_logprobs_are_the_models_own_and_answers_end_with_their_object(
        tiny_model_dir: Path) -> None:
    """A random model under the grammar: every answer is a prefix of an action, ending with the end of the turn
    just after the object when it ends; the logprobs recorded are the model's own (what GRPO and the off-policy
    trainer compute for those tokens), not the renormalised ones it was sampled from."""
    torch.manual_seed(0)
    loaded = load_policy_model(tiny_model_dir, device="cpu")
    grammar = action_grammar(loaded.tokenizer, loaded.stop_token_ids)
    prompts = [prompt_messages(opening(runbook_episode(fault))) for fault in ("oom", "bad-image", "none")]
    for sampling in (SamplingConfig(temperature=1.0, max_new_tokens=40), SamplingConfig(temperature=0.0,
                                                                                         max_new_tokens=40)):
        for messages, g in zip(prompts, TransformersBackend(loaded).generate(prompts, sampling), strict=True):
            ids, logprobs = g.token_ids or [], g.logprobs or []
            assert grammar.matcher().consume_tokens(ids), g.text
            if g.finish_reason == "stop":
                assert parse_action(g.text)[0] is not None and grammar.accepts(ids[:-1])
            prompt = prompt_token_ids(loaded.tokenizer, messages)
            with torch.inference_mode():
                logits = loaded.model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1:-1]
            own = logits.log_softmax(-1).gather(1, torch.tensor(ids)[:, None]).squeeze(1)
            assert all(math.isfinite(lp) for lp in logprobs)
            assert torch.allclose(own, torch.tensor(logprobs), atol=1e-3)


def test_an_endpoint_that_takes_a_json_schema_is_sent_the_same_one() -> None:
    messages = prompt_messages(opening(runbook_episode()))
    plain = OpenAIBackend("http://vllm:8000/v1", model="m").request_body(messages, SamplingConfig())
    assert "response_format" not in plain
    backend = OpenAIBackend("http://vllm:8000/v1", model="m", json_schema=True)
    body = backend.request_body(messages, SamplingConfig())
    assert body["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "tool_call", "schema": action_json_schema()}}
    assert "response_format" not in backend.request_body(messages, SamplingConfig(constrained=False))


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    """The untrained SmolLM2-135M-Instruct, converted from its GGUF (~20 s)."""
    return load_policy_model(ensure_base_model(tmp_path_factory.getbasetemp() / "base-smollm2-135m"), device="cpu")


@pytest.mark.slow  # the 135M model decoding 1,300 tokens on CPU: minutes, past the per-test limit on a busy machine
def test_the_untrained_model_answers_only_tool_calls_under_the_grammar(base_model: LoadedModel) -> None:
    """The base model on incident prompts (first turns and later ones), within training's token budget, greedy
    and sampled at temperature 1: every answer it ends parses, and one it does not end is cut off inside an action
    (a free-text string it keeps writing: the one way left to an invalid answer). Without the grammar, it writes
    prose."""
    grammar = action_grammar(base_model.tokenizer, base_model.stop_token_ids)
    episodes = [runbook_episode(fault) for fault in ("oom", "bad-image", "none")]
    prompts = [prompt_messages(before(t, k)) for t in episodes for k in (0, 2)]
    backend = TransformersBackend(base_model)
    torch.manual_seed(0)
    for temperature in (0.0, 1.0):
        answers = backend.generate(prompts, SamplingConfig(temperature=temperature, max_new_tokens=MAX_ACTION_TOKENS))
        ended = [g for g in answers if g.finish_reason == "stop"]
        assert [parse_action(g.text)[1] for g in ended] == [None] * len(ended), [g.text for g in ended]
        assert len(ended) >= len(prompts) // 2, [g.text for g in answers]
        for g in answers:
            matcher = grammar.matcher()
            assert matcher.consume_tokens(g.token_ids or []) and matcher.is_accepting() == (g in ended), g.text
    free = backend.generate(prompts, SamplingConfig(temperature=1.0, max_new_tokens=32, constrained=False))
    assert sum(parse_action(g.text)[0] is not None for g in free) <= 1, [g.text for g in free]


def opening(t: Trajectory) -> Trajectory:
    return before(t, 0)


def before(t: Trajectory, k: int) -> Trajectory:
    """The trajectory as the workflow holds it when asking for step k."""
    assistant_turns = [i for i, m in enumerate(t.conversation) if m.role == "assistant"]
    upto = assistant_turns[k - 1] + 1 if k else 0
    return t.model_copy(update={"steps": t.steps[:k], "conversation": t.conversation[:upto]})
