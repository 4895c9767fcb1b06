"""Settings for a throwaway stack on free ports, so tests and benchmarks never collide with (or talk to) a
developer's `agent-sre dev up` stack."""

from __future__ import annotations

from pathlib import Path

from agent_sre.stack.ports import pick_free_ports


def isolated_env(data_dir: Path, host: str = "127.0.0.1") -> dict[str, str]:
    """AGENT_SRE_* variables for a stack on free ports with its data under `data_dir`."""
    temporal, ui, s3, master, volume, filer, admin, sim = pick_free_ports(8, host)
    return {
        "AGENT_SRE_TEMPORAL_ADDRESS": f"{host}:{temporal}",
        "AGENT_SRE_TEMPORAL_UI_PORT": str(ui),
        "AGENT_SRE_S3_ENDPOINT": f"{host}:{s3}",
        "AGENT_SRE_SEAWEEDFS_MASTER_PORT": str(master),
        "AGENT_SRE_SEAWEEDFS_VOLUME_PORT": str(volume),
        "AGENT_SRE_SEAWEEDFS_FILER_PORT": str(filer),
        "AGENT_SRE_SEAWEEDFS_ADMIN_PORT": str(admin),
        "AGENT_SRE_SIM_HOST": host,
        "AGENT_SRE_SIM_PORT": str(sim),
        "AGENT_SRE_DATA_DIR": str(data_dir),
    }
