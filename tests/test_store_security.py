"""The dev store answers only the S3 client with our keys: every other port SeaweedFS opens refuses anonymous
reads and writes (its HTTP APIs are off or want a JWT, its gRPC ports want our client certificate)."""

from __future__ import annotations

import io
import os
import socket
import ssl
import stat
import urllib.error
import urllib.request
from pathlib import Path

from agent_sre.config import Settings
from agent_sre.stack.component import data_dir
from agent_sre.stack.seaweedfs import SeaweedS3
from agent_sre.storage import object_store

HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes.fromhex("000000040000000000")  # + an empty SETTINGS
FID = "1,01637037d6"  # a file id as the master hands them out: volume 1, key 1, cookie


def _anonymous(method: str, url: str, body: bytes | None = None) -> int:
    """The HTTP status an anonymous request gets (the body is a multipart upload when given)."""
    headers = {}
    if body is not None:
        boundary = "agent-sre-intruder"
        body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x\"\r\n\r\n".encode()
                + body + f"\r\n--{boundary}--\r\n".encode())
        headers["Content-Type"] = f"multipart/form-data; boundary={boundary}"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=body, method=method, headers=headers),
                                    timeout=10) as reply:
            return reply.status
    except urllib.error.HTTPError as e:
        return e.code


def _http_ports(settings: Settings) -> dict[str, int]:
    return {"master": settings.seaweedfs_master_port, "volume": settings.seaweedfs_volume_port,
            "filer": settings.seaweedfs_filer_port}


def test_the_store_s_http_ports_refuse_anonymous_reads_and_writes(s3_store: Settings) -> None:
    store, bucket = object_store(s3_store), s3_store.s3_bucket
    store.put_object(bucket, "trajectories/secret.json", io.BytesIO(b"secret"), 6)
    ports = _http_ports(s3_store)
    paths = {"filer": [f"/buckets/{bucket}/", f"/buckets/{bucket}/trajectories/secret.json",
                       f"/buckets/{bucket}/registry/evil.json"],
             "master": ["/dir/assign", "/dir/status", "/vol/status", "/submit", "/vol/grow?count=1", f"/{FID}"],
             "volume": [f"/{FID}", "/ui/index.html"]}
    allowed = []
    for service, port in ports.items():
        for path in paths[service]:
            url = f"http://127.0.0.1:{port}{path}"
            for method, body in (("GET", None), ("PUT", b"evil"), ("POST", b"evil"), ("DELETE", None)):
                if (status := _anonymous(method, url, body)) < 300:
                    allowed.append(f"{method} {service}{path}: {status}")
    assert not allowed
    # Nothing of the above reached the data, and the S3 client with our keys still reads and writes.
    assert store.get_object(bucket, "trajectories/secret.json").read() == b"secret"
    assert [o.object_name for o in store.list_objects(bucket, prefix="registry/", recursive=True)
            if o.object_name == "registry/evil.json"] == []
    store.put_object(bucket, "registry/probe.json", io.BytesIO(b"{}"), 2)
    store.remove_object(bucket, "registry/probe.json")


def _grpc_ports(settings: Settings) -> list[int]:
    return [spec.port for spec in SeaweedS3().ports(settings) if "gRPC" in spec.label]


def test_the_store_s_grpc_ports_refuse_a_client_without_our_certificate(s3_store: Settings) -> None:
    """In plain text or over TLS without a client certificate: a gRPC server that admitted the client would
    answer the HTTP/2 preface with its own SETTINGS frame."""
    answered = {(port, tls): _http2_answer(port, tls) for port in _grpc_ports(s3_store) for tls in (False, True)}
    assert not {where: reply for where, reply in answered.items() if reply.startswith(b"\x00\x00")}


def _http2_answer(port: int, tls: bool) -> bytes:
    """The first bytes a gRPC port sends back to an HTTP/2 preface; b"" when it refuses the connection."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        conn: socket.socket = raw
        if tls:
            context = ssl.create_default_context()
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
            context.set_alpn_protocols(["h2"])
            try:
                conn = context.wrap_socket(raw)
            except (ssl.SSLError, OSError):
                return b""
        conn.sendall(HTTP2_PREFACE)
        return conn.recv(64)
    except (ssl.SSLError, OSError):
        return b""
    finally:
        raw.close()


def test_the_store_s_files_and_sockets_are_its_owner_s_alone(s3_store: Settings) -> None:
    """Keys, certificates and the unix sockets weed opens in /tmp (one per service)."""
    ports = {*_http_ports(s3_store).values(), *_grpc_ports(s3_store)}
    sockets = [Path("/tmp") / name for name in os.listdir("/tmp")
               if name.startswith("seaweedfs-") and name.endswith(".sock")
               and int(name.removesuffix(".sock").rsplit("-", 1)[1]) in ports]
    secrets = [data_dir(s3_store) / "security.toml", *(data_dir(s3_store) / "seaweedfs" / "tls").iterdir()]
    shared = {str(p): oct(stat.S_IMODE(p.stat().st_mode)) for p in [*sockets, *secrets]
              if stat.S_IMODE(p.stat().st_mode) & 0o077}
    assert sockets and not shared, shared
