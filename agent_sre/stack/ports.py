"""Port checks done before anything starts, so a clash is reported by port and owner instead of as a crash log."""

from __future__ import annotations

import asyncio
import os
import random
import socket
from dataclasses import dataclass
from pathlib import Path

from agent_sre.stack.errors import PortInUseError, StackError


@dataclass(frozen=True)
class PortSpec:
    """One port a component binds, with the setting that moves it (named in the error when it is taken)."""

    label: str
    host: str
    port: int
    setting: str


def split_host_port(address: str, setting: str) -> tuple[str, int]:
    """Split 'host:port'; the embedded stack needs an explicit port to bind."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise StackError(f"{setting}={address!r} must be host:port, for example 127.0.0.1:{port or 'PORT'}.")
    return host, int(port)


def port_is_free(host: str, port: int) -> bool:
    """True when we could bind it. SO_REUSEADDR mirrors what servers do, so TIME_WAIT leftovers don't count."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


async def accepts_connections(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """A TCP connect: the cheapest "is anything there" check before a protocol-level probe."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
    except (TimeoutError, OSError):
        return False
    writer.close()
    return True


def port_owner(port: int) -> str | None:
    """Describe the process listening on a TCP port ('temporal (pid 12, /path/temporal server ...)'), if /proc tells.

    Best effort: on systems without /proc, or for another user's process, we only know the port is taken.
    """
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    proc = Path("/proc")
    for pid_dir in proc.iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            fds = list((pid_dir / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                return describe_pid(int(pid_dir.name))
    return None


def describe_pid(pid: int) -> str:
    """'name (pid N: command line)' for messages, shortened to one line."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        command = " ".join(a.decode(errors="replace") for a in argv if a)
    except OSError:
        return f"pid {pid}"
    name = Path(command.split(" ", 1)[0]).name if command else "?"
    if len(command) > 160:
        command = command[:157] + "..."
    return f"{name} (pid {pid}: {command})"


def _listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # 0A = LISTEN
                inodes.add(inode)
    return inodes


def ensure_ports_free(specs: list[PortSpec]) -> None:
    """Raise one `PortInUseError` listing every taken port, its owner when known, and the setting to change."""
    problems = []
    for spec in specs:
        if port_is_free(spec.host, spec.port):
            continue
        owner = port_owner(spec.port)
        held = f"held by {owner}" if owner else "already in use"
        problems.append(f"port {spec.port} ({spec.label}) on {spec.host} is {held}; free it or set {spec.setting}.")
    if problems:
        raise PortInUseError("\n".join(problems))


def pick_free_ports(count: int, host: str = "127.0.0.1", *, also_free_at_offset: int = 10_000) -> list[int]:
    """Distinct free ports for an isolated stack (tests), each with port+offset free too for SeaweedFS's gRPC.

    Picked from 10000-22767 so that port and port+offset both stay below Linux's ephemeral range (32768+),
    where outgoing connections would otherwise grab them between the check and the server's bind; racy by
    nature, like any free-port search.
    """
    chosen: list[int] = []
    reserved: set[int] = set()
    for _ in range(count * 200):
        port = random.randint(10_000, 32_767 - also_free_at_offset)
        pair = {port, port + also_free_at_offset}
        if pair & reserved or not all(port_is_free(host, p) for p in pair):
            continue
        chosen.append(port)
        reserved |= pair
        if len(chosen) == count:
            return chosen
    raise StackError(f"could not find {count} free ports on {host}")
