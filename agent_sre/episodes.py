"""Running batches of simulated episodes through Temporal and summarising them."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from statistics import fmean

from temporalio.client import Client

from agent_sre.config import Settings
from agent_sre.models.episode import EpisodeRequest, EpisodeResult, OutcomeStats
from agent_sre.models.incident import RemediationLimits
from agent_sre.models.remediation import PolicyRef
from agent_sre.models.scenario import Scenario
from agent_sre.temporal import task_queues
from agent_sre.workflows.simulated import SimulatedIncidentWorkflow


async def run_episode(client: Client, settings: Settings, scenario: Scenario, policy: PolicyRef | None,
                      workflow_id: str, limits: RemediationLimits | None = None) -> EpisodeResult:
    """One episode. With `policy` None the remediation's routing activity picks the version, as it does for a real
    incident, so rollouts see simulated traffic the way they see production's.

    Eager start: when this client also runs a worker of the agent queue with a free slot (the bench, tests,
    `make demo`), the server hands the episode's first workflow task back in the start call's reply instead of
    through matching; elsewhere the request is ignored and the episode starts as usual."""
    request = EpisodeRequest(scenario=scenario, policy=policy, queues=task_queues(settings))
    if limits is not None:
        request.limits = limits
    return await client.execute_workflow(
        SimulatedIncidentWorkflow.run, request, id=workflow_id, task_queue=settings.queue_agent,
        request_eager_start=True)


async def run_episodes(client: Client, settings: Settings, scenarios: Sequence[Scenario], n: int,
                       policy: PolicyRef | None, concurrency: int = 8,
                       on_done: Callable[[EpisodeResult], None] | None = None,
                       limits: RemediationLimits | None = None) -> list[EpisodeResult]:
    """Run `n` episodes cycling through `scenarios` fault type by fault type, at most `concurrency` at once."""
    if not scenarios:
        raise ValueError("no scenarios to run")
    scenarios = interleave_by_fault(scenarios)
    batch = uuid.uuid4().hex[:8]
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> EpisodeResult:
        scenario = scenarios[i % len(scenarios)]
        async with gate:
            result = await run_episode(client, settings, scenario, policy, _episode_id(batch, i, scenario), limits)
        if on_done:
            on_done(result)
        return result

    return list(await asyncio.gather(*(one(i) for i in range(n))))


async def run_episodes_until(client: Client, settings: Settings, scenarios: Sequence[Scenario],
                             stop: asyncio.Event, policy: PolicyRef | None, concurrency: int = 8,
                             on_done: Callable[[EpisodeResult], None] | None = None,
                             limits: RemediationLimits | None = None) -> list[EpisodeResult]:
    """Keep `concurrency` episodes running, cycling through `scenarios`, until `stop` is set; the episodes in flight
    then finish and are returned with the rest. For traffic whose length is not known in advance (a rollout)."""
    if not scenarios:
        raise ValueError("no scenarios to run")
    scenarios = interleave_by_fault(scenarios)
    batch = uuid.uuid4().hex[:8]
    results: list[EpisodeResult] = []
    numbers = itertools.count()

    async def lane() -> None:
        while not stop.is_set():
            i = next(numbers)
            scenario = scenarios[i % len(scenarios)]
            result = await run_episode(client, settings, scenario, policy, _episode_id(batch, i, scenario), limits)
            results.append(result)
            if on_done:
                on_done(result)

    await asyncio.gather(*(lane() for _ in range(concurrency)))
    return results


def _episode_id(batch: str, i: int, scenario: Scenario) -> str:
    return f"episode-{batch}-{i:05d}-{scenario.name}"


def interleave_by_fault(scenarios: Sequence[Scenario]) -> list[Scenario]:
    """Order scenarios so that any prefix covers the fault types evenly (the catalog lists families in blocks)."""
    rank: dict[str, int] = defaultdict(int)
    keyed = []
    for s in scenarios:
        keyed.append((rank[s.fault], s.fault, s))
        rank[s.fault] += 1
    return [s for _, _, s in sorted(keyed, key=lambda k: (k[0], k[1]))]


def summarize(results: Sequence[EpisodeResult]) -> list[OutcomeStats]:
    """Per fault type, then a final `all` row."""
    groups: dict[str, list[EpisodeResult]] = defaultdict(list)
    for r in results:
        groups[r.fault].append(r)
    rows = [_stats(fault, rs) for fault, rs in sorted(groups.items())]
    if results:
        rows.append(_stats("all", list(results)))
    return rows


def _stats(group: str, rs: list[EpisodeResult]) -> OutcomeStats:
    ttm = [r.outcome.time_to_mitigate_s for r in rs if r.outcome.time_to_mitigate_s is not None]
    steps = sum(r.outcome.steps for r in rs)
    return OutcomeStats(
        group=group, episodes=len(rs),
        success_rate=fmean(r.outcome.outcome == "resolved" for r in rs),
        mean_time_to_mitigate_s=fmean(ttm) if ttm else None,
        mean_steps=steps / len(rs),
        false_positive_rate=fmean(r.outcome.false_positive for r in rs),
        escalation_rate=fmean(r.outcome.termination == "escalated" for r in rs),
        write_rate=fmean(r.outcome.writes > 0 for r in rs),
        harmful_rate=fmean(r.outcome.outcome == "worse" for r in rs),
        invalid_action_rate=sum(r.outcome.invalid for r in rs) / max(steps, 1),
        mean_reward=fmean(r.outcome.reward.total for r in rs))
