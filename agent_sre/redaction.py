"""Redaction of secrets and personal data before anything leaves the process: trajectories for storage and training,
escalation notices and every webhook body, rollback notices, log records.

Tool outputs are what the model read, so they carry whatever the cluster showed it: decoded secret values,
connection strings, pod IPs, the e-mail of whoever deployed. Training data must not, and neither must a page in a
chat channel. Each finding is replaced by a typed placeholder (`<redacted:KIND>`) so the text keeps its shape for
the model to learn from. Redaction is idempotent: placeholders match no pattern, so redacting redacted text changes
nothing.

Three layers:
- `redact(text)`: patterns over free text (conversation, completions, tool outputs, reports, annotations);
- `redact_data(value)` / `redact_model(m)` / `redact_trajectory(t)`: walk every string of a JSON-like value applying
  `redact`, plus the key-aware rules that only structured data allows (`set_env` of a `DB_PASSWORD`,
  `set_config_key` on a secret). Identity fields (ids, versions, namespaces, tool names) are kept: they partition
  storage and hold no secrets. Models are re-validated, so the structure stays valid;
- the incident's own secrets: every value the rules removed from what the agent read (`incident_secrets`) is
  removed again wherever it reappears without the context that gave it away (a diagnosis that restates the
  password in prose). It is a pure function of the trajectory, so workflows may call it.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import logging
import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any, NamedTuple, TypeVar

from pydantic import BaseModel, ValidationError

from agent_sre.models.trajectory import Trajectory

M = TypeVar("M", bound=BaseModel)

PREFIX = "<redacted:"
SECRET = "<redacted:secret>"
# Kinds that are personal data, not secrets: an address seen once is not hunted for in later prose.
_PERSONAL = frozenset({"email", "ip"})
# A shorter value read from a Secret (`admin`, `5432`, `true`) is too common a word to remove wherever it appears.
MIN_TRACKED_CHARS = 6

# Key names whose values are secrets: `password=...`, `PASSWORD: ...`, `"api_key": "..."`, `DB_PASSWORD=...`, and
# the abbreviations that only count as a whole last segment (`DB_PASS`, `SMTP_PWD`, not `bypass` or `compass`).
_SECRET_WORD = r"(?:password|passwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|credentials?|authorization)"
_SECRET_KEY = (rf"[A-Za-z0-9_.-]*(?:{_SECRET_WORD}[A-Za-z0-9_.-]*"
               r"|(?<![A-Za-z0-9])(?:pass(?:phrase)?|pwd|pw)(?![A-Za-z0-9]))")
_SECRET_KEY_RE = re.compile(rf"^{_SECRET_KEY}$", re.IGNORECASE)
# Keys that only name, point at or count a secret (`secretName`, `secretKeyRef`, `max_tokens`, the list of names
# `Image Pull Secrets:` / `imagePullSecrets` / `Mountable secrets:`) are not secrets.
_NOT_A_SECRET_SUFFIX = re.compile(r"(?:name|ref|refs|file|path|seconds|type|tokens|ids|count|secrets)$",
                                  re.IGNORECASE)

# Fields of the trajectory that identify it; never rewritten.
_IDENTITY_KEYS = frozenset({"schema_version", "workflow_id", "run_id", "policy", "model_version", "id",
                            "incident_id", "namespace", "tool", "fingerprint", "fault", "fault_class", "function"})


def is_secret_key(key: str) -> bool:
    """True for a key whose value is a secret (not for one that names or points at a secret)."""
    return bool(_SECRET_KEY_RE.match(key)) and not _NOT_A_SECRET_SUFFIX.search(key)


def _names_a_secret_value(m: re.Match[str]) -> bool:
    """A `key: value` match whose key names a secret and whose value is not a placeholder already."""
    value = m.group("qvalue") if m.group("q") else m.group("value")
    return is_secret_key(m.group("key")) and not value.startswith(PREFIX)


_VALUE = (r"""(?:(?P<q>["'])(?P<qvalue>(?:(?!(?P=q))[^\n\\]|\\.)+)(?P=q)"""  # quoted, escapes allowed
          r"""|(?P<value>(?!<|(?:Bearer|Basic)[ \t])[^\s"',;}\]]+))""")  # bare; not "<set to...>", not a scheme
# password=x, PASSWORD: x, "api_key": "x", --token x is not matched (no separator)
_KEY_VALUE_RE = re.compile(rf"""(?P<head>(?<![\w.-])["']?(?P<key>{_SECRET_KEY})["']?[ \t]*[:=][ \t]*){_VALUE}""",
                           re.IGNORECASE)
# env entries and config keys: `- name: DB_PASSWORD\n  value: x` (YAML), `{"key": "api_token", "value": "x"}`
_ENV_ENTRY_RE = re.compile(
    rf"""(?P<head>["']?(?:name|key)["']?[ \t]*[:=][ \t]*["']?(?P<key>{_SECRET_KEY})["']?[ \t]*,?\s*["']?value["']?"""
    rf"""[ \t]*[:=][ \t]*){_VALUE}""", re.IGNORECASE)


def _is_ipv6(m: re.Match[str]) -> bool:
    try:
        ipaddress.IPv6Address(m.group(0))
    except ValueError:  # a time of day, a MAC address, a C++ scope...
        return False
    return True


def _is_card_number(m: re.Match[str]) -> bool:
    """A payment card's length and issuer prefix, and a valid Luhn check digit: an order id of 16 digits passes
    the check by chance one time in ten, and rarely with a card's prefix too."""
    digits = [int(c) for c in m.group(0) if c.isdigit()]
    if not 13 <= len(digits) <= 19:
        return False
    checksum = sum(digits[-1::-2]) + sum(sum(divmod(2 * d, 10)) for d in digits[-2::-2])
    return checksum % 10 == 0


def _encodes_a_secret(m: re.Match[str]) -> bool:
    """A base64 token whose decoded text holds a secret (`cGFzc3dvcmQ9...` is `password=...`)."""
    token = m.group(0)
    try:
        decoded = base64.b64decode(token + "=" * (-len(token) % 4), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return False
    return redact(decoded) != decoded


# What every match of a rule contains: literals of a case-sensitive rule, lower-cased (any one of them), or a
# pattern far cheaper than the rule's. Most text (tool output, prompts) holds none, and a rule's own scan costs
# many times the check. (Before these and the walk's memo below, redaction was about a sixth of a worker's CPU
# per simulated episode, by py-spy; bench/redaction.py measures it.)
_Trigger = tuple[str, ...] | re.Pattern[str]


class _Rule(NamedTuple):
    """A pattern whose match, or its group `secret` / `qvalue` / `value` where it has one, becomes
    `<redacted:KIND>` when `accept` (if any) agrees."""

    pattern: re.Pattern[str]
    kind: str
    trigger: _Trigger
    accept: Callable[[re.Match[str]], bool] | None = None


# Every secret key name holds one of these (`password` holds `pass`, `api_key` holds `key`); literals are checked
# at a tenth of the cost of the key pattern itself, which runs on the few texts that hold one.
_NAMES_A_SECRET = ("pass", "pw", "secret", "token", "key", "credential", "authorization")
_AWS_KEY_ID = r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}\b"
_AWS_TRIGGER = ("akia", "asia", "agpa", "aida", "aroa", "anpa", "anva", "aipa")

# Order matters: specific token shapes first, then `key: value`, then e-mails and addresses.
_RULES: list[_Rule] = [
    _Rule(re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?"
                     r"(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)", re.DOTALL),
          "private_key", ("-----begin",)),
    # credentials inside a URL: scheme://user:password@host (a DB connection string too), or scheme://:password@
    _Rule(re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@<>]*:(?P<secret>(?!<redacted:)[^\s@/<>]+)(?=@)"),
          "secret", ("://",)),
    _Rule(re.compile(r"\bhooks\.slack\.com/(?:services|workflows|triggers)/(?P<secret>[A-Za-z0-9/_-]{8,})"),
          "webhook", ("hooks.slack.com/",)),
    _Rule(re.compile(r"\b(?:Bearer|Basic)[ \t]+(?P<secret>(?!<redacted:)[A-Za-z0-9._~+/=-]{8,})", re.IGNORECASE),
          "token", re.compile("bearer|basic", re.IGNORECASE)),
    _Rule(re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"), "jwt", ("eyj",)),
    # an AWS secret access key next to its key id (a CSV of credentials, `aws configure list`): nothing names it
    _Rule(re.compile(rf"{_AWS_KEY_ID}[\s\"',:;=|]{{1,10}}(?P<secret>[A-Za-z0-9/+]{{40}})(?![A-Za-z0-9/+=])"),
          "secret", _AWS_TRIGGER),
    _Rule(re.compile(_AWS_KEY_ID), "aws_key", _AWS_TRIGGER),
    _Rule(re.compile(r"\bsk-(?:[A-Za-z0-9]+-)*[A-Za-z0-9_]{16,}"), "api_key", ("sk-",)),
    _Rule(re.compile(r"\b(?:(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{10,}|whsec_[A-Za-z0-9]{16,})"), "api_key",  # Stripe
          ("sk_live_", "sk_test_", "rk_live_", "rk_test_", "whsec_")),
    _Rule(re.compile(r"\bAIza[A-Za-z0-9_-]{35}"), "api_key", ("aiza",)),  # Google
    _Rule(re.compile(r"\bSG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}"), "api_key", ("sg.",)),  # SendGrid
    _Rule(re.compile(r"\b(?:AC|SK)[0-9a-f]{32}\b"), "token", re.compile("AC[0-9a-f]|SK[0-9a-f]")),  # Twilio
    _Rule(re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|xox[abprs]-[A-Za-z0-9-]{10,})"),
          "token", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "xoxa-", "xoxb-", "xoxp-", "xoxr-",
                    "xoxs-")),
    _Rule(_ENV_ENTRY_RE, "secret", _NAMES_A_SECRET, _names_a_secret_value),
    _Rule(_KEY_VALUE_RE, "secret", _NAMES_A_SECRET, _names_a_secret_value),
    _Rule(re.compile(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/]{16,}={0,2}(?![A-Za-z0-9+/=_-])"), "secret",
          re.compile(r"[A-Za-z0-9+/]{16}"), _encodes_a_secret),
    # in groups of 4 (Visa, Mastercard), 4-6-5 (Amex) or none
    _Rule(re.compile(r"(?<![\w-])[2-6]\d{3}(?:[ -]?\d{4,6}){2}[ -]?\d{1,7}(?![\w-])"), "card",
          re.compile(r"\d{4}[ -]?\d{4}"), _is_card_number),
    _Rule(re.compile(r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"),
          "email", ("@",)),
    _Rule(re.compile(r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:\d{1,3}(?:\.\d{1,3}){3}|[0-9A-Fa-f]{0,4})(?![\w:])"),
          "ip", re.compile(r":[0-9A-Fa-f]{0,4}:"), _is_ipv6),
    _Rule(re.compile(r"(?<![\w.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
                     r"(?![\w]|\.\d)"), "ip", re.compile(r"\d\.\d{1,3}\.\d{1,3}\.\d")),
]


