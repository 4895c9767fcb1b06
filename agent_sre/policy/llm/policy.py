"""The LLM policy: a language model answers each turn of the shared conversation with one JSON tool call.

A model version is resolved to a backend at decide time, so a newly registered version is servable by a running
worker; local models stay loaded per worker process in a small LRU cache. Bad model output never raises: it
becomes an invalid action whose reason the model reads on its next turn.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path

from agent_sre.config import Settings, get_settings
from agent_sre.models.llm import SamplingConfig
from agent_sre.models.policy import PolicyDecision
from agent_sre.models.remediation import PolicyRef
from agent_sre.models.trajectory import Trajectory
from agent_sre.policy.conversation import parse_action, pending_messages
from agent_sre.policy.llm.backends import Backend, Generation, OpenAIBackend, TransformersBackend
from agent_sre.policy.llm.chat import prompt_messages
from agent_sre.policy.llm.checkpoint import (
    LoadedModel,
    ModelDirError,
    check_model_dir,
    ensure_base_model,
    load_policy_model,
)

BASE_VERSION = "base"
BASE_DIR_NAME = "base-smollm2-135m"

VersionResolver = Callable[[str], Path]
BackendProvider = Callable[[str], Backend]


def local_version_dir(version: str, models_dir: Path, registry: VersionResolver | None = None) -> Path:
    """The version resolver: "base" is the converted SmolLM2 (converted on first use), a path is that model
    directory, and any other name is asked of `registry` (e.g. the model registry's download cache)."""
    if version == BASE_VERSION:
        return ensure_base_model(models_dir / BASE_DIR_NAME)
    path = Path(version).expanduser()
    if path.is_dir():
        return check_model_dir(path)
    if registry is not None:
        return check_model_dir(registry(version))
    raise ModelDirError(f"unknown model version {version!r}: not {BASE_VERSION!r} and not a model directory")


class LocalModels:
    """Version → a local transformers backend. The `max_loaded` most recently used model directories stay loaded;
    two versions that resolve to the same directory share one copy."""

    def __init__(self, resolver: VersionResolver, max_loaded: int = 2, device: str = "auto",
                 loader: Callable[[Path, str], LoadedModel] = load_policy_model, kv_cache_tokens: int = 0) -> None:
        if max_loaded < 1:
            raise ValueError(f"max_loaded must be at least 1, got {max_loaded}")
        self.resolver, self.max_loaded, self.device, self.loader = resolver, max_loaded, device, loader
        self.kv_cache_tokens = kv_cache_tokens
        self._loaded: OrderedDict[Path, TransformersBackend] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def loaded(self) -> list[Path]:
        """Loaded model directories, least recently used first."""
        return list(self._loaded)

    def __call__(self, version: str) -> TransformersBackend:
        path = self.resolver(version).resolve()
        with self._lock:  # held while loading, so concurrent first calls load a version once
            backend = self._loaded.get(path)
            if backend is None:
                backend = TransformersBackend(self.loader(path, self.device), self.kv_cache_tokens)
                self._loaded[path] = backend
                while len(self._loaded) > self.max_loaded:
                    self._loaded.popitem(last=False)
            self._loaded.move_to_end(path)
            return backend


def backends_from_settings(settings: Settings, registry: VersionResolver | None = None) -> BackendProvider:
    """An OpenAI-compatible endpoint when one is configured (the version is the served model name), else local
    models resolved by `local_version_dir` (with `registry` for registered version names)."""
    if settings.llm_endpoint:
        endpoint = settings.llm_endpoint
        return lambda version: OpenAIBackend(endpoint, model=version, api_key=settings.llm_endpoint_api_key,
                                             token_ids=settings.llm_endpoint_token_ids,
                                             json_schema=settings.llm_endpoint_json_schema)
    models_dir = settings.models_dir
    return LocalModels(lambda version: local_version_dir(version, models_dir, registry),
                       max_loaded=settings.llm_cache_size, device=settings.llm_device,
                       kv_cache_tokens=settings.llm_kv_cache_tokens)


class LLMPolicy:
    """The Policy protocol over a language model. Without backends it configures itself from `settings` (default:
    the environment's) on first use, so registering it costs nothing in a worker that never serves it."""

    def __init__(self, backends: BackendProvider | None = None, sampling: SamplingConfig | None = None,
                 registry: VersionResolver | None = None, settings: Settings | None = None) -> None:
        self._backends = backends
        self._sampling = sampling
        self._registry = registry  # for the backends configured from the settings: registered version names
        self._settings = settings
        self._lock = threading.Lock()

    @property
    def backends(self) -> BackendProvider:
        with self._lock:
            if self._backends is None:
                self._backends = backends_from_settings(self._settings or get_settings(), self._registry)
            return self._backends

    @property
    def sampling(self) -> SamplingConfig:
        return self._sampling if self._sampling is not None else (self._settings or get_settings()).llm_sampling

    def decide(self, ref: PolicyRef, trajectory: Trajectory) -> PolicyDecision:
        return self.decide_batch(ref, [trajectory])[0]

    def decide_batch(self, ref: PolicyRef, trajectories: Sequence[Trajectory],
                     sampling: SamplingConfig | None = None) -> list[PolicyDecision]:
        """One decision per trajectory, generated as one batch (GRPO groups, evaluation suites)."""
        started = time.perf_counter()
        sampling = sampling or self.sampling
        generations = self.backends(ref.version).generate([prompt_messages(t) for t in trajectories], sampling)
        latency_ms = (time.perf_counter() - started) * 1000 / max(1, len(trajectories))
        return [_decision(ref, t, g, sampling, latency_ms) for t, g in zip(trajectories, generations, strict=True)]


def _decision(ref: PolicyRef, trajectory: Trajectory, generation: Generation, sampling: SamplingConfig,
              latency_ms: float) -> PolicyDecision:
    invalid: str | None
    if generation.problem is not None:
        action, invalid = None, generation.problem
    else:
        action, invalid = parse_action(generation.text)
        if invalid is not None and generation.finish_reason == "length":
            invalid += f" (the answer was cut off at {sampling.max_new_tokens} tokens)"
    return PolicyDecision(action=action, invalid_reason=invalid, completion=generation.text,
                          new_messages=pending_messages(trajectory), completion_token_ids=generation.token_ids,
                          completion_logprobs=generation.logprobs, model_version=ref.version, latency_ms=latency_ms)
