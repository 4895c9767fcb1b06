"""`agent-sre train --wait` (and the demo) follow a cycle by polling; a server too busy to answer for a while must
not end the following, since the cycle itself goes on."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from datetime import timedelta

import pytest
from temporalio import workflow
from temporalio.worker import Worker

from agent_sre.cli.train import follow
from agent_sre.config import Settings
from agent_sre.models.training import TrainingStatus
from agent_sre.stack.manager import pid_file, select
from agent_sre.temporal import connect


@workflow.defn(name="FollowedCycle", sandboxed=False)
class FollowedCycle:
    """Stands in for a training cycle: answers `progress` until told to finish."""

    def __init__(self) -> None:
        self.done = False

    @workflow.run
    async def run(self) -> TrainingStatus:
        await workflow.wait_condition(lambda: self.done)
        return self.progress()

    @workflow.query
    def progress(self) -> TrainingStatus:
        return TrainingStatus(workflow_id=workflow.info().workflow_id, phase="training", algorithm="sft", base="base")

    @workflow.signal
    def finish(self) -> None:
        self.done = True


@pytest.mark.asyncio(loop_scope="session")
async def test_following_rides_out_a_server_that_does_not_answer(temporal_server: Settings,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    client = await connect(temporal_server)
    queue = f"follow-{uuid.uuid4().hex[:8]}"
    server = pid_file(temporal_server, select(["temporal"])[0]).live_pid()
    assert server is not None
    async with Worker(client, task_queue=queue, workflows=[FollowedCycle]):
        handle = await client.start_workflow(FollowedCycle.run, id=f"follow-{uuid.uuid4().hex}", task_queue=queue)
        following = asyncio.create_task(follow(client, handle.id, final=False, rpc_timeout=timedelta(seconds=1)))
        await asyncio.sleep(0.5)
        os.kill(server, signal.SIGSTOP)  # the server hangs: every poll times out
        try:
            await asyncio.sleep(4)
        finally:
            os.kill(server, signal.SIGCONT)
        assert not following.done()  # still following, not failed
        await handle.signal(FollowedCycle.finish)
        await asyncio.wait_for(following, timeout=60)  # ends when the cycle does
    out = capsys.readouterr().out
    assert "Temporal did not answer" in out and "training" in out
