"""`agent-sre incident …` and `agent-sre worker` as a user runs them: the worker is a real process (with its
Prometheus endpoint), the commands run through the CLI against the session's Temporal server and simulator."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from google.protobuf.duration_pb2 import Duration
from isolated_workers import isolated_queues
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
from temporalio.service import RPCError
from trajectory_factory import finish, make_trajectory, read, step, write
from typer.testing import CliRunner, Result

from agent_sre import config
from agent_sre.cli import app
from agent_sre.cli import common as cli_common
from agent_sre.cli import incident as incident_cli
from agent_sre.config import Settings
from agent_sre.learning.data import gather
from agent_sre.models.episode import EpisodeResult
from agent_sre.models.incident import Incident
from agent_sre.models.learning import LearningConfig, LearningState
from agent_sre.models.remediation import ApprovalDecision, RemediationRequest
from agent_sre.models.reward import RewardConfig
from agent_sre.models.training import TrainingRequest
from agent_sre.rewards import compute_reward
from agent_sre.scenarios import default_catalog
from agent_sre.simulator.client import SimulatorClient
from agent_sre.stack.ports import pick_free_ports
from agent_sre.stack.temporal import SEARCH_ATTRIBUTES
from agent_sre.storage import object_store
from agent_sre.temporal import connect
from agent_sre.trajectory_store import read_reward, write_trajectory
from agent_sre.workflows.incident import IncidentRemediationWorkflow

BAD_IMAGE = default_catalog() / "bad-image.yaml"


@dataclass
class Worker:
    settings: Settings
    metrics_port: int

    def metric(self, name: str, **labels: str) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
                   if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


@pytest.fixture(scope="module")
def worker(stack: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    """`agent-sre worker` on queues of its own, metrics on a free port."""
    settings = isolated_queues(stack)
    [port] = pick_free_ports(1, "127.0.0.1")
    env = dict(os.environ, AGENT_SRE_QUEUE_AGENT=settings.queue_agent, AGENT_SRE_QUEUE_TOOLS=settings.queue_tools,
               AGENT_SRE_QUEUE_POLICY=settings.queue_policy)
    log = tmp_path_factory.mktemp("worker") / "worker.log"
    proc = subprocess.Popen([sys.executable, "-m", "agent_sre.cli", "worker", "--metrics-port", str(port)], env=env,
                            stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
    handle = Worker(settings, port)
    try:
        _until(lambda: "worker on" in log.read_text() and _answers(handle), "the worker to start", log)
        yield handle
    finally:
        proc.send_signal(signal.SIGINT)  # graceful: KeyboardInterrupt shuts the workers down
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _answers(worker: Worker) -> bool:
    try:
        worker.metric("agent_sre_incidents_started_total")
    except OSError:
        return False
    return True


def _until(ok: Callable[[], object], what: str, log: Path | None = None, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not ok():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}" + (f"\n{log.read_text()}" if log else ""))
        time.sleep(0.2)


@pytest.fixture
def cli(worker: Worker, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Result]:
    """Run `agent-sre ARGS` with settings naming the worker's queues."""
    monkeypatch.setattr(cli_common, "get_settings", lambda: worker.settings)
    monkeypatch.setattr(incident_cli, "console", Console(width=200))  # no wrapped table cells to match across
    runner = CliRunner()

    def run(*args: str) -> Result:
        return runner.invoke(app, list(args))

    return run


@pytest.fixture
def shop_env(stack: Settings) -> Iterator[str]:
    """A fresh simulated environment with the shop app; yields its Kubernetes API URL."""
    sim = SimulatorClient(stack.sim_url)
    env = sim.create_env(apps=["shop"])
    try:
        yield env["server"]
    finally:
        sim.delete_env(env["name"])


def flat(result: Result) -> str:
    """The output with rich's line wrapping undone, for matching phrases."""
    return re.sub(r"\s+", " ", result.output)


def status_until(cli: Callable[..., Result], workflow_id: str, phrase: str, timeout_s: float = 90.0) -> str:
    last = ""

    def reached() -> bool:
        nonlocal last
        result = cli("incident", "status", workflow_id)
        assert result.exit_code == 0, result.output
        last = flat(result)
        return phrase in last

    _until(reached, f"{phrase!r} in the status of {workflow_id}", timeout_s=timeout_s)
    return last


