"""The model registry in the object store.

Layout under `registry/` in the configured bucket:

    index.json                          every version's stage and stage history (one object: see agent_sre.cas)
    versions/<version>/model.json       the card, written once with If-None-Match: * (registration claims the name)
    versions/<version>/files/<path>     the weights directory (safetensors, tokenizer, config...)
    versions/<version>/eval/<suite>.json  evaluation results recorded after registration (one per suite)

A version exists once it is in the index, which is written last, so a reader never sees a version whose card
or files are still on their way. The first access of an empty store creates the index with the rule-based
runbook policy ("runbook-v1", no files) in production, which is what serves incidents before any model is
trained.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from minio import Minio

from agent_sre import cas
from agent_sre.config import Settings
from agent_sre.models.episode import OutcomeStats
from agent_sre.models.registry import (
    DataItem,
    EvalRecord,
    IndexEntry,
    ModelCard,
    ModelVersion,
    RegistryIndex,
    Stage,
    StageChange,
)
from agent_sre.models.remediation import PolicyName, PolicyRef
from agent_sre.registry import stages, weights
from agent_sre.registry.errors import CorruptVersionError, NoWeightsError, RegistryError, VersionExistsError
from agent_sre.registry.stages import Why
from agent_sre.storage import object_store

PREFIX = "registry"
BUILTIN_PRODUCTION = PolicyRef(name="runbook", version="runbook-v1")
_CARD_IDENTITY_EXCLUDES = {"created_at", "created_by"}


class Registry:
    def __init__(self, client: Minio, bucket: str, cache_dir: Path, prefix: str = PREFIX) -> None:
        self.client, self.bucket, self.cache_dir, self.prefix = client, bucket, cache_dir, prefix

    @classmethod
    def from_settings(cls, settings: Settings, timeout_s: float | None = None) -> Registry:
        return cls(object_store(settings, timeout_s=timeout_s), settings.s3_bucket, settings.data_dir / "models")

    # --- keys ---------------------------------------------------------------------------------------------------
    @property
    def _index_key(self) -> str:
        return f"{self.prefix}/index.json"

    def _card_key(self, version: str) -> str:
        return f"{self.prefix}/versions/{version}/model.json"

    def _files_prefix(self, version: str) -> str:
        return f"{self.prefix}/versions/{version}/files"

    def _eval_prefix(self, version: str) -> str:
        return f"{self.prefix}/versions/{version}/eval/"

    # --- reading ------------------------------------------------------------------------------------------------
    def index(self) -> RegistryIndex:
        found = self._read_index()
        if found is None:
            self._bootstrap()
            found = self._read_index()
            assert found is not None
        return found

    def _read_index(self) -> RegistryIndex | None:
        try:
            found = cas.read_model(self.client, self.bucket, self._index_key, RegistryIndex)
        except cas.CorruptDocument as exc:
            raise RegistryError(f"the registry index is damaged: {exc}") from exc
        return found[0] if found else None

    def _bootstrap(self) -> None:
        """Create the index with the built-in production policy, unless another process just did."""
        now = datetime.now(UTC)
        builtin = ModelCard(version=BUILTIN_PRODUCTION.version, policy=BUILTIN_PRODUCTION.name, created_at=now,
                            created_by="agent-sre")
        self._put_card(builtin, create_only=False)
        index = RegistryIndex(versions={builtin.version: IndexEntry(
            policy=builtin.policy, stage="production",
            history=[StageChange(from_stage=None, to_stage="production", by="agent-sre",
                                 reason="built-in rule-based policy: production until a model is promoted", at=now)])})
        try:
            cas.write(self.client, self.bucket, self._index_key, index.model_dump_json(indent=1).encode(), None)
        except cas.WriteConflict:
            pass

    def card(self, version: str) -> ModelCard:
        stages.entry(self.index(), version)  # unknown versions fail here, with the list of known ones
        return self._card(version)

    def _card(self, version: str) -> ModelCard:
        key = self._card_key(version)
        try:
            found = cas.read_model(self.client, self.bucket, key, ModelCard)
        except cas.CorruptDocument as exc:
            raise CorruptVersionError(f"{version}: its card is damaged: {exc}") from exc
        if found is None:
            raise CorruptVersionError(f"{version} is registered but s3://{self.bucket}/{key} is missing")
        card = found[0]
        if card.version != version:
            raise CorruptVersionError(f"s3://{self.bucket}/{key} describes {card.version!r}, not {version!r}")
        return card

    def get(self, version: str) -> ModelVersion:
        e = stages.entry(self.index(), version)
        return ModelVersion(card=self._card(version), stage=e.stage, history=e.history)

    def production(self) -> PolicyRef:
        """The policy that serves incidents when no rollout splits the traffic."""
        index = self.index()
        current = index.in_stage("production")
        if len(current) != 1:
            raise RegistryError(f"the registry has {len(current)} production versions ({', '.join(current)}); "
                                "it needs exactly one")
        return PolicyRef(name=index.versions[current[0]].policy, version=current[0])

    def policy_ref(self, version: str) -> PolicyRef:
        return PolicyRef(name=stages.entry(self.index(), version).policy, version=version)

    # --- registering --------------------------------------------------------------------------------------------
    def register(self, version: str, *, policy: PolicyName, by: str, weights_dir: Path | None = None,
                 parent: str | None = None, training_request: dict[str, Any] | None = None,
                 data_manifest: Iterable[DataItem] = (), eval_results: dict[str, list[OutcomeStats]] | None = None,
                 reason: str = "registered") -> ModelVersion:
        """Upload a version as a candidate. The LLM policy needs a weights directory; rule-based policies have none.

        Registering the same content again (a retried activity) returns the registered version; different content
        under a taken name is refused: versions are immutable."""
        if (policy == "llm") != (weights_dir is not None):
            raise RegistryError(f"policy {policy!r} " + ("needs a weights directory" if policy == "llm"
                                                          else "is rule-based: it takes no weights directory"))
        if parent is not None:
            stages.entry(self.index(), parent)
        card = ModelCard(version=version, policy=policy, parent=parent, training_request=training_request,
                         data_manifest=list(data_manifest), eval_results=eval_results or {},
                         files=weights.manifest(weights_dir) if weights_dir is not None else [],
                         created_at=datetime.now(UTC), created_by=by)
        if version in self.index().versions:
            return self._registered_again(card)
        try:
            self._put_card(card, create_only=True)
        except cas.WriteConflict:
            card = self._resume(card)  # a registration of the same content was interrupted: finish it
        if weights_dir is not None:
            weights.upload(self.client, self.bucket, self._files_prefix(version), weights_dir, card.files)
        why = Why(by, reason, datetime.now(UTC))

        def add(index: RegistryIndex | None) -> RegistryIndex:
            index = _present(index)
            if version in index.versions:
                raise VersionExistsError(f"{version} was registered by someone else meanwhile")
            index.versions[version] = IndexEntry(policy=policy, stage="candidate", history=[StageChange(
                from_stage=None, to_stage="candidate", by=why.by, reason=why.reason, at=why.at)])
            return index

        self._update(add)
        return self.get(version)

    def _put_card(self, card: ModelCard, create_only: bool) -> None:
        body = card.model_dump_json(indent=1).encode()
        key = self._card_key(card.version)
        if create_only:
            cas.write(self.client, self.bucket, key, body, None)
        else:
            self.client.put_object(self.bucket, key, io.BytesIO(body), len(body), content_type="application/json")

    def _registered_again(self, card: ModelCard) -> ModelVersion:
        existing = self.get(card.version)
        if _same_content(existing.card, card):
            return existing
        raise VersionExistsError(f"{card.version} is already registered with different content; versions are "
                                 "immutable: register under a new version name")

    def _resume(self, card: ModelCard) -> ModelCard:
        stored = self._card(card.version)
        if not _same_content(stored, card):
            raise VersionExistsError(f"an unfinished registration of {card.version} with different content holds "
                                     "the name; register under a new version name")
        return stored

    # --- stage changes ------------------------------------------------------------------------------------------
    def _update(self, change: Callable[[RegistryIndex | None], RegistryIndex | None]) -> RegistryIndex:
        self.index()  # bootstrap first, so `change` always gets an index
        updated = cas.update_model(self.client, self.bucket, self._index_key, RegistryIndex, change)
        assert updated is not None
        return updated

    def start_canary(self, version: str, *, by: str, reason: str) -> ModelVersion:
        why = Why(by, reason, datetime.now(UTC))
        self._update(lambda index: stages.start_canary(_present(index), version, why))
        return self.get(version)

    def end_canary(self, version: str, to: Stage, *, by: str, reason: str) -> ModelVersion:
        why = Why(by, reason, datetime.now(UTC))
        self._update(lambda index: stages.end_canary(_present(index), version, to, why))
        return self.get(version)

    def promote(self, version: str, *, by: str, reason: str, ending_rollout: bool = False) -> ModelVersion:
        why = Why(by, reason, datetime.now(UTC))
        self._update(lambda index: stages.promote(_present(index), version, why, ending_rollout))
        return self.get(version)

    def archive(self, version: str, *, by: str, reason: str) -> ModelVersion:
        why = Why(by, reason, datetime.now(UTC))
        self._update(lambda index: stages.archive(_present(index), version, why))
        return self.get(version)

    def rollback(self, *, by: str, reason: str) -> tuple[str, str]:
        """Production → rolled_back, and the version it replaced back to production. Returns (from, to)."""
        why = Why(by, reason, datetime.now(UTC))
        moved: list[tuple[str, str]] = []

        def change(index: RegistryIndex | None) -> RegistryIndex:
            updated, old, new = stages.rollback(_present(index), why)
            moved[:] = [(old, new)]
            return updated

        self._update(change)
        return moved[0]

    # --- evaluation results ------------------------------------------------------------------------------------
    def record_eval(self, version: str, suite: str, rows: list[OutcomeStats]) -> None:
        """Store a version's results on a suite (replacing earlier results on the same suite id)."""
        stages.entry(self.index(), version)
        body = EvalRecord(suite=suite, rows=rows, recorded_at=datetime.now(UTC)).model_dump_json(indent=1).encode()
        self.client.put_object(self.bucket, f"{self._eval_prefix(version)}{suite}.json", io.BytesIO(body), len(body),
                               content_type="application/json")

    def eval_results(self, version: str) -> dict[str, list[OutcomeStats]]:
        """Suite id -> rows: the card's results at registration, then those recorded since."""
        results = dict(self.card(version).eval_results)
        for obj in self.client.list_objects(self.bucket, prefix=self._eval_prefix(version)):
            try:
                found = cas.read_model(self.client, self.bucket, obj.object_name, EvalRecord)
            except cas.CorruptDocument as exc:
                raise CorruptVersionError(f"{version}: stored evaluation results are damaged: {exc}") from exc
            if found is not None:
                results[found[0].suite] = found[0].rows
        return results

    # --- weights ------------------------------------------------------------------------------------------------
    def local_path(self, version: str) -> Path:
        """The version's weights as a local directory (`cache_dir/<version>`), downloaded and verified on first use.
        Usable as the LLM policy's version resolver."""
        card = self.card(version)
        if not card.files:
            raise NoWeightsError(f"{version} is the rule-based policy {card.policy!r}: it has no weights to load")
        target = self.cache_dir / version
        card_json = card.model_dump_json(indent=1)
        if weights.is_cached(target, card_json):
            return target
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        return weights.download(self.client, self.bucket, self._files_prefix(version), card.files, target, card_json,
                                version)


def _present(index: RegistryIndex | None) -> RegistryIndex:
    if index is None:
        raise RegistryError("the registry index disappeared during a stage change")
    return index


def _same_content(a: ModelCard, b: ModelCard) -> bool:
    return a.model_dump(exclude=_CARD_IDENTITY_EXCLUDES) == b.model_dump(exclude=_CARD_IDENTITY_EXCLUDES)
