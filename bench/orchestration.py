"""Orchestration benchmark: the same simulated episodes with the activities called directly, and through Temporal.

Both run exactly the same activity functions (create environment and inject, whose snapshot is the baseline,
policy decisions, tool calls, observe, reward, store) against the same embedded stack (simulator over HTTP,
SeaweedFS); the difference is Temporal: workflow tasks, history, (de)serialisation, task-queue dispatch. Settle
windows are zero so waiting does not hide the overhead.

  direct    activities called in-process (ActivityEnvironment), in the workflows' order
  temporal  SimulatedIncidentWorkflow + child IncidentRemediationWorkflow, workers in this process, for each
            tool execution mode (TaskQueues.tool_execution: `queue`, `local`)

Sequential: each scenario directly and then through Temporal in each mode, back to back, so that the load other
work puts on the machine weighs on all alike. Per-step overhead = (temporal episode time - direct episode time of
the same scenario) / steps, median over episodes. Concurrent (for throughput): all episodes at once, at most
--concurrency in flight; CPU time per episode by process says where the throughput goes.
Targets (issue 3): overhead <= 10 ms per step median, >= 20 episodes/s on 2 cores.

    .venv/bin/python bench/orchestration.py [--episodes 50] [--concurrency 32] [--no-docs]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta
from functools import cache, partial
from pathlib import Path
from typing import get_args

from rich.console import Console
from rich.table import Table
from temporalio import activity, workflow
from temporalio.testing import ActivityEnvironment
from temporalio.worker import Worker

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchdocs import provenance, write_section

from agent_sre import stack
from agent_sre.activities import rewards
from agent_sre.config import Settings, get_settings
from agent_sre.episodes import interleave_by_fault, run_episode, run_episodes
from agent_sre.models.episode import EpisodeRequest, InjectRequest
from agent_sre.models.incident import Incident, RemediationLimits
from agent_sre.models.policy import ChatMessage, PolicyDecision
from agent_sre.models.remediation import (
    ObserveRequest,
    PolicyRef,
    PolicyRequest,
    RewardRequest,
    ToolExecution,
)
from agent_sre.models.scenario import Scenario
from agent_sre.models.tools import ToolInvocation
from agent_sre.models.trajectory import Step, Trajectory
from agent_sre.scenarios import load_scenarios
from agent_sre.stack.isolated import isolated_env
from agent_sre.stack.manager import pid_file
from agent_sre.temporal import connect
from agent_sre.workers.main import Activities, build_activities, build_workers, settle_heap
from agent_sre.workflows.simulated import environment_name

LIMITS = RemediationLimits(settle_s=0.0)
WARM_UP = 5
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
FLOOR_ACTIVITIES = 20
FLOOR_QUEUE, FLOOR_OTHER_QUEUE = "bench-floor", "bench-floor-other"
# How a workflow can run an activity, cheapest last: through matching to another queue's worker, on its own queue
# (eager dispatch: handed back with the workflow task's reply), as a local activity (no server round trip).
FLOOR_KINDS = {"activity on another queue": FLOOR_OTHER_QUEUE, "activity on its own queue (eager)": FLOOR_QUEUE,
               "local activity": None}


@activity.defn
def noop(x: int) -> int:
    return x


@workflow.defn(sandboxed=False)
class FloorWorkflow:
    """The dev server's own floor: a workflow of no-op activities, nothing of ours in it."""

    @workflow.run
    async def run(self, n: int, queue: str | None) -> int:
        for i in range(n):
            if queue is None:
                await workflow.execute_local_activity(noop, i, start_to_close_timeout=timedelta(seconds=30))
            else:
                await workflow.execute_activity(noop, i, start_to_close_timeout=timedelta(seconds=30),
                                                task_queue=queue)
        return n


