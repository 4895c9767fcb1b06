"""model.v1 and the registry index: what a registered model version is, and where it stands.

A version's card (`model.json`) is written once, at registration, and never changes. Its stage and stage history
live in one registry index object, so a change that moves two versions at once (a promotion archives the old
production) is a single atomic write.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from agent_sre.models.episode import OutcomeStats
from agent_sre.models.remediation import PolicyName, PolicyRef

Stage = Literal["candidate", "canary", "production", "rolled_back", "archived"]

# No '/' (a version is one object-store key segment and one cache directory name) and no leading dot.
VERSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$"
SHA256_PATTERN = r"^[0-9a-f]{64}$"


class FileEntry(BaseModel):
    """One file of a version's weights directory (safetensors, tokenizer, config...)."""

    path: str = Field(description="relative POSIX path inside the version directory")
    sha256: str = Field(pattern=SHA256_PATTERN)
    bytes: int = Field(ge=0)

    @field_validator("path")
    @classmethod
    def _inside(cls, path: str) -> str:
        """A card is read from the store: a path must not lead a download outside the version's directory."""
        parts = path.split("/")
        if not path or path.startswith("/") or "\\" in path or any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"{path!r} is not a plain relative path")
        return path


class DataItem(BaseModel):
    """One input of the training run, pinned by its hash so the data a version saw can be checked later."""

    uri: str
    sha256: str = Field(pattern=SHA256_PATTERN)
    bytes: int | None = Field(default=None, ge=0)
    rows: int | None = Field(default=None, ge=0)


class ModelCard(BaseModel):
    """`model.json`: everything about a version that does not change after registration."""

    schema_version: Literal["model.v1"] = "model.v1"
    version: str = Field(pattern=VERSION_PATTERN)
    policy: PolicyName = Field(description="which policy serves it; rule-based policies are versions without files")
    parent: str | None = Field(default=None, description="the version it was trained from")
    training_request: dict[str, Any] | None = Field(default=None, description="training.request.v1, as submitted")
    data_manifest: list[DataItem] = Field(default_factory=list)
    eval_results: dict[str, list[OutcomeStats]] = Field(default_factory=dict, description="suite name -> rows")
    files: list[FileEntry] = Field(default_factory=list, description="the weights directory; empty for rules")
    created_at: datetime
    created_by: str = Field(min_length=1)

    @property
    def policy_ref(self) -> PolicyRef:
        return PolicyRef(name=self.policy, version=self.version)


class EvalRecord(BaseModel):
    """A version's results on one evaluation suite, stored beside its card after registration (the card is
    immutable, and a version is evaluated again on new suites)."""

    suite: str = Field(pattern=VERSION_PATTERN, description="suite id: name and fingerprint of scenarios/settings")
    rows: list[OutcomeStats]
    recorded_at: datetime


class StageChange(BaseModel):
    """Who moved a version to which stage, when, and why."""

    from_stage: Stage | None = Field(description="None when the version was registered")
    to_stage: Stage
    by: str = Field(min_length=1)
    reason: str = Field(min_length=1)
    at: datetime


class IndexEntry(BaseModel):
    policy: PolicyName
    stage: Stage
    history: list[StageChange]


class RegistryIndex(BaseModel):
    """The single object whose compare-and-swap makes every stage change atomic."""

    schema_version: Literal["registry.index.v1"] = "registry.index.v1"
    versions: dict[str, IndexEntry] = Field(default_factory=dict)

    def in_stage(self, stage: Stage) -> list[str]:
        return [v for v, e in self.versions.items() if e.stage == stage]


class ModelVersion(BaseModel):
    """A version as `models show` presents it: its card, its stage and how it got there."""

    card: ModelCard
    stage: Stage
    history: list[StageChange]

    @property
    def version(self) -> str:
        return self.card.version
