"""One settings object for every process, read from environment variables.

Defaults point at the embedded dev stack (`agent-sre dev up`), so nothing needs configuring locally; production
sets the same variables to point at a real Temporal cluster, MinIO and a kubeconfig.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AGENT_SRE_", extra="ignore")

    temporal_address: str = "127.0.0.1:7233"
    temporal_namespace: str = "default"
    temporal_ui_port: int = 8233

    s3_endpoint: str = "127.0.0.1:8333"
    s3_access_key: str = "agent-sre"
    s3_secret_key: str = "agent-sre-dev-secret"
    s3_bucket: str = "agent-sre"
    s3_secure: bool = False

    # The standard variable, unprefixed, as kubectl reads it. None means: use the embedded simulator.
    kubeconfig: Path | None = Field(default=None, validation_alias=AliasChoices("KUBECONFIG", "AGENT_SRE_KUBECONFIG"))

    sim_host: str = "127.0.0.1"
    sim_port: int = 8480
    sim_speed: float = Field(default=60.0, gt=0, description="simulated seconds per real second")

    data_dir: Path = Path(".agent-sre")

    queue_agent: str = "agent"
    queue_tools: str = "agent-tools"
    queue_policy: str = "agent-policy"
    queue_training: str = "training"

    otel_exporter: str = Field(default="none", pattern="^(none|console|otlp|file)$")
    otel_endpoint: str = "http://127.0.0.1:4318"
    metrics_port: int = 9464

    @property
    def sim_url(self) -> str:
        return f"http://{self.sim_host}:{self.sim_port}"

    @property
    def temporal_ui_url(self) -> str:
        host = self.temporal_address.rsplit(":", 1)[0]
        return f"http://{host}:{self.temporal_ui_port}"


@lru_cache
def get_settings() -> Settings:
    return Settings()
