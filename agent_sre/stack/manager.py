"""`dev up | down | status` for the embedded stack: one code path for the CLI, the demo and the test fixtures.

Everything is checked (binaries, ports) before anything starts, then all components start in parallel; if one
fails, the ones this call started are stopped again, so a failed `up` leaves nothing half-running.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agent_sre.config import Settings
from agent_sre.stack.component import Component, Health, data_dir
from agent_sre.stack.errors import ComponentStartError, StackError
from agent_sre.stack.ports import accepts_connections, ensure_ports_free
from agent_sre.stack.process import PidFile, exit_code, is_running, spawn, terminate
from agent_sre.stack.seaweedfs import SeaweedS3
from agent_sre.stack.simulator import SimulatorServer
from agent_sre.stack.temporal import TemporalDevServer

COMPONENTS: dict[str, Component] = {c.name: c for c in (TemporalDevServer(), SeaweedS3(), SimulatorServer())}
LOG_TAIL_LINES = 15

State = Literal["started", "already running", "stopped", "killed after timeout", "not running"]


@dataclass(frozen=True)
class Outcome:
    """What `up` or `down` did to one component."""

    component: str
    endpoint: str
    state: State
    pid: int | None
    seconds: float = 0.0


@dataclass(frozen=True)
class ComponentStatus:
    component: str
    endpoint: str
    pid: int | None  # None when no process of ours runs (the endpoint may still answer: an external server)
    health: Health


def select(names: Iterable[str] | None) -> list[Component]:
    """Components by CLI name, in stack order; all of them when `names` is None or empty."""
    wanted = list(names or [])
    unknown = [n for n in wanted if n not in COMPONENTS]
    if unknown:
        raise StackError(f"unknown component {', '.join(unknown)}; choose from {', '.join(COMPONENTS)}.")
    return [c for name, c in COMPONENTS.items() if not wanted or name in wanted]


def pid_file(settings: Settings, component: Component) -> PidFile:
    return PidFile(data_dir(settings) / "run" / f"{component.name}.pid")


def log_path(settings: Settings, component: Component) -> Path:
    return data_dir(settings) / "logs" / f"{component.name}.log"


def running(settings: Settings) -> list[str]:
    """The components whose process is alive."""
    return [c.name for c in COMPONENTS.values() if pid_file(settings, c).live_pid() is not None]


def bulk(settings: Settings) -> list[Path]:
    """What `dev clean` removes, where it exists: the S3 data (episodes, model weights, datasets: SeaweedFS rewrites
    its identities and TLS files at every start), the local model copies, logs, training scratch and traces. The
    Temporal database, the kubeconfig and drill reports stay."""
    root = data_dir(settings)
    paths = [root / "seaweedfs", settings.models_dir.expanduser().resolve(), root / "logs", root / "training",
             root / "traces.jsonl"]
    return [p for p in paths if p.exists()]


def disk_usage(path: Path) -> int:
    """Bytes `path` takes on disk (as du counts them: a file hardlinked twice counts once)."""
    if not path.is_dir():
        return path.stat().st_blocks * 512 if path.exists() else 0
    seen: set[tuple[int, int]] = set()
    total = 0
    for file in path.rglob("*"):
        st = file.lstat()
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
    return total


async def up(
    settings: Settings,
    names: Iterable[str] | None = None,
    on_ready: Callable[[Outcome], None] | None = None,
) -> list[Outcome]:
    """Start the selected components that are not already running and wait until each answers."""
    components = select(names)
    outcomes: dict[str, Outcome] = {}
    to_start: list[Component] = []
    for component in components:
        pid = pid_file(settings, component).live_pid()
        if pid is None:
            to_start.append(component)
            continue
        outcomes[component.name] = Outcome(component.name, component.endpoint(settings), "already running", pid)
        if on_ready:
            on_ready(outcomes[component.name])

    commands = {c.name: c.command(settings) for c in to_start}
    ensure_ports_free([spec for c in to_start for spec in c.ports(settings)])

    root = data_dir(settings)
    root.mkdir(parents=True, exist_ok=True)
    started: list[tuple[Component, int]] = []
    try:
        for component in to_start:
            component.prepare(settings)
            process = spawn(commands[component.name], log_path=log_path(settings, component), cwd=root)
            pid_file(settings, component).write(process.pid, commands[component.name])
            started.append((component, process.pid))
        results = await asyncio.gather(
            *(_wait_ready(settings, c, pid, on_ready) for c, pid in started), return_exceptions=True
        )
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            raise failures[0] if len(failures) == 1 else StackError("\n".join(str(f) for f in failures))
    except BaseException:
        await asyncio.gather(*(_stop(settings, c) for c, _ in started))
        raise
    outcomes.update({r.component: r for r in results if isinstance(r, Outcome)})
    return [outcomes[c.name] for c in components]


async def down(settings: Settings, names: Iterable[str] | None = None) -> list[Outcome]:
    """Stop the selected components by pid (SIGTERM, then SIGKILL after `stack_stop_timeout_s`)."""
    return list(await asyncio.gather(*(_stop(settings, c) for c in select(names))))


async def status(settings: Settings, names: Iterable[str] | None = None) -> list[ComponentStatus]:
    """Probe every selected endpoint (ours or not) and report our process, if any."""

    async def one(component: Component) -> ComponentStatus:
        health = await _probe(settings, component)
        pid = pid_file(settings, component).live_pid()
        return ComponentStatus(component.name, component.endpoint(settings), pid, health)

    return list(await asyncio.gather(*(one(c) for c in select(names))))


async def _wait_ready(
    settings: Settings, component: Component, pid: int, on_ready: Callable[[Outcome], None] | None
) -> Outcome:
    started_at = time.monotonic()
    deadline = started_at + settings.stack_start_timeout_s
    while True:
        if not is_running(pid):
            code = exit_code(pid)
            raise ComponentStartError(
                f"{component.name} exited{f' with code {code}' if code is not None else ''} during startup. "
                f"Last lines of {log_path(settings, component)}:\n{_tail(log_path(settings, component))}"
            )
        health = await _probe(settings, component)
        if health.answers:
            try:
                await component.on_ready(settings)
            except Exception as exc:  # retried until the deadline; the last reason is reported
                health = Health(False, f"post-start setup failed: {exc}")
            else:
                outcome = Outcome(
                    component.name, component.endpoint(settings), "started", pid, time.monotonic() - started_at
                )
                if on_ready:
                    on_ready(outcome)
                return outcome
        if time.monotonic() > deadline:
            raise ComponentStartError(
                f"{component.name} did not answer at {component.endpoint(settings)} within "
                f"{settings.stack_start_timeout_s:g}s (last check: {health.detail}). "
                f"See {log_path(settings, component)}."
            )
        await asyncio.sleep(0.2)


async def _probe(settings: Settings, component: Component) -> Health:
    """Connect to the main port first: a plain "nothing listening" beats a client library's transport error."""
    main = component.ports(settings)[0]
    if not await accepts_connections(main.host, main.port):
        return Health(False, f"nothing listening on {main.host}:{main.port}")
    return await component.probe(settings)


async def _stop(settings: Settings, component: Component) -> Outcome:
    endpoint = component.endpoint(settings)
    pids = pid_file(settings, component)
    pid = pids.live_pid()
    if pid is None:
        return Outcome(component.name, endpoint, "not running", None)
    began = time.monotonic()
    killed = await asyncio.to_thread(terminate, pid, settings.stack_stop_timeout_s)
    pids.remove()
    state: State = "killed after timeout" if killed else "stopped"
    return Outcome(component.name, endpoint, state, pid, time.monotonic() - began)


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(lines[-LOG_TAIL_LINES:])