def test_scenario_with_approval_then_feedback(cli: Callable[..., Result], worker: Worker) -> None:
    started = cli("incident", "start", "--scenario", str(BAD_IMAGE), "--name", "bad-image-cart-s0",
                  "--approval-risk", "medium", "--feedback-window", "60")
    assert started.exit_code == 0, started.output
    episode_id = re.search(r"started (episode-cli-\S+)", flat(started)).group(1)  # type: ignore[union-attr]
    workflow_id = f"{episode_id}-remediation"
    waiting = status_until(cli, episode_id, "awaiting_approval")  # the episode's status follows its remediation
    step = int(re.search(r"waiting for approval │ step (\d+): (\w+)", waiting).group(1))  # type: ignore[union-attr]
    assert f"agent-sre incident approve|reject {workflow_id} --step {step}" in waiting  # what to run
    wrong = cli("incident", "approve", workflow_id, "--step", str(step + 1))
    assert wrong.exit_code == 1 and f"step {step + 1} is not waiting for approval; step {step}" in flat(wrong)
    early = cli("incident", "feedback", workflow_id, "--rating", "1")
    assert early.exit_code == 1 and "is awaiting_approval: rate it once it has been judged" in flat(early)

    so_far = cli("incident", "steps", workflow_id)  # the running workflow's trajectory query
    assert so_far.exit_code == 0, so_far.output
    assert f"waiting for approval: agent-sre incident approve|reject {workflow_id} --step {step}" in flat(so_far)
    assert "list_pods" in so_far.output and "ended: still acting · verdict: not judged yet" in flat(so_far)

    approved = cli("incident", "approve", workflow_id, "--step", str(step), "--by", "oncall")
    assert approved.exit_code == 0 and "approved" in approved.output, approved.output

    status_until(cli, workflow_id, "awaiting_feedback")
    sent = cli("incident", "feedback", workflow_id, "--rating", "1", "--comment", "quick rollback")
    assert sent.exit_code == 0 and "inside its feedback window" in flat(sent), sent.output

    done = status_until(cli, workflow_id, "COMPLETED")
    assert "phase │ done" in done and "termination │ finished" in done
    assert "summary │ applied the runbook remediation; it rolled out" in done
    assert "feedback +1" in done  # the rating was folded into the reward
    stored = flat(cli("incident", "steps", episode_id))  # completed: read from the store, redacted
    assert f"{step} rollout_undo deployment=cart deployment.apps/cart rolled back" in stored
    assert "ended: finished · verdict: resolved · reward +18.00 (sre)" in stored and "waiting" not in stored
    assert worker.metric("agent_sre_incidents_finished_total", model_version="runbook-v1") >= 1



def test_follow_prints_each_step_once_taken_and_the_approval_a_write_waits_for(cli: Callable[..., Result],
                                                                                 worker: Worker) -> None:
    """`steps --follow` on an episode: it waits for the remediation to start, names the write waiting for approval
    (approved here by someone else, as an on-call would from another terminal) and ends with the verdict."""
    started = cli("incident", "start", "--scenario", str(BAD_IMAGE), "--name", "bad-image-cart-s0",
                  "--approval-risk", "medium")
    assert started.exit_code == 0, started.output
    episode_id = re.search(r"started (episode-cli-\S+)", flat(started)).group(1)  # type: ignore[union-attr]
    workflow_id = f"{episode_id}-remediation"
    assert f"follow it: agent-sre incident steps {episode_id} -f" in flat(started)

    async def approve_when_asked() -> int:
        client = await connect(worker.settings)
        handle = client.get_workflow_handle(workflow_id)
        for _ in range(300):
            try:
                status = await handle.query(IncidentRemediationWorkflow.status)
            except RPCError:  # not started yet
                status = None
            if status is not None and status.pending_step is not None:
                await asyncio.sleep(2 * incident_cli.FOLLOW_POLL_S)  # long enough for the follower to see it wait
                await handle.signal(IncidentRemediationWorkflow.approve_action,
                                    ApprovalDecision(step=status.pending_step, approved=True))
                return status.pending_step
            await asyncio.sleep(0.2)
        raise AssertionError(f"{workflow_id} never asked for approval")

    with ThreadPoolExecutor(1) as pool:
        approved = pool.submit(asyncio.run, approve_when_asked())
        followed = cli("incident", "steps", episode_id, "--follow")
        step = approved.result(timeout=90)
    assert followed.exit_code == 0, followed.output
    text = flat(followed)
    assert (f"{step} rollout_undo deployment=cart waiting for approval: agent-sre incident approve|reject "
            f"{workflow_id} --step {step} {step} rollout_undo deployment=cart deployment.apps/cart rolled back") in text
    assert text.count(" list_pods ") == 1  # each step once, as it was taken
    # the reward is usually known with the verdict (both land in one workflow task), and then shown
    assert re.search(r"ended: finished · verdict: resolved( · reward \+17\.00 \(sre\))?$", text.rstrip()), text
    again = cli("incident", "steps", workflow_id, "--follow")  # completed by now: the stored steps, rewarded
    assert again.exit_code == 0 and flat(again).count(" list_pods ") == 1, again.output
    assert again.output.rstrip().endswith("ended: finished · verdict: resolved · reward +17.00 (sre)"), again.output
    refused = cli("incident", "steps", "--trajectory", "trajectories/x.jsonl", "--follow")
    assert refused.exit_code == 2 and "a stored episode has ended" in flat(refused)


