"""The error an API server answers a refused request with, for code that plays the server's part.

The simulator raises it and serves it as a Kubernetes `Status`; the label-selector parser (`kube.selectors`)
raises it with the apiserver's wording, so a bad selector fails the same way wherever it is parsed.
"""

from __future__ import annotations


class ApiError(Exception):
    """A refusal as a `Status` object carries it: HTTP code, reason (`NotFound`, `Invalid`...) and message."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
