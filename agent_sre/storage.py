"""Object storage access (trajectories, model registry) through the MinIO client, against SeaweedFS or MinIO/S3.

This is the one place a client is built, so endpoint, TLS and credential handling cannot drift between callers.
"""

from __future__ import annotations

import urllib3
from minio import Minio
from minio.error import MinioException, S3Error

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


def store_status(settings: Settings, timeout_s: float = 2.0) -> tuple[bool, str]:
    """Whether the object store answers a bucket lookup, and what it said (or why not), in one line: the stack's
    health check, and the warning a worker gives at start (its trajectories would wait in their workflows until the
    store is back, and the CLI that started them says nothing)."""
    from agent_sre.stack.component import short_error  # here: the stack's components import this module

    try:
        exists = object_store(settings, timeout_s=timeout_s).bucket_exists(settings.s3_bucket)
    except S3Error as exc:
        return False, f"{exc.code}: {exc.message}"
    except (MinioException, urllib3.exceptions.HTTPError, OSError) as exc:  # refused, timed out, garbled
        return False, short_error(exc)
    return True, f"bucket {settings.s3_bucket} {'present' if exists else 'missing'}"
