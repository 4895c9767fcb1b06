"""The teacher's actions fit the student's action budget: every action the expert takes on the catalog and both
evaluation suites, rendered as SFT trains on it, takes at most MAX_ACTION_TOKENS SmolLM2 tokens with its end token.

A student imitating a longer action is cut off mid-JSON by `max_new_tokens` (an invalid action), so an ending that
quotes too much of what it read (a JSON value, a scheduler message) breaks the recipe, not just a line of text.
The tokenizer is the GGUF's, the one the recipe's base model is converted from (local, a few seconds to read).
"""

from __future__ import annotations

from collections import Counter

import pytest

from agent_sre.models.training import MAX_ACTION_TOKENS
from agent_sre.policy.conversation import render_action
from agent_sre.policy.expert import ExpertPolicy
from agent_sre.policy.llm.checkpoint import smollm2_gguf
from agent_sre.scenarios import default_catalog, evaluation_suites, load_scenarios
from agent_sre.simulator.simulator import Simulator
from agent_sre.training.demonstrations import EXPERT
from agent_sre.training.evaluate import play

END_OF_TURN = 1  # <|im_end|>: the model generates it too, within max_new_tokens


@pytest.mark.integration  # reads the model's GGUF for its tokenizer and plays ~500 episodes: CI, not the unit loop
def test_every_expert_action_fits_the_action_token_budget() -> None:
    transformers = pytest.importorskip("transformers")
    gguf = smollm2_gguf()
    tokenizer = transformers.AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    simulator = Simulator(speed=0)
    scenarios = [s for path in (default_catalog(), *evaluation_suites()) for s in load_scenarios(path)]
    lengths: Counter[str] = Counter()
    over: dict[str, tuple[int, str]] = {}
    for scenario in scenarios:
        for step in play(ExpertPolicy(), EXPERT, scenario, simulator).steps:
            if step.action is None:
                continue
            text = render_action(step.action)
            n = len(tokenizer(text, add_special_tokens=False)["input_ids"]) + END_OF_TURN
            lengths[step.action.tool] = max(lengths[step.action.tool], n)
            if n > MAX_ACTION_TOKENS:
                over[scenario.name] = (n, text)
    assert len(scenarios) >= 300 and {"finish", "escalate"} <= set(lengths)
    assert not over, f"{len(over)} actions over {MAX_ACTION_TOKENS} tokens: {over}"
