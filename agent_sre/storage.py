"""Object storage access (trajectories, model registry) through the MinIO client, against SeaweedFS or MinIO/S3.

This is the one place a client is built, so endpoint, TLS and credential handling cannot drift between callers.
"""

from __future__ import annotations

import urllib3
from minio import Minio
from minio.error import S3Error

from agent_sre.config import Settings


def object_store(settings: Settings, *, timeout_s: float | None = None) -> Minio:
    """A client for `settings.s3_endpoint` with the configured keys.

    With `timeout_s`, requests fail fast instead of retrying (health checks); without it, the MinIO client's own
    retrying HTTP pool is used (bulk transfers).
    """
    http_client = None
    if timeout_s is not None:
        http_client = urllib3.PoolManager(timeout=urllib3.Timeout(connect=timeout_s, read=timeout_s), retries=False)
    return Minio(
        settings.s3_endpoint,
        access_key=settings.s3_access_key,
        secret_key=settings.s3_secret_key,
        secure=settings.s3_secure,
        http_client=http_client,
    )


def ensure_bucket(client: Minio, bucket: str) -> bool:
    """Create `bucket` unless it exists; True when this call created it. Safe to race with another creator."""
    if client.bucket_exists(bucket):
        return False
    try:
        client.make_bucket(bucket)
    except S3Error as exc:
        if exc.code in {"BucketAlreadyOwnedByYou", "BucketAlreadyExists"}:
            return False
        raise
    return True


def store_unreachable(settings: Settings, timeout_s: float = 2.0) -> str | None:
    """Why the object store does not answer a bucket lookup, or None when it does. A worker warns at start: its
    trajectories would wait in their workflows until the store is back, and the CLI that started them says nothing."""
    try:
        object_store(settings, timeout_s=timeout_s).bucket_exists(settings.s3_bucket)
    except (urllib3.exceptions.HTTPError, S3Error, OSError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None