def test_feedback_after_the_window_reaches_the_next_learning_cycle(cli: Callable[..., Result],
                                                                     worker: Worker) -> None:
    """No feedback window (production's default): ratings given once the remediation has completed are stored
    beside its trajectory, and the next learning cycle recomputes the episode's reward with them."""
    started_at = datetime.now(UTC) - timedelta(seconds=1)  # the store's modification times have whole seconds
    started = cli("incident", "start", "--scenario", str(BAD_IMAGE), "--name", "bad-image-cart-s0")
    assert started.exit_code == 0, started.output
    episode_id = re.search(r"started (episode-cli-\S+)", flat(started)).group(1)  # type: ignore[union-attr]
    workflow_id = f"{episode_id}-remediation"
    done = status_until(cli, episode_id, "trajectory │ ")  # the episode's status follows its remediation
    key = re.search(r"trajectory │ (\S+\.jsonl)", done).group(1)  # type: ignore[union-attr]

    episode = cli("incident", "feedback", episode_id, "--rating", "-1")
    assert episode.exit_code == 1 and f"rate its remediation, {workflow_id}" in flat(episode)
    by_id = cli("incident", "feedback", workflow_id, "--rating", "-1", "--comment", "wrong pod", "--author", "oncall")
    assert by_id.exit_code == 0 and "recorded after its feedback window" in flat(by_id), by_id.output
    by_key = cli("incident", "feedback", workflow_id, "--rating", "-1", "--author", "lead", "--trajectory", key)
    assert by_key.exit_code == 0 and "recorded after its feedback window" in flat(by_key), by_key.output
    other = cli("incident", "feedback", "incident-someone-else", "--rating", "1", "--trajectory", key)
    assert other.exit_code == 1 and f"holds an episode of {workflow_id}, not of incident-someone-else" in flat(other)

    settings = worker.settings
    client, bucket = object_store(settings), settings.s3_bucket
    conf = LearningConfig(name=f"t-{uuid.uuid4().hex[:8]}", start_at=started_at, settle_s=0)
    gathered = gather(client, bucket, conf, LearningState(name=conf.name), datetime.now(UTC),
                      usable=lambda episodes: (len(episodes), None))
    [learnt] = [t for t in gathered.episodes if t.workflow_id == workflow_id]
    assert gathered.data.late_feedback >= 1
    assert sorted(f.author for f in learnt.feedback) == ["lead", "oncall"]
    assert learnt.reward is not None and learnt.reward.components["feedback"] == -2.0
    served = read_reward(client, bucket, learnt)  # as the workflow computed it, without the late ratings
    assert served is not None and served.components["feedback"] == 0.0 and learnt.reward.total < served.total


def test_steps_of_a_stored_episode_name_each_action_and_what_came_back(cli: Callable[..., Result],
                                                                          worker: Worker) -> None:
    """Read by key, without Temporal: invalid actions, refusals and tool errors are steps like any other, and
    long outputs show their first lines unless --full."""
    pods = "NAME READY STATUS\n" + "\n".join(f"cart-{i} 0/1 CrashLoopBackOff" for i in range(8))
    t = make_trajectory([read(output=pods), step(None, None, completion="kubectl delete ns shop",
                                                 invalid_reason="not a JSON tool call"),
                         write(refused=True), write(ok=False), write(), finish()], outcome="resolved")
    t.reward = compute_reward(t, RewardConfig())
    key = write_trajectory(object_store(worker.settings), worker.settings.s3_bucket, t).key

    shown = cli("incident", "steps", "--trajectory", key)
    assert shown.exit_code == 0, shown.output
    lines = [line.rstrip() for line in shown.output.splitlines()]
    assert lines[1:9] == [" 0 list_pods", "   NAME READY STATUS", "   cart-0 0/1 CrashLoopBackOff",
                          "   cart-1 0/1 CrashLoopBackOff", "   … 6 more lines (--full shows them)",
                          " 1 invalid action: kubectl delete ns shop  step reward -0.5",
                          "   why: not a JSON tool call", " 2 rollout_undo deployment=cart  step reward -0.5"]
    assert lines[9:13] == ["   refused: not allowed", " 3 rollout_undo deployment=cart  step reward -0.1",
                           "   error: conflict", " 4 rollout_undo deployment=cart"]
    assert lines[-1] == f"ended: finished · verdict: resolved · reward {t.reward.total:+.2f} (sre)"
    whole = cli("incident", "steps", "--trajectory", key, "--full")
    assert "cart-7 0/1 CrashLoopBackOff" in whole.output and "--full shows them" not in whole.output


