"""Conversation tokens: what one episode costs the model to read, part by part, and what the runbook achieves.

Plays the runbook policy (or, with --policy expert, the expert teacher) on a scenario suite in-process, renders
each episode as the training conversation (SmolLM2's chat template, the `tool` role as a prefixed user turn, as
SFT and serving see it) and counts SmolLM2 tokens per episode: the system prompt, the incident (user) message, each
tool's output, and the model's own actions (its JSON answers). A turn's tokens are what it adds to the conversation
before it, so the parts add up exactly to the whole (checked). It also reports the policy's success, false-positive
and escalation rates on the suite, and can save and compare each scenario's outcome and actions, so a change to
the tools' output can be shown not to change what a policy does.

    .venv/bin/python bench/tokens.py [--suite heldout|variants|catalog|PATH] [--policy runbook|expert]
                                     [--label before|after] [--save-outcomes FILE] [--compare-outcomes FILE]
                                     [--no-docs]

The runbook's figures on the held-out suite go into docs/benchmarks.md, under a heading per label.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from statistics import fmean
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchdocs import provenance, write_section

from agent_sre.config import get_settings
from agent_sre.models.remediation import PolicyRef
from agent_sre.models.trajectory import Trajectory
from agent_sre.outcome import incident_outcome
from agent_sre.policy.base import ActionPolicy
from agent_sre.policy.llm.chat import chat_messages, chat_token_ids, install_chat_template
from agent_sre.policy.llm.checkpoint import smollm2_gguf
from agent_sre.policy.llm.policy import BASE_VERSION, local_version_dir
from agent_sre.policy.runbook import RunbookPolicy
from agent_sre.scenarios import default_catalog, heldout_suite, load_scenarios, variants_suite
from agent_sre.simulator.simulator import Simulator
from agent_sre.training.evaluate import play

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

ROOT = Path(__file__).resolve().parent.parent
HEADING = "## Conversation tokens, {label} (bench/tokens.py)"
POLICIES = {name: PolicyRef(name=name, version=name) for name in ("runbook", "expert")}
# The files whose changes move these figures: where they stand is said with each row.
SOURCES = ["agent_sre/tools", "agent_sre/policy/conversation.py", "agent_sre/models/tools.py"]


def tokenizer() -> PreTrainedTokenizerBase:
    """SmolLM2's tokenizer with the project's chat template: the converted base model's, else the GGUF's."""
    from transformers import AutoTokenizer

    base = local_version_dir(BASE_VERSION, get_settings().models_dir)
    if (base / "tokenizer.json").is_file():
        tok = AutoTokenizer.from_pretrained(base, local_files_only=True)
    else:
        gguf = smollm2_gguf()
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    install_chat_template(tok)
    return tok


def parts(tok: PreTrainedTokenizerBase, t: Trajectory) -> dict[str, int]:
    """Tokens of one episode's conversation by part: `system`, `user`, `actions`, `tool:NAME` per tool."""
    messages = chat_messages(t.conversation)
    counts: dict[str, int] = defaultdict(int)
    last_tool, before = "?", 0
    for i, original in enumerate(t.conversation):
        upto = len(chat_token_ids(tok, messages[:i + 1]))
        n, before = upto - before, upto
        if original.role == "assistant":
            last_tool = json.loads(original.content).get("tool", "?")
            counts["actions"] += n
        elif original.role == "tool":
            counts[f"tool:{last_tool}"] += n
        else:
            counts[original.role] += n
    whole = len(chat_token_ids(tok, messages))
    assert whole == sum(counts.values()), f"turns add up to {sum(counts.values())} tokens, the whole to {whole}"
    return dict(counts)


