"""SeaweedFS's own access control for the dev store, written fresh (new keys) at every start.

Only the S3 gateway checks our access key; the other services trust whoever reaches their ports, and binding
them to 127.0.0.1 still admits every local user. So: `weed mini -disableHttp` turns the master's and the filer's
HTTP APIs off (the S3 gateway talks to them over gRPC), JWT keys make the volume server refuse reads and writes
that the master did not sign, and mutual TLS with a CA made here makes every gRPC port refuse a client without
its certificate. The files are readable by their owner only.
"""

from __future__ import annotations

import datetime
import ipaddress
import secrets
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

JWT_KEYS = ("signing", "signing.read", "filer_signing", "filer_signing.read")
GRPC_SERVERS = ("master", "volume", "filer", "s3", "admin", "worker")
VALIDITY = datetime.timedelta(days=30)


def write_security(config_dir: Path, tls_dir: Path) -> Path:
    """`config_dir/security.toml` (weed reads ./security.toml: `config_dir` must be its working directory) with
    fresh JWT keys and a fresh CA and certificate in `tls_dir`."""
    ca, cert, key = _certificates(tls_dir)
    sections = [f'[jwt.{name}]\nkey = "{secrets.token_urlsafe(32)}"\n' for name in JWT_KEYS]
    sections += ["[access]\nui = false\n", "[filer.expose_directory_metadata]\nenabled = false\n",
                 f'[grpc]\nca = "{ca}"\n', f'[grpc.client]\ncert = "{cert}"\nkey = "{key}"\n']
    sections += [f'[grpc.{server}]\ncert = "{cert}"\nkey = "{key}"\n' for server in GRPC_SERVERS]
    return _private(config_dir / "security.toml", "\n".join(sections).encode())


def _certificates(tls_dir: Path) -> tuple[Path, Path, Path]:
    """A CA and one certificate it signed, for both ends of every gRPC connection (weed checks no host name)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "agent-sre dev store CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(now + VALIDITY)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .sign(ca_key, hashes.SHA256()))
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "agent-sre dev store")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + VALIDITY)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    tls_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    pem = serialization.Encoding.PEM
    return (_private(tls_dir / "ca.crt", ca.public_bytes(pem)),
            _private(tls_dir / "store.crt", cert.public_bytes(pem)),
            _private(tls_dir / "store.key", key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                              serialization.NoEncryption())))


def _private(path: Path, content: bytes) -> Path:
    """Write `content` readable by the owner only, from the first byte on."""
    path.unlink(missing_ok=True)
    path.touch(mode=0o600)
    path.write_bytes(content)
    return path.resolve()
