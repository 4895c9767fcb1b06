"""`agent-sre worker` as a real process, for tests that restart or kill it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest


def start_worker(log: Path, metrics_port: int = 0, **env: str) -> subprocess.Popen[bytes]:
    """A worker on every queue, with the current environment plus `env` (AGENT_SRE_* settings)."""
    proc = subprocess.Popen([sys.executable, "-m", "agent_sre.cli", "worker", "--metrics-port", str(metrics_port)],
                            env=dict(os.environ, **env), stdout=log.open("ab"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    until(lambda: "worker on" in log.read_text(), "the worker to start", log)
    return proc


def stop_worker(proc: subprocess.Popen[bytes], kill: bool = False) -> None:
    """SIGINT lets the worker shut down gracefully; `kill` is a crash (SIGKILL)."""
    if proc.poll() is not None:
        return
    if kill:
        os.killpg(proc.pid, signal.SIGKILL)
    else:
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def until(ok: Callable[[], object], what: str, log: Path | None = None, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not ok():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}" + (f"\n{log.read_text()}" if log else ""))
        time.sleep(0.2)
