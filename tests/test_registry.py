"""The model registry against the session's real SeaweedFS: versions, weights, stages, errors, and races."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from minio import Minio
from safetensors.torch import save_file
from store_fixtures import fresh_bucket

from agent_sre import cas
from agent_sre.config import Settings
from agent_sre.models.registry import DataItem, RegistryIndex
from agent_sre.models.remediation import PolicyRef
from agent_sre.registry import (
    CorruptVersionError,
    NoWeightsError,
    Registry,
    RegistryError,
    StageError,
    UnknownVersionError,
    VersionExistsError,
)
from agent_sre.storage import object_store

SHA = "a" * 64


@pytest.fixture
def client(s3_store: Settings) -> Minio:
    return object_store(s3_store)


@pytest.fixture
def registry(client: Minio, tmp_path: Path) -> Iterator[Registry]:
    with fresh_bucket(client, "registry") as bucket:
        yield Registry(client, bucket, tmp_path / "cache")


def weights_dir(root: Path, seed: int = 0) -> Path:
    """A small model directory as training writes it: safetensors, a config and a tokenizer in a subfolder."""
    root.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(seed)
    save_file({"lm_head.weight": torch.randn(8, 4, generator=generator)}, str(root / "model.safetensors"))
    (root / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 4}))
    (root / "tokenizer").mkdir(exist_ok=True)
    (root / "tokenizer" / "tokenizer.json").write_text('{"version": "1.0"}')
    return root


def register_llm(registry: Registry, version: str, root: Path, **kw: Any):
    return registry.register(version, policy="llm", by="trainer", weights_dir=weights_dir(root / version), **kw)


def test_an_empty_store_starts_with_the_runbook_in_production(registry: Registry) -> None:
    assert registry.production() == PolicyRef(name="runbook", version="runbook-v1")
    shown = registry.get("runbook-v1")
    assert shown.stage == "production" and shown.card.files == [] and shown.card.policy == "runbook"
    assert [c.to_stage for c in shown.history] == ["production"]


def test_register_upload_and_load_a_version(registry: Registry, tmp_path: Path) -> None:
    manifest = [DataItem(uri="s3://agent-sre/trajectories/date=2026-03-14/", sha256=SHA, rows=120)]
    registered = register_llm(registry, "smol-sft-1", tmp_path, parent="runbook-v1", data_manifest=manifest,
                              training_request={"algorithm": "sft", "epochs": 2})
    assert registered.stage == "candidate"
    card = registered.card
    assert card.parent == "runbook-v1" and card.training_request == {"algorithm": "sft", "epochs": 2}
    assert card.data_manifest == manifest and card.created_by == "trainer"
    assert [f.path for f in card.files] == ["config.json", "model.safetensors", "tokenizer/tokenizer.json"]
    (change,) = registered.history
    assert (change.from_stage, change.to_stage, change.by, change.reason) == (None, "candidate", "trainer",
                                                                              "registered")

    local = registry.local_path("smol-sft-1")
    assert local == tmp_path / "cache" / "smol-sft-1"
    source = tmp_path / "smol-sft-1"
    for f in card.files:
        assert (local / f.path).read_bytes() == (source / f.path).read_bytes()
    assert json.loads((local / "model.json").read_text())["version"] == "smol-sft-1"
    assert not [p for p in local.parent.iterdir() if p.name.endswith(".partial")]

    # The second load is served from the cache: it does not need the files in the store any more.
    for f in card.files:
        registry.client.remove_object(registry.bucket, f"registry/versions/smol-sft-1/files/{f.path}")
    assert registry.local_path("smol-sft-1") == local


def test_versions_are_immutable_and_registration_is_idempotent(registry: Registry, tmp_path: Path) -> None:
    first = register_llm(registry, "smol-1", tmp_path)
    again = registry.register("smol-1", policy="llm", by="someone-else", weights_dir=tmp_path / "smol-1")
    assert again.card == first.card  # a retried registration of the same content
    with pytest.raises(VersionExistsError, match="already registered with different content"):
        registry.register("smol-1", policy="llm", by="trainer", weights_dir=weights_dir(tmp_path / "other", seed=1))


def test_rule_based_policies_are_versions_without_weights(registry: Registry, tmp_path: Path) -> None:
    version = registry.register("runbook-v2", policy="runbook", by="sre", reason="a safer rollback rule")
    assert version.card.policy_ref == PolicyRef(name="runbook", version="runbook-v2")
    with pytest.raises(NoWeightsError, match="runbook-v2 is the rule-based policy 'runbook'"):
        registry.local_path("runbook-v2")
    with pytest.raises(RegistryError, match="rule-based: it takes no weights directory"):
        registry.register("runbook-v3", policy="runbook", by="sre", weights_dir=weights_dir(tmp_path / "w"))
    with pytest.raises(RegistryError, match="needs a weights directory"):
        registry.register("smol-2", policy="llm", by="sre")


def test_unknown_and_badly_named_versions_are_clear_errors(registry: Registry, tmp_path: Path) -> None:
    with pytest.raises(UnknownVersionError, match=r"unknown model version 'nope'; registered: runbook-v1"):
        registry.get("nope")
    with pytest.raises(UnknownVersionError):
        registry.local_path("nope")
    with pytest.raises(UnknownVersionError, match="'ghost'"):
        register_llm(registry, "child", tmp_path, parent="ghost")
    with pytest.raises(ValueError, match="String should match pattern"):
        registry.register("../escape", policy="runbook", by="sre")


@pytest.mark.parametrize("damage", ["card missing", "card garbage", "card of another version"])
def test_a_damaged_card_is_a_corrupt_version(registry: Registry, tmp_path: Path, damage: str) -> None:
    register_llm(registry, "smol-3", tmp_path)
    key = "registry/versions/smol-3/model.json"
    if damage == "card missing":
        registry.client.remove_object(registry.bucket, key)
        expected = "smol-3 is registered but s3://.*/model.json is missing"
    elif damage == "card garbage":
        registry.client.put_object(registry.bucket, key, io.BytesIO(b"{not json"), 9)
        expected = "smol-3: its card is damaged"
    else:
        other = registry.get("runbook-v1").card.model_dump_json().encode()
        registry.client.put_object(registry.bucket, key, io.BytesIO(other), len(other))
        expected = "describes 'runbook-v1', not 'smol-3'"
    with pytest.raises(CorruptVersionError, match=expected):
        registry.get("smol-3")
    with pytest.raises(CorruptVersionError):
        registry.local_path("smol-3")


@pytest.mark.parametrize("damage", ["tampered", "missing"])
def test_damaged_weights_never_reach_the_cache(registry: Registry, tmp_path: Path, damage: str) -> None:
    register_llm(registry, "smol-4", tmp_path)
    key = "registry/versions/smol-4/files/model.safetensors"
    if damage == "tampered":
        registry.client.put_object(registry.bucket, key, io.BytesIO(b"not the weights"), 15)
        expected = "smol-4: file model.safetensors does not match its card"
    else:
        registry.client.remove_object(registry.bucket, key)
        expected = "smol-4: file model.safetensors is missing from s3://"
    with pytest.raises(CorruptVersionError, match=expected):
        registry.local_path("smol-4")
    assert not (tmp_path / "cache" / "smol-4").exists()
    assert list((tmp_path / "cache").iterdir()) == []  # no partial download left behind


def test_a_damaged_index_is_named(registry: Registry) -> None:
    registry.index()
    registry.client.put_object(registry.bucket, "registry/index.json", io.BytesIO(b"[]"), 2)
    with pytest.raises(RegistryError, match="the registry index is damaged"):
        registry.production()


def test_rollout_stages_and_their_history(registry: Registry, tmp_path: Path) -> None:
    register_llm(registry, "smol-a", tmp_path)
    register_llm(registry, "smol-b", tmp_path)
    assert registry.start_canary("smol-a", by="rollout", reason="rollout 1").stage == "canary"
    with pytest.raises(StageError, match="smol-a is already in canary: one rollout at a time"):
        registry.start_canary("smol-b", by="rollout", reason="rollout 2")
    with pytest.raises(StageError, match="in a rollout: promote it with `agent-sre rollout promote --full`"):
        registry.promote("smol-a", by="alice", reason="impatient")
    with pytest.raises(StageError, match="a rollout of smol-a is running"):
        registry.promote("smol-b", by="alice", reason="sidestep")
    with pytest.raises(StageError, match="roll it back with `agent-sre rollout rollback`"):
        registry.rollback(by="alice", reason="oops")

    promoted = registry.promote("smol-a", by="rollout", reason="all steps passed", ending_rollout=True)
    assert promoted.stage == "production"
    assert registry.production() == PolicyRef(name="llm", version="smol-a")
    old = registry.get("runbook-v1")
    assert old.stage == "archived" and old.history[-1].reason == "replaced by smol-a: all steps passed"
    assert [(c.from_stage, c.to_stage) for c in promoted.history] == [(None, "candidate"), ("candidate", "canary"),
                                                                       ("canary", "production")]
    assert promoted.history[1].by == "rollout" and promoted.history[1].reason == "rollout 1"
    assert promoted.history[0].at <= promoted.history[1].at <= promoted.history[2].at

    registry.start_canary("smol-b", by="rollout", reason="rollout 2")
    assert registry.end_canary("smol-b", "rolled_back", by="rollout", reason="harmful").stage == "rolled_back"
    assert registry.end_canary("smol-b", "rolled_back", by="rollout", reason="retried").history[-1].reason == "harmful"
    with pytest.raises(StageError, match="smol-b is rolled_back: only a candidate can start a rollout"):
        registry.start_canary("smol-b", by="rollout", reason="again")

    assert registry.rollback(by="bob", reason="latency regression") == ("smol-a", "runbook-v1")
    assert registry.production().version == "runbook-v1"
    assert registry.get("smol-a").history[-1].by == "bob"
    with pytest.raises(StageError, match="no earlier production version to roll runbook-v1 back to"):
        registry.rollback(by="bob", reason="again")
    with pytest.raises(StageError, match="needs who asks for it and why"):
        registry.promote("smol-a", by="bob", reason=" ")


def _race(n: int, action: Callable[[int], object]) -> list[object]:
    """Run `action(i)` for i in range(n) on n threads released at once; results or exceptions, in order."""
    barrier = threading.Barrier(n)
    results: list[object] = [None] * n

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = action(i)
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_seaweedfs_conditional_writes_let_exactly_one_racer_win(client: Minio) -> None:
    with fresh_bucket(client, "cas") as bucket:
        etag = cas.write(client, bucket, "doc.json", b"{}", None)
        with pytest.raises(cas.WriteConflict):
            cas.write(client, bucket, "doc.json", b"{}", None)  # If-None-Match: * on an existing object
        for round_ in range(3):  # distinct bodies: SeaweedFS ETags are content hashes (see agent_sre.cas)
            def body(i: int, r: int = round_) -> bytes:
                return f'{{"round": {r}, "writer": {i}}}'.encode()

            results = _race(8, lambda i, previous=etag: cas.write(client, bucket, "doc.json", body(i), previous))
            winners = [r for r in results if isinstance(r, str)]
            assert len(winners) == 1, f"round {round_}: {results}"
            assert all(isinstance(r, cas.WriteConflict) for r in results if not isinstance(r, str))
            assert cas.read(client, bucket, "doc.json")[1] == winners[0]
            etag = winners[0]


def test_concurrent_stage_changes_conflict_and_none_is_lost(registry: Registry, tmp_path: Path) -> None:
    versions = [f"smol-r{i}" for i in range(6)]
    for v in versions:
        registry.register(v, policy="runbook", by="trainer")

    starts = _race(6, lambda i: registry.start_canary(versions[i], by=f"op{i}", reason="race"))
    won = [v for v, r in zip(versions, starts, strict=True) if not isinstance(r, Exception)]
    assert len(won) == 1, starts
    assert all(isinstance(r, StageError) and "already in canary" in str(r) for r in starts if isinstance(r, Exception))
    registry.end_canary(won[0], "candidate", by="op", reason="reset")

    # Six promotions at once: each one re-checks the index it replaces, so all land, one after the other.
    promotions = _race(6, lambda i: registry.promote(versions[i], by=f"op{i}", reason="race"))
    assert not [r for r in promotions if isinstance(r, Exception)], promotions
    index: RegistryIndex = registry.index()
    assert len(index.in_stage("production")) == 1
    archived = index.in_stage("archived")
    assert sorted(archived + index.in_stage("production")) == sorted([*versions, "runbook-v1"])
    for v in versions:  # every promotion is in the history: none was overwritten by a concurrent one
        assert any(c.to_stage == "production" and c.by.startswith("op") for c in index.versions[v].history)
