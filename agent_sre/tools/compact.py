"""Tool output that keeps the evidence and drops the repetition: a small model reads every token of it.

Logs: lines that differ only in their numbers (timestamps, addresses, ids, durations) are said once, at the newest
of them, with how many there were (error and warning lines: their newest three, so a repeated failure still reads
as one); an HTTP status that is an error (4xx, 5xx) is not just a number, so error lines stay apart from the
successful ones. Indented lines (stack frames, a traceback's context) stay as they are.

Events: routine Normal events (a pod scheduled, its image pulled, its container created and started, a
ReplicaSet creating or deleting a pod) are counted, not listed; warnings and everything else stay. Pod UIDs in
messages (`pod cart-x_shop(6f1c...)`) are dropped: the pod's name says which pod; so is containerd's restating of the
image a pull failed for (`failed to pull and unpack image "X": failed to resolve reference "X": `), which the
kubelet's `Failed to pull image "X"` already names, so that the registry's answer (`401 Unauthorized`, `not found`)
fits the line.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

ROUTINE_REASONS = frozenset({"Scheduled", "Pulling", "Pulled", "Created", "Started", "SuccessfulCreate",
                             "SuccessfulDelete"})
_ERROR_STATUS = re.compile(r"\b([45])\d\d\b")
_NUMBERS = re.compile(r"\b(?=[0-9a-f]*\d)[0-9a-f]{8,}\b|\d+")
EVIDENCE = re.compile(r"(?i)\b(?:error|err|fatal|panic|exception|traceback|warn(?:ing)?|fail(?:ed|ure|ing)?|refused|"
                      r"timed out|timeout|killed|oom\w*)\b")
ALIKE_ERRORS_KEPT = 3  # of error and warning lines alike but for their numbers, the newest ones shown
SHAPES_KEPT = 8192  # log lines whose shape is remembered
_PULL_RESTATED = re.compile(r'failed to pull and unpack image "[^"]*": failed to resolve reference "[^"]*": ')
_POD_UID = re.compile(r"_[a-z0-9][-a-z0-9]*\([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\)")


@lru_cache(maxsize=SHAPES_KEPT)
def _shape(line: str) -> str:
    """The line with its numbers masked, an HTTP error status kept as its class (remembered: the regular
    expressions cost about 10 us a line, and episodes of one scenario read the same lines again)."""
    return _NUMBERS.sub("#", _ERROR_STATUS.sub(lambda m: "E4xx" if m[1] == "4" else "E5xx", line))


def _structural(line: str) -> bool:
    """Part of a multi-line message (a stack frame, a blank line): only ever collapsed with an identical twin."""
    return not line.strip() or line[0].isspace()


def compact_log(text: str) -> str:
    """`text`'s lines in order, each group of lines alike but for their numbers said by its newest line (its newest
    three for errors and warnings, so that a repeated failure still reads as one), with `(xN)` (N identical lines)
    or `(xN similar)` after the last one kept."""
    lines = text.split("\n")
    keys = [line if _structural(line) else _shape(line) for line in lines]
    counts = Counter(keys)
    seen: Counter[str] = Counter()
    variants: dict[str, set[str]] = {}
    for line, key in zip(lines, keys, strict=True):
        if counts[key] > 1:
            variants.setdefault(key, set()).add(line)
    out: list[str] = []
    for line, key in zip(lines, keys, strict=True):
        seen[key] += 1
        n = counts[key]
        if n == 1:
            out.append(line)
        elif _structural(line):
            if not out or out[-1] != line:  # a run of identical frames or blank lines is one
                out.append(line)
        elif seen[key] == n:
            out.append(f"{line} (x{n})" if len(variants[key]) == 1 else f"{line} (x{n} similar)")
        elif n - seen[key] < ALIKE_ERRORS_KEPT and EVIDENCE.search(line) and len(variants[key]) > 1:
            out.append(line)
    return "\n".join(out)


def event_message(message: Any) -> str:
    """An event's message on one line, without the pod UIDs the kubelet puts in some or containerd's restated
    image reference."""
    return _PULL_RESTATED.sub("", _POD_UID.sub("", str(message))).replace("\n", " ")


def routine(event: Mapping[str, Any]) -> bool:
    return event.get("type") == "Normal" and event.get("reason") in ROUTINE_REASONS


def routine_note(events: Iterable[Mapping[str, Any]]) -> str:
    """`+5 routine Normal events not shown`, or "" when there are none."""
    total = sum(1 for e in events if routine(e))
    return f"+{total} routine Normal event{'s' if total > 1 else ''} not shown" if total else ""
