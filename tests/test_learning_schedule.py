"""`agent-sre learn` against the session's real Temporal dev server and S3 store: the schedule is created and
updated with overlap SKIP (an update keeps an operator's pause), pause/unpause with notes, a trigger runs one cycle,
a backfill runs the missed cycles one after another, each up to its own scheduled time, and delete removes it."""

from __future__ import annotations

import asyncio
import itertools
import re
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from isolated_workers import running_workers, terminate_running
from rich.console import Console
from store_fixtures import settings_with_own_bucket
from temporalio.client import Client, ScheduleActionStartWorkflow, ScheduleOverlapPolicy
from temporalio.service import RPCError
from typer.testing import CliRunner, Result

from agent_sre.cli import app
from agent_sre.cli import learn as learn_cli
from agent_sre.config import Settings, get_settings
from agent_sre.learning import store as streams
from agent_sre.models.learning import LearningCycleInput
from agent_sre.storage import object_store
from agent_sre.temporal import connect


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def text(result: Result) -> str:
    assert result.exit_code == 0, result.output
    return re.sub(r"\s+", " ", result.output)


@pytest.fixture
async def learning(temporal_server: Settings, s3_store: Settings,
                   monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[Client, Settings, str]]:
    """Workers on isolated queues, a bucket of the test's own, the CLI pointed at both, and a stream name."""
    monkeypatch.setattr(learn_cli, "console", Console(width=250))
    with settings_with_own_bucket(s3_store, "sched") as settings:
        client = await connect(settings)
        async with running_workers(client, settings) as isolated:
            for name in ("queue_agent", "queue_training"):
                monkeypatch.setenv(f"AGENT_SRE_{name.upper()}", getattr(isolated, name))
            get_settings.cache_clear()
            name = f"t-{uuid.uuid4().hex[:8]}"
            try:
                yield client, get_settings(), name
            finally:
                await asyncio.to_thread(invoke, "learn", "delete", "--name", name)
                query = 'WorkflowType="ContinuousLearningWorkflow" AND ExecutionStatus="Running"'
                await terminate_running(client, [w.id async for w in client.list_workflows(query)
                                                 if w.id.startswith(f"learning-{name}-")])
                get_settings.cache_clear()


async def until(condition, timeout_s: float = 60.0) -> None:
    for _ in range(int(timeout_s / 0.5)):
        if await condition():
            return
        await asyncio.sleep(0.5)
    raise AssertionError("timed out")


async def test_schedule_pause_trigger_backfill_and_delete_through_the_cli(
        learning: tuple[Client, Settings, str]) -> None:
    client, settings, name = learning
    typo = await asyncio.to_thread(invoke, "learn", "schedule", "--name", name, "--base", "nope", "--paused")
    assert typo.exit_code == 1 and "unknown model version 'nope'" in typo.output  # it would fail every cycle
    with pytest.raises(RPCError, match="not found"):
        await client.get_schedule_handle(name).describe()  # nothing was scheduled
    created = await asyncio.to_thread(invoke, "learn", "schedule", "--name", name, "--every", "1m", "--paused",
                                      "--note", "set up by a test", "--plan", "none", "--min-episodes", "1")
    assert (f"learning schedule {name} created: one offpolicy cycle every 1m on queue {settings.queue_training}"
            in text(created))
    handle = client.get_schedule_handle(name)
    described = await handle.describe()
    assert described.schedule.state.paused and described.schedule.state.note == "set up by a test"
    assert described.schedule.policy.overlap == ScheduleOverlapPolicy.SKIP
    action = described.schedule.action
    assert isinstance(action, ScheduleActionStartWorkflow) and action.workflow == "ContinuousLearningWorkflow"
    [arg] = await client.data_converter.decode(action.args, [LearningCycleInput])
    assert arg.config.name == name and arg.config.min_episodes == 1 and arg.config.rollout_plan is None
    assert arg.config.rollout_queue == settings.queue_agent

    # an update changes what runs and when, and keeps the pause an operator set
    updated = await asyncio.to_thread(invoke, "learn", "schedule", "--name", name, "--every", "2h", "--plan", "none",
                                      "--min-episodes", "3")
    assert f"learning schedule {name} updated" in text(updated)
    described = await handle.describe()
    assert described.schedule.state.paused and described.schedule.spec.intervals[0].every == timedelta(hours=2)
    text(await asyncio.to_thread(invoke, "learn", "unpause", "--name", name, "--note", "go"))
    assert not (await handle.describe()).schedule.state.paused
    text(await asyncio.to_thread(invoke, "learn", "pause", "--name", name, "--note", "freeze"))
    assert (await handle.describe()).schedule.state.note == "freeze"

    # a trigger runs one cycle now, paused or not; with no data it is skipped and says why
    once = await asyncio.to_thread(invoke, "learn", "run-once", "--name", name, "--wait")
    assert "status │ skipped: 0 usable new episodes (0 accepted), fewer than 3: the data waits" in text(once)

    # a backfill runs the cycles of the missed 2-hour slots (even UTC hours) one after another, each up to its
    # own time
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    start = end - timedelta(hours=5, minutes=30)
    slots = [t for t in (end - timedelta(hours=k) for k in range(6)) if t.hour % 2 == 0 and start < t <= end]
    asked = await asyncio.to_thread(invoke, "learn", "backfill", "--name", name, "--start",
                                    f"{start:%Y-%m-%dT%H:%M}", "--end", f"{end:%Y-%m-%dT%H:%M}")
    assert "backfill of" in text(asked)
    s3 = object_store(settings)

    async def all_recorded() -> bool:
        return len(streams.list_records(s3, settings.s3_bucket, name)) == 1 + len(slots)

    await until(all_recorded, timeout_s=120)
    records = streams.list_records(s3, settings.s3_bucket, name)
    backfilled = [r for r in records if r.cutoff in slots]
    assert sorted(r.cutoff for r in backfilled) == sorted(slots) and len(slots) >= 2
    ordered = sorted(backfilled, key=lambda r: r.started_at)
    assert all(a.ended_at <= b.started_at for a, b in itertools.pairwise(ordered))  # one after another
    assert all(r.status == "skipped" for r in records)

    shown = text(await asyncio.to_thread(invoke, "learn", "status", "--name", name))
    assert "paused · freeze" in shown and "no watermark yet" in shown and "skipped" in shown
    text(await asyncio.to_thread(invoke, "learn", "delete", "--name", name))
    gone = await asyncio.to_thread(invoke, "learn", "pause", "--name", name)
    assert gone.exit_code == 1 and f"no learning schedule {name!r}" in gone.output
