"""The learning stream's Temporal Schedule: one ContinuousLearningWorkflow run per interval, on the training queue.

Temporal owns the timing: overlap policy SKIP (no run starts while the previous one is running; a rollout that a
cycle started is waited for by the next cycle itself), pause with a note, backfill and trigger. The schedule's id
is the stream's name, and its runs' workflow ids are `learning-<name>-<scheduled time>`.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Literal

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionExecution,
    ScheduleActionExecutionStartWorkflow,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleBackfill,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
    ScheduleUpdate,
    ScheduleUpdateInput,
)

from agent_sre.models.learning import LearningConfig, LearningCycleInput
from agent_sre.workflows.learning import ContinuousLearningWorkflow


def started(executions: Iterable[ScheduleActionExecution]) -> list[str]:
    """The workflow ids a schedule's actions started (ours start workflows only)."""
    return [e.workflow_id for e in executions if isinstance(e, ScheduleActionExecutionStartWorkflow)]


def schedule_of(config: LearningConfig, every: timedelta, task_queue: str, paused: bool, note: str) -> Schedule:
    return Schedule(
        action=ScheduleActionStartWorkflow(
            ContinuousLearningWorkflow.run, LearningCycleInput(config=config), id=f"learning-{config.name}",
            task_queue=task_queue,
            static_summary=f"learning cycle of {config.name}: {config.training.algorithm}, at least "
                           f"{config.min_episodes} new episodes"),
        spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=every)]),
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
        state=ScheduleState(paused=paused, note=note))


async def upsert_schedule(client: Client, config: LearningConfig, every: timedelta, task_queue: str,
                          paused: bool | None = None, note: str = "") -> Literal["created", "updated"]:
    """Create the stream's schedule, or replace its action, interval and policy. `paused` None keeps an existing
    schedule's pause (and its note): updating the interval does not resume what an operator paused."""
    try:
        await client.create_schedule(config.name, schedule_of(config, every, task_queue, bool(paused), note))
        return "created"
    except ScheduleAlreadyRunningError:
        pass

    def update(current: ScheduleUpdateInput) -> ScheduleUpdate:
        state = current.description.schedule.state
        keep = paused is None
        return ScheduleUpdate(schedule=schedule_of(config, every, task_queue, state.paused if keep else bool(paused),
                                                   (state.note or "") if keep else note))

    await client.get_schedule_handle(config.name).update(update)
    return "updated"


async def backfill(client: Client, name: str, start: datetime, end: datetime) -> None:
    """Run the cycles the schedule would have run between `start` and `end`, one after another (each
    learns up to its own scheduled time, from the watermark the previous one left)."""
    if end <= start:
        raise ValueError(f"the backfill ends ({end:%F %T}) before it starts ({start:%F %T})")
    await client.get_schedule_handle(name).backfill(
        ScheduleBackfill(start_at=start, end_at=end, overlap=ScheduleOverlapPolicy.BUFFER_ALL))