def test_list_filters_by_the_search_attributes(cli: Callable[..., Result]) -> None:
    done = cli("incident", "start", "--scenario", str(BAD_IMAGE), "--name", "bad-image-cart-s0", "--wait")
    assert done.exit_code == 0, done.output
    found = re.search(r"outcome of (episode-cli-\S+-remediation)", flat(done))
    assert found is not None, done.output
    workflow_id, listed = found.group(1), ""

    def shown() -> bool:  # the dev server's visibility store is updated asynchronously
        nonlocal listed
        result = cli("incident", "list", "--service", "cart", "--outcome", "resolved", "--limit", "1000")
        assert result.exit_code == 0, result.output
        listed = result.output
        return workflow_id in listed

    _until(shown, f"{workflow_id} in the list")
    header, *rows = [line for line in listed.splitlines() if line.startswith(("ID ", "episode-", "incident-"))]
    assert header.split() == ["ID", "STATUS", "STARTED", "(UTC)", "SERVICE", "FAULT", "MODEL", "ENDED", "OUTCOME"]
    assert rows and all(row.split()[4] == "cart" and row.split()[-1] == "resolved" for row in rows), listed
    assert f"{workflow_id}   completed" in listed and "deploy/image   runbook-v1   finished   resolved" in listed
    by_fault = cli("incident", "list", "--fault", "deploy/image", "--limit", "1000")  # fault classes hold a '/'
    assert by_fault.exit_code == 0 and workflow_id in by_fault.output, by_fault.output
    finished = cli("incident", "list", "--ending", "finished", "--service", "cart", "--limit", "1000")
    assert finished.exit_code == 0 and workflow_id in finished.output, finished.output
    escalated = cli("incident", "list", "--ending", "escalated", "--service", "cart", "--limit", "1000")
    assert escalated.exit_code == 0 and workflow_id not in escalated.output, escalated.output
    running = cli("incident", "list", "--running", "--model", "runbook-v1")
    assert running.exit_code == 0 and workflow_id not in running.output
    as_json = cli("incident", "list", "--service", "cart", "--outcome", "resolved", "--limit", "1000", "-o", "json")
    assert as_json.exit_code == 0, as_json.output
    [mine] = [w for w in json.loads(as_json.output) if w["workflow_id"] == workflow_id]
    assert {k: v for k, v in mine.items() if k != "started_at"} == {
        "workflow_id": workflow_id, "execution_status": "completed", "service": "cart", "fault_class": "deploy/image",
        "model_version": "runbook-v1", "ending": "finished", "outcome": "resolved"}
    as_yaml = cli("incident", "status", workflow_id, "-o", "yaml")
    assert as_yaml.exit_code == 0, as_yaml.output
    state = yaml.safe_load(as_yaml.output)
    assert (state["workflow_id"], state["execution_status"]) == (workflow_id, "COMPLETED")
    assert state["outcome"]["outcome"] == "resolved" and state["outcome"]["workflow_id"] == workflow_id


def test_user_report_starts_then_attaches(cli: Callable[..., Result], shop_env: str) -> None:
    text = f"my checkout page keeps failing ({shop_env.rsplit('/', 1)[-1]})"
    args = ("incident", "report", text, "--namespace", "shop", "--service", "checkout", "--kubeconfig", shop_env)
    first = cli(*args)
    assert first.exit_code == 0, first.output
    workflow_id = re.search(r"started (incident-shop-\w+)", flat(first)).group(1)  # type: ignore[union-attr]
    assert f"follow it: agent-sre incident steps {workflow_id} -f" in flat(first)
    again = cli(*args)
    assert again.exit_code == 0 and f"attached to the running remediation {workflow_id}" in flat(again)
    assert cli("incident", "cancel", workflow_id).exit_code == 0


