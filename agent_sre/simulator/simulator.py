"""Many isolated simulated clusters in one process, so thousands of training episodes can run side by side."""

from __future__ import annotations

import itertools
import json
import os
import re
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from agent_sre.kube.errors import ApiError
from agent_sre.kube.times import rfc3339
from agent_sre.simulator.cluster import Cluster, SimClock, clock_start

ENV_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class Simulator:
    """A registry of named environments (one `Cluster` each) and the lock that serialises requests to them.

    Requests from the HTTP server and from in-process API clients (possibly on several threads) both hold
    `lock` while a cluster syncs and serves, so controllers never see a half-applied write.

    Environments live only in memory. With a `ledger` (a JSON file) the simulator remembers their names across
    restarts, so a request for one that a restart lost is told so (`absence`) rather than a bare "not found".
    """

    def __init__(self, speed: float = 1.0, ledger: Path | None = None) -> None:
        self.speed = speed
        self.envs: dict[str, Cluster] = {}
        self.lock = threading.RLock()
        self._ids = itertools.count(1)
        self._ledger = ledger
        self.lost: dict[str, str] = _lost_at_start(ledger) if ledger is not None else {}
        self._record()

    def _new_name(self) -> str:
        while True:
            name = f"env-{next(self._ids)}"
            if name not in self.envs and name not in self.lost:  # an old incident's name never means a new env
                return name

    def _record(self) -> None:
        """Write the ledger: the environments held now and those lost with earlier restarts."""
        if self._ledger is None:
            return
        self._ledger.parent.mkdir(parents=True, exist_ok=True)
        partial = self._ledger.with_suffix(".partial")
        partial.write_text(json.dumps({"environments": sorted(self.envs), "lost": self.lost}, indent=1))
        os.replace(partial, self._ledger)

    def absence(self, name: str) -> ApiError:
        """Why there is no environment `name`: lost with a restart (410 Gone: it will not come back, and it is no
        object's 404) or never created, or deleted (404)."""
        if name in self.lost:
            return ApiError(410, "Gone", f"simulated environment {name!r} is gone: the simulator restarted at "
                                         f"{self.lost[name]} and environments live only in its memory; create "
                                         "a new one")
        known = ", ".join(sorted(self.envs)) or "none"
        return ApiError(404, "NotFound", f"no simulated environment named {name!r} (known: {known})")

    def _check_new_name(self, name: str) -> None:
        if not ENV_NAME.match(name):
            raise ValueError(f"invalid environment name {name!r}: use lowercase letters, digits and '-' "
                             "(at most 63 characters)")
        if name in self.envs:
            raise ValueError(f"environment {name!r} already exists")

    def add_env(self, cluster: Cluster) -> Cluster:
        """Register an already built cluster (e.g. one without the workload model, for API-level tests)."""
        with self.lock:
            self._check_new_name(cluster.name)
            self.envs[cluster.name] = cluster
            self.lost.pop(cluster.name, None)
            self._record()
        return cluster

    def create_env(self, name: str | None = None, apps: Sequence[str] = ("shop",), seed: int = 0,
                   speed: float | None = None, clock: str = "fixed") -> Cluster:
        """A new cluster running the workload model with `apps` installed; `speed` defaults to the simulator's.
        `clock`: where its clock starts, "fixed" (SIM_EPOCH, reproducible) or "wall" (now, see `clock_start`)."""
        # Imported here: the workload model is heavier than the API layer and not needed to serve requests.
        from agent_sre.simulator import install, workload

        if isinstance(apps, str):
            raise ValueError("apps must be a list of app names, not a single string")
        effective_speed = self.speed if speed is None else speed
        if effective_speed < 0:  # 0 is a manual clock: only `advance` moves it (training episodes)
            raise ValueError(f"speed must be zero or positive, got {effective_speed}")
        start = clock_start(clock)
        with self.lock:
            name = name or self._new_name()
            self._check_new_name(name)
            cluster = Cluster(name, clock=SimClock(speed=effective_speed, start=start))
            workload.attach(cluster)
            for app_name in apps:
                install.install(cluster, app_name, seed=seed)
            cluster.sync()
            return self.add_env(cluster)

    def env(self, name: str) -> Cluster:
        try:
            return self.envs[name]
        except KeyError:
            raise KeyError(self.absence(name).message) from None

    def delete_env(self, name: str) -> None:
        with self.lock:
            self.env(name)
            del self.envs[name]
            self._record()

    def advance(self, name: str, seconds: float) -> float:
        """Move one environment's clock forward and let its controllers catch up; returns the new sim time. A timer
        due on the way fires at its time, the cluster synced there, not at the end of the jump: a fault that arrives
        later has had the rest of the jump to develop."""
        if seconds < 0:
            raise ValueError("the simulated clock cannot go backwards")
        with self.lock:
            cluster = self.env(name)
            end = cluster.clock.now() + seconds
            while cluster.timers and cluster.timers[0].at < end:
                cluster.clock.advance(max(cluster.timers[0].at - cluster.clock.now(), 0.0))
                cluster.sync()
            cluster.clock.advance(max(end - cluster.clock.now(), 0.0))
            cluster.sync()
            return cluster.clock.now()


def _lost_at_start(ledger: Path) -> dict[str, str]:
    """The environments a previous run held (lost now, as of this start) and those lost before it."""
    try:
        previous = json.loads(ledger.read_text())
    except (FileNotFoundError, ValueError):  # none yet, or unreadable: nothing to tell of
        return {}
    now = rfc3339(time.time())
    return {**previous.get("lost", {}), **{name: now for name in previous.get("environments", [])}}
