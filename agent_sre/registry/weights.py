"""A version's weights directory in the object store, and its verified copy in the local download cache."""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from pathlib import Path

from minio import Minio
from minio.error import S3Error

from agent_sre.models.registry import FileEntry
from agent_sre.registry.errors import CorruptVersionError, RegistryError


def sha256_of(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def manifest(directory: Path) -> list[FileEntry]:
    """Every file under `directory` (recursively), with its hash and size, in path order."""
    if not directory.is_dir():
        raise RegistryError(f"{directory} is not a directory")
    files = sorted(p for p in directory.rglob("*") if p.is_file())
    if not files:
        raise RegistryError(f"{directory} holds no files: a model version needs its weights")
    return [FileEntry(path=p.relative_to(directory).as_posix(), sha256=sha256_of(p), bytes=p.stat().st_size)
            for p in files]


def upload(client: Minio, bucket: str, prefix: str, directory: Path, files: list[FileEntry]) -> None:
    """Each file under `prefix/`; the MinIO client switches to multipart uploads for big weights on its own."""
    for f in files:
        client.fput_object(bucket, f"{prefix}/{f.path}", str(directory / f.path))


def download(client: Minio, bucket: str, prefix: str, files: list[FileEntry], target: Path, card_json: str,
             version: str) -> Path:
    """Fetch into a private temporary directory, check every hash, then move it into place in one rename, so the
    cache never holds a half-downloaded version. `card_json` is written last, as `model.json`: a cache directory
    whose `model.json` equals the registered card is complete."""
    partial = target.parent / f".{target.name}.{uuid.uuid4().hex[:8]}.partial"
    try:
        for f in files:
            dest = partial / f.path
            key = f"{prefix}/{f.path}"
            try:
                client.fget_object(bucket, key, str(dest))
            except S3Error as exc:
                if exc.code == "NoSuchKey":
                    raise CorruptVersionError(f"{version}: file {f.path} is missing from s3://{bucket}/{key}") from exc
                raise
            size, digest = dest.stat().st_size, sha256_of(dest)
            if (size, digest) != (f.bytes, f.sha256):
                raise CorruptVersionError(f"{version}: file {f.path} does not match its card (sha256 {digest[:12]}… "
                                          f"{size} bytes, registered {f.sha256[:12]}… {f.bytes} bytes)")
        (partial / "model.json").write_text(card_json)
        if target.exists():  # a stale or damaged copy: the registered card differs from its model.json
            shutil.rmtree(target)
        try:
            os.replace(partial, target)
        except OSError:
            if not is_cached(target, card_json):  # else another process finished the same download first
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target


def is_cached(target: Path, card_json: str) -> bool:
    marker = target / "model.json"
    return marker.is_file() and marker.read_text() == card_json