def test_a_report_is_the_root_of_its_incidents_trace(cli: Callable[..., Result], shop_env: str,
                                                      exported: InMemorySpanExporter) -> None:
    text = f"checkout is slow ({uuid.uuid4().hex[:6]})"
    started = cli("incident", "report", text, "--namespace", "shop", "--kubeconfig", shop_env)
    assert started.exit_code == 0, started.output
    workflow_id = re.search(r"started (incident-shop-\w+)", flat(started)).group(1)  # type: ignore[union-attr]
    assert cli("incident", "cancel", workflow_id).exit_code == 0
    spans = {s.name: s for s in exported.get_finished_spans()}
    root, start = spans["incident report"], spans["StartWorkflow:IncidentRemediationWorkflow"]
    assert root.parent is None and start.parent is not None and start.parent.span_id == root.context.span_id
    assert (root.attributes or {}).items() >= {"k8s.namespace.name": "shop", "temporalWorkflowID": workflow_id,
                                               "agent_sre.incident.source": "user_report"}.items()


def test_status_of_a_failed_incident_says_why(cli: Callable[..., Result], tmp_path: Path) -> None:
    missing = tmp_path / "no-kubeconfig"
    started = cli("incident", "report", f"checkout is down ({uuid.uuid4().hex[:6]})", "--namespace", "shop",
                  "--kubeconfig", str(missing))
    assert started.exit_code == 0, started.output
    workflow_id = re.search(r"started (incident-shop-\w+)", flat(started)).group(1)  # type: ignore[union-attr]
    failed = status_until(cli, workflow_id, "FAILED")
    # Not the worker's own cluster (scope.worker_cluster): refused before anything reads it.
    assert f"ended │ failed: KubeconfigError: kubeconfig {missing} is not this worker's cluster" in failed, failed


def test_status_names_an_activity_no_worker_picks_up(cli: Callable[..., Result], worker: Worker) -> None:
    """A hand-written request naming a tools queue nobody serves: the remediation waits, and status says on what."""
    nobody = f"no-worker-{uuid.uuid4().hex[:6]}"
    incident = Incident(id=uuid.uuid4().hex[:8], source="cli", namespace="shop", report="checkout fails")
    request = RemediationRequest(incident=incident, queues={"tools": nobody, "policy": worker.settings.queue_policy,
                                                            "tool_execution": "queue"})

    async def start() -> None:
        client = await connect(worker.settings)
        await client.start_workflow(IncidentRemediationWorkflow.run, request, id=incident.workflow_id,
                                    task_queue=worker.settings.queue_agent)

    asyncio.run(start())
    try:
        waiting = status_until(cli, incident.workflow_id, "waiting on")
        assert "snapshot_cluster · scheduled · attempt 1 · no worker has picked it up" in waiting, waiting
    finally:
        asyncio.run(_terminate(worker.settings, incident.workflow_id))


async def _terminate(settings: Settings, workflow_id: str) -> None:
    await (await connect(settings)).get_workflow_handle(workflow_id).terminate(reason="test finished")


def test_cancel_while_a_write_waits_for_approval(cli: Callable[..., Result]) -> None:
    started = cli("incident", "start", "--scenario", str(BAD_IMAGE), "--name", "bad-image-checkout-s0",
                  "--approval-risk", "low")
    assert started.exit_code == 0, started.output
    episode_id = re.search(r"started (episode-cli-\S+)", flat(started)).group(1)  # type: ignore[union-attr]
    workflow_id = f"{episode_id}-remediation"
    status_until(cli, episode_id, "awaiting_approval")
    cancelled = cli("incident", "cancel", workflow_id)
    assert cancelled.exit_code == 0 and f"cancel sent to {workflow_id}" in cancelled.output
    done = status_until(cli, workflow_id, "COMPLETED")
    assert "termination │ cancelled" in done
    assert "writes / refused / invalid │ 0 / 1 / 0" in done  # the waiting write was refused, never run


