"""Temporal workflows: deterministic, short, reading like their state diagrams. I/O lives in activities."""

from collections.abc import Sequence

from pydantic import ValidationError

# An input that does not validate (hand-written JSON given to `temporal workflow start`, a client on another
# schema) fails the workflow with pydantic's reasons, field by field. Without this the SDK fails the workflow task
# instead ("Failed decoding arguments"), and the server retries that task for as long as the workflow may run.
BAD_INPUT: Sequence[type[BaseException]] = (ValidationError,)
