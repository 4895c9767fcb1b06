"""`agent-sre models …` and `agent-sre rollout …` as an operator runs them: a real worker process, the session's
Temporal dev server and S3 store (a bucket of its own), every command through the CLI."""

from __future__ import annotations

import asyncio
import re
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from isolated_workers import isolated_queues, terminate_running
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from store_fixtures import settings_with_own_bucket
from typer.testing import CliRunner, Result
from worker_process import start_worker, stop_worker, until

from agent_sre.cli import app
from agent_sre.cli import models as models_cli
from agent_sre.cli import rollout as rollout_cli
from agent_sre.config import Settings, get_settings
from agent_sre.registry import Registry
from agent_sre.rollout.client import ROLLOUT_WORKFLOW_ID
from agent_sre.stack.ports import pick_free_ports
from agent_sre.temporal import connect

PLAN = """\
name: cli-test
steps:
  - set_weight: 20
  - bake: 1h
  - analyze
"""


@dataclass
class Operator:
    settings: Settings
    metrics_port: int
    tmp: Path

    def run(self, *args: str) -> Result:
        return CliRunner().invoke(app, list(args))

    def ok(self, *args: str) -> str:
        result = self.run(*args)
        assert result.exit_code == 0, result.output
        return re.sub(r"\s+", " ", result.output)

    def refused(self, *args: str) -> str:
        result = self.run(*args)
        assert result.exit_code == 1, result.output
        return re.sub(r"\s+", " ", result.output)

    def metric(self, name: str, **labels: str) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
                   if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


@pytest.fixture
def operator(temporal_server: Settings, s3_store: Settings, tmp_path: Path,
             monkeypatch: pytest.MonkeyPatch) -> Iterator[Operator]:
    """Settings (for the CLI and the worker alike) naming a bucket and task queues of this test's own."""
    queues = isolated_queues(temporal_server)
    env = {"AGENT_SRE_QUEUE_AGENT": queues.queue_agent, "AGENT_SRE_QUEUE_TOOLS": queues.queue_tools,
           "AGENT_SRE_QUEUE_POLICY": queues.queue_policy}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    wide = Console(width=250)  # no wrapped table cells to match across
    monkeypatch.setattr(models_cli, "console", wide)
    monkeypatch.setattr(rollout_cli, "console", wide)
    with settings_with_own_bucket(s3_store, "rollout-cli") as settings:
        [port] = pick_free_ports(1, "127.0.0.1")
        worker = start_worker(tmp_path / "worker.log", metrics_port=port)
        try:
            yield Operator(settings, port, tmp_path)
        finally:
            stop_worker(worker)
            get_settings.cache_clear()


async def _terminate(settings: Settings) -> None:
    await terminate_running(await connect(settings), [ROLLOUT_WORKFLOW_ID])


def test_an_operator_rolls_a_version_out_and_back(operator: Operator) -> None:
    try:
        _session(operator)
    finally:
        asyncio.run(_terminate(operator.settings))


def _session(op: Operator) -> None:
    listed = op.ok("models", "list")
    assert "runbook-v1 │ runbook │ production" in listed
    weights = op.tmp / "weights"
    weights.mkdir()
    (weights / "model.safetensors").write_bytes(b"\0" * 64)
    Registry.from_settings(op.settings).register("smol-cli-1", policy="llm", by="trainer", weights_dir=weights)
    shown = op.ok("models", "show", "smol-cli-1")
    assert "stage │ candidate" in shown and "model.safetensors 64 B" in shown
    assert "unknown model version 'nope'" in op.refused("models", "show", "nope")

    plan = op.tmp / "plan.yaml"
    plan.write_text(PLAN.replace("1h", "0s"))
    bad = op.refused("rollout", "start", "--candidate", "smol-cli-1", "--plan", str(plan))
    assert "steps.1.bake.duration: must be longer than zero" in bad
    plan.write_text(PLAN)
    started = op.ok("rollout", "start", "--candidate", "smol-cli-1", "--plan", str(plan),
                                      "--reason", "GRPO run 7", "--by", "alice")
    assert f"rollout of smol-cli-1 against runbook-v1 started as {ROLLOUT_WORKFLOW_ID}: plan cli-test" in started

    status = ""

    def baking() -> bool:
        nonlocal status
        status = op.ok("rollout", "status")
        return "step │ 2/3: bake 1h" in status

    until(baking, "the rollout to reach its bake")
    assert "weight │ 20% of new incidents to smol-cli-1" in status
    assert re.search(r"time left in step │ (1h|59m\d+s) ", status), status
    assert "started │ alice │ plan cli-test (3 steps), candidate smol-cli-1 against runbook-v1: GRPO run 7" in status
    again = op.refused("rollout", "start", "--candidate", "smol-cli-1")
    assert "smol-cli-1 is canary: only a candidate can be rolled out" in again

    refused = op.refused("rollout", "resume")
    assert "refused: cannot resume: the rollout is not paused" in refused
    paused = op.ok("rollout", "pause", "--reason", "on-call handover", "--by", "bob")
    assert "pause: accepted · paused" in paused
    assert "already paused" in op.refused("rollout", "pause")
    sidestep = op.refused("models", "promote", "smol-cli-1", "--reason", "impatient")
    assert "smol-cli-1 is in a rollout: promote it with `agent-sre rollout promote --full`" in sidestep
    assert "resume: accepted · running · step 2/3: bake 1h" in op.ok("rollout", "resume")
    assert "promote: accepted · running · step 3/3: analyze" in op.ok("rollout", "promote")  # where it went

    before = op.metric("agent_sre_model_rollbacks_total", candidate="smol-cli-1", trigger="signal")
    requested = op.ok("rollout", "rollback", "--reason", "pager: checkout 5xx",
                                        "--by", "carol")
    assert "rollback requested" in requested
    until(lambda: "phase │ rolled_back" in op.ok("rollout", "status"), "the rollback")
    assert op.metric("agent_sre_model_rollbacks_total", candidate="smol-cli-1", trigger="signal") == before + 1

    shown = op.ok("models", "show", "smol-cli-1")
    assert "stage │ rolled_back" in shown
    assert "canary │ rolled_back │ rollout:signal │ pager: checkout 5xx (by carol)" in shown
    assert "no earlier production version" in op.refused("models", "rollback",
                                                                       "--reason", "x")
    assert "no rollout is running" in op.refused("rollout", "pause")
    listed = op.ok("models", "list")
    assert listed.count("│ production │") == 1 and "smol-cli-1 │ llm │ rolled_back" in listed