def test_alert_file_starts_one_remediation_per_firing_alert(cli: Callable[..., Result], shop_env: str,
                                                             tmp_path: Path) -> None:
    tag = shop_env.rsplit("/", 1)[-1]
    firing = [{"status": "firing", "labels": {"alertname": "KubePodCrashLooping", "namespace": "shop",
                                               "deployment": name, "env": tag}} for name in ("cart", "catalog")]
    resolved = {"status": "resolved", "labels": {"alertname": "Old", "namespace": "shop", "env": tag}}
    hook = tmp_path / "webhook.json"
    hook.write_text(json.dumps({"version": "4", "groupKey": "g", "status": "firing", "receiver": "agent-sre",
                                "alerts": [*firing, resolved]}))
    result = cli("incident", "start", "--alert", str(hook), "--kubeconfig", shop_env)
    assert result.exit_code == 0, result.output
    ids = re.findall(r"started (incident-shop-\w+)", flat(result))
    assert len(set(ids)) == 2
    for workflow_id in ids:
        assert cli("incident", "cancel", workflow_id).exit_code == 0


def test_episodes_run_plays_a_batch_with_the_policy_named_and_prints_the_outcomes(cli: Callable[..., Result]) -> None:
    result = cli("episodes", "run", "--scenarios", str(BAD_IMAGE), "--n", "3", "--policy", "runbook-v1",
                 "--concurrency", "3")
    assert result.exit_code == 0, result.output
    text = flat(result)
    assert "3 simulated incidents · policy runbook-v1" in text
    # the runbook fixes a bad image, so every episode wrote (success, TTM, steps, wrote)
    assert re.search(r"│ bad_image │ 3 │ 100% │ [\d.]+ │ [\d.]+ │ 100% │", text), text
    assert "not resolved" not in text
    as_json = cli("episodes", "run", "--scenarios", str(BAD_IMAGE), "--n", "2", "--policy", "runbook-v1", "-o", "json")
    assert as_json.exit_code == 0, as_json.output
    episodes = [EpisodeResult.model_validate(e) for e in json.loads(as_json.stdout)]
    assert [e.outcome.outcome for e in episodes] == ["resolved", "resolved"]


def test_episodes_run_names_the_unresolved_episodes_whose_steps_show_why(cli: Callable[..., Result]) -> None:
    """The runbook never looks at NetworkPolicies: each episode is listed, and its steps show the wrong fix."""
    result = cli("episodes", "run", "--scenarios", str(default_catalog() / "network-policy.yaml"), "--n", "2")
    assert result.exit_code == 0, result.output
    assert "not resolved (2); what the agent did: agent-sre incident steps ID" in flat(result)
    listed = re.findall(r"^  (episode-\S+-remediation)  unresolved, (\w+)$", result.output, re.MULTILINE)
    assert len(listed) == 2, result.output
    shown = cli("incident", "steps", listed[0][0])
    assert shown.exit_code == 0, shown.output
    assert f"ended: {listed[0][1]} · verdict: unresolved" in flat(shown)


@pytest.mark.parametrize(("args", "message"), [
    (("incident", "start"), "give exactly one of --alert FILE or --scenario FILE"),
    (("incident", "start", "--scenario", str(BAD_IMAGE)), "holds 9 scenarios; pick one with --name"),
    (("incident", "start", "--scenario", str(BAD_IMAGE), "--name", "nope"), "no scenario named 'nope'"),
    (("incident", "report", "x", "--namespace", "Not_Valid"),
     "namespace: String should match pattern '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'"),
    (("incident", "report", "   ", "--namespace", "shop"), "input: an incident needs an alert or a report"),
    (("incident", "report", "x", "--namespace", "kube-system"), "namespace 'kube-system' is outside the agent's "
                                                               "scope (AGENT_SRE_ALLOWED_NAMESPACES: shop, bank); "
                                                               "nothing was started"),
    (("incident", "report", "x", "--namespace", "shop", "--policy", "llm"),
     "Invalid value for --policy: unknown model version 'llm'; registered:"),
    (("episodes", "run", "--policy", "nope"), "unknown model version 'nope'"),
    (("episodes", "run", "--scenarios", "/nonexistent.yaml"), "/nonexistent.yaml: no such file or directory"),
    (("incident", "status", "incident-nope-0"), "no workflow 'incident-nope-0': check the id"),
    (("incident", "cancel", "incident-nope-0"), "no running workflow 'incident-nope-0': the id is wrong, or it has "
                                                "ended and takes no more signals"),
    (("train", "status", "train-nope-0"), "no training cycle 'train-nope-0'"),
    (("train", "stop", "train-nope-0"), "no running training cycle 'train-nope-0': the id is wrong, or it has ended"),
    (("incident", "steps"), "give exactly one of ID or --trajectory KEY"),
    (("incident", "list", "--service", "x' OR 1=1"), "\"x' OR 1=1\" is not a name"),
    (("incident", "list", "--outcome", "fixed"), "--outcome"),
    (("incident", "list", "--ending", "paged"), "--ending"),
    (("incident", "steps", "incident-nope-0"), "no workflow 'incident-nope-0': check the id"),
    (("incident", "steps", "--trajectory", "rewards/x.json"), "'rewards/x.json' is not a trajectory key"),
    (("incident", "steps", "--trajectory", "trajectories/date=2026-01-01/model=m/incident-nope-0__r.jsonl"),
     "no trajectory stored at s3://"),
    (("incident", "feedback", "incident-nope-0", "--rating", "2"), "--rating"),
    (("incident", "feedback", "incident-nope-0", "--rating", "1"), "unknown incident incident-nope-0"),
    (("incident", "feedback", "incident-nope-0", "--rating", "1", "--trajectory", "rewards/x.json"),
     "'rewards/x.json' is not a trajectory key"),
    (("incident", "feedback", "incident-nope-0", "--rating", "1", "--trajectory",
      "trajectories/date=2026-01-01/model=m/incident-nope-0__r.jsonl"), "no trajectory stored at s3://"),
])
def test_bad_input_is_one_clear_error(cli: Callable[..., Result], args: tuple[str, ...], message: str) -> None:
    result = cli(*args)
    assert result.exit_code != 0
    assert message in flat(result), result.output
    assert "Traceback" not in result.output


