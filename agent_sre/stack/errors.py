"""Errors the embedded stack raises. Each message says what went wrong and what to do about it."""

from __future__ import annotations


class StackError(Exception):
    """Base class: the CLI prints these as one clear line (or a few) instead of a traceback."""


class BinaryNotFoundError(StackError):
    """A server binary (temporal, weed, agent-sre) is not installed where we look for it."""


class PortInUseError(StackError):
    """A port a component needs is already bound by another process."""


class ComponentStartError(StackError):
    """A component exited during startup or did not answer before the timeout."""
