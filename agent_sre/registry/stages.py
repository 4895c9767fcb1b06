"""Stage changes as pure functions over the registry index: each checks the index it is given and moves versions,
or refuses with the reason. The store runs them inside a compare-and-swap, so the checks always hold for the
state that the write replaces (a concurrent change makes the store re-read and run them again).

    candidate ──▶ canary ──▶ production ──▶ archived (when replaced) ──▶ production (`models rollback`)
      │ ▲            │  └──▶ rolled_back (rollout rolled back)        production ──▶ rolled_back (`models rollback`)
      │ └────────────┘ (rollout aborted)
      └──▶ archived (failed the training gate)

Each function returns the changed index, or None when the version is already where it was asked to go, so a
retried activity does not fail on its own earlier success.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from agent_sre.models.registry import IndexEntry, RegistryIndex, Stage, StageChange
from agent_sre.registry.errors import StageError, UnknownVersionError


@dataclass(frozen=True)
class Why:
    """Who asks for a stage change, why, and when."""

    by: str
    reason: str
    at: datetime

    def __post_init__(self) -> None:
        if not self.by.strip() or not self.reason.strip():
            raise StageError("a stage change needs who asks for it and why (by and reason)")


def entry(index: RegistryIndex, version: str) -> IndexEntry:
    try:
        return index.versions[version]
    except KeyError:
        known = sorted(index.versions)
        shown = ", ".join(known[:12]) + (f" and {len(known) - 12} more" if len(known) > 12 else "")
        raise UnknownVersionError(f"unknown model version {version!r}; registered: {shown or 'none'}") from None


def move(e: IndexEntry, to: Stage, why: Why) -> None:
    e.history.append(StageChange(from_stage=e.stage, to_stage=to, by=why.by, reason=why.reason, at=why.at))
    e.stage = to


def _running_rollout(index: RegistryIndex) -> str | None:
    canaries = index.in_stage("canary")
    return canaries[0] if canaries else None


def start_canary(index: RegistryIndex, version: str, why: Why) -> RegistryIndex | None:
    e = entry(index, version)
    if e.stage == "canary":
        return None
    if e.stage != "candidate":
        raise StageError(f"{version} is {e.stage}: only a candidate can start a rollout")
    if (other := _running_rollout(index)) is not None:
        raise StageError(f"{other} is already in canary: one rollout at a time")
    if not index.in_stage("production"):
        raise StageError("no version is in production to compare the candidate against")
    move(e, "canary", why)
    return index


def end_canary(index: RegistryIndex, version: str, to: Stage, why: Why) -> RegistryIndex | None:
    """A rollout ends without promotion: rolled_back (it was found wanting) or candidate (it was aborted)."""
    if to not in ("rolled_back", "candidate"):
        raise StageError(f"a rollout ends in rolled_back or candidate, not {to}")
    e = entry(index, version)
    if e.stage == to:
        return None
    if e.stage != "canary":
        raise StageError(f"{version} is {e.stage}, not canary: it is not in a rollout")
    move(e, to, why)
    return index


def archive(index: RegistryIndex, version: str, why: Why) -> RegistryIndex | None:
    """A candidate that will not be rolled out (it failed the training gate) is archived with the reason."""
    e = entry(index, version)
    if e.stage == "archived":
        return None
    if e.stage != "candidate":
        raise StageError(f"{version} is {e.stage}: only a candidate can be archived")
    move(e, "archived", why)
    return index


def promote(index: RegistryIndex, version: str, why: Why, ending_rollout: bool = False) -> RegistryIndex | None:
    """`version` becomes production and the current production is archived, in the same index write."""
    e = entry(index, version)
    if e.stage == "production":
        return None
    running = _running_rollout(index)
    if e.stage == "canary" and not ending_rollout:
        raise StageError(f"{version} is in a rollout: promote it with `agent-sre rollout promote --full`")
    if running is not None and running != version:
        raise StageError(f"a rollout of {running} is running: finish or abort it first (`agent-sre rollout status`)")
    for old in index.in_stage("production"):
        move(index.versions[old], "archived", Why(why.by, f"replaced by {version}: {why.reason}", why.at))
    move(e, "production", why)
    return index


def rollback(index: RegistryIndex, why: Why) -> tuple[RegistryIndex, str, str]:
    """Production goes to rolled_back and the version it replaced comes back. Returns (index, from, to)."""
    if (running := _running_rollout(index)) is not None:
        raise StageError(f"a rollout of {running} is running: roll it back with `agent-sre rollout rollback`")
    current = index.in_stage("production")
    if not current:
        raise StageError("no version is in production")
    previous = [(e.history[-1].at, v) for v, e in index.versions.items()
                if e.stage == "archived" and e.history and e.history[-1].from_stage == "production"]
    if not previous:
        raise StageError(f"no earlier production version to roll {current[0]} back to")
    _, restored = max(previous)
    move(index.versions[current[0]], "rolled_back", why)
    move(index.versions[restored], "production", why)
    return index, current[0], restored
