"""The model registry: versions (weights + card) in the object store, with atomic, recorded stage changes."""

from agent_sre.registry.errors import (
    CorruptVersionError,
    NoWeightsError,
    RegistryError,
    StageError,
    UnknownVersionError,
    VersionExistsError,
)
from agent_sre.registry.store import BUILTIN_PRODUCTION, Registry

__all__ = [
    "BUILTIN_PRODUCTION",
    "CorruptVersionError",
    "NoWeightsError",
    "Registry",
    "RegistryError",
    "StageError",
    "UnknownVersionError",
    "VersionExistsError",
]
