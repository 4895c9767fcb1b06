"""A bucket of its own per test, for tests whose code reads the bucket from the settings (activities do)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from minio import Minio

from agent_sre.config import Settings, get_settings
from agent_sre.storage import ensure_bucket, object_store


@contextmanager
def fresh_bucket(client: Minio, prefix: str) -> Iterator[str]:
    name = f"{prefix}-{uuid.uuid4().hex[:12]}"
    ensure_bucket(client, name)
    try:
        yield name
    finally:
        for obj in client.list_objects(name, recursive=True):
            client.remove_object(name, obj.object_name)
        client.remove_bucket(name)


@contextmanager
def settings_with_own_bucket(settings: Settings, prefix: str) -> Iterator[Settings]:
    """`get_settings()` (what activities read) names a fresh bucket until the block ends."""
    with fresh_bucket(object_store(settings), prefix) as bucket, pytest.MonkeyPatch.context() as env:
        env.setenv("AGENT_SRE_S3_BUCKET", bucket)
        get_settings.cache_clear()
        try:
            yield get_settings()
        finally:
            get_settings.cache_clear()
