"""Start and stop detached server processes, tracked by pid files so `dev down` works from another shell.

A pid file holds the pid and the argv it was started with; a pid whose /proc cmdline no longer matches is treated
as stale (the pid was reused), so we never signal an unrelated process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

# Children started by this interpreter, so stopping them also reaps them (no zombies in long test sessions).
_children: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True)
class PidFile:
    path: Path

    def write(self, pid: int, argv: list[str]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps({"pid": pid, "argv": argv}))

    def read(self) -> tuple[int, list[str]] | None:
        try:
            data = json.loads(self.path.read_text())
            return int(data["pid"]), [str(a) for a in data["argv"]]
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)

    def live_pid(self) -> int | None:
        """The recorded pid if that process still runs the recorded command; removes a stale file."""
        record = self.read()
        if record is None:
            self.remove()
            return None
        pid, argv = record
        if is_running(pid, argv):
            return pid
        self.remove()
        return None


def is_running(pid: int, argv: list[str] | None = None) -> bool:
    """Alive and not a zombie; with `argv`, also still the same program (guards against pid reuse)."""
    child = _children.get(pid)
    if child is not None and child.poll() is not None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    proc = Path(f"/proc/{pid}")
    if not proc.exists():
        return True  # no /proc (macOS): the signal check is all we have
    try:
        # A zombie still answers signals; it counts as gone (its parent may be an init that never reaps).
        if (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False
        return argv is None or (proc / "cmdline").read_bytes().split(b"\0")[: len(argv)] == [a.encode() for a in argv]
    except OSError:
        return False


def spawn(argv: list[str], *, log_path: Path, cwd: Path) -> subprocess.Popen[bytes]:
    """Start `argv` detached from our terminal (its own session: Ctrl-C in the shell doesn't kill the stack).

    Whatever it creates (data, keys, the unix sockets SeaweedFS opens in /tmp) is its owner's alone: umask 077.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(argv)}\n".encode())
        log.flush()
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            start_new_session=True,
            umask=0o077,
        )
    _children[process.pid] = process
    return process


def exit_code(pid: int) -> int | None:
    """The exit status of a child we started, once it has exited (None while running or if not ours)."""
    child = _children.get(pid)
    return None if child is None else child.poll()


def terminate(pid: int, timeout_s: float) -> bool:
    """SIGTERM, wait up to `timeout_s`, then SIGKILL. Returns True if it had to be killed."""
    if not _signal(pid, signal.SIGTERM):
        return False
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not is_running(pid):
            _reap(pid)
            return False
        time.sleep(0.05)
    _signal(pid, signal.SIGKILL)
    while is_running(pid):
        time.sleep(0.05)
    _reap(pid)
    return True


def _signal(pid: int, sig: signal.Signals) -> bool:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        _reap(pid)
        return False
    return True


def _reap(pid: int) -> None:
    child = _children.pop(pid, None)
    if child is not None:
        child.wait()
