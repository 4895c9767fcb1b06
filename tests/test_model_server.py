"""A real OpenAI-compatible model server: `transformers serve` (shipped with transformers) serving a local
checkpoint, and the LLM policy playing one whole incident through the OpenAI backend against it.

The other backend tests use a fake endpoint that answers what the test says; this one checks that our requests are
ones a real server accepts and that its answers (tool calls or not) become an episode that is judged."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_sre.models.llm import SamplingConfig
from agent_sre.models.remediation import PolicyRef
from agent_sre.policy.llm import LLMPolicy, OpenAIBackend
from agent_sre.scenarios import load_scenarios
from agent_sre.simulator.simulator import Simulator
from agent_sre.training.evaluate import play

READY_WITHIN_S = 240.0  # importing torch and transformers on a busy 2-core machine takes most of a minute


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ready(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + READY_WITHIN_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"transformers serve exited with {process.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(1)
    raise TimeoutError(f"transformers serve did not answer {url}/health within {READY_WITHIN_S:.0f} s")


@pytest.fixture(scope="module")
def served(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = _free_port()
    log = (tmp_path_factory.mktemp("serve") / "serve.log").open("wb")
    process = subprocess.Popen([str(Path(sys.executable).parent / "transformers"), "serve", "--host", "127.0.0.1",
                                "--port", str(port), str(tiny_model_dir)], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _ready(url, process)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def test_the_llm_policy_plays_an_incident_through_a_real_openai_compatible_server(
        served: str, tiny_model_dir: Path) -> None:
    scenario = next(s for s in load_scenarios() if s.fault == "oom_limit")
    policy = LLMPolicy(lambda version: OpenAIBackend(f"{served}/v1", model=version),
                       SamplingConfig(temperature=0.0, max_new_tokens=24, constrained=False))
    t = play(policy, PolicyRef(name="llm", version=str(tiny_model_dir)), scenario, Simulator(speed=0))
    # A random tiny model answers nonsense: each answer must still arrive whole and be judged as an action.
    assert t.steps and all(s.decision.completion for s in t.steps)
    assert all(s.decision.action is not None or s.decision.invalid_reason for s in t.steps)
    assert t.termination is not None and t.verdict is not None
