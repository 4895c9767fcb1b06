"""Orchestration benchmark: the same simulated episodes with the activities called directly, and through Temporal.

Both modes run exactly the same activity functions (create environment, inject and wait, baseline, policy
decisions, tool calls, observe, reward, store) against the same embedded stack (simulator over HTTP, SeaweedFS);
the difference is Temporal: workflow tasks, history, (de)serialisation, task-queue dispatch. Settle windows are
zero so waiting does not hide the overhead.

  direct    one episode at a time, activities called in-process (ActivityEnvironment)
  temporal  SimulatedIncidentWorkflow + child IncidentRemediationWorkflow, workers in this process;
            sequential (for per-step overhead) and concurrent (for throughput)

Per-step overhead = (temporal episode time - direct episode time) / steps, median over episodes.
Targets (issue 3): overhead <= 10 ms per step median, >= 20 episodes/s on 2 cores.

    .venv/bin/python bench/orchestration.py [--episodes 50] [--concurrency 32] [--no-docs]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rich.console import Console
from rich.table import Table
from temporalio import activity, workflow
from temporalio.testing import ActivityEnvironment
from temporalio.worker import Worker

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchdocs import provenance, write_section  # noqa: E402

from agent_sre import stack  # noqa: E402
from agent_sre.activities import observer, policy, rewards, simulation, tools, trajectories  # noqa: E402
from agent_sre.config import Settings, get_settings  # noqa: E402
from agent_sre.episodes import interleave_by_fault, run_episodes  # noqa: E402
from agent_sre.models.episode import EpisodeRequest, InjectRequest  # noqa: E402
from agent_sre.models.incident import Incident, RemediationLimits  # noqa: E402
from agent_sre.models.policy import ChatMessage  # noqa: E402
from agent_sre.models.remediation import ObserveRequest, PolicyRef, PolicyRequest, RewardRequest  # noqa: E402
from agent_sre.models.scenario import Scenario  # noqa: E402
from agent_sre.models.tools import ToolInvocation  # noqa: E402
from agent_sre.models.trajectory import Step, Trajectory  # noqa: E402
from agent_sre.scenarios import load_scenarios  # noqa: E402
from agent_sre.stack.isolated import isolated_env  # noqa: E402
from agent_sre.temporal import connect  # noqa: E402
from agent_sre.workers.main import build_workers  # noqa: E402

LIMITS = RemediationLimits(settle_s=0.0)
FLOOR_ACTIVITIES = 20


@activity.defn
def noop(x: int) -> int:
    return x


@workflow.defn(sandboxed=False)
class FloorWorkflow:
    """The dev server's own floor: a workflow of no-op activities, nothing of ours in it."""

    @workflow.run
    async def run(self, n: int) -> int:
        for i in range(n):
            await workflow.execute_activity(noop, i, start_to_close_timeout=timedelta(seconds=30))
        return n


async def activity_round_trip_ms(settings: Settings, runs: int = 3) -> float:
    client = await connect(settings)
    async with Worker(client, task_queue="bench-floor", workflows=[FloorWorkflow], activities=[noop],
                      activity_executor=ThreadPoolExecutor(4)):
        times = []
        for _ in range(runs):
            began = time.perf_counter()
            await client.execute_workflow(FloorWorkflow.run, FLOOR_ACTIVITIES, id=f"floor-{uuid.uuid4().hex}",
                                          task_queue="bench-floor")
            times.append((time.perf_counter() - began) * 1000 / FLOOR_ACTIVITIES)
    return statistics.median(times)
HEADING = "## Orchestration (bench/orchestration.py)"


def direct_episode(scenario: Scenario, ref: PolicyRef) -> tuple[float, int]:
    """One episode with every activity called in-process, in the workflow's order. Returns (seconds, steps)."""
    run = ActivityEnvironment().run
    began = time.perf_counter()
    env = run(simulation.create_environment, scenario)
    injected = run(simulation.inject_and_wait_for_alert, InjectRequest(environment=env, scenario=scenario))
    incident = Incident(id=uuid.uuid4().hex[:12], source="simulation", alert=injected.alert,
                        namespace=scenario.namespace, kubeconfig=env.server, scenario=scenario, limits=LIMITS)
    baseline = run(observer.snapshot_cluster, incident)
    t = Trajectory(incident=incident, workflow_id=f"direct-{incident.id}", run_id="direct", policy=ref.name,
                   model_version=ref.version, started_at=datetime.now(UTC))
    while len(t.steps) < LIMITS.max_steps:
        decision = run(policy.decide_next_action, PolicyRequest(policy=ref, trajectory=t))
        t.conversation += [*decision.new_messages, ChatMessage(role="assistant", content=decision.completion)]
        step = Step(index=len(t.steps), decision=decision, at=datetime.now(UTC))
        t.steps.append(step)
        if decision.action is None:
            continue
        if decision.action.tool == "finish":
            break
        step.result = run(tools.run_tool, ToolInvocation(call=decision.action, namespace=incident.namespace,
                                                         kubeconfig=env.server, idempotency_key=f"{t.workflow_id}/{step.index}"))
    t.termination, t.mitigated_at = "finished", datetime.now(UTC)
    t.verdict = run(observer.observe, ObserveRequest(incident=incident, baseline=baseline))
    t.ended_at = datetime.now(UTC)
    t.reward = run(rewards.compute_reward, RewardRequest(trajectory=t, config=EpisodeRequest(scenario=scenario).reward))
    run(trajectories.store_trajectory, t)
    run(simulation.delete_environment, env)
    return time.perf_counter() - began, len(t.steps)


