"""Starting, following and stopping the training job (`agent_sre.training.run`) as a child process.

The job runs under `accelerate launch` with the request's config from `infra/accelerate/`; where accelerate is
not installed beside this Python, it runs as `python -m` in one process and says so (`Launch.description`).
The job gets a process group of its own, so stopping it reaches the launcher and every rank it started:
SIGTERM, a grace period, then SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from agent_sre.models.training import Compute, TrainingProgress

CONFIG_DIR = Path(__file__).resolve().parents[2] / "infra" / "accelerate"
MODULE = "agent_sre.training.run"
STOP_GRACE_S = 10.0


class LaunchError(RuntimeError):
    """The job cannot be started on this machine as requested (no accelerate config, not enough GPUs)."""


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    description: str


def accelerate_config(compute: Compute) -> Path:
    path = CONFIG_DIR / f"{compute}.yaml"
    if not path.is_file():
        raise LaunchError(f"no accelerate config for compute {compute!r}: {path} is missing")
    return path


def launch_command(compute: Compute, job_args: list[str], gpus: int) -> Launch:
    """The command line of the training job for `compute` on a machine with `gpus` visible GPUs."""
    needed = {"cpu": 0, "gpu1": 1, "multigpu-fsdp": 2, "multigpu-deepspeed": 2}[compute]
    if gpus < needed:
        raise LaunchError(f"compute {compute!r} needs {needed} GPU(s); this training worker sees {gpus}")
    config = accelerate_config(compute)
    accelerate = Path(sys.executable).with_name("accelerate")
    if not accelerate.is_file():
        if compute.startswith("multigpu"):
            raise LaunchError(f"compute {compute!r} needs accelerate, which is not installed beside {sys.executable}")
        return Launch([sys.executable, "-m", MODULE, *job_args],
                      f"python -m {MODULE} (accelerate is not installed beside {sys.executable}: one process, "
                      f"without {config.name})")
    processes = ["--num_processes", str(gpus)] if compute.startswith("multigpu") else []
    return Launch([str(accelerate), "launch", "--config_file", str(config), *processes, "-m", MODULE, *job_args],
                  f"accelerate launch --config_file {config.relative_to(config.parents[2])}"
                  + (f" --num_processes {gpus}" if processes else ""))


class TrainingProcess:
    """The running job: its progress lines as they appear, its exit status, and a clean stop."""

    def __init__(self, launch: Launch, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.progress_file, self.log_file = out / "progress.jsonl", out / "train.log"
        self._offset = self.progress_file.stat().st_size if self.progress_file.exists() else 0
        with self.log_file.open("ab") as log:
            # the worker's working directory: the job's arguments (data dir, scenario files) may be relative to it
            self.proc = subprocess.Popen(launch.argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1"})

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()

    def new_progress(self) -> list[TrainingProgress]:
        """Complete progress lines written since the last call."""
        if not self.progress_file.exists():
            return []
        with self.progress_file.open("rb") as f:
            f.seek(self._offset)
            chunk = f.read()
        complete = chunk[:chunk.rfind(b"\n") + 1]
        self._offset += len(complete)
        return [TrainingProgress.model_validate_json(line) for line in complete.splitlines() if line.strip()]

    def stop(self, grace_s: float = STOP_GRACE_S) -> int:
        """SIGTERM to the job's process group, SIGKILL to whatever is left after `grace_s`; returns once every
        process of the group has exited (the launcher may exit first, leaving its ranks behind)."""
        if self._group_gone():
            return self.proc.wait()
        self._signal_group(signal.SIGTERM)
        if not self._wait_group(grace_s):
            self._signal_group(signal.SIGKILL)
            self._wait_group(STOP_GRACE_S)
        return self.proc.wait()

    def _wait_group(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not self._group_gone():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    def _group_gone(self) -> bool:
        self.proc.poll()  # reap the launcher, our child, so that it does not linger as a zombie of the group
        try:
            os.killpg(self.proc.pid, 0)
        except ProcessLookupError:
            return True
        return False

    def _signal_group(self, sig: signal.Signals) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def log_tail(self, chars: int = 2000) -> str:
        if not self.log_file.exists():
            return ""
        with self.log_file.open("rb") as f:
            f.seek(max(0, self.log_file.stat().st_size - chars))
            return f.read().decode(errors="replace")
