"""Redaction of secrets and personal data before a trajectory leaves the workflow for storage and training.

Tool outputs are what the model read, so they carry whatever the cluster showed it: decoded secret values,
connection strings, pod IPs, the e-mail of whoever deployed. Training data must not. Each finding is replaced
by a typed placeholder (`<redacted:KIND>`) so the text keeps its shape for the model to learn from. Redaction is
idempotent: placeholders match no pattern, so redacting redacted text changes nothing.

Two layers:
- `redact(text)`: patterns over free text (conversation, completions, tool outputs, reports, annotations);
- `redact_trajectory(t)`: walks every string of the trajectory applying `redact`, plus the key-aware rules that
  only structured data allows (`set_env` of a `DB_PASSWORD`, `set_config_key` on a secret). Identity fields
  (ids, versions, namespaces, tool names) are kept: they partition storage and hold no secrets. The result is
  re-validated, so the structure stays a valid trajectory.v1.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

from agent_sre.models.trajectory import Trajectory

M = TypeVar("M", bound=BaseModel)

PREFIX = "<redacted:"
SECRET = "<redacted:secret>"

# Key names whose values are secrets: `password=...`, `PASSWORD: ...`, `"api_key": "..."`, `DB_PASSWORD=...`.
_SECRET_WORD = r"(?:password|passwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|credentials?|authorization)"
_SECRET_KEY = rf"[A-Za-z0-9_.-]*{_SECRET_WORD}[A-Za-z0-9_.-]*"
_SECRET_KEY_RE = re.compile(rf"^{_SECRET_KEY}$", re.IGNORECASE)
# Keys that only name, point at or count a secret (`secretName`, `secretKeyRef`, `max_tokens`) are not secrets.
_NOT_A_SECRET_SUFFIX = re.compile(r"(?:name|ref|refs|file|path|seconds|type|tokens|ids|count)$", re.IGNORECASE)

# Fields of the trajectory that identify it; never rewritten.
_IDENTITY_KEYS = frozenset({"schema_version", "workflow_id", "run_id", "policy", "model_version", "id",
                            "incident_id", "namespace", "tool", "fingerprint", "fault", "fault_class", "function"})


def is_secret_key(key: str) -> bool:
    """True for a key whose value is a secret (not for one that names or points at a secret)."""
    return bool(_SECRET_KEY_RE.match(key)) and not _NOT_A_SECRET_SUFFIX.search(key)


def _keyed_value(m: re.Match[str]) -> str:
    """Replace the value of a `key: value` match when the key names a secret."""
    value = m.group("qvalue") if m.group("q") else m.group("value")
    if not is_secret_key(m.group("key")) or value.startswith(PREFIX):
        return m.group(0)
    q = m.group("q") or ""
    return f"{m.group('head')}{q}{SECRET}{q}"


_VALUE = (r"""(?:(?P<q>["'])(?P<qvalue>(?:(?!(?P=q))[^\n\\]|\\.)+)(?P=q)"""  # quoted, escapes allowed
          r"""|(?P<value>(?!<|(?:Bearer|Basic)[ \t])[^\s"',;}\]]+))""")  # bare; not "<set to...>", not a scheme
# password=x, PASSWORD: x, "api_key": "x", --token x is not matched (no separator)
_KEY_VALUE_RE = re.compile(rf"""(?P<head>(?<![\w.-])["']?(?P<key>{_SECRET_KEY})["']?[ \t]*[:=][ \t]*){_VALUE}""",
                           re.IGNORECASE)
# env entries and config keys: `- name: DB_PASSWORD\n  value: x` (YAML), `{"key": "api_token", "value": "x"}`
_ENV_ENTRY_RE = re.compile(
    rf"""(?P<head>["']?(?:name|key)["']?[ \t]*[:=][ \t]*["']?(?P<key>{_SECRET_KEY})["']?[ \t]*,?\s*["']?value["']?"""
    rf"""[ \t]*[:=][ \t]*){_VALUE}""", re.IGNORECASE)


def _ipv6(m: re.Match[str]) -> str:
    try:
        ipaddress.IPv6Address(m.group(0))
    except ValueError:  # a time of day, a MAC address, a C++ scope...
        return m.group(0)
    return "<redacted:ip>"


# What every match of a rule contains: literals of a case-sensitive rule, lower-cased (any one of them), or a
# pattern far cheaper than the rule's. Most text (tool output, prompts) holds none, and a rule's own scan costs
# many times the check. (Before these and the walk's memo below, redaction was about a sixth of a worker's CPU
# per simulated episode, by py-spy; bench/redaction.py measures it.)
_Trigger = tuple[str, ...] | re.Pattern[str]
_Rule = tuple[re.Pattern[str], str | Callable[[re.Match[str]], str], _Trigger]
_NAMES_A_SECRET = re.compile(_SECRET_WORD, re.IGNORECASE)

# Order matters: specific token shapes first, then `key: value`, then e-mails and addresses.
_RULES: list[_Rule] = [
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)", re.DOTALL),
     "<redacted:private_key>", ("-----begin",)),
    # credentials inside a URL: scheme://user:password@host
    (re.compile(r"(?P<pre>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@<>]+:)(?!<redacted:)[^\s@/<>]+(?=@)"),
     rf"\g<pre>{SECRET}", ("://",)),
    (re.compile(r"\b(?P<scheme>Bearer|Basic)[ \t]+(?!<redacted:)[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE),
     r"\g<scheme> <redacted:token>", re.compile("bearer|basic", re.IGNORECASE)),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"), "<redacted:jwt>", ("eyj",)),
    (re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}\b"), "<redacted:aws_key>",
     ("akia", "asia", "agpa", "aida", "aroa", "anpa", "anva", "aipa")),
    (re.compile(r"\bsk-(?:[A-Za-z0-9]+-)*[A-Za-z0-9_]{16,}"), "<redacted:api_key>", ("sk-",)),
    (re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|xox[abprs]-[A-Za-z0-9-]{10,})"),
     "<redacted:token>", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "xoxa-", "xoxb-", "xoxp-", "xoxr-",
                          "xoxs-")),
    (_ENV_ENTRY_RE, _keyed_value, _NAMES_A_SECRET),
    (_KEY_VALUE_RE, _keyed_value, _NAMES_A_SECRET),
    (re.compile(r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"),
     "<redacted:email>", ("@",)),
    (re.compile(r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:\d{1,3}(?:\.\d{1,3}){3}|[0-9A-Fa-f]{0,4})(?![\w:])"),
     _ipv6, re.compile(r":[0-9A-Fa-f]{0,4}:")),
    (re.compile(r"(?<![\w.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
                r"(?![\w]|\.\d)"), "<redacted:ip>", re.compile(r"\d\.\d{1,3}\.\d{1,3}\.\d")),
]


