"""Simulator benchmark: training episodes per second, in one process and over HTTP, and tool-call latency.

One episode is what a training rollout costs the simulator and the tools: create an environment with the app
on a manual clock (as training does: simulated time moves only when the episode advances it),
inject the scenario's fault, let it develop (simulated time), take the oracle's baseline, make 8 investigation
tool calls (the reads an agent starts with), apply the ground-truth fix through the tools, let it settle, ask
the oracle, delete the environment. Episodes cycle through the training catalog (`load_scenarios()`).

  in-process  the simulator and the tools in this process (`transport.in_process_api_client`)
  http        the simulator in its own process (`agent-sre sim serve`), the tools over HTTP via a kubeconfig

Targets (issue 2): >= 200 episodes/s in-process, tool-call p99 <= 20 ms over HTTP, on 2 cores.
Prints a table and replaces the `## Simulator (bench/simulator.py)` section of docs/benchmarks.md.

    .venv/bin/python bench/simulator.py [--episodes 2000] [--http-episodes 300] [--no-docs]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from kubernetes.client import ApiClient
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchdocs import DOCS, provenance, write_section

from agent_sre.faults import FAULTS, inject
from agent_sre.faults.oracle import observe, snapshot
from agent_sre.models.scenario import Scenario
from agent_sre.models.tools import TOOL_SPECS, ToolCall
from agent_sre.scenarios import load_scenarios
from agent_sre.simulator.client import SimulatorClient
from agent_sre.simulator.server import write_kubeconfig
from agent_sre.simulator.simulator import Simulator
from agent_sre.simulator.transport import in_process_api_client
from agent_sre.tools import ToolContext, execute
from agent_sre.tools.client import api_client

SECTION = "## Simulator (bench/simulator.py)"
INJECT_SETTLE_S = 300.0  # simulated seconds for the fault to show (crash loops, back-offs, alerts)
FIX_SETTLE_S = 1800.0  # simulated seconds after the fix (rollouts, image pulls, probes, back-offs expire)
TARGET_EPISODES_PER_S = 200.0
TARGET_HTTP_P99_MS = 20.0
INVESTIGATION_CALLS = 8
STAGES = ("create env", "inject", "settle (simulate)", "oracle", "8 tool calls", "fix (tool calls)", "delete env")


class Transport(Protocol):
    def create(self, name: str, scenario: Scenario) -> ApiClient: ...
    def advance(self, name: str, seconds: float) -> None: ...
    def delete(self, name: str) -> None: ...


class InProcess:
    def __init__(self) -> None:
        self.simulator = Simulator(speed=0)  # a manual clock, as training runs it: only `advance` moves time
        self._clients: dict[str, ApiClient] = {}

    def create(self, name: str, scenario: Scenario) -> ApiClient:
        self.simulator.create_env(name, apps=[scenario.app], seed=scenario.seed)
        if name not in self._clients:  # the client addresses the env by name, so it outlives a re-created env
            self._clients[name] = in_process_api_client(self.simulator, name)
        return self._clients[name]

    def advance(self, name: str, seconds: float) -> None:
        self.simulator.advance(name, seconds)

    def delete(self, name: str) -> None:
        self.simulator.delete_env(name)


class Http:
    """The simulator as a separate `agent-sre sim serve` process, as the dev stack runs it."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        cli = Path(sys.executable).parent / "agent-sre"
        self.process = subprocess.Popen(
            [str(cli), "sim", "serve", "--port", str(port), "--kubeconfig-out", str(workdir / "default.yaml")],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "AGENT_SRE_DATA_DIR": str(workdir)})
        self.control = SimulatorClient(self.url)
        deadline = time.monotonic() + 60
        while not self.control.healthy():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the simulator did not start: {self.process.stderr.read().decode()[-2000:]}"
                                   if self.process.stderr else "the simulator did not start")
            time.sleep(0.1)

    def create(self, name: str, scenario: Scenario) -> ApiClient:
        self.control.create_env(name=name, apps=[scenario.app], seed=scenario.seed, speed=0)
        kubeconfig = self.workdir / f"{name}.yaml"
        if not kubeconfig.exists():  # written once per name, so the cached client and its connections are reused
            write_kubeconfig(kubeconfig, f"{self.url}/envs/{name}", name)
        return api_client(kubeconfig)

    def advance(self, name: str, seconds: float) -> None:
        self.control.advance(name, seconds)

    def delete(self, name: str) -> None:
        self.control.delete_env(name)

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


