"""Model FLOPs and MFU as the training benchmark reports them."""

from pathlib import Path

import pytest

from agent_sre.training.flops import mfu, model_flops, parameter_count, peak_bf16_flops


def test_parameter_count_is_the_loaded_models(tiny_model_dir: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, local_files_only=True)
    # parameters() yields a tied LM head once, as the safetensors file stores it
    assert parameter_count(tiny_model_dir) == sum(p.numel() for p in model.parameters())


def test_parameter_count_without_weights_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no safetensors"):
        parameter_count(tmp_path)


def test_training_costs_three_times_generation_per_token() -> None:
    assert model_flops(100, trained_tokens=10) == 6_000
    assert model_flops(100, trained_tokens=0, generated_tokens=10) == 2_000
    assert model_flops(100, 10, 10) == 8_000


@pytest.mark.parametrize(("name", "peak"), [
    ("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA H100 PCIe", 756e12), ("NVIDIA H200", 989e12),
    ("NVIDIA A100-SXM4-80GB", 312e12), ("NVIDIA L4", 121e12), ("NVIDIA L40S", 362e12),
    ("cpu", None), ("NVIDIA GeForce RTX 4090", None)])
def test_peak_by_device_name(name: str, peak: float | None) -> None:
    assert peak_bf16_flops(name) == peak


def test_mfu() -> None:
    assert mfu(989e12, 2.0, 989e12) == pytest.approx(0.5)
    assert mfu(1e12, 1.0, None) is None
    with pytest.raises(ValueError):
        mfu(1e12, 0.0, 1e12)