def _secret_span(m: re.Match[str]) -> tuple[int, int]:
    groups = m.re.groupindex
    for group in ("secret", "qvalue", "value"):
        if group in groups and m.group(group) is not None:
            return m.span(group)
    return m.span()


def _apply(rule: _Rule, text: str, found: set[str] | None) -> tuple[str, int]:
    """`text` with the rule's findings replaced, and how many; each secret value removed is added to `found`."""
    def replace(m: re.Match[str]) -> str:
        if rule.accept is not None and not rule.accept(m):
            return m.group(0)
        start, end = _secret_span(m)
        if found is not None and rule.kind not in _PERSONAL:
            found.add(text[start:end])
        return f"{text[m.start():start]}<redacted:{rule.kind}>{text[end:m.end()]}"
    return rule.pattern.subn(replace, text)


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


def _redact_yaml_secret_data(document: str, found: set[str] | None) -> str:
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
                    _found(found, line[indent:])
                    line = line[:indent] + SECRET
                elif entry.group("value") and not _BLOCK_SCALAR.match(entry.group("value")):
                    _found(found, entry.group("value").strip().strip("\"'"))
                    line = f"{entry.group('head')}{entry.group('sep') or ' '}{SECRET}"
        if _DATA_BLOCK_YAML.match(line):
            data_indent, entry_indent = _indent(line), None
        out.append(line)
    return "\n".join(out)