@dataclass
class Run:
    mode: str
    episodes: int = 0
    seconds: float = 0.0
    outcomes: Counter[str] = field(default_factory=Counter)
    tool_ms: list[float] = field(default_factory=list)
    failed_calls: Counter[str] = field(default_factory=Counter)
    stages: dict[str, float] = field(default_factory=lambda: defaultdict(float))  # seconds per episode stage

    def stopwatch(self) -> Callable[[str], None]:
        """`lap(stage)` adds the time since the previous lap to `stage`."""
        last = time.perf_counter()

        def lap(stage: str) -> None:
            nonlocal last
            now = time.perf_counter()
            self.stages[stage] += now - last
            last = now

        return lap

    @property
    def rate(self) -> float:
        return self.episodes / self.seconds if self.seconds else 0.0

    def percentile(self, q: float) -> float:
        return statistics.quantiles(self.tool_ms, n=100, method="inclusive")[int(q) - 1] if self.tool_ms else 0.0


def investigation(ctx: ToolContext, scenario: Scenario) -> Generator[ToolCall, str | None, None]:
    """The 8 reads an agent starts with (about the first fault's target, the one a several-fault incident's alert
    names); the pod for `get_logs` is picked from the pod list, as an agent would."""
    target = scenario.faults[0].target
    pods = yield ToolCall(tool="list_pods")
    names = [line.split()[0] for line in (pods or "").splitlines()[1:] if line.strip()]
    pod = next((n for n in names if n.startswith(f"{target}-")), names[0] if names else target)
    yield ToolCall(tool="describe", args={"kind": "deployment", "name": target})
    yield ToolCall(tool="get_logs", args={"pod": pod, "tail": 50})
    yield ToolCall(tool="get_events")
    yield ToolCall(tool="get_endpoints", args={"service": target})
    yield ToolCall(tool="top")
    yield ToolCall(tool="rollout_history", args={"deployment": target})
    yield ToolCall(tool="list_chaos_experiments")


def episode(transport: Transport, scenario: Scenario, run: Run, name: str = "bench-0") -> None:
    clock = run.stopwatch()
    api = transport.create(name, scenario)
    clock("create env")
    inject(api, scenario)
    clock("inject")
    transport.advance(name, INJECT_SETTLE_S)
    clock("settle (simulate)")
    baseline = snapshot(api, scenario.namespace, scenario.app)
    clock("oracle")
    ctx = ToolContext(api=api, namespace=scenario.namespace, approved=True)  # a simulated episode: nobody approves
    calls, output = investigation(ctx, scenario), None  # the first send starts the generator
    for _ in range(INVESTIGATION_CALLS):
        call = calls.send(output)
        result = execute(call, ctx)
        output = result.output
        run.tool_ms.append(result.duration_ms)
        if not result.ok:
            run.failed_calls[call.tool] += 1
    clock("8 tool calls")
    for i, call in enumerate(scenario.ground_truth.fix):
        ctx.idempotency_key = f"{name}/{scenario.name}/fix-{i}"
        result = execute(call, ctx)
        run.tool_ms.append(result.duration_ms)
        if not result.ok:
            run.failed_calls[f"fix:{call.tool}"] += 1
    clock("fix (tool calls)")
    transport.advance(name, FIX_SETTLE_S)
    clock("settle (simulate)")
    truth = scenario.ground_truth  # ends as the ground truth does (a handover, where that is the right answer)
    writes = sum(TOOL_SPECS[call.tool].write for call in truth.fix)
    run.outcomes[observe(api, scenario, baseline, truth.expected_ending, writes).outcome] += 1
    clock("oracle")
    transport.delete(name)
    clock("delete env")


def measure(mode: str, transport: Transport, catalog: list[Scenario], n: int, warmup: int) -> Run:
    for i in range(warmup):  # builds the per-(app, seed) templates and warms caches and connections
        episode(transport, catalog[i % len(catalog)], Run(mode))
    run = Run(mode)
    start = time.perf_counter()
    for i in range(n):
        episode(transport, catalog[i % len(catalog)], run)
    run.seconds = time.perf_counter() - start
    run.episodes = n
    return run


def _faults(catalog: list[Scenario]) -> int:
    return len({f.fault for s in catalog for f in s.faults})


def table(runs: list[Run], catalog: list[Scenario]) -> Table:
    t = Table(title=f"Simulator episodes ({len(catalog)} catalog scenarios, {_faults(catalog)} fault types)")
    for col in ("mode", "episodes", "wall s", "episodes/s", "resolved", "tool calls", "tool p50 ms",
                "tool p99 ms"):
        t.add_column(col, justify="left" if col == "mode" else "right")
    for r in runs:
        t.add_row(r.mode, str(r.episodes), f"{r.seconds:.2f}", f"{r.rate:.1f}",
                  f"{r.outcomes['resolved']}/{r.episodes}", str(len(r.tool_ms)), f"{r.percentile(50):.2f}",
                  f"{r.percentile(99):.2f}")
    return t


