"""What every embedded-stack component provides, so the manager can start, probe and stop them uniformly."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from agent_sre.config import Settings
from agent_sre.stack.ports import PortSpec


@dataclass(frozen=True)
class Health:
    """Whether the endpoint answered a real request, and a short human-readable reason either way."""

    answers: bool
    detail: str


def data_dir(settings: Settings) -> Path:
    """Absolute data dir: servers run with it as cwd, so relative paths in their arguments would break."""
    return settings.data_dir.expanduser().resolve()


class Component(ABC):
    """One server process of the embedded stack."""

    name: str  # the CLI name: `agent-sre dev up --only <name>`

    @abstractmethod
    def endpoint(self, settings: Settings) -> str:
        """The address clients use (shown by `dev status`)."""

    @abstractmethod
    def ports(self, settings: Settings) -> list[PortSpec]:
        """Every port the process binds, checked before it starts."""

    @abstractmethod
    def command(self, settings: Settings) -> list[str]:
        """The argv to launch; resolving the binary here makes a missing one fail before anything starts."""

    def prepare(self, settings: Settings) -> None:  # noqa: B027 - optional hook
        """Write config files the process reads at startup."""

    @abstractmethod
    async def probe(self, settings: Settings) -> Health:
        """A cheap real request against the endpoint; never raises."""

    async def on_ready(self, settings: Settings) -> None:  # noqa: B027 - optional hook
        """One-time setup once the endpoint answers (e.g. create the bucket). May raise; it is retried."""


def short_error(exc: BaseException) -> str:
    """First line of an exception, for one-line status output."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:160] if text else type(exc).__name__
