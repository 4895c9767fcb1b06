"""Compare-and-swap on one object-store object, with S3 conditional writes (If-Match / If-None-Match).

The registry index and the routing table are read-modify-write documents with more than one possible writer
(two operators, a retried activity). Each write carries the ETag it read, and the store refuses it if the object
changed since, so no update is ever lost. Checked against the embedded SeaweedFS (4.x): a PUT with a stale
If-Match or with If-None-Match: * on an existing key answers 412 PreconditionFailed, and of 8 concurrent PUTs
with the same If-Match exactly one wins (`tests/test_registry.py` races it). SeaweedFS evaluates the condition
under its per-object write lock for single-part PUTs only, not when completing a multipart upload, so these
documents are always sent in one PUT (they are kilobytes). Its ETags are MD5s of the content, so a write whose
bytes equal the current ones also matches an older read of those same bytes; that is harmless here, since the
state such a writer checked is exactly the state it replaces. Under contention SeaweedFS makes losers wait for
its object lock (about a second each), so CAS suits rarely written documents, which these are.

minio-py has no public argument for these headers on PutObject; `_put_object` is the single-request PUT that
`put_object` itself uses, called here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from minio import Minio
from minio.error import S3Error
from pydantic import BaseModel, ValidationError

T = TypeVar("T", bound=BaseModel)
CONFLICT_CODES = {"PreconditionFailed", "ConditionalRequestConflict"}  # AWS uses the second for racing writes


class WriteConflict(Exception):
    """The object changed (or appeared) since it was read: re-read and try again."""


class CorruptDocument(ValueError):
    """The stored object is not the document it should be."""


def read(client: Minio, bucket: str, key: str) -> tuple[bytes, str] | None:
    """The object's body and ETag from one GET, or None when there is no such object."""
    try:
        response = client.get_object(bucket, key)
    except S3Error as exc:
        if exc.code == "NoSuchKey":
            return None
        raise
    try:
        return response.read(), response.headers.get("ETag", "").strip('"')
    finally:
        response.close()
        response.release_conn()


def write(client: Minio, bucket: str, key: str, body: bytes, etag: str | None,
          content_type: str = "application/json") -> str:
    """Write `body` only if the object still has `etag` (None: only if it does not exist). Returns the new ETag;
    raises WriteConflict when the condition does not hold."""
    condition = {"If-None-Match": "*"} if etag is None else {"If-Match": f'"{etag}"'}
    try:
        result = client._put_object(bucket, key, body, headers={"Content-Type": content_type, **condition})
    except S3Error as exc:
        if exc.code in CONFLICT_CODES:
            raise WriteConflict(f"s3://{bucket}/{key} changed while it was being updated") from exc
        raise
    return result.etag or ""  # as `read`: an answer without an ETag matches no later condition


def read_model(client: Minio, bucket: str, key: str, model: type[T]) -> tuple[T, str] | None:
    """A JSON document parsed as `model`, with its ETag; None when absent. A bad document is a CorruptDocument."""
    found = read(client, bucket, key)
    if found is None:
        return None
    body, etag = found
    try:
        return model.model_validate_json(body), etag
    except ValidationError as exc:
        raise CorruptDocument(f"s3://{bucket}/{key} is not a valid {model.__name__}: {exc}") from exc


def update_model(client: Minio, bucket: str, key: str, model: type[T], change: Callable[[T | None], T | None],
                 attempts: int = 20) -> T | None:
    """Optimistic read-modify-write: `change` gets the current document (None when absent) and returns the new
    one, or None to leave it as it is. On a conflict the document is re-read and `change` runs again on it, so
    its checks always see the state the write replaces. Returns what is stored afterwards."""
    for _ in range(attempts):
        found = read_model(client, bucket, key, model)
        current, etag = found if found is not None else (None, None)
        updated = change(current.model_copy(deep=True) if current is not None else None)
        if updated is None:
            return current
        try:
            write(client, bucket, key, updated.model_dump_json(indent=1).encode(), etag)
        except WriteConflict:
            continue
        return updated
    raise WriteConflict(f"s3://{bucket}/{key}: still changing after {attempts} attempts; try again")