def _may_match(trigger: _Trigger, text: str, lowered: str) -> bool:
    if isinstance(trigger, re.Pattern):
        return trigger.search(text) is not None
    return any(literal in lowered for literal in trigger)


# A Kubernetes Secret rendered as YAML (`kubectl get secret -o yaml`) or JSON: every value under data/stringData.
_SECRET_KIND_YAML = re.compile(r"^\s*kind:\s*[\"']?Secret[\"']?\s*$", re.MULTILINE)
_DATA_BLOCK_YAML = re.compile(r"^(?P<indent>[ \t]*)(?:data|stringData):[ \t]*$")
_YAML_ENTRY = re.compile(r"^(?P<head>[ \t]*[^\s:#][^:]*:)(?P<sep>[ \t]*)(?P<value>.*)$")
_BLOCK_SCALAR = re.compile(r"^[|>][-+]?$")
# ...and in JSON: a Secret, or a tool call on one (`{"kind": "secret", ..., "value": "..."}` in a completion).
_SECRET_KIND_JSON = re.compile(r'"kind"\s*:\s*"secret"', re.IGNORECASE)
_SECRET_PAYLOAD_JSON = re.compile(r'"(?:data|stringData|patch)"\s*:\s*(?=[{\[])|"value"\s*:\s*(?=")')
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_JSON_TOKEN = re.compile(r'(?P<s>"(?:[^"\\]|\\.)*")(?P<colon>\s*:)?')


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _redact_yaml_secret_data(document: str) -> str:
    out: list[str] = []
    data_indent: int | None = None  # indent of the `data:` line while inside its block
    entry_indent: int | None = None  # indent of the block's keys; deeper lines continue a block scalar
    for line in document.split("\n"):
        if data_indent is not None and line.strip():
            indent = _indent(line)
            if indent <= data_indent:
                data_indent = entry_indent = None
            else:
                entry_indent = indent if entry_indent is None else entry_indent
                entry = _YAML_ENTRY.match(line)
                if indent > entry_indent or entry is None:
                    line = line[:indent] + SECRET
                elif entry.group("value") and not _BLOCK_SCALAR.match(entry.group("value")):
                    line = f"{entry.group('head')}{entry.group('sep') or ' '}{SECRET}"
        if _DATA_BLOCK_YAML.match(line):
            data_indent, entry_indent = _indent(line), None
        out.append(line)
    return "\n".join(out)


