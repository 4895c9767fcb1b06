"""SFT, GRPO and evaluation on a GPU, with the tiny model: run where CUDA is (a lent GPU machine), skipped elsewhere.

CI has no GPU; this is the check to run first on one (`python -m pytest tests/test_gpu.py`), before a long
`bench/training.py --device auto`."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agent_sre.models.remediation import PolicyRef
from agent_sre.models.training import GRPOTrainingConfig, SFTConfig
from agent_sre.policy.llm.checkpoint import tiny_model
from agent_sre.policy.runbook import RunbookPolicy
from agent_sre.scenarios import default_catalog, heldout_suite, load_scenarios
from agent_sre.simulator.simulator import Simulator
from agent_sre.training.evaluate import play, run_model
from agent_sre.training.grpo import train_grpo
from agent_sre.training.sft import train_sft

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def train_and_evaluate(device: str, work: Path) -> None:
    """Two SFT steps, one GRPO step with its probe, and a batched evaluation, all on `device`."""
    expected_device = torch.cuda.get_device_name() if device.startswith("cuda") else "cpu"
    expected_bf16 = device.startswith("cuda") and torch.cuda.is_bf16_supported()
    catalog = load_scenarios(default_catalog())[:6]
    runbook, simulator = RunbookPolicy(), Simulator(speed=0)
    experts = [play(runbook, PolicyRef(name="runbook", version="runbook"), s, simulator) for s in catalog[:3]]

    sft = train_sft(tiny_model(work / "tiny"), experts, work / "sft",
                    SFTConfig(max_steps=2, max_length=4096, device=device))
    assert (sft.device, sft.bf16, sft.steps) == (expected_device, expected_bf16, 2)

    grpo = train_grpo(Path(sft.output_dir), catalog, work / "grpo", GRPOTrainingConfig(
        max_steps=1, group_size=2, groups_per_step=2, max_turns=2, max_new_tokens=8, device=device,
        probe_scenarios=2))
    assert (grpo.device, grpo.bf16) == (expected_device, expected_bf16)
    assert set(grpo.logged_rewards) == {1} and [p.step for p in grpo.probes] == [0, 1]

    suite = load_scenarios(heldout_suite())[:4]
    results = run_model(Path(grpo.output_dir), suite, max_turns=2, max_new_tokens=8, device=device)
    assert [r.scenario for r in results] == [s.name for s in suite]
    assert all(r.outcome.steps >= 1 for r in results)


def test_sft_grpo_and_evaluation_run_on_the_gpu(tmp_path: Path) -> None:
    train_and_evaluate("cuda", tmp_path)