def markdown(runs: list[Run], catalog: list[Scenario], load_before: float) -> str:
    """The section's body: provenance, what an episode is, the figures and the verdict on each target."""
    inproc = next((r for r in runs if r.mode == "in-process"), None)
    http = next((r for r in runs if r.mode == "http"), None)
    lines = [
        provenance().rstrip("\n"),
        f"1-minute load average {load_before:.2f} before and {os.getloadavg()[0]:.2f} after the run (other work on "
        "the machine slows it).",
        "",
        f"Episode: create env -> inject fault -> settle {INJECT_SETTLE_S:.0f} s simulated -> oracle baseline -> "
        f"{INVESTIGATION_CALLS} investigation tool calls -> ground-truth fix (tool calls) -> settle "
        f"{FIX_SETTLE_S:.0f} s simulated -> oracle verdict -> delete env. Episodes cycle through the "
        f"{len(catalog)} scenarios of the training catalog ({_faults(catalog)} of the {len(FAULTS)} fault types, "
        f"apps: {', '.join(sorted({s.app for s in catalog}))}), on a manual clock as in training (simulated time "
        "moves only by the settles). Over HTTP the simulator runs as its own process (`agent-sre sim serve`); tool "
        "latency is the client-side time of `tools.execute`, fixes included.",
        "",
        "| mode | episodes | wall s | episodes/s | resolved by the fix | tool calls | tool p50 ms | tool p99 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        lines.append(f"| {r.mode} | {r.episodes} | {r.seconds:.2f} | {r.rate:.1f} | {r.outcomes['resolved']}/"
                     f"{r.episodes} | {len(r.tool_ms)} | {r.percentile(50):.2f} | {r.percentile(99):.2f} |")
    lines += ["", "Where an episode's time goes (ms per episode):", "",
              "| mode | " + " | ".join(STAGES) + " |", "|---|" + "---:|" * len(STAGES)]
    for r in runs:
        lines.append(f"| {r.mode} | " + " | ".join(f"{1000 * r.stages[s] / max(r.episodes, 1):.2f}" for s in STAGES)
                     + " |")
    lines.append("")
    if inproc:
        lines.append(f"- In-process target >= {TARGET_EPISODES_PER_S:.0f} episodes/s: "
                     f"{'met' if inproc.rate >= TARGET_EPISODES_PER_S else 'NOT met'} ({inproc.rate:.1f}).")
    if http:
        lines.append(f"- HTTP tool-call p99 target <= {TARGET_HTTP_P99_MS:.0f} ms: "
                     f"{'met' if http.percentile(99) <= TARGET_HTTP_P99_MS else 'NOT met'} "
                     f"({http.percentile(99):.2f} ms).")
    for r in runs:
        if r.failed_calls:
            lines.append(f"- {r.mode}: tool calls answered ok=False (expected for e.g. logs of a pod whose image "
                         f"cannot be pulled): " + ", ".join(f"{k} x{v}" for k, v in sorted(r.failed_calls.items())))
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--episodes", type=int, default=2000, help="in-process episodes")
    parser.add_argument("--http-episodes", type=int, default=300, help="episodes over HTTP (0 to skip)")
    parser.add_argument("--warmup", type=int, default=0, help="untimed episodes per mode [default: one per scenario]")
    parser.add_argument("--no-docs", action="store_true", help="do not update docs/benchmarks.md")
    args = parser.parse_args()
    catalog = load_scenarios()  # the training catalog (scenario YAML under agent_sre/scenarios/catalog)
    warmup = args.warmup or len(catalog)
    console = Console(width=160)
    load_before = os.getloadavg()[0]
    runs = []
    if args.episodes:
        with console.status(f"in-process: {args.episodes} episodes"):
            runs.append(measure("in-process", InProcess(), catalog, args.episodes, warmup))
    if args.http_episodes:
        with tempfile.TemporaryDirectory() as tmp, console.status(f"http: {args.http_episodes} episodes"):
            http = Http(Path(tmp))
            try:
                runs.append(measure("http", http, catalog, args.http_episodes, warmup))
            finally:
                http.close()
    console.print(table(runs, catalog))
    body = markdown(runs, catalog, load_before)
    console.print(body)
    if not args.no_docs:
        write_section(SECTION, body)
        console.print(f"updated {DOCS.relative_to(DOCS.parent.parent)}")


if __name__ == "__main__":
    main()
