"""DAgger: the expert labels the states the student reaches, and the student learns from those labels.

Imitation only shows the student the states the expert visits. Once the student slips (a wrong read, a wrong fix),
it is somewhere no demonstration went. The expert decides from the conversation alone (`policy/expert.py`), so it can
say what to do from any state of a student's episode, after the student's own mistakes too. Each state becomes one
prompt-completion example: the prompt is exactly what the student saw at that turn (its own earlier actions and the
cluster's answers to them), the completion is the expert's action in the canonical form. The loss is on the
completion only, so the student's earlier actions, wrong ones included, are context and never targets.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from agent_sre.models.remediation import PolicyRef
from agent_sre.models.scenario import Scenario
from agent_sre.models.training import (
    MAX_ACTION_TOKENS,
    SIMULATED_ACTIONS_PER_EXTRA_SERVICE,
    SIMULATED_MAX_ACTIONS,
    SFTConfig,
    SFTResult,
)
from agent_sre.models.trajectory import Trajectory
from agent_sre.policy.conversation import render_action
from agent_sre.policy.expert import ExpertPolicy
from agent_sre.policy.llm.chat import chat_messages

EXPERT = PolicyRef(name="expert", version="expert")
Example = dict[str, list[dict[str, str]]]  # {"prompt": chat messages, "completion": [the assistant's message]}


def labelled_states(trajectories: Iterable[Trajectory], expert: ExpertPolicy | None = None) -> list[Example]:
    """One example per turn of each episode: what the policy saw then, and what the expert does from there."""
    expert = expert or ExpertPolicy()
    examples: list[Example] = []
    seen: set[str] = set()
    for t in trajectories:
        context: list[dict[str, str]] = []
        for i, step in enumerate(t.steps):
            context += chat_messages(step.decision.new_messages)
            label = expert.choose(EXPERT, t.model_copy(update={"steps": t.steps[:i]}))
            example = {"prompt": list(context), "completion": [{"role": "assistant", "content": render_action(label)}]}
            key = repr(example)
            if key not in seen:
                seen.add(key)
                examples.append(example)
            context.append({"role": "assistant", "content": step.decision.completion})
    return examples


def student_states(model_dir: Path, scenarios: Sequence[Scenario], *, device: str = "auto", batch: int = 64,
                   max_turns: int = SIMULATED_MAX_ACTIONS, max_new_tokens: int = MAX_ACTION_TOKENS,
                   extra_turns_per_service: int = SIMULATED_ACTIONS_PER_EXTRA_SERVICE,
                   ) -> tuple[list[Trajectory], float]:
    """The student's own episodes on `scenarios` (greedy, under the action grammar, as it is served) and the share
    it resolved: the states a DAgger round labels."""
    from agent_sre.training.evaluate import run_model

    played: list[Trajectory] = []
    results = run_model(model_dir, scenarios, version="dagger-student", device=device, batch=batch,
                        max_turns=max_turns, max_new_tokens=max_new_tokens, on_trajectory=played.append,
                        extra_turns_per_service=extra_turns_per_service)
    resolved = sum(r.outcome.outcome == "resolved" for r in results) / max(len(results), 1)
    return played, resolved


def train_on_labels(model_dir: Path, examples: list[Example], output_dir: Path, config: SFTConfig) -> SFTResult:
    """Fine-tune the student on the labelled states (loss on the expert's completions only)."""
    from agent_sre.training.sft import train_sft_rows

    rows: list[dict[str, Any]] = list(examples)
    return train_sft_rows(model_dir, rows, output_dir, config)
