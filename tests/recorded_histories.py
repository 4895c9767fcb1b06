"""Workflow histories as tests/histories/ stores them, and the throwaway stack they are recorded on.

One file per run: {"workflow_id": …, "history": <the history as `temporal workflow show --output json` writes it>}.
A workflow that continues as new has one file per run, since each run replays on its own.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from temporalio.client import Client, WorkflowHistory

from agent_sre import stack
from agent_sre.config import Settings, get_settings
from agent_sre.stack.isolated import isolated_env

HISTORIES = Path(__file__).with_name("histories")
ROLLOUT_FILES = "model-rollout-*-run*.json"  # every run of each rollout: model-rollout-<rollout>-run<n>.json
LEARNING_FILES = "learning-cycle-*.json"


def load(path: Path) -> WorkflowHistory:
    saved = json.loads(path.read_text())
    return WorkflowHistory.from_json(saved["workflow_id"], saved["history"])


def save(path: Path, history: WorkflowHistory) -> None:
    saved = {"workflow_id": history.workflow_id, "history": json.loads(history.to_json())}
    path.write_text(json.dumps(saved, indent=1) + "\n")
    print(f"{path}: {len(history.events)} events")


def type_of(history: WorkflowHistory) -> str:
    return history.events[0].workflow_execution_started_event_attributes.workflow_type.name


async def every_run(client: Client, workflow_id: str, first_run_id: str) -> list[WorkflowHistory]:
    """The history of each run of a workflow, first to last: a run that continued as new names the next one."""
    histories: list[WorkflowHistory] = []
    run_id = first_run_id
    while run_id:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        histories.append(history)
        run_id = history.events[-1].workflow_execution_continued_as_new_event_attributes.new_execution_run_id
    return histories


@asynccontextmanager
async def throwaway_stack(components: list[str] | None = None) -> AsyncIterator[Settings]:
    """The named components (default: all) on free ports, with their data in a directory removed afterwards, so
    recording never touches a developer's stack."""
    with tempfile.TemporaryDirectory() as data_dir:
        os.environ.update(isolated_env(Path(data_dir)))
        get_settings.cache_clear()
        settings = get_settings()
        await stack.up(settings, components)
        try:
            yield settings
        finally:
            await stack.down(settings, components)