def _found(found: set[str] | None, value: str) -> None:
    if found is not None and not value.startswith(PREFIX):
        found.add(value)


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


def _redact_json_strings(payload: str, found: set[str] | None) -> str:
    """Every string value in a JSON fragment becomes the placeholder; object keys stay readable."""
    def replace(m: re.Match[str]) -> str:
        if m.group("colon") or m.group("s").startswith('"<redacted:'):
            return m.group(0)
        _found(found, m.group("s")[1:-1])
        return f'"{SECRET}"'
    return _JSON_TOKEN.sub(replace, payload)


def _redact_json_secret_payloads(text: str, found: set[str] | None) -> str:
    out, position = [], 0
    for match in _SECRET_PAYLOAD_JSON.finditer(text):
        if match.start() < position:  # inside a payload already redacted
            continue
        end = _json_value_end(text, match.end())
        out.append(text[position:match.end()] + _redact_json_strings(text[match.end():end], found))
        position = end
    return "".join(out) + text[position:]


def _redact_secret_manifests(text: str, found: set[str] | None) -> str:
    if _SECRET_KIND_YAML.search(text):
        documents = re.split(r"(?m)^(---[ \t]*)$", text)
        text = "".join(_redact_yaml_secret_data(d, found) if _SECRET_KIND_YAML.search(d) else d for d in documents)
    if _SECRET_KIND_JSON.search(text):
        text = _redact_json_secret_payloads(text, found)
    return text


