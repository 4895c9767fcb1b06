"""One way to tell a user what was wrong with their input, from pydantic's own errors."""

from __future__ import annotations

from pydantic import ValidationError


def explain(exc: ValidationError, root: str = "input") -> str:
    """`loc: msg; loc: msg`, without the offending values (they may hold secrets). `root` names an error
    about the whole document rather than one field."""
    return "; ".join(f"{'.'.join(str(p) for p in err['loc']) or root}: {err['msg']}" for err in exc.errors())
