"""Running batches of simulated episodes through Temporal and summarising them."""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from statistics import fmean

from temporalio.client import Client

from agent_sre.config import Settings
from agent_sre.models.episode import EpisodeRequest, EpisodeResult, OutcomeStats
from agent_sre.models.remediation import PolicyRef
from agent_sre.models.scenario import Scenario
from agent_sre.temporal import task_queues


async def run_episodes(client: Client, settings: Settings, scenarios: Sequence[Scenario], n: int,
                       policy: PolicyRef, concurrency: int = 8,
                       on_done: Callable[[EpisodeResult], None] | None = None) -> list[EpisodeResult]:
    """Run `n` episodes cycling through `scenarios`, at most `concurrency` at once."""
    if not scenarios:
        raise ValueError("no scenarios to run")
    batch = uuid.uuid4().hex[:8]
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> EpisodeResult:
        scenario = scenarios[i % len(scenarios)]
        async with gate:
            result: EpisodeResult = await client.execute_workflow(
                "SimulatedIncidentWorkflow",
                EpisodeRequest(scenario=scenario, policy=policy, queues=task_queues(settings)),
                id=f"episode-{batch}-{i:05d}-{scenario.name}", task_queue=settings.queue_agent,
                result_type=EpisodeResult)
        if on_done:
            on_done(result)
        return result

    return list(await asyncio.gather(*(one(i) for i in range(n))))


def is_false_positive(r: EpisodeResult) -> bool:
    """Acted on a false alarm, or claimed a fix the observer rejected."""
    o = r.outcome
    return (r.fault == "none" and o.writes > 0) or (o.termination == "finished" and o.outcome != "resolved"
                                                      and r.fault != "none")


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
        false_positive_rate=fmean(is_false_positive(r) for r in rs),
        harmful_rate=fmean(r.outcome.outcome == "worse" for r in rs),
        invalid_action_rate=sum(r.outcome.invalid for r in rs) / max(steps, 1),
        mean_reward=fmean(r.outcome.reward.total for r in rs))
