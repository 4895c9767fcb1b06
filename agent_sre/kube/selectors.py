"""Label selectors with the apiserver's semantics: the text syntax, parsed once and matched many times, and
LabelSelector objects, matched directly.

The simulator serves `?labelSelector=` and runs its controllers with them; the health oracle and the faults match
the same objects read from any cluster. Parsing errors raise `ApiError(400)` with the apiserver's wording, so
`kubectl -l 'a in b'` fails the same way against the simulator as against a real cluster.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from agent_sre.kube.errors import ApiError

LabelRequirement = Callable[[Mapping[str, str]], bool]

_TOKEN = re.compile(r"\s*(!=|==|=|\(|\)|,|!|[^\s!=(),]+)")
_KEY = re.compile(r"^([a-z0-9A-Z]([-a-z0-9A-Z_.]*[a-z0-9A-Z])?/)?[a-z0-9A-Z]([-a-z0-9A-Z_.]*[a-z0-9A-Z])?$")


class LabelSelector:
    """A parsed label selector: every requirement must hold (the comma is AND)."""

    def __init__(self, requirements: list[LabelRequirement], text: str) -> None:
        self._requirements = requirements
        self.text = text

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(req(labels) for req in self._requirements)

    @property
    def empty(self) -> bool:
        return not self._requirements


def _tokens(text: str) -> list[str]:
    out, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ApiError(400, "BadRequest", f"unable to parse requirement: invalid label selector {text!r}")
        out.append(m.group(1))
        pos = m.end()
    return out


def _check_key(key: str, text: str) -> str:
    if not _KEY.match(key):
        raise ApiError(400, "BadRequest", f"unable to parse requirement: invalid label key {key!r} in {text!r}")
    return key


def _exists(key: str, want: bool) -> LabelRequirement:
    return lambda labels: (key in labels) == want


def _equals(key: str, value: str, want: bool) -> LabelRequirement:
    return lambda labels: (labels.get(key) == value) == want


def _member(key: str, values: frozenset[str], want: bool) -> LabelRequirement:
    return lambda labels: (labels.get(key) in values) == want


@lru_cache(maxsize=1024)  # selectors repeat (a deployment's, an agent's); a parsed one is never changed
def parse_label_selector(text: str | None) -> LabelSelector:
    """Parse `a=b,c!=d,e in (x,y),f notin (z),g,!h` (the apiserver's set-based syntax)."""
    text = text or ""
    toks, i = _tokens(text), 0
    reqs: list[LabelRequirement] = []

    def bad(why: str) -> ApiError:
        return ApiError(400, "BadRequest", f"unable to parse requirement: {why} in label selector {text!r}")

    while i < len(toks):
        if toks[i] == "!":
            if i + 1 >= len(toks):
                raise bad("missing key after '!'")
            key = _check_key(toks[i + 1], text)
            reqs.append(_exists(key, False))
            i += 2
        else:
            key = _check_key(toks[i], text)
            op = toks[i + 1] if i + 1 < len(toks) else ","
            if op == ",":
                reqs.append(_exists(key, True))
                i += 1
            elif op in ("=", "==", "!="):
                if i + 2 >= len(toks) or toks[i + 2] == ",":
                    value = ""
                    i += 2
                else:
                    value = toks[i + 2]
                    i += 3
                reqs.append(_equals(key, value, op != "!="))
            elif op in ("in", "notin"):
                if i + 2 >= len(toks) or toks[i + 2] != "(":
                    raise bad(f"expected '(' after '{op}'")
                j, values = i + 3, set()
                while j < len(toks) and toks[j] != ")":
                    if toks[j] != ",":
                        values.add(toks[j])
                    j += 1
                if j >= len(toks):
                    raise bad("missing ')'")
                reqs.append(_member(key, frozenset(values), op == "in"))
                i = j + 1
            else:
                raise bad(f"unexpected {op!r} after key {key!r}")
        if i < len(toks):
            if toks[i] != ",":
                raise bad(f"expected ',' but found {toks[i]!r}")
            i += 1
    return LabelSelector(reqs, text)


def selector_to_string(selector: Mapping[str, Any] | None) -> str:
    """Render a LabelSelector object (matchLabels/matchExpressions) in the text syntax, as `Scale.status` does."""
    if not selector:
        return ""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], sorted(expr.get("values") or [])
        if op == "In":
            parts.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
        else:
            raise ApiError(422, "Invalid", f"selector.matchExpressions: unsupported operator {op!r}")
    return ",".join(parts)


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str] | None) -> bool:
    """Does a LabelSelector object select these labels? An empty selector selects everything.

    Evaluated directly (no text round trip): controllers call this for every pod on every sync.
    """
    if not selector:
        return True
    labels = labels or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In":
            ok = labels.get(key) in values
        elif op == "NotIn":
            ok = labels.get(key) not in values
        elif op == "Exists":
            ok = key in labels
        elif op == "DoesNotExist":
            ok = key not in labels
        else:
            raise ApiError(422, "Invalid", f"selector.matchExpressions: unsupported operator {op!r}")
        if not ok:
            return False
    return True


def matches(selector: Mapping[str, object], labels: Mapping[str, str] | None) -> bool:
    """LabelSelector semantics (an empty selector selects everything); the common matchLabels-only case is
    answered without parsing, everything else by `selector_matches`."""
    if not selector.get("matchExpressions"):
        labels = labels or {}
        wanted: Mapping[str, str] = selector.get("matchLabels") or {}  # type: ignore[assignment]
        return all(labels.get(k) == v for k, v in wanted.items())
    return selector_matches(selector, labels)
