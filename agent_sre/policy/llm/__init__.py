"""The language-model policy: chat formatting, model directories, generation backends and the Policy itself.

Importing this package is cheap: torch and transformers load only when a model does."""

from agent_sre.policy.llm.backends import Backend, BackendError, Generation, OpenAIBackend, TransformersBackend
from agent_sre.policy.llm.chat import chat_messages, prompt_messages, prompt_token_ids
from agent_sre.policy.llm.checkpoint import (
                                             LoadedModel,
                                             ModelDirError,
                                             convert_gguf,
                                             ensure_base_model,
                                             load_policy_model,
                                             smollm2_gguf,
                                             tiny_model,
)
from agent_sre.policy.llm.policy import BASE_VERSION, LLMPolicy, LocalModels, backends_from_settings, local_version_dir

__all__ = ["BASE_VERSION", "Backend", "BackendError", "Generation", "LLMPolicy", "LoadedModel", "LocalModels",
           "ModelDirError", "OpenAIBackend", "TransformersBackend", "backends_from_settings", "chat_messages",
           "convert_gguf", "ensure_base_model", "load_policy_model", "local_version_dir", "prompt_messages",
           "prompt_token_ids", "smollm2_gguf", "tiny_model"]
