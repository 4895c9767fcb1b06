"""DAgger's data: the expert labels every state of another policy's episode, mistakes included, and SFT learns the
labels and nothing of the episode's own actions."""

from __future__ import annotations

import json
from pathlib import Path

from agent_sre.models.remediation import PolicyRef
from agent_sre.models.training import SFTConfig
from agent_sre.policy.conversation import parse_action
from agent_sre.policy.runbook import RunbookPolicy
from agent_sre.scenarios import default_catalog, load_scenarios
from agent_sre.simulator.simulator import Simulator
from agent_sre.training.dagger import labelled_states, student_states, train_on_labels
from agent_sre.training.evaluate import play
from agent_sre.training.sft import _trainer

SCENARIO = next(s for s in load_scenarios(default_catalog()) if s.fault == "bad_config")


def _runbook_episode():
    """The runbook on a config value the service cannot parse: it rolls back a revision that was fine."""
    return play(RunbookPolicy(), PolicyRef(name="runbook", version="runbook"), SCENARIO, Simulator(speed=0))


def test_every_state_is_labelled_by_the_expert_after_the_students_mistake_too() -> None:
    episode = _runbook_episode()
    wrong = next(s for s in episode.steps if s.action is not None and s.action.tool == "rollout_undo")
    examples = labelled_states([episode])
    assert len(examples) == len(episode.steps)
    labels = [parse_action(e["completion"][0]["content"])[0] for e in examples]
    assert all(label is not None for label in labels)  # every label is a valid action in the canonical form
    after = [(e, label) for e, label in zip(examples, labels, strict=True)
             if any(m["role"] == "assistant" and m["content"] == wrong.decision.completion for m in e["prompt"])]
    assert after, "no state after the wrong fix was labelled"
    # From the states the runbook's wrong fix left, the expert goes on to the real fault: it never repeats the
    # runbook's write, does not claim the incident fixed, and labels the ground truth's fix.
    assert all(label is not None and label.tool not in ("rollout_undo", "finish") for _, label in after)
    assert any(label in SCENARIO.ground_truth.fix for _, label in after), [label for _, label in after]
    assert examples[0]["prompt"][0]["role"] == "system" and examples[0]["prompt"][-1]["role"] == "user"


def test_sft_on_labels_trains_the_completions_only(tiny_model_dir: Path, tmp_path: Path) -> None:
    examples = labelled_states([_runbook_episode()])
    config = SFTConfig(max_steps=1, learning_rate=1e-3, max_length=4096)
    trainer = _trainer(tiny_model_dir, list(examples), tmp_path / "work", config)
    tokenizer = trainer.processing_class
    for i, example in enumerate(examples):
        row = trainer.train_dataset[i]
        trained = tokenizer.decode([t for t, label in zip(row["input_ids"], row["labels"], strict=True)
                                    if label != -100])
        # the label and its end of turn (the template's newline after it rides along), none of the prompt
        assert trained.removesuffix("\n") == example["completion"][0]["content"] + "<|im_end|>"
    result = train_on_labels(tiny_model_dir, examples, tmp_path / "dagger", config)
    assert result.steps == 1 and result.examples == len(examples)
    assert json.loads((tmp_path / "dagger" / "config.json").read_text())["num_hidden_layers"] == 2


def test_the_students_own_episodes_are_what_a_round_labels(tiny_model_dir: Path) -> None:
    played, resolved = student_states(tiny_model_dir, [SCENARIO], device="cpu", max_turns=2, max_new_tokens=24)
    assert len(played) == 1 and 0.0 <= resolved <= 1.0
    assert played[0].policy == "llm" and len(labelled_states(played)) == len(played[0].steps) >= 1