def _redact_text(text: str, found: set[str] | None = None) -> str:
    """`redact` without known values; each secret value it removes is added to `found`."""
    text = _redact_secret_manifests(text, found)
    lowered = text.lower()
    for rule in _RULES:
        if _may_match(rule.trigger, text, lowered):
            text, replaced = _apply(rule, text, found)
            if replaced:
                lowered = text.lower()
    return text


@lru_cache(maxsize=64)
def _known_pattern(known: frozenset[str]) -> re.Pattern[str] | None:
    """One scan for every known value, longest first; placeholders are matched (and kept) so that a value that is
    a word of one (`secret`) leaves it whole."""
    if not known:
        return None
    values = "|".join(re.escape(v) for v in sorted(known, key=len, reverse=True))
    return re.compile(rf"<redacted:[a-z_]+>|{values}")


def _redact_known(text: str, pattern: re.Pattern[str] | None) -> str:
    if pattern is None:
        return text
    return pattern.sub(lambda m: m.group(0) if m.group(0).startswith(PREFIX) else SECRET, text)


def redact(text: str, known: frozenset[str] = frozenset()) -> str:
    """Replace secrets, tokens, passwords, card numbers, e-mail and IP addresses in free text by
    `<redacted:KIND>`, and each of the `known` secret values (`incident_secrets`) wherever it appears."""
    return _redact_known(_redact_text(text), _known_pattern(known))


def tracked(found: set[str]) -> frozenset[str]:
    """The secret values worth hunting for in later text: long enough not to be a common word, and their base64
    (how a Secret's manifest and many configs carry them)."""
    values = {v for v in found if len(v) >= MIN_TRACKED_CHARS and PREFIX not in v}
    return frozenset(values | {base64.b64encode(v.encode()).decode() for v in values})


def _redact_all_strings(value: Any, found: set[str] | None) -> Any:
    if isinstance(value, str):
        _found(found, value)
        return value if value.startswith(PREFIX) else SECRET
    if isinstance(value, dict):
        return {k: _redact_all_strings(v, found) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_all_strings(v, found) for v in value]
    return value


def _names_a_secret(d: dict[str, Any]) -> bool:
    """`{"name": "DB_PASSWORD", "value": ...}` (set_env, env entries) or `{"key": "password", "value": ...}`."""
    return any(isinstance(d.get(k), str) and is_secret_key(d[k]) for k in ("name", "key"))


def _is_secret_object(d: dict[str, Any]) -> bool:
    """A Secret itself, or a tool call on one (`set_config_key`/`patch` with kind=secret)."""
    kind = d.get("kind")
    return isinstance(kind, str) and kind.lower() == "secret"


