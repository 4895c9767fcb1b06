"""Model FLOPs of a training run and its utilisation of the accelerator (MFU), for the benchmarks.

Counted the usual way (Kaplan et al. 2020; PaLM's MFU): a token costs 2N FLOPs forward and 4N backward for a model of
N parameters, so training reads a token for 6N and generation writes one for 2N. Attention's score and value products
are left out (12·layers·width FLOPs a token per token of context: for the 135M model at 1,000 tokens of context a
quarter more), so the figures are lower bounds. MFU divides what the run achieved by the device's dense bf16 peak
from its vendor's data sheet; a device not in the table, a CPU among them, has no MFU unless the caller gives the
peak.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

# Dense (no sparsity) bf16 tensor-core peak, FLOP/s, by a pattern of torch.cuda.get_device_name(): NVIDIA data sheets.
PEAK_BF16_FLOPS: tuple[tuple[str, float], ...] = (
    (r"H200", 989e12),
    (r"H100.*PCIe", 756e12),
    (r"H100", 989e12),
    (r"A100", 312e12),
    (r"L40S", 362e12),
    (r"\bL4\b", 121e12),
)


def parameter_count(model_dir: Path) -> int:
    """Parameters of a safetensors model directory, each tensor once (a tied LM head is stored once and still costs
    its matmul, so counting it once is right for FLOPs)."""
    from safetensors import safe_open

    index = model_dir / "model.safetensors.index.json"
    files = (sorted({model_dir / f for f in json.loads(index.read_text())["weight_map"].values()})
             if index.is_file() else sorted(model_dir.glob("*.safetensors")))
    if not files:
        raise FileNotFoundError(f"no safetensors weights in {model_dir}")
    total = 0
    for path in files:
        with safe_open(str(path), "pt") as f:
            total += sum(math.prod(f.get_slice(name).get_shape()) for name in f.keys())
    return total


def model_flops(parameters: int, trained_tokens: int, generated_tokens: int = 0) -> float:
    """FLOPs of reading `trained_tokens` forward and backward and generating `generated_tokens`."""
    return 6.0 * parameters * trained_tokens + 2.0 * parameters * generated_tokens


def peak_bf16_flops(device_name: str) -> float | None:
    """The data-sheet dense bf16 peak of a GPU by its name, or None when it is not in the table."""
    for pattern, peak in PEAK_BF16_FLOPS:
        if re.search(pattern, device_name):
            return peak
    return None


def mfu(flops: float, seconds: float, peak_flops: float | None) -> float | None:
    """Model FLOPs utilisation: achieved FLOP/s over the peak; None without a peak."""
    if peak_flops is None:
        return None
    if seconds <= 0 or peak_flops <= 0:
        raise ValueError("seconds and the peak must be positive")
    return flops / seconds / peak_flops
