"""A remediation's steps as a terminal session: each action, then what came back, indented and uncut by table
borders (kubectl's output is as wide as the terminal). `agent-sre incident steps` prints trajectories with it."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from datetime import datetime

from rich.console import Console
from rich.markup import escape

from agent_sre.models.remediation import RemediationStatus, Waiting
from agent_sre.models.tools import WriteAssessment
from agent_sre.models.trajectory import ENDINGS, Step, Trajectory

PREVIEW_LINES = 3  # of a tool's output, unless `full`
PREVIEW_CHARS = 120  # of an invalid action's raw completion


def is_taken(step: Step) -> bool:
    """Whether a step is complete: a tool call with its result, an invalid action, or the agent's ending (finish,
    escalate; a write waiting for approval, or still running, has no result yet)."""
    return step.result is not None or step.action is None or step.action.tool in ENDINGS


def action_text(step: Step) -> str:
    if step.action is None:
        return "invalid action: " + textwrap.shorten(step.decision.completion or "(empty completion)",
                                                     PREVIEW_CHARS, placeholder=" …")
    return step.action.command_line()


def assessment_text(assessment: WriteAssessment) -> str:
    """What a human approves: the write's risk, and each finding of the write rules that makes it so."""
    findings = "; ".join(f"{f.reason} ({f.rule}, {f.risk})" for f in assessment.findings)
    return f"{assessment.risk} risk" + (f": {findings}" if findings else "")


def waiting_text(waiting: Waiting, now: datetime) -> str:
    """What a running remediation waits on, since when (and for how long), and until when."""
    text = f"{waiting.on} since {waiting.since:%Y-%m-%d %H:%M:%S} UTC ({(now - waiting.since).total_seconds():.0f}s)"
    return text + (f", until {waiting.until:%H:%M:%S} UTC" if waiting.until is not None else "")


@dataclass
class StepPrinter:
    console: Console
    full: bool = False  # whole tool outputs, not their first lines

    def trajectory(self, t: Trajectory, running: RemediationStatus | None = None, start: int = 0,
                   header: bool = True) -> None:
        """Steps `start`.. with their step rewards once known, the approval `running` says a write waits for, and
        how the episode ended."""
        rewards = t.reward.step_rewards if t.reward is not None else []
        if header:
            self.console.print(f"[bold]steps of {escape(t.workflow_id)}[/] · {escape(t.model_version)}")
        for i, step in enumerate(t.steps[start:], start=start):
            self.step(step, rewards[i] if i < len(rewards) else None)
            if running is not None and running.pending_step == step.index:
                self.waiting(t.workflow_id, step, running.pending_assessment)
        self.ending(t)

    def step(self, step: Step, reward: float | None = None) -> None:
        shown = f"  [dim]step reward {reward:+g}[/]" if reward else ""
        self.console.print(f"[bold]{step.index:>2}[/] {escape(action_text(step))}{shown}")
        for line in self._result_lines(step):
            self.console.print("   " + line, markup=False, highlight=False, no_wrap=not self.full,
                               overflow="fold" if self.full else "ellipsis")

    def waiting(self, workflow_id: str, step: Step, assessment: WriteAssessment | None,
                with_action: bool = False) -> None:
        """A write waiting for approval, what the write rules found in it, and the command that answers it."""
        if with_action:
            self.console.print(f"[bold]{step.index:>2}[/] {escape(action_text(step))}")
        if assessment is not None:
            self.console.print(f"   [yellow]held[/]: {escape(assessment_text(assessment))}")
        self.console.print(f"   [yellow]waiting for approval[/]: agent-sre incident approve|reject "
                           f"{escape(workflow_id)} --step {step.index}")

    def ending(self, t: Trajectory) -> None:
        ended = t.termination or "still acting"
        verdict = t.verdict.outcome if t.verdict is not None else "not judged yet"
        total = f" · reward {t.reward.total:+.2f} ({t.reward.function})" if t.reward is not None else ""
        self.console.print(f"ended: {ended} · verdict: {verdict}{total}")

    def _result_lines(self, step: Step) -> list[str]:
        r = step.result
        if r is None:
            return [f"why: {step.decision.invalid_reason or '?'}"] if step.action is None else []
        lines = r.output.rstrip().splitlines() or ["(no output)"]
        label = "refused: " if r.refused else "" if r.ok else "error: "
        if not lines[0].startswith(label):  # the tools' own refusals and errors already say so
            lines[0] = label + lines[0]
        if r.idempotent_replay:
            lines.append("(a retried write: it found its own earlier effect and did nothing)")
        if self.full or len(lines) <= PREVIEW_LINES + 1:
            return lines
        return [*lines[:PREVIEW_LINES], f"… {len(lines) - PREVIEW_LINES} more lines (--full shows them)"]