async def round_trips_ms(settings: Settings, runs: int = 3) -> dict[str, tuple[float, float, float]]:
    """Per kind of activity, over `runs` workflows of FLOOR_ACTIVITIES no-ops: the median wall time per activity,
    and the CPU time per activity of this process (the SDK: workflow activations, the worker's Rust core) and of
    the Temporal server, all in ms. Nothing of ours runs in them: this is what the SDK and the server cost alone."""
    client = await connect(settings)
    executor = ThreadPoolExecutor(4)
    async with (Worker(client, task_queue=FLOOR_QUEUE, workflows=[FloorWorkflow], activities=[noop],
                       activity_executor=executor),
                Worker(client, task_queue=FLOOR_OTHER_QUEUE, activities=[noop], activity_executor=executor)):
        floor = {}
        for kind, queue in FLOOR_KINDS.items():
            times, before = [], cpu_seconds(settings)
            for _ in range(runs):
                began = time.perf_counter()
                await client.execute_workflow(FloorWorkflow.run, args=[FLOOR_ACTIVITIES, queue],
                                              id=f"floor-{uuid.uuid4().hex}", task_queue=FLOOR_QUEUE)
                times.append((time.perf_counter() - began) * 1000 / FLOOR_ACTIVITIES)
            after = cpu_seconds(settings)
            cpu = {name: (after[name] - before[name]) * 1000 / (runs * FLOOR_ACTIVITIES) for name in before}
            floor[kind] = (statistics.median(times), cpu["bench process"], cpu.get("temporal", 0.0))
    return floor


HEADING = "## Orchestration (bench/orchestration.py)"
NOTES = """- `queue`: every tool call and the observation are activities on `agent-tools`, two matching hops each.
  `local`: reads run as local activities beside the workflow (results recorded as markers when the workflow task
  completes), writes as activities on the workflow's own queue (eager dispatch: one hop), so a rule-based
  policy's investigation costs no server round trip until it writes. Rule-based decisions, reward, routing and
  storing are local activities in both modes; a zero settle window sets no timer (a durable timer costs a
  timer-queue round trip even at zero length).
- The bench's process runs the workers as `agent-sre worker` does: after start-up its heap is frozen and young
  collections run every 10,000 allocations (`settle_heap`); its garbage collection is timed by `gc.callbacks`.
- The dev server (agent_sre/stack/temporal.py) raises `history.transferProcessorMaxPollRPS` from its default, 20,
  which delayed every hop once a workflow got going, and runs SQLite in WAL mode with synchronous=normal.
"""


def direct_episode(scenario: Scenario, ref: PolicyRef,
                   tool_seconds: dict[str, float] | None = None) -> tuple[float, int]:
    """One episode with every activity called in-process, in the workflow's order. Returns (seconds, steps)."""
    began = time.perf_counter()
    t = direct_trajectory(scenario, ref, tool_seconds=tool_seconds)
    return time.perf_counter() - began, len(t.steps)


@cache
def direct_activities() -> Activities:
    """The activities the direct mode calls, built once, as a worker builds them."""
    return build_activities(get_settings())


def direct_trajectory(scenario: Scenario, ref: PolicyRef,
                      decide: Callable[[PolicyRequest], PolicyDecision] | None = None,
                      limits: RemediationLimits = LIMITS, tool_seconds: dict[str, float] | None = None) -> Trajectory:
    """`direct_episode`'s episode; `decide` replaces the policy activity (a policy configured by the caller).
    `tool_seconds` adds up the wall time of each tool's calls, by tool."""
    run, a = ActivityEnvironment().run, direct_activities()
    decide = decide or (lambda req: run(a.policy.decide_next_action, req))
    name = environment_name(f"direct-{uuid.uuid4().hex}")
    injected = run(a.simulation.create_and_inject, InjectRequest(environment=name, scenario=scenario))
    env = injected.environment
    incident = Incident(id=uuid.uuid4().hex[:12], source="simulation", alert=injected.alert,
                        namespace=scenario.namespace, kubeconfig=env.server, scenario=scenario, limits=limits)
    baseline = injected.health or run(a.observer.snapshot_cluster, incident)  # as the remediation takes it
    t = Trajectory(incident=incident, workflow_id=f"direct-{incident.id}", run_id="direct", policy=ref.name,
                   model_version=ref.version, started_at=datetime.now(UTC))
    t.termination = "step_limit"
    while len(t.steps) < limits.max_steps:
        decision = decide(PolicyRequest(policy=ref, trajectory=t.for_policy()))
        t.conversation += [*decision.new_messages, ChatMessage(role="assistant", content=decision.completion)]
        step = Step(index=len(t.steps), decision=decision, at=datetime.now(UTC))
        t.steps.append(step)
        if decision.action is None:
            continue
        if t.end(decision.action) is not None:  # finish or escalate, as the workflow's loop ends
            break
        began = time.perf_counter()
        step.result = run(a.tools.run_tool, ToolInvocation(call=decision.action, namespace=incident.namespace,
                                                           kubeconfig=env.server,
                                                           idempotency_key=f"{t.workflow_id}/{step.index}"))
        if tool_seconds is not None:
            tool = decision.action.tool
            tool_seconds[tool] = tool_seconds.get(tool, 0.0) + time.perf_counter() - began
    t.mitigated_at = datetime.now(UTC)
    t.verdict = run(a.observer.observe, ObserveRequest(incident=incident, baseline=baseline,
                                                       termination=t.termination, writes=len(t.writes)))
    t.ended_at = datetime.now(UTC)
    t.reward = run(rewards.compute_reward, RewardRequest(trajectory=t, config=EpisodeRequest(scenario=scenario).reward))
    run(a.trajectories.store_trajectory, t)
    run(a.simulation.delete_environment, env.name)
    return t