async def temporal_episodes(settings: Settings, scenarios: list[Scenario], n: int, concurrency: int,
                            ref: PolicyRef) -> tuple[float, list[tuple[float, int]]]:
    client = await connect(settings)
    per_episode: list[tuple[float, int]] = []
    async with AsyncExitStack() as workers:
        for worker in build_workers(client, settings):
            await workers.enter_async_context(worker)
        began = time.perf_counter()

        async def timed(i: int) -> None:
            scenario = scenarios[i % len(scenarios)]
            t0 = time.perf_counter()
            res = await run_episodes(client, settings, [scenario], 1, ref, 1, limits=LIMITS)
            per_episode.append((time.perf_counter() - t0, res[0].outcome.steps))

        if concurrency == 1:
            for i in range(n):
                await timed(i)
        else:
            gate = asyncio.Semaphore(concurrency)

            async def gated(i: int) -> None:
                async with gate:
                    await timed(i)

            await asyncio.gather(*(gated(i) for i in range(n)))
        return time.perf_counter() - began, per_episode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args()
    console = Console(width=140)
    ref = PolicyRef(name="runbook")
    scenarios = interleave_by_fault(load_scenarios())
    with tempfile.TemporaryDirectory() as data_dir:
        os.environ.update(isolated_env(Path(data_dir)))
        get_settings.cache_clear()
        settings = get_settings()
        asyncio.run(stack.up(settings))
        try:
            for s in scenarios[:5]:
                direct_episode(s, ref)  # warm-up: imports, connection pools
            began = time.perf_counter()
            direct = [direct_episode(scenarios[i % len(scenarios)], ref) for i in range(args.episodes)]
            direct_wall = time.perf_counter() - began
            floor_ms = asyncio.run(activity_round_trip_ms(settings))
            seq_wall, seq = asyncio.run(temporal_episodes(settings, scenarios, args.episodes, 1, ref))
            con_wall, con = asyncio.run(temporal_episodes(settings, scenarios, args.episodes, args.concurrency, ref))
        finally:
            asyncio.run(stack.down(settings))
    overhead = [max(0.0, (ts - ds) / max(steps, 1)) * 1000 for (ts, steps), (ds, _) in zip(seq, direct)]
    rows = [
        ("direct (sequential)", args.episodes, direct_wall, args.episodes / direct_wall, None),
        ("temporal (sequential)", args.episodes, seq_wall, args.episodes / seq_wall, statistics.median(overhead)),
        (f"temporal ({args.concurrency} concurrent)", args.episodes, con_wall, args.episodes / con_wall, None),
    ]
    table = Table("mode", "episodes", "wall s", "episodes/s", "overhead ms/step (median)", title="Orchestration")
    for mode, n, wall, rate, ovh in rows:
        table.add_row(mode, str(n), f"{wall:.1f}", f"{rate:.2f}", f"{ovh:.1f}" if ovh is not None else "")
    console.print(table)
    console.print(f"dev-server floor: a no-op activity round trip takes {floor_ms:.1f} ms (median of 3 x "
                  f"{FLOOR_ACTIVITIES})")
    steps = statistics.mean(s for _, s in direct)
    body = provenance() + (
        f"\nEpisodes: the runbook policy on the training catalog (interleaved by fault type), settle windows 0, "
        f"{steps:.1f} steps per episode on average; everything on the embedded stack of this machine.\n\n"
        "| mode | episodes | wall s | episodes/s | orchestration overhead, ms/step (median) |\n|---|---:|---:|---:|---:|\n"
        + "".join(f"| {m} | {n} | {w:.1f} | {r:.2f} | {f'{o:.1f}' if o is not None else ''} |\n"
                  for m, n, w, r, o in rows)
        + f"\nThe dev server's own floor on this machine: a no-op activity round trip (workflow of "
          f"{FLOOR_ACTIVITIES} no-op activities, median of 3) takes {floor_ms:.1f} ms.\n"
        + f"\n- Overhead target <= 10 ms/step: {'met' if rows[1][4] <= 10 else 'NOT met'} ({rows[1][4]:.1f}).\n"
        + f"- Throughput target >= 20 episodes/s: {'met' if rows[2][3] >= 20 else 'NOT met'} ({rows[2][3]:.2f}).\n")
    if not args.no_docs:
        write_section(HEADING, body)


if __name__ == "__main__":
    main()
