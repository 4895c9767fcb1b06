"""Temporal workflows: deterministic, short, reading like their state diagrams. I/O lives in activities."""

from collections.abc import Sequence

from pydantic import ValidationError
from temporalio.exceptions import ApplicationError

# An input that does not validate (hand-written JSON given to `temporal workflow start`) fails an incident workflow
# with pydantic's reasons, field by field. Without this the SDK fails the workflow task instead ("Failed decoding
# arguments"), and the server retries that task for as long as the workflow may run. It applies to every payload
# the workflow decodes, activity results too, so only the short incident workflows take it: a week-long rollout or
# a learning cycle meeting an activity result it cannot read (a worker of another version) should wait, its task
# retried, for a worker that can, not fail.
BAD_INPUT: Sequence[type[BaseException]] = (ValidationError,)


def refusal(reason: str) -> ApplicationError:
    """What an update validator raises to refuse a control: `reason` reaches the caller, marked non-retryable, as
    the same control would be refused again (any other exception reaches it marked retryable)."""
    return ApplicationError(reason, type="Refused", non_retryable=True)
