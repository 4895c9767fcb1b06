"""One way to tell a user what was wrong with their input, from pydantic's own errors."""

from __future__ import annotations

from pydantic import ValidationError
from pydantic_core import ErrorDetails


def explain(exc: ValidationError, root: str = "input") -> str:
    """`loc: msg; loc: msg`, without the offending values (they may hold secrets). `root` names an error
    about the whole document rather than one field."""
    return "; ".join(f"{'.'.join(str(p) for p in err['loc']) or root}: {_message(err)}" for err in exc.errors())


def _message(err: ErrorDetails) -> str:
    """Pydantic's message, but a validator's own words without its "Value error, " prefix."""
    if err["type"] == "value_error" and "error" in err.get("ctx", {}):
        return str(err["ctx"]["error"])
    return err["msg"]
