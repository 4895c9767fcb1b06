"""What can go wrong with the model registry, each with a message that says what to do about it."""

from __future__ import annotations


class RegistryError(Exception):
    """Base class: any refusal or failure of the model registry."""


class UnknownVersionError(RegistryError, LookupError):
    """No version of that name is registered."""


class CorruptVersionError(RegistryError):
    """A registered version's stored card or files are missing, unreadable or do not match their hashes."""


class VersionExistsError(RegistryError):
    """A version of that name is already registered (versions are immutable: register a new one)."""


class StageError(RegistryError):
    """The stage change is not allowed from where the registry stands now."""


class NoWeightsError(RegistryError):
    """The version is a rule-based policy: there is nothing to download."""