def cpu_seconds(settings: Settings) -> dict[str, float]:
    """CPU time used so far by this process (workers, client, direct episodes) and by each stack process."""
    used = {"bench process": time.process_time()}
    for component in stack.select(None):
        pid = pid_file(settings, component).live_pid()
        if pid is not None:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            used[component.name] = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime
    return used


class GcClock:
    """CPU seconds this process has spent collecting garbage since it was made (a collection runs in the thread
    that triggered it, so that thread's clock times it)."""

    def __init__(self) -> None:
        self.seconds, self._began = 0.0, 0.0
        gc.callbacks.append(self._tick)

    def _tick(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.thread_time()
        else:
            self.seconds += time.thread_time() - self._began


GC_CLOCK = GcClock()


async def cpu_per_episode(settings: Settings, n: int, run: Callable[[], Awaitable[object]],
                          ) -> tuple[float, dict[str, float], float]:
    """Wall seconds of `run`, the CPU milliseconds per episode it cost each process, and of the bench process's
    the milliseconds per episode spent collecting garbage."""
    before, gc_before, began = cpu_seconds(settings), GC_CLOCK.seconds, time.perf_counter()
    await run()
    wall, after = time.perf_counter() - began, cpu_seconds(settings)
    return (wall, {name: (after[name] - before[name]) * 1000 / n for name in before},
            (GC_CLOCK.seconds - gc_before) * 1000 / n)


async def measure(settings: Settings, picked: list[Scenario], ref: PolicyRef, concurrency: int,
                  ) -> tuple[dict[str, list[tuple[float, int]]], dict[str, tuple[float, dict[str, float], float]],
                             dict[str, float]]:
    """Sequential (seconds, steps) per episode and mode, concurrent (wall s, CPU ms per episode) per mode, and the
    sequential direct episodes' seconds in each tool."""
    modes = {mode: settings.model_copy(update={"tool_execution": mode}) for mode in get_args(ToolExecution)}
    client = await connect(settings)
    async with AsyncExitStack() as workers:
        for worker in build_workers(client, settings):  # one set of workers serves both modes: it is per request
            await workers.enter_async_context(worker)
        settle_heap()  # as `agent-sre worker` does

        async def temporal(mode: ToolExecution, scenario: Scenario) -> tuple[float, int]:
            began = time.perf_counter()
            result = await run_episode(client, modes[mode], scenario, ref, f"bench-{mode}-{uuid.uuid4().hex}", LIMITS)
            return time.perf_counter() - began, result.outcome.steps

        for scenario in picked[:WARM_UP]:  # imports, connection pools, the sandbox's module cache
            await asyncio.to_thread(direct_episode, scenario, ref)
            for mode in modes:
                await temporal(mode, scenario)
        sequential: dict[str, list[tuple[float, int]]] = {"direct": [], **{mode: [] for mode in modes}}
        tool_seconds: dict[str, float] = {}
        for scenario in picked:
            sequential["direct"].append(await asyncio.to_thread(direct_episode, scenario, ref, tool_seconds))
            for mode in modes:
                sequential[mode].append(await temporal(mode, scenario))

        def direct_threads() -> None:
            with ThreadPoolExecutor(concurrency) as pool:
                list(pool.map(lambda s: direct_episode(s, ref), picked))

        n = len(picked)
        concurrent = {"direct": await cpu_per_episode(settings, n, lambda: asyncio.to_thread(direct_threads))}
        for mode, mode_settings in modes.items():
            concurrent[mode] = await cpu_per_episode(settings, n, partial(run_episodes, client, mode_settings, picked,
                                                                          n, ref, concurrency, limits=LIMITS))
    return sequential, concurrent, tool_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args()
    console = Console(width=140)
    ref = PolicyRef(name="runbook")
    scenarios = interleave_by_fault(load_scenarios())
    picked = [scenarios[i % len(scenarios)] for i in range(args.episodes)]
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as data_dir:
        os.environ.update(isolated_env(Path(data_dir)))
        get_settings.cache_clear()
        settings = get_settings()
        asyncio.run(stack.up(settings))
        try:
            floor = asyncio.run(round_trips_ms(settings))
            sequential, concurrent, tool_seconds = asyncio.run(measure(settings, picked, ref, args.concurrency))
        finally:
            asyncio.run(stack.down(settings))
    load_after = os.getloadavg()[0]

    n, direct = args.episodes, sequential["direct"]
    rows: list[tuple[str, float, float | None]] = []  # mode, wall s, median overhead ms/step
    for mode, runs in sequential.items():
        overhead = None if mode == "direct" else statistics.median(
            max(0.0, (t - d) / max(steps, 1)) * 1000 for (t, steps), (d, _) in zip(runs, direct, strict=True))
        rows.append((label(mode, "sequential"), sum(t for t, _ in runs), overhead))
    for mode, (wall, _, _) in concurrent.items():
        rows.append((label(mode, f"{args.concurrency} threads" if mode == "direct" else
                           f"{args.concurrency} concurrent"), wall, None))
    processes = list(next(iter(concurrent.values()))[1])

    table = Table("mode", "episodes", "wall s", "episodes/s", "overhead ms/step (median)", title="Orchestration")
    for mode, wall, ovh in rows:
        table.add_row(mode, str(n), f"{wall:.1f}", f"{n / wall:.2f}", f"{ovh:.1f}" if ovh is not None else "")
    console.print(table)
    cpu = Table("concurrent run", *processes, "total", "of the bench process: GC", title="CPU ms per episode")
    for mode, (_, used, gc_ms) in concurrent.items():
        cpu.add_row(label(mode, ""), *(f"{used[p]:.1f}" for p in processes), f"{sum(used.values()):.1f}",
                    f"{gc_ms:.1f}")
    console.print(cpu)
    direct_wall = sum(t for t, _ in direct)
    tool_rows = [(tool, seconds * 1000 / n, seconds / direct_wall)
                 for tool, seconds in sorted(tool_seconds.items(), key=lambda item: -item[1])]
    tools_table = Table("tool", "ms per episode", "of the episode", title="Direct episodes (sequential): time in tools")
    for tool, ms, share in tool_rows:
        tools_table.add_row(tool, f"{ms:.1f}", f"{share:.0%}")
    console.print(tools_table)
    for kind, (ms, sdk_ms, server_ms) in floor.items():
        console.print(f"floor, {kind}: {ms:.1f} ms per activity; CPU ms: this process {sdk_ms:.2f}, "
                      f"server {server_ms:.2f}")
    console.print(f"1-minute load average {load_before:.2f} before, {load_after:.2f} after")

    best_overhead = min(o for _, _, o in rows if o is not None)
    cores = os.cpu_count() or 1
    best_rate = max(n / wall for mode, (wall, _, _) in concurrent.items() if mode != "direct")
    steps = statistics.mean(s for _, s in direct)
    direct_cpu = sum(concurrent["direct"][1].values())
    orchestration_cpu = {mode: sum(used.values()) - direct_cpu for mode, (_, used, _) in concurrent.items()
                         if mode != "direct"}
    local_sdk_ms, local_server_ms = floor["local activity"][1:]
    body = provenance() + (
        f"1-minute load average {load_before:.2f} before the run (other work on the machine) and {load_after:.2f} at "
        "its end (the stack's processes and the bench's own). Compare machines by the dev-server floor below.\n"
        f"\nEpisodes: the runbook policy on the training catalog (interleaved by fault type), settle windows 0, "
        f"{steps:.1f} steps per episode on average; everything on the embedded stack of this machine (Temporal dev "
        "server, SeaweedFS, the simulator over HTTP; workers and client in the bench's process). Sequential rows: "
        "each scenario directly and then in each mode, back to back; wall s is the sum of that mode's episodes.\n\n"
        "| mode | episodes | wall s | episodes/s | orchestration overhead, ms/step (median) |\n"
        "|---|---:|---:|---:|---:|\n"
        + "".join(f"| {m} | {n} | {w:.1f} | {n / w:.2f} | {f'{o:.1f}' if o is not None else ''} |\n"
                  for m, w, o in rows)
        + "\nCPU time per episode in the concurrent runs, by process (ms):\n\n"
        + f"| run | {' | '.join(processes)} | total | of the bench process: garbage collection |\n"
        + f"|---|{'---:|' * (len(processes) + 2)}\n"
        + "".join(f"| {label(mode, '')} | {' | '.join(f'{used[p]:.1f}' for p in processes)} | "
                  f"{sum(used.values()):.1f} | {gc_ms:.1f} |\n" for mode, (_, used, gc_ms) in concurrent.items())
        + f"\nWhere the sequential direct episodes' time goes ({direct_wall * 1000 / n:.0f} ms an episode), by "
          "tool (wall time of its calls; the rest is setting up, deciding, observing, rewarding, storing):\n\n"
          "| tool | ms per episode | of the episode |\n|---|---:|---:|\n"
        + "".join(f"| `{tool}` | {ms:.1f} | {share:.0%} |\n" for tool, ms, share in tool_rows)
        + f"\nThe dev server's floor on this machine (a workflow of {FLOOR_ACTIVITIES} no-op activities, median of "
          "3, per activity; CPU over the 3 workflows, per activity, the server's including each workflow's start and "
          "completion):\n\n"
          "| how the workflow runs an activity | ms | CPU ms, bench process (SDK: worker and client) "
          "| CPU ms, Temporal server |\n"
          "|---|---:|---:|---:|\n"
        + "".join(f"| {kind} | {ms:.1f} | {sdk_ms:.2f} | {server_ms:.2f} |\n"
                  for kind, (ms, sdk_ms, server_ms) in floor.items())
        + f"\n- Overhead target <= 10 ms/step: {'met' if best_overhead <= 10 else 'NOT met'} ({best_overhead:.1f}).\n"
        + f"- Throughput target >= 20 episodes/s: {'met' if best_rate >= 20 else 'NOT met'} ({best_rate:.2f}).\n"
        + "- At the CPU time per episode measured here (contention inflates it), even with every core free the "
          "rate could not exceed cores x 1000 / CPU ms: "
        + ", ".join(f"{label(mode, '')} {cores * 1000 / sum(used.values()):.1f}"
                    for mode, (_, used, _) in concurrent.items()) + f" episodes/s on {cores} cores.\n"
        + "- Orchestration's own CPU, the temporal run's total less the direct run's: "
        + ", ".join(f"{label(mode, '')} {ms:.0f} ms" for mode, ms in orchestration_cpu.items())
        + f" per episode. Were the episodes free, {cores} cores could orchestrate at most "
        + ", ".join(f"{cores * 1000 / ms:.1f}" for ms in orchestration_cpu.values())
        + " episodes/s. A step is at least two activities (the decision, the tool); a no-op local activity alone "
          f"costs this process {local_sdk_ms:.2f} CPU ms, and the floor's workflow of {FLOOR_ACTIVITIES} of them "
          f"(start, workflow tasks, markers, completion) {local_server_ms * FLOOR_ACTIVITIES:.0f} CPU ms of the "
          "server's; an episode is two workflows.\n"
        + NOTES)
    if not args.no_docs:
        write_section(HEADING, body)


def label(mode: str, how: str) -> str:
    name = "direct" if mode == "direct" else f"temporal, tools `{mode}`"
    return f"{name} ({how})" if how else name


if __name__ == "__main__":
    main()