def _json_value_end(text: str, start: int) -> int:
    """End of the JSON value (string, object or array) starting at `start`; the text's end if unbalanced."""
    depth, i = 0, start
    while i < len(text):
        char = text[i]
        if char == '"':
            string = _JSON_STRING.match(text, i)
            i = string.end() if string else len(text)
            if depth == 0:
                return i
            continue
        if char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return len(text)


def _redact_json_strings(payload: str) -> str:
    """Every string value in a JSON fragment becomes the placeholder; object keys stay readable."""
    return _JSON_TOKEN.sub(lambda m: m.group(0) if m.group("colon") or m.group("s").startswith('"<redacted:')
                           else f'"{SECRET}"', payload)


def _redact_json_secret_payloads(text: str) -> str:
    out, position = [], 0
    for match in _SECRET_PAYLOAD_JSON.finditer(text):
        if match.start() < position:  # inside a payload already redacted
            continue
        end = _json_value_end(text, match.end())
        out.append(text[position:match.end()] + _redact_json_strings(text[match.end():end]))
        position = end
    return "".join(out) + text[position:]


def _redact_secret_manifests(text: str) -> str:
    if _SECRET_KIND_YAML.search(text):
        documents = re.split(r"(?m)^(---[ \t]*)$", text)
        text = "".join(_redact_yaml_secret_data(d) if _SECRET_KIND_YAML.search(d) else d for d in documents)
    if _SECRET_KIND_JSON.search(text):
        text = _redact_json_secret_payloads(text)
    return text


def redact(text: str) -> str:
    """Replace secrets, tokens, passwords, e-mail and IP addresses in free text by `<redacted:KIND>`."""
    text = _redact_secret_manifests(text)
    lowered = text.lower()
    for pattern, replacement, trigger in _RULES:
        if _may_match(trigger, text, lowered):
            text, replaced = pattern.subn(replacement, text)
            if replaced:
                lowered = text.lower()
    return text


def _redact_all_strings(value: Any) -> Any:
    if isinstance(value, str):
        return value if value.startswith(PREFIX) else SECRET
    if isinstance(value, dict):
        return {k: _redact_all_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_all_strings(v) for v in value]
    return value


def _names_a_secret(d: dict[str, Any]) -> bool:
    """`{"name": "DB_PASSWORD", "value": ...}` (set_env, env entries) or `{"key": "password", "value": ...}`."""
    return any(isinstance(d.get(k), str) and is_secret_key(d[k]) for k in ("name", "key"))


def _is_secret_object(d: dict[str, Any]) -> bool:
    """A Secret itself, or a tool call on one (`set_config_key`/`patch` with kind=secret)."""
    kind = d.get("kind")
    return isinstance(kind, str) and kind.lower() == "secret"


def _redact_value(value: Any, memo: dict[str, str]) -> Any:
    """`memo`: text already redacted in this walk. A trajectory holds each tool output and prompt several times
    (the conversation, the step, the next decision's messages)."""
    if isinstance(value, str):
        redacted = memo.get(value)
        if redacted is None:
            redacted = memo[value] = redact(value)
        return redacted
    if isinstance(value, list):
        return [_redact_value(v, memo) for v in value]
    if not isinstance(value, dict):
        return value
    names_secret, secret_object = _names_a_secret(value), _is_secret_object(value)
    out: dict[str, Any] = {}
    for key, item in value.items():
        if key in _IDENTITY_KEYS and isinstance(item, str):
            out[key] = item
        elif (isinstance(item, str) and isinstance(key, str) and is_secret_key(key)) \
                or (key == "value" and names_secret) \
                or (secret_object and key in ("data", "stringData", "value", "patch")):
            out[key] = _redact_all_strings(item)
        else:
            out[key] = _redact_value(item, memo)
    return out


def redact_model(model: M) -> M:
    """A copy of any contract (a reward record, an incident) with every text field redacted, re-validated."""
    return type(model).model_validate(_redact_value(model.model_dump(mode="python"), {}))


def redact_trajectory(t: Trajectory) -> Trajectory:
    """A copy of `t` with every text field redacted: conversation, completions, tool calls and outputs, the
    incident's alert and report, diagnosis, summary, verdict reasons, feedback comments."""
    return redact_model(t)
