"""Helpers for the workload-model and fault tests: an environment of the in-process simulator, reached through
the official Kubernetes client (the same code path as over HTTP), with the agent's real tools for fixes."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client import ApiClient

from agent_sre.faults import inject
from agent_sre.faults.oracle import observe, snapshot
from agent_sre.models.endings import Termination
from agent_sre.models.scenario import Scenario
from agent_sre.models.tools import TOOL_SPECS, ToolCall, ToolResult
from agent_sre.models.verdict import HealthSnapshot, Verdict
from agent_sre.simulator import later
from agent_sre.simulator.cluster import Cluster, Obj
from agent_sre.simulator.simulator import Simulator
from agent_sre.simulator.transport import in_process_api_client
from agent_sre.tools.context import ToolContext
from agent_sre.tools.executor import execute

INJECT_SETTLE_S = 180.0  # simulated time for a fault to show (crash loops, back-offs, rollouts)
FIX_SETTLE_S = 600.0  # simulated time for a fix to roll out and prove itself (longer than any back-off)

_names = itertools.count()


@dataclass
class Env:
    """One isolated environment with one app installed."""

    sim: Simulator
    name: str
    app: str
    api: ApiClient = field(init=False)
    keys: itertools.count = field(default_factory=itertools.count)
    ending: Termination | None = None  # set by a `finish` or `escalate` the test ran: the oracle judges it too
    writes: int = 0

    def __post_init__(self) -> None:
        self.api = in_process_api_client(self.sim, self.name)

    @property
    def cluster(self) -> Cluster:
        return self.sim.env(self.name)

    @property
    def ns(self) -> str:
        return self.app

    def advance(self, seconds: float) -> None:
        self.sim.advance(self.name, seconds)

    def tool(self, call: ToolCall) -> ToolResult:
        ctx = ToolContext(api=self.api, namespace=self.ns, idempotency_key=f"{self.name}-{next(self.keys)}",
                          max_chars=20000, approved=True)  # as in training: a high-risk fix runs unasked
        result = execute(call, ctx)
        if call.tool in ("finish", "escalate"):
            self.ending = "finished" if call.tool == "finish" else "escalated"
        elif result.ok and TOOL_SPECS[call.tool].write:
            self.writes += 1
        return result

    def tools(self, calls: list[ToolCall]) -> list[ToolResult]:
        results = [self.tool(call) for call in calls]
        for call, result in zip(calls, results, strict=True):
            assert result.ok, f"{call.tool} {call.args}: {result.output}"
        return results

    def pods(self, service: str | None = None) -> list[Obj]:
        pods = self.cluster.list("pods", self.ns)
        if service is not None:
            pods = [p for p in pods if (p["metadata"].get("labels") or {}).get("app") == service]
        return sorted(pods, key=lambda p: p["metadata"]["name"])

    def get(self, resource: str, name: str) -> Obj:
        self.cluster.sync()
        obj = self.cluster.get(resource, self.ns, name)
        assert obj is not None, f"{resource}/{name} not found"
        return obj

    def events(self, reason: str | None = None, about: str | None = None) -> list[Obj]:
        self.cluster.sync()
        return [e for e in self.cluster.list("events", self.ns)
                if (reason is None or e["reason"] == reason)
                and (about is None or e["involvedObject"]["name"].startswith(about))]

    def logs(self, pod: str, container: str | None = None, which: str = "current") -> list[str]:
        self.cluster.sync()
        container = container or next(iter(self.get("pods", pod)["spec"]["containers"]))["name"]
        return list(self.cluster.logs[(self.ns, pod, container)][which])

    def snapshot(self) -> HealthSnapshot:
        return snapshot(self.api, self.ns, self.app)

    def observe(self, scenario: Scenario, baseline: HealthSnapshot) -> Verdict:
        return observe(self.api, scenario, baseline, self.ending, self.writes)


def new_env(sim: Simulator, app: str = "shop", seed: int = 0, apps: list[str] | None = None, **kw: Any) -> Env:
    """An environment with `app` installed (and `apps` beside it, when given: `app` is the one the Env acts on)."""
    name = f"t{next(_names)}"
    sim.create_env(name, apps=apps or [app], seed=seed, **kw)
    return Env(sim, name, app)


def injected(sim: Simulator, scenario: Scenario) -> tuple[Env, HealthSnapshot]:
    """A fresh environment with the scenario's faults injected (every app it names installed; those that arrive
    later held by the environment and arrived too), developed, and the oracle's baseline taken."""
    env = new_env(sim, scenario.app, scenario.seed, apps=scenario.apps)
    inject(env.api, scenario)
    later.hold(sim, env.name, scenario)
    env.advance(INJECT_SETTLE_S + max((f.delay_s for f in scenario.faults), default=0.0))
    return env, snapshot(env.api, scenario.namespace, scenario.app, neighbours=scenario.neighbours)
