"""The one conversation format, shared by serving and training: the model never sees a different prompt in
production than it was trained on.

    system     rules + every tool with its JSON schema
    user       the alert and/or the user's report
    assistant  {"tool": "...", "args": {...}}           ← exactly one JSON object per turn
    tool       the tool's kubectl-like output, or why the action was invalid or refused
    ...
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, get_args

from pydantic import ValidationError

from agent_sre.models.alert import Alert
from agent_sre.models.incident import Incident
from agent_sre.models.policy import ChatMessage
from agent_sre.models.tools import TOOL_SPECS, ReadableKind, ToolCall
from agent_sre.models.trajectory import Trajectory

MAX_COMPLETION_CHARS = 4000

RULES = """You are the on-call SRE of a Kubernetes cluster; an alert fired. Find the root cause with read tools, fix \
it with the smallest safe change in the incident's namespace, check the fix worked, then finish. On a false alarm, \
change nothing and finish. If you cannot fix it, escalate.
Answer with one JSON object only: {"tool": "<name>", "args": {...}}. ? marks an optional argument; namespace \
defaults to the incident's."""
# Choice lists that several signatures take: spelled out once, named in each signature.
NAMED_CHOICES: dict[str, tuple[str, ...]] = {"KIND": get_args(ReadableKind)}


@lru_cache
def system_prompt() -> str:
    """Rules plus one signature line per tool. Compact on purpose: a small model reads the prompt at every turn,
    and training pays for every token of it (the JSON schemas themselves are ~3x longer)."""
    lines = [RULES, *(f"{name}: {'|'.join(choices)}" for name, choices in NAMED_CHOICES.items()), "Tools:"]
    for spec in TOOL_SPECS.values():
        schema = spec.args.model_json_schema()
        required = set(schema.get("required", []))
        args = ", ".join(_signature(name, prop, name in required)
                         for name, prop in schema.get("properties", {}).items())
        lines.append(f"{spec.name}({args})" + (f": {spec.description}" if spec.description else ""))
    return "\n".join(lines)


def _signature(name: str, prop: dict[str, Any], required: bool) -> str:
    """`name` for a required string, `name?` for an optional one, with the type or choices when not a string."""
    kind = _brief(prop)
    return name + ("" if required else "?") + ("" if kind == "string" else f": {kind}")


def _brief(prop: dict[str, Any]) -> str:
    if "enum" in prop:
        named = next((name for name, choices in NAMED_CHOICES.items() if tuple(prop["enum"]) == choices), None)
        return named or "|".join(map(str, prop["enum"]))
    if "anyOf" in prop:
        return "|".join(_brief(p) for p in prop["anyOf"] if p.get("type") != "null")
    return str(prop.get("type", "any"))


# Alert annotations left out of the incident message: links the agent cannot follow.
UNREAD_ANNOTATIONS = frozenset({"runbook_url", "dashboard_url"})


def incident_message(incident: Incident) -> str:
    """The user turn. An incident of several alerts (one Alertmanager group) lists each, numbered; one alert reads
    as it always has, the prompt the models were trained on."""
    parts = [f"Namespace: {incident.namespace}"]
    alerts = incident.all_alerts
    if len(alerts) == 1:
        parts.extend(alert_lines(alerts[0]))
    elif alerts:
        parts.append(f"{len(alerts)} alerts of one group, likely one root cause:")
        for i, alert in enumerate(alerts, 1):
            parts.extend(f"[{i}] {line}" for line in alert_lines(alert))
    if incident.report:
        parts.append(f"User report: {incident.report}")
    return "\n".join(parts)


def alert_lines(alert: Alert) -> list[str]:
    labels = alert.labels
    return [f"Alert: {labels.get('alertname', 'unnamed')} ({alert.status})",
            "Labels: " + ", ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "alertname"),
            *(f"{k.capitalize()}: {v}" for k, v in sorted(alert.annotations.items()) if k not in UNREAD_ANNOTATIONS)]


def pending_messages(trajectory: Trajectory) -> list[ChatMessage]:
    """The messages the model has not seen yet: the opening pair, or the outcome of its last action."""
    if not trajectory.steps:
        return [ChatMessage(role="system", content=system_prompt()),
                ChatMessage(role="user", content=incident_message(trajectory.incident))]
    last = trajectory.steps[-1]
    if last.decision.action is None:
        return [ChatMessage(role="tool", content=f"invalid action: {last.decision.invalid_reason}. "
                                                 'Answer with one JSON object {"tool": ..., "args": {...}}.')]
    assert last.result is not None, "a finished trajectory has no next turn"
    return [ChatMessage(role="tool", content=last.result.output)]


def parse_action(completion: str) -> tuple[ToolCall | None, str | None]:
    """Strictly parse one completion into a validated tool call, or explain why it is not one."""
    text = completion.strip()
    if len(text) > MAX_COMPLETION_CHARS:
        return None, f"the answer is longer than {MAX_COMPLETION_CHARS} characters"
    if text.startswith("```"):
        text = text.strip("`").removeprefix("json").strip()
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        return None, f"not valid JSON ({e.msg} at position {e.pos})"
    if not isinstance(obj, dict) or set(obj) - {"tool", "args"} or not isinstance(obj.get("tool"), str):
        return None, 'expected an object with exactly the keys "tool" and "args"'
    args = obj.get("args", {})
    if not isinstance(args, dict):
        return None, '"args" must be an object'
    call = ToolCall(tool=obj["tool"], args=args)
    if call.tool not in TOOL_SPECS:
        return None, f"unknown tool {call.tool!r}; known tools: {', '.join(TOOL_SPECS)}"
    try:
        call.validate_args()
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'args'}: {err['msg']}" for err in e.errors())
        return None, f"bad arguments for {call.tool}: {problems}"
    return call, None


def render_action(call: ToolCall) -> str:
    """The canonical completion for an action: what a teacher policy 'says', and what SFT trains on."""
    return json.dumps({"tool": call.tool, "args": call.args}, separators=(", ", ": "))