class _Walk:
    """One redaction of a JSON-like value: the text rules (or, with `rules=False`, only the known values) on
    every string, the key-aware rules on every object. `memo` holds text already redacted: a trajectory holds each
    tool output and prompt several times (the conversation, the step, the next decision's messages). `found`
    collects the secret values removed."""

    def __init__(self, known: frozenset[str] = frozenset(), rules: bool = True) -> None:
        self.known, self.rules = _known_pattern(known), rules
        self.memo: dict[str, str] = {}
        self.found: set[str] = set()

    def text(self, text: str) -> str:
        redacted = self.memo.get(text)
        if redacted is None:
            redacted = _redact_text(text, self.found) if self.rules else text
            redacted = self.memo[text] = _redact_known(redacted, self.known)
        return redacted

    def value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.value(v) for v in value]
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
                out[key] = _redact_all_strings(item, self.found)
            else:
                out[key] = self.value(item)
        return out


def redact_data(value: Any, known: frozenset[str] = frozenset()) -> Any:
    """A copy of a JSON-like value (a webhook body) with every string redacted, and each `known` value removed."""
    return _Walk(known).value(value)


def redact_model(model: M, known: frozenset[str] = frozenset()) -> M:
    """A copy of any contract (a reward record, an incident, a notice) with every text field redacted, and each
    `known` secret value removed, re-validated."""
    return type(model).model_validate(redact_data(model.model_dump(mode="python"), known))


def incident_secrets(t: Trajectory) -> frozenset[str]:
    """The secret values the incident's tool calls and outputs revealed (a Secret's data, a `DB_PASSWORD` in an
    env listing, a token in a log): what must not reappear in anything said about the incident afterwards. A pure
    function of the trajectory, so a workflow may call it."""
    walk = _Walk()
    walk.value([s.model_dump(mode="python", include={"decision", "result"}) for s in t.steps])
    return tracked(walk.found)


def redact_trajectory(t: Trajectory) -> Trajectory:
    """A copy of `t` with every text field redacted: conversation, completions, tool calls and outputs, the
    incident's alert and report, diagnosis, summary, verdict reasons, feedback comments; then every secret value
    found anywhere in it is removed everywhere else (a password restated in the diagnosis)."""
    walk = _Walk()
    ruled = walk.value(t.model_dump(mode="python"))
    known = tracked(walk.found)
    if not known:
        return Trajectory.model_validate(ruled)
    redacted = _Walk(known, rules=False).value(ruled)
    try:
        return Trajectory.model_validate(redacted)
    except ValidationError as exc:  # a found value inside an identifier of constrained form (a scenario named after
        for error in exc.errors():  # the name a rule took for a value): that field as the rules left it
            try:
                _put(redacted, error["loc"], _get(ruled, error["loc"]))
            except (KeyError, IndexError, TypeError):  # a location that is no path into the document (a union's tag)
                raise exc from None
        return Trajectory.model_validate(redacted)


def _get(document: Any, path: tuple[int | str, ...]) -> Any:
    for key in path:
        document = document[key]
    return document


def _put(document: Any, path: tuple[int | str, ...], value: Any) -> None:
    _get(document, path[:-1])[path[-1]] = value


def redact_record(record: logging.LogRecord) -> logging.LogRecord:
    """The record with its message (arguments merged in) and its traceback redacted."""
    try:
        message = record.getMessage()
    except (TypeError, ValueError):  # arguments that do not fit the format: logging reports that itself
        return record
    record.msg, record.args = redact(message), None
    if record.exc_info and not record.exc_text:
        record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
    return record


def install_log_redaction() -> None:
    """Redact every log record this process makes, when it is made: whichever handler (a console, a collector)
    or logger (ours, Temporal's workflow and activity loggers, a library's) it goes through, it holds no secret.
    A logger's filter would see only that logger's own records; this sees all. Installing twice is harmless."""
    factory = logging.getLogRecordFactory()
    if getattr(factory, "redacts", False):
        return

    def make(*args: Any, **kwargs: Any) -> logging.LogRecord:
        return redact_record(factory(*args, **kwargs))

    make.redacts = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(make)