def test_status_of_a_running_workflow_that_no_worker_polls_says_so_at_once(cli: Callable[..., Result],
                                                                           worker: Worker) -> None:
    """A query would wait for Temporal's 30 s query timeout; the status commands look for pollers first."""
    queue = f"nobody-polls-{uuid.uuid4().hex[:8]}"
    incident = RemediationRequest(incident=Incident(report="checkout fails", namespace="shop"))
    training = TrainingRequest(algorithm="sft", base="base", requested_by="test")

    async def start() -> list[str]:
        client = await connect(worker.settings)
        return [(await client.start_workflow(kind, arg, id=f"{kind}-{queue}", task_queue=queue)).id
                for kind, arg in (("IncidentRemediationWorkflow", incident), ("TrainingCycleWorkflow", training))]

    async def terminate(ids: list[str]) -> None:
        client = await connect(worker.settings)
        for workflow_id in ids:
            await client.get_workflow_handle(workflow_id).terminate("test over")

    remediation, cycle = ids = asyncio.run(start())
    try:
        began = time.monotonic()
        shown = cli("incident", "status", remediation)
        assert shown.exit_code == 0 and f"│ not known: no worker polls its task queue '{queue}'" in flat(shown)
        steps = cli("incident", "steps", remediation)
        assert steps.exit_code == 1
        assert f"{remediation} cannot be asked for its steps: no worker polls its task queue '{queue}'" in flat(steps)
        refused = cli("train", "status", cycle)
        assert refused.exit_code == 1, refused.output
        assert f"{cycle} is running, but no worker polls its task queue '{queue}'" in flat(refused)
        assert time.monotonic() - began < 20  # neither waited for a query to time out
    finally:
        asyncio.run(terminate(ids))


def test_alert_file_errors_name_the_file(cli: Callable[..., Result], tmp_path: Path) -> None:
    cases = {"not-json.json": ("{nope", "is not JSON"),
             "no-namespace.json": ('{"labels": {"alertname": "X"}}', "alert X has no 'namespace' label"),
             "empty-webhook.json": ('{"version": "4", "alerts": []}', "(webhook): groupKey: Field required"),
             "only-resolved.json": ('{"status": "resolved", "labels": {"namespace": "shop"}}', "no firing alert")}
    for name, (content, message) in cases.items():
        path = tmp_path / name
        path.write_text(content)
        result = cli("incident", "start", "--alert", str(path))
        assert result.exit_code == 1, (name, result.output)
        assert message in flat(result), (name, result.output)


def test_a_bad_setting_is_one_clear_error_naming_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_SRE_ESCALATION_URL", "ftp://pager")
    monkeypatch.setenv("AGENT_SRE_LLM_SAMPLING", '{"temperature": "hot"}')
    monkeypatch.setattr(config, "get_settings", config.Settings)  # uncached: read the variables just set
    result = CliRunner().invoke(app, ["incident", "list"])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert result.output.splitlines() == [
        "error: AGENT_SRE_ESCALATION_URL: String should match pattern '^https?://' (got 'ftp://pager')",
        "error: AGENT_SRE_LLM_SAMPLING (temperature): Input should be a valid number, unable to parse string as a "
        "number (got 'hot')"]