def where() -> str:
    """The commit, and whether the files that shape the conversation differ from it in the working tree."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()
    commit = git("rev-parse", "--short", "HEAD") or "unknown (not a git checkout)"
    dirty = git("status", "--porcelain", "--", *SOURCES)
    return f"commit {commit}" + (" with uncommitted changes to " + ", ".join(
        line[3:] for line in dirty.splitlines()) if dirty else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="heldout",
                        help="heldout, variants, catalog, or a scenario file or directory")
    parser.add_argument("--policy", choices=sorted(POLICIES), default="runbook",
                        help="the teacher that plays (docs/benchmarks.md gets the runbook's figures)")
    parser.add_argument("--label", default="now", help="the row's name in docs/benchmarks.md, e.g. before, after")
    parser.add_argument("--save-outcomes", type=Path, help="write each scenario's outcome and actions as JSON")
    parser.add_argument("--compare-outcomes", type=Path, help="say which scenarios' outcomes or actions differ "
                                                              "from a --save-outcomes file")
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args()
    path = {"heldout": heldout_suite(), "variants": variants_suite(), "catalog": default_catalog()}.get(
        args.suite, Path(args.suite))
    scenarios = load_scenarios(path)
    tok = tokenizer()
    simulator = Simulator(speed=0)
    ref = POLICIES[args.policy]
    policy = teacher(args.policy)

    episodes: list[dict[str, int]] = []
    calls: dict[str, int] = defaultdict(int)
    record: dict[str, dict[str, object]] = {}
    for scenario in scenarios:
        t = play(policy, ref, scenario, simulator)
        outcome = incident_outcome(t)
        episodes.append(parts(tok, t))
        for step in t.steps:
            if step.action is not None:
                calls[step.action.tool] += 1
        record[scenario.name] = {"outcome": outcome.outcome, "termination": outcome.termination,
                                 "false_positive": outcome.false_positive,
                                 "actions": [s.action.command_line() for s in t.steps if s.action is not None]}

    n = len(episodes)
    names = sorted({k for e in episodes for k in k_tools(e)}, key=lambda k: -sum(e.get(k, 0) for e in episodes))
    mean = {k: sum(e.get(k, 0) for e in episodes) / n for k in ["system", "user", *names, "actions"]}
    total = sum(mean.values())
    tool_total = sum(mean[k] for k in names)
    outcomes = list(record.values())
    success = fmean(o["outcome"] == "resolved" for o in outcomes)
    false_positive = fmean(bool(o["false_positive"]) for o in outcomes)
    escalated = fmean(o["termination"] == "escalated" for o in outcomes)

    table = Table(title=f"{args.policy} on {args.suite}: {n} episodes, {args.label}")
    for column in ("part", "tokens/episode", "share", "calls/episode", "tokens/call"):
        table.add_column(column, justify="left" if column == "part" else "right", no_wrap=True)
    rows: list[tuple[str, float, float | None]] = [
        ("system prompt", mean["system"], None), ("user (incident)", mean["user"], None),
        ("tool output, all", tool_total, None),
        *((f"  {k.removeprefix('tool:')}", mean[k], calls[k.removeprefix("tool:")] / n) for k in names),
        ("actions (the model's answers)", mean["actions"], None), ("total", total, None)]
    md = ["| part | tokens/episode | share | calls/episode | tokens/call |", "|---|--:|--:|--:|--:|"]
    for label, value, per_episode in rows:
        share = f"{value / total:.0%}" if label != "total" else "100%"
        cells = [label, f"{value:,.0f}", share, f"{per_episode:.2f}" if per_episode else "",
                 f"{value / per_episode:,.0f}" if per_episode else ""]
        table.add_row(*cells)
        md.append("| " + " | ".join(c.strip() if i else c.replace("  ", "&nbsp;&nbsp;") for i, c in
                                    enumerate(cells)) + " |")
    Console(width=120).print(table)
    longest = max(sum(e.values()) for e in episodes)
    summary = (f"{args.policy.capitalize()} on the {args.suite} suite ({n} episodes): success {success:.1%}, "
               f"false positives {false_positive:.1%}, escalations {escalated:.1%}; "
               f"longest episode {longest:,} tokens.")
    print(summary)

    if args.save_outcomes:
        args.save_outcomes.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    if args.compare_outcomes:
        compare(json.loads(args.compare_outcomes.read_text()), record)
    if not args.no_docs and args.suite == "heldout" and args.policy == "runbook":
        write_section(HEADING.format(label=args.label), (
            f"SmolLM2-135M-Instruct tokens of the runbook's conversations on the held-out suite, rendered with the "
            f"chat template as SFT trains on them (the last action's output is never read, so it is not counted). "
            f"Measured at {where()}.\n\n" + "\n".join(md) + f"\n\n{summary}\n\n" + provenance()))


def teacher(name: str) -> ActionPolicy:
    if name == "expert":
        from agent_sre.policy.expert import ExpertPolicy
        return ExpertPolicy()
    return RunbookPolicy()


def k_tools(episode: dict[str, int]) -> list[str]:
    return [k for k in episode if k.startswith("tool:")]


def compare(before: dict[str, dict[str, object]], after: dict[str, dict[str, object]]) -> None:
    """One line per scenario whose outcome (resolved, false positive, how it ended) or actions changed."""
    changed = 0
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name), after.get(name)
        if old is None or new is None:
            print(f"{name}: only {'after' if old is None else 'before'}")
            changed += 1
            continue
        outcome_keys = ("outcome", "false_positive", "termination")
        if any(old[k] != new[k] for k in outcome_keys):
            changed += 1
            print(f"{name}: OUTCOME " + ", ".join(f"{k} {old[k]} -> {new[k]}" for k in outcome_keys))
        elif old["actions"] != new["actions"]:
            changed += 1
            print(f"{name}: same outcome, actions {old['actions']} -> {new['actions']}")
    print(f"{len(after)} scenarios compared: {changed} changed" if changed else
          f"{len(after)} scenarios compared: every outcome and every action identical")


if __name__ == "__main__":
    main()
