"""Text building blocks for kubectl-like output: aligned tables, ages, labels, and length bounds.

Everything a tool returns is read by a language model with a finite context, so output is cleaned of control
characters (cluster data is untrusted: a log line may carry terminal escapes) and clipped to a budget with a
marker that says what was cut and how to see less.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

NONE = "<none>"
_CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|[\x00-\x08\x0b-\x1f\x7f]")


def clean(text: str) -> str:
    """Drop terminal escapes and control characters (tabs and newlines stay)."""
    return text if text.isprintable() else _CONTROL.sub("", text)  # most cells have neither


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Columns padded to their widest cell, separated by three spaces, as `kubectl get` prints them."""
    cells = [list(headers), *([clean(str(c)) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def labels(mapping: Mapping[str, str] | None, sep: str = ",") -> str:
    return sep.join(f"{k}={v}" for k, v in sorted((mapping or {}).items())) or NONE


def selector(sel: Mapping[str, Any] | None) -> str:
    """A label selector as kubectl prints it: `app=cart,tier in (backend,web)`; `<none>` when it selects all."""
    sel = sel or {}
    parts = [f"{k}={v}" for k, v in sorted((sel.get("matchLabels") or {}).items())]
    for e in sel.get("matchExpressions") or []:
        op, values = str(e.get("operator", "")), ",".join(sorted(map(str, e.get("values") or [])))
        parts.append({"In": f"{e.get('key')} in ({values})", "NotIn": f"{e.get('key')} notin ({values})",
                      "Exists": str(e.get("key")), "DoesNotExist": f"!{e.get('key')}"}.get(op, f"{e.get('key')} {op}"))
    return ",".join(parts) or NONE


def clip(text: str, max_chars: int, keep: str = "head") -> str:
    """Bound `text` to `max_chars`, cutting at line ends; `keep="tail"` keeps the newest lines (logs, events)."""
    if len(text) <= max_chars:
        return text
    lines = text.split("\n")
    budget = max(max_chars - 80, 40)
    kept: list[str] = []
    used = 0
    for line in (lines if keep == "head" else reversed(lines)):
        if used + len(line) + 1 > budget:
            if not kept:  # one enormous line: keep a slice of it
                kept.append(line[:budget] if keep == "head" else line[-budget:])
            break
        kept.append(line)
        used += len(line) + 1
    dropped = len(lines) - len(kept)
    if keep == "head":
        return "\n".join(kept) + (f"\n... [truncated: {dropped} more lines; "
                                  "ask for less, e.g. a selector or a smaller tail]")
    return f"[truncated: {dropped} earlier lines not shown]\n" + "\n".join(reversed(kept))


def fit(head: str, tail: str, max_chars: int) -> str:
    """Join a description and its events within `max_chars`: events keep up to half, newest first."""
    if len(head) + len(tail) + 1 <= max_chars:
        return f"{head}\n{tail}" if tail else head
    tail_part = clip(tail, max(max_chars // 2, max_chars - len(head) - 1), keep="tail") if tail else ""
    return clip(head, max_chars - len(tail_part) - 1) + ("\n" + tail_part if tail_part else "")