def test_worker_bad_input_is_one_clear_error(stack: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = stack
    runner = CliRunner()
    unknown = runner.invoke(app, ["worker", "--queue", "nope", "--metrics-port", "0"])
    assert unknown.exit_code == 2 and "unknown task queue(s) ['nope']" in flat(unknown)

    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        busy = runner.invoke(app, ["worker", "--metrics-port", str(taken.getsockname()[1])])
        monkeypatch.setattr(config, "get_settings", lambda: settings.model_copy(
            update={"metrics_port": taken.getsockname()[1]}))
        busy_setting = runner.invoke(app, ["worker"])
    assert busy.exit_code == 2 and "Invalid value for --metrics-port: cannot serve metrics on port" in flat(busy)
    assert busy_setting.exit_code == 2
    assert "Invalid value for AGENT_SRE_METRICS_PORT: cannot serve metrics on port" in flat(busy_setting)

    [nobody] = pick_free_ports(1, "127.0.0.1")
    monkeypatch.setattr(config, "get_settings", lambda: settings.model_copy(
        update={"temporal_address": f"127.0.0.1:{nobody}"}))
    unreachable = runner.invoke(app, ["worker", "--metrics-port", "0"])
    assert unreachable.exit_code == 1 and f"cannot reach Temporal at 127.0.0.1:{nobody}" in flat(unreachable)
    assert "Traceback" not in unreachable.output

    absent = settings.model_copy(update={"temporal_namespace": f"absent-{uuid.uuid4().hex[:8]}"})
    monkeypatch.setattr(config, "get_settings", lambda: absent)
    monkeypatch.setattr(cli_common, "get_settings", lambda: absent)
    for args in (["worker", "--metrics-port", "0"], ["episodes", "run", "--n", "1"],
                 ["incident", "status", "incident-shop-0"]):
        missing = runner.invoke(app, args)
        assert missing.exit_code == 1 and "Traceback" not in missing.output, (args, missing.output)
        assert f"has no namespace '{absent.temporal_namespace}' (AGENT_SRE_TEMPORAL_NAMESPACE)" in flat(missing), args

    # A namespace registered by hand, as on a production cluster, has none of our search attributes.
    bare = f"bare-{uuid.uuid4().hex[:8]}"
    asyncio.run(_register_namespace(settings, bare))
    monkeypatch.setattr(config, "get_settings", lambda: settings.model_copy(update={"temporal_namespace": bare}))
    unregistered = runner.invoke(app, ["worker", "--metrics-port", "0"])
    assert unregistered.exit_code == 1 and "Traceback" not in unregistered.output, unregistered.output
    assert f"error: namespace '{bare}' lacks search attributes our workflows set" in flat(unregistered)
    assert [line.strip() for line in unregistered.output.splitlines()[-len(SEARCH_ATTRIBUTES):]] == [
        f"temporal operator search-attribute create --namespace {bare} --name {key} --type Keyword"
        for key in SEARCH_ATTRIBUTES]


def test_worker_warns_at_start_when_the_object_store_does_not_answer(stack: Settings, tmp_path: Path) -> None:
    """It serves all the same (the trajectories wait in their workflows), but says so where its operator looks."""
    settings = isolated_queues(stack)
    [nobody] = pick_free_ports(1, "127.0.0.1")
    env = dict(os.environ, AGENT_SRE_QUEUE_AGENT=settings.queue_agent, AGENT_SRE_QUEUE_TOOLS=settings.queue_tools,
               AGENT_SRE_QUEUE_POLICY=settings.queue_policy, AGENT_SRE_S3_ENDPOINT=f"127.0.0.1:{nobody}")
    log = tmp_path / "worker.log"
    proc = subprocess.Popen([sys.executable, "-m", "agent_sre.cli", "worker", "--metrics-port", "0"], env=env,
                            stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _until(lambda: "worker on" in log.read_text(), "the worker to start", log)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = re.sub(r"\s+", " ", log.read_text())
    assert f"warning: the object store at 127.0.0.1:{nobody} does not answer (NewConnectionError" in text, text


async def _register_namespace(settings: Settings, name: str) -> None:
    client = await connect(settings)
    await client.workflow_service.register_namespace(RegisterNamespaceRequest(
        namespace=name, workflow_execution_retention_period=Duration(seconds=86400)))
