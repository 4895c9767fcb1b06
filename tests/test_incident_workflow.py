"""IncidentRemediationWorkflow and SimulatedIncidentWorkflow end to end on the embedded stack: the real Temporal
dev server, the real S3 store, the simulator over HTTP, real activities and policies."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from isolated_workers import running_workers
from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from agent_sre import faults
from agent_sre.activities import observer
from agent_sre.config import Settings
from agent_sre.episodes import run_episodes, summarize
from agent_sre.models.episode import EpisodeRequest, EpisodeResult
from agent_sre.models.incident import Incident, RemediationLimits
from agent_sre.models.remediation import ApprovalDecision, IncidentOutcome, PolicyRef, RemediationStatus
from agent_sre.models.reward import HumanFeedback
from agent_sre.models.scenario import Scenario
from agent_sre.models.tools import Risk, ToolCall
from agent_sre.models.trajectory import Trajectory
from agent_sre.policy.llm.chat import prompt_messages
from agent_sre.policy.runbook import RunbookPolicy
from agent_sre.scenarios import default_catalog, load_scenarios
from agent_sre.simulator.client import SimulatorClient
from agent_sre.simulator.simulator import Simulator
from agent_sre.stack.ports import pick_free_ports
from agent_sre.storage import object_store
from agent_sre.temporal import connect, start_incident, task_queues
from agent_sre.tools.client import api_client
from agent_sre.training.environment import IncidentEnvironment
from agent_sre.trajectory_store import iter_trajectories
from agent_sre.workflows.incident import ENDING, OUTCOME, IncidentRemediationWorkflow
from agent_sre.workflows.simulated import SimulatedIncidentWorkflow

pytestmark = pytest.mark.asyncio(loop_scope="session")
CATALOG_UNFOLDING = default_catalog() / "unfolding.yaml"


@pytest.fixture(scope="module")
def catalog() -> dict[str, Scenario]:
    """One scenario per fault type: the first of each family in the catalog."""
    first: dict[str, Scenario] = {}
    for s in load_scenarios():
        if "unfolding" not in s.tags:  # measured apart (test_unfolding_scenarios_run_through_the_workflow)
            first.setdefault(s.fault, s)
    return first


async def _client(settings: Settings) -> Client:
    return await connect(settings)


def _injected_incident(settings: Settings, scenario: Scenario, **limits: object) -> Incident:
    """Inject `scenario` into a fresh simulator environment and build the incident its alert would raise."""
    env = SimulatorClient(settings.sim_url).create_env(apps=[scenario.app], seed=scenario.seed)
    faults.inject(api_client(env["server"]), scenario)
    return Incident(id=uuid.uuid4().hex[:12], source="sdk", alert=scenario.alert, namespace=scenario.namespace,
                    kubeconfig=env["server"], scenario=scenario,
                    limits=RemediationLimits(settle_s=1.0, **limits))  # type: ignore[arg-type]


async def test_every_fault_type_runs_through_the_workflow_with_the_runbook(stack: Settings, catalog) -> None:
    client = await _client(stack)
    async with running_workers(client, stack) as settings:
        results = await run_episodes(client, settings, list(catalog.values()), n=len(catalog),
                                     policy=PolicyRef(name="runbook"), concurrency=8)
    assert {r.fault for r in results} == set(catalog)
    assert all(r.outcome.steps >= 1 and r.outcome.trajectory_key for r in results)
    rows = {row.group: row for row in summarize(results)}
    resolved = {r.fault for r in results if r.outcome.outcome == "resolved"}
    # The runbook is a decent baseline, not an oracle: the textbook faults it fixes, its documented blind
    # spots (NetworkPolicies, Service wiring, a corrupted Secret survives a rollback) it misses. (OOM is checked
    # on a manual clock in test_environment.py: here the simulated clock follows wall time, so whether the
    # runbook sees OOMKilled or only a crash loop depends on the machine's load.)
    assert {"bad_image", "chaos_network_delay", "node_selector_missing", "scaled_to_zero"} <= resolved
    assert not {"network_policy_deny", "service_selector", "secret_password"} & resolved
    # (The catalog's families the runbook cannot handle grew with the fault types: it resolves 57 % of the catalog
    # in-process; here one scenario a family, on a clock that follows the machine's pace.)
    assert 0.35 <= rows["all"].success_rate < 1.0, rows["all"]
    assert rows["bad_image"].write_rate == 1.0  # it resolved them, so it wrote: `wrote` counts episodes, not writes
    stored = list(iter_trajectories(object_store(stack), stack.s3_bucket, model_version="runbook-v1"))
    assert {r.outcome.workflow_id for r in results} <= {t.workflow_id for t in stored}


async def test_false_alarm_right_answer_is_no_write(stack: Settings, catalog) -> None:
    client = await _client(stack)
    incident = _injected_incident(stack, catalog["none"])
    script = [ToolCall(tool="list_pods"), ToolCall(tool="get_events")]
    async with running_workers(client, stack) as settings:
        started = await start_incident(client, incident, policy=PolicyRef(name="scripted", script=script),
                                       settings=settings)
        outcome: IncidentOutcome = await started.handle.result()
    assert outcome.outcome == "resolved" and outcome.writes == 0
    assert outcome.reward.components.get("false_positive", 0) == 0


async def test_a_feedback_window_nobody_uses_closes_and_the_incident_is_stored(stack: Settings, catalog) -> None:
    """The window is an offer, not a requirement: with no feedback the incident is scored and stored when it ends."""
    client = await _client(stack)
    incident = _injected_incident(stack, catalog["none"], feedback_window_s=2)
    script = [ToolCall(tool="list_pods"), ToolCall(tool="finish", args={"diagnosis": "nothing is wrong",
                                                                          "summary": "read the pods"})]
    async with running_workers(client, stack) as settings:
        started = await start_incident(client, incident, policy=PolicyRef(name="scripted", script=script),
                                       settings=settings)
        outcome: IncidentOutcome = await started.handle.result()
    assert outcome.outcome == "resolved" and outcome.trajectory_key is not None
    stored = [t for t in iter_trajectories(object_store(stack), stack.s3_bucket)
              if t.workflow_id == outcome.workflow_id]
    assert len(stored) == 1 and stored[0].feedback == []


async def test_a_fix_that_never_rolls_out_is_escalated_not_claimed(stack: Settings, catalog) -> None:
    """A corrupted Secret survives the runbook's rollback: it waits for the rollout, sees it time out and hands
    the incident to a human. That claims no fix, so it is no false positive, and the escalation is what shows:
    the page reaches the webhook (its first attempt answered 503 and was retried) and the incident is listed."""
    client = await _client(stack)
    incident = _injected_incident(stack, catalog["secret_password"])
    pages: list[dict] = []

    async def pager(request: web.Request) -> web.Response:
        pages.append(await request.json())
        return web.Response(status=503 if len(pages) == 1 else 202)

    app = web.Application()
    app.router.add_post("/page", pager)
    async with TestServer(app) as webhook, running_workers(client, stack) as settings:
        url = str(webhook.make_url("/page"))
        started = await start_incident(client, incident, policy=PolicyRef(name="runbook"), settings=settings,
                                       escalation_url=url)
        outcome: IncidentOutcome = await started.handle.result()
        trajectory: Trajectory = await started.handle.query(IncidentRemediationWorkflow.trajectory)
        status: RemediationStatus = await started.handle.query(IncidentRemediationWorkflow.status)
        listed = (await started.handle.describe()).typed_search_attributes
    assert (outcome.termination, outcome.outcome, outcome.writes) == ("escalated", "unresolved", 1)
    assert (listed[ENDING], listed[OUTCOME]) == ("escalated", "unresolved")  # what on-call filters pages by
    assert not outcome.false_positive and outcome.reward.components["false_positive"] == 0
    check, ending = trajectory.steps[-2:]
    assert check.action is not None and check.action.tool == "rollout_status" and check.result is not None
    assert check.result.output.endswith("error: timed out waiting for the condition")
    assert ending.action is not None and ending.action.tool == "escalate" and ending.result is None
    assert trajectory.diagnosis == outcome.diagnosis and "did not fix" in (trajectory.diagnosis or "")
    assert outcome.summary == trajectory.summary and (outcome.summary or "").startswith("rollout status: ")

    assert len(pages) == 2 and pages[0] == pages[1]  # the retry sent the same notice
    page = pages[0]
    assert page["event"] == "incident_escalated" and page["workflow_id"] == outcome.workflow_id
    assert (page["diagnosis"], page["summary"]) == (outcome.diagnosis, outcome.summary)
    assert page["alertname"] == incident.alert.labels["alertname"] and page["namespace"] == incident.namespace
    assert page["actions"] == [s.action.command_line() for s in trajectory.writes if s.action is not None]
    assert f"agent-sre incident steps {outcome.workflow_id}" in page["text"]
    assert status.escalation == f"notified {url} (HTTP 202)"


async def test_an_unreachable_pager_is_noted_and_the_incident_goes_on(stack: Settings, catalog) -> None:
    client = await _client(stack)
    incident = _injected_incident(stack, catalog["secret_password"])
    [nobody] = pick_free_ports(1, "127.0.0.1")
    url = f"http://127.0.0.1:{nobody}/page"
    async with running_workers(client, stack) as settings:  # the URL from the settings, as `alerts serve` has it
        started = await start_incident(client, incident, policy=PolicyRef(name="runbook"),
                                       settings=settings.model_copy(update={"escalation_url": url}))
        outcome: IncidentOutcome = await started.handle.result()
        status: RemediationStatus = await started.handle.query(IncidentRemediationWorkflow.status)
    assert (outcome.termination, outcome.outcome) == ("escalated", "unresolved") and outcome.trajectory_key
    assert status.escalation is not None and status.escalation.startswith(f"notifying {url} failed: ")
    assert "Connection refused" in status.escalation


async def test_refused_and_invalid_actions_are_steps_not_crashes(stack: Settings, catalog) -> None:
    client = await _client(stack)
    incident = _injected_incident(stack, catalog["bad_image"])
    script = [
        ToolCall(tool="delete_network_policy", args={"name": "x", "namespace": "kube-system"}),  # bad args
        ToolCall(tool="rm_rf", args={}),  # unknown tool
        ToolCall(tool="patch", args={"kind": "deployment", "name": "frontend",
                                     "patch": {"metadata": {"namespace": "kube-system"}}}),  # guardrail
    ]
    async with running_workers(client, stack) as settings:
        started = await start_incident(client, incident, policy=PolicyRef(name="scripted", script=script),
                                       settings=settings)
        outcome: IncidentOutcome = await started.handle.result()
        trajectory: Trajectory = await started.handle.query(IncidentRemediationWorkflow.trajectory)
    assert outcome.invalid == 2 and outcome.refused == 1 and outcome.writes == 0
    assert all(r < 0 for r in outcome.reward.step_rewards[:3])
    # The model is told why, in the conversation it will see next.
    tool_messages = [m.content for m in trajectory.conversation if m.role == "tool"]
    assert "invalid action" in tool_messages[0] and "unknown tool" in tool_messages[1]
    assert tool_messages[2].startswith("refused")


async def test_policies_decide_from_the_workflows_view_of_the_trajectory_as_from_the_whole(catalog) -> None:
    """The workflow sends `Trajectory.for_policy()`, without each decision's copy of the messages: the runbook must
    decide the same from it, and a language model must be prompted with the same messages."""
    env = IncidentEnvironment(Simulator(speed=0), catalog["bad_image"], policy="runbook")
    env.reset()
    runbook, ref = RunbookPolicy(), PolicyRef()
    while not env.done:
        whole, view = env.trajectory, env.trajectory.for_policy()
        decision = runbook.decide(ref, whole)
        assert runbook.decide(ref, view).model_copy(update={"latency_ms": 0}) == decision.model_copy(
            update={"latency_ms": 0})
        assert prompt_messages(view) == prompt_messages(whole)
        env.record(decision)
    t = env.close()
    assert len(t.steps) > 3 and all(s.decision.new_messages for s in t.steps)  # the whole is left as it was
    assert len(t.for_policy().model_dump_json()) < 0.8 * len(t.model_dump_json())


async def _await_phase(handle, phase: str) -> RemediationStatus:
    for _ in range(200):
        status = await handle.query(IncidentRemediationWorkflow.status)
        if status.phase == phase:
            return status
        await asyncio.sleep(0.05)
    raise AssertionError(f"never reached {phase}; last status {status}")


def _restart(scenario: Scenario) -> list[ToolCall]:
    """A low-risk write on the scenario's own service, which approval mode holds back."""
    return [ToolCall(tool="rollout_restart", args={"deployment": scenario.target})]


async def test_repeated_alert_attaches_to_the_running_remediation(stack: Settings, catalog) -> None:
    client = await _client(stack)
    scenario = catalog["bad_image"]
    incident = _injected_incident(stack, scenario, approval_risk=Risk.LOW, approval_timeout_s=60)
    async with running_workers(client, stack) as settings:
        first = await start_incident(client, incident, policy=PolicyRef(name="scripted", script=_restart(scenario)),
                                     settings=settings)
        second = await start_incident(client, incident, settings=settings)
        assert not first.attached and second.attached
        assert second.workflow_id == first.workflow_id
        await _await_phase(first.handle, "awaiting_approval")
        await first.handle.signal(IncidentRemediationWorkflow.cancel)
        outcome: IncidentOutcome = await first.handle.result()
    assert outcome.termination == "cancelled" and outcome.refused == 1 and outcome.writes == 0


async def test_a_kubeconfig_that_does_not_exist_fails_the_incident_at_once(stack: Settings, catalog, tmp_path) -> None:
    """Not a baseline snapshot retried for as long as the workflow may run."""
    client = await _client(stack)
    missing = tmp_path / "no-such-kubeconfig"
    incident = Incident(id=uuid.uuid4().hex[:12], source="sdk", alert=catalog["bad_image"].alert, namespace="shop",
                        kubeconfig=str(missing))
    async with running_workers(client, stack) as settings:
        started = await start_incident(client, incident, policy=PolicyRef(name="runbook"), settings=settings)
        with pytest.raises(WorkflowFailureError) as failed:
            await asyncio.wait_for(started.handle.result(), timeout=60)
    causes, cause = [], failed.value.cause
    while cause is not None:
        causes.append(cause)
        cause = cause.cause
    assert any(isinstance(c, ApplicationError) and c.type == "KubeconfigError" and str(missing) in c.message
               and c.non_retryable for c in causes), causes


async def test_approval_gate_and_status_query(stack: Settings, catalog) -> None:
    client = await _client(stack)
    scenario = catalog["bad_image"]
    incident = _injected_incident(stack, scenario, approval_risk=Risk.LOW, approval_timeout_s=60)
    async with running_workers(client, stack) as settings:
        started = await start_incident(client, incident, policy=PolicyRef(name="scripted", script=_restart(scenario)),
                                       settings=settings)
        status = await _await_phase(started.handle, "awaiting_approval")
        assert status.pending_approval is not None and status.pending_approval.tool == "rollout_restart"
        await started.handle.signal(IncidentRemediationWorkflow.approve_action,
                                    ApprovalDecision(step=0, approved=True, by="alice"))
        outcome: IncidentOutcome = await started.handle.result()
    assert outcome.writes == 1 and outcome.refused == 0


async def test_a_high_risk_write_waits_for_a_human_and_runs_once_approved(stack: Settings, catalog) -> None:
    """By default (approve_high_risk="human") a write the rules judge high-risk is held: the workflow waits with
    the write's assessment in its status, runs it approved after `approve_action`, and a rejected one reaches the
    model as a refusal."""
    client = await _client(stack)
    scenario = catalog["secret_password"]
    fix = scenario.ground_truth.fix[0]
    assert fix.tool == "set_config_key"
    redirect = ToolCall(tool="set_env", args={"deployment": scenario.target, "container": scenario.target,
                                              "name": "DB_HOST", "value": "db.attacker.example"})
    incident = _injected_incident(stack, scenario, approval_timeout_s=60)
    async with running_workers(client, stack) as settings:
        started = await start_incident(client, incident, policy=PolicyRef(name="scripted", script=[fix, redirect]),
                                       settings=settings)
        status = await _await_phase(started.handle, "awaiting_approval")
        assert status.pending_step == 0 and status.pending_approval == fix
        assert status.pending_assessment is not None and status.pending_assessment.risk == "high"
        assert [f.rule for f in status.pending_assessment.findings] == ["secret_data"]
        await started.handle.signal(IncidentRemediationWorkflow.approve_action,
                                    ApprovalDecision(step=0, approved=True, by="alice"))
        status = await _await_phase(started.handle, "awaiting_approval")
        assert status.pending_step == 1 and status.pending_assessment.findings[0].rule == "env_host"
        await started.handle.signal(IncidentRemediationWorkflow.reject_action,
                                    ApprovalDecision(step=1, approved=False, by="bob", reason="no"))
        outcome: IncidentOutcome = await started.handle.result()
        trajectory: Trajectory = await started.handle.query(IncidentRemediationWorkflow.trajectory)
    approved, rejected = (trajectory.steps[i].result for i in (0, 1))
    assert approved.ok and approved.needs_approval is None
    assert rejected.refused and rejected.output.startswith("refused: rejected by bob: no (needs approval: env DB_HOST")
    assert outcome.writes == 1


async def test_episode_records_ground_truth_and_user_report(stack: Settings, catalog) -> None:
    client = await _client(stack)
    scenario = catalog["oom_limit"]
    async with running_workers(client, stack) as settings:
        result: EpisodeResult = await client.execute_workflow(
            SimulatedIncidentWorkflow.run, EpisodeRequest(scenario=scenario, queues=task_queues(settings)),
            id=f"episode-test-{uuid.uuid4().hex[:8]}", task_queue=settings.queue_agent)
    stored = [t for t in iter_trajectories(object_store(stack), stack.s3_bucket)
              if t.workflow_id == result.outcome.workflow_id]
    assert len(stored) == 1
    t = stored[0]
    assert t.incident.scenario is not None and t.incident.scenario.ground_truth.fault_class
    assert t.incident.report == scenario.symptom
    # The environment was cleaned up.
    assert result.environment not in {e["name"] for e in SimulatorClient(stack.sim_url).list_envs()}


@pytest.mark.slow
async def test_200_concurrent_simulated_incidents_none_lost(stack: Settings) -> None:
    client = await _client(stack)
    scenarios = load_scenarios()
    async with running_workers(client, stack) as settings:
        results = await run_episodes(client, settings, scenarios, n=200, policy=PolicyRef(name="runbook"),
                                     concurrency=200)
    assert len(results) == 200
    assert len({r.outcome.workflow_id for r in results}) == 200
    assert all(r.outcome.trajectory_key for r in results)


def _limited(incident: Incident, **limits: object) -> Incident:
    return incident.model_copy(update={"limits": incident.limits.model_copy(update=limits)})


async def _refusal(handle, update, arg) -> ApplicationError:
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(update, arg)
    cause = refused.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "Refused" and cause.non_retryable, cause
    return cause


async def test_approval_and_feedback_are_updates_that_refuse_what_does_not_apply(stack: Settings, catalog) -> None:
    """A wrong step, a contradictory decision or feedback before the verdict is refused with the reason, not
    retryable; an approval returns the state the incident moves on to; a rejection's reason reaches the model."""
    client = await _client(stack)
    scenario = catalog["secret_password"]
    fix = scenario.ground_truth.fix[0]
    redirect = ToolCall(tool="set_env", args={"deployment": scenario.target, "container": scenario.target,
                                              "name": "DB_HOST", "value": "db.attacker.example"})
    incident = _injected_incident(stack, scenario, approval_timeout_s=60)
    workflow = IncidentRemediationWorkflow
    async with running_workers(client, stack) as settings:
        started = await start_incident(client, incident, policy=PolicyRef(name="scripted", script=[fix, redirect]),
                                       settings=settings)
        handle = started.handle
        status = await _await_phase(handle, "awaiting_approval")
        assert status.waiting is not None
        assert status.waiting.on == "a human to approve or reject step 0 (set_config_key)"
        assert status.waiting.until is not None and status.waiting.until > status.waiting.since
        wrong = await _refusal(handle, workflow.approve, ApprovalDecision(step=1, approved=True, by="alice"))
        assert wrong.message == ("cannot approve: step 1 is not waiting for approval; step 0 (set_config_key) is")
        mixed = await _refusal(handle, workflow.reject, ApprovalDecision(step=0, approved=True, by="alice"))
        assert mixed.message == "cannot reject: the decision says approved=True"
        early = await _refusal(handle, workflow.feedback, HumanFeedback(rating=1))
        assert early.message == "cannot rate: the incident has no feedback window; rate it once it has completed"
        moved_on = await handle.execute_update(workflow.approve, ApprovalDecision(step=0, approved=True, by="alice"))
        assert moved_on.phase in ("investigating", "awaiting_approval") and moved_on.pending_step != 0
        status = await _await_phase(handle, "awaiting_approval")
        assert status.pending_step == 1
        again = await _refusal(handle, workflow.approve, ApprovalDecision(step=0, approved=True, by="alice"))
        assert "step 0 is not waiting for approval; step 1 (set_env) is" in again.message
        await handle.execute_update(workflow.reject, ApprovalDecision(step=1, approved=False, by="bob",
                                                                      reason="that host is not ours"))
        outcome: IncidentOutcome = await handle.result()
        trajectory: Trajectory = await handle.query(workflow.trajectory)
    assert outcome.writes == 1 and outcome.refused == 1
    told = [m.content for m in trajectory.conversation if m.role == "tool"]
    assert any(m.startswith("refused: rejected by bob: that host is not ours") for m in told), told


async def test_the_old_approval_signal_still_approves(stack: Settings, catalog) -> None:
    """Callers from before the updates (`approve_action`) still work; the status names what the incident waits on."""
    client = await _client(stack)
    scenario = catalog["bad_image"]
    incident = _injected_incident(stack, scenario, approval_risk=Risk.LOW, approval_timeout_s=60)
    async with running_workers(client, stack) as settings:
        started = await start_incident(client, incident, policy=PolicyRef(name="scripted", script=_restart(scenario)),
                                       settings=settings)
        await _await_phase(started.handle, "awaiting_approval")
        await started.handle.signal(IncidentRemediationWorkflow.approve_action,
                                    ApprovalDecision(step=0, approved=True, by="alice"))
        outcome: IncidentOutcome = await started.handle.result()
    assert outcome.writes == 1 and outcome.refused == 0


async def test_a_deleted_environment_ends_the_incident_as_cluster_lost(stack: Settings, catalog) -> None:
    """The simulator environment goes away while the incident settles: the observer's 404 is final, and the
    incident ends at once, unjudged, as `cluster_lost`, its trajectory stored saying why."""
    client = await _client(stack)
    scenario = catalog["none"]
    incident = _limited(_injected_incident(stack, scenario), settle_s=3)
    env_name = incident.kubeconfig.rstrip("/").rsplit("/", 1)[-1]  # type: ignore[union-attr]
    async with running_workers(client, stack) as settings:
        started = await start_incident(client, incident, policy=PolicyRef(name="scripted", script=[]),
                                       settings=settings)
        status = await _await_phase(started.handle, "settling")
        assert status.waiting is not None and status.waiting.on == "timer settle"
        SimulatorClient(stack.sim_url).delete_env(env_name)
        outcome: IncidentOutcome = await asyncio.wait_for(started.handle.result(), timeout=20)
        trajectory: Trajectory = await started.handle.query(IncidentRemediationWorkflow.trajectory)
        listed = (await started.handle.describe()).typed_search_attributes
    assert (outcome.termination, outcome.outcome) == ("cluster_lost", "unresolved") and outcome.trajectory_key
    assert listed[ENDING] == "cluster_lost"
    assert trajectory.verdict is not None
    [reason] = trajectory.verdict.reasons
    assert reason.startswith(f"not judged: the cluster could not be observed: namespace '{scenario.namespace}' is "
                             "not in the incident's cluster (any more)") and env_name in reason, reason


@pytest.fixture
def failing_observer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The observer cannot reach the cluster, the way a simulator that is down looks: retried, never answering."""
    def unreachable(*args: object) -> None:
        raise ConnectionRefusedError("the cluster does not answer")

    monkeypatch.setattr(observer.oracle, "observe_incident", unreachable)


async def test_an_observer_that_keeps_failing_ends_within_the_cluster_timeout(stack: Settings, catalog,
                                                                              failing_observer: None) -> None:
    client = await _client(stack)
    incident = _limited(_injected_incident(stack, catalog["none"]), cluster_timeout_s=3)
    async with running_workers(client, stack) as settings:
        started = await start_incident(client, incident, policy=PolicyRef(name="scripted", script=[]),
                                       settings=settings)
        outcome: IncidentOutcome = await asyncio.wait_for(started.handle.result(), timeout=30)
        trajectory: Trajectory = await started.handle.query(IncidentRemediationWorkflow.trajectory)
    assert outcome.termination == "cluster_lost" and trajectory.verdict is not None
    assert trajectory.verdict.reasons == ["not judged: the cluster did not answer the observer for 3s"]


async def test_cancel_while_observing_ends_the_incident_promptly(stack: Settings, catalog,
                                                                 failing_observer: None) -> None:
    client = await _client(stack)
    incident = _injected_incident(stack, catalog["none"])  # the observer would retry for 300 s
    async with running_workers(client, stack) as settings:
        started = await start_incident(client, incident, policy=PolicyRef(name="scripted", script=[]),
                                       settings=settings)
        status = await _await_phase(started.handle, "observing")
        assert status.waiting is not None and status.waiting.on == "activity observe"
        await started.handle.signal(IncidentRemediationWorkflow.cancel)
        outcome: IncidentOutcome = await asyncio.wait_for(started.handle.result(), timeout=10)
        trajectory: Trajectory = await started.handle.query(IncidentRemediationWorkflow.trajectory)
    assert (outcome.termination, outcome.outcome) == ("cancelled", "unresolved") and outcome.trajectory_key
    assert trajectory.verdict is not None
    assert trajectory.verdict.reasons == ["not judged: the incident was cancelled while it was being observed"]


@pytest.mark.parametrize("phase", ["settling", "awaiting_feedback"])
async def test_cancel_ends_a_wait_at_once(stack: Settings, catalog, phase: str) -> None:
    """A minute-long settle or feedback window is cut short by a cancel; the incident is judged all the same."""
    client = await _client(stack)
    settling = phase == "settling"
    incident = _limited(_injected_incident(stack, catalog["none"]), settle_s=60 if settling else 0,
                        feedback_window_s=0 if settling else 60)
    async with running_workers(client, stack) as settings:
        started = await start_incident(client, incident, policy=PolicyRef(name="scripted", script=[]),
                                       settings=settings)
        await _await_phase(started.handle, phase)
        await started.handle.signal(IncidentRemediationWorkflow.cancel)
        outcome: IncidentOutcome = await asyncio.wait_for(started.handle.result(), timeout=10)
    assert (outcome.termination, outcome.outcome) == ("finished", "resolved")


async def test_unfolding_scenarios_run_through_the_workflow(stack: Settings) -> None:
    """Through Temporal: the episode's environment installs both apps of a shared fault, and the incident is judged
    on its own namespace (its own fault's fix, scripted: what the expert reads through the served simulator depends
    on which log lines its clock samples, which the in-process tests pin); a fault that arrives later is held by the
    served simulator and lands as its clock passes it (a simulated second after injection: at 60x, before the alert
    fires, so the expert sees it from its first look; later, when it lands depends on the machine's pace, and the
    incident's 15 steps, unlike the in-process budget, do not grow as it arrives); the scenario's settle window
    reaches the incident's limits in the real seconds of its timer."""
    catalog = load_scenarios(CATALOG_UNFOLDING)
    shared, later_fault = catalog[3], catalog[1]
    later_fault = later_fault.model_copy(update={"name": "later-soon", "settle_s": 120.0, "faults": [
        later_fault.faults[0], later_fault.faults[1].model_copy(update={"delay_s": 1.0})]})
    own_fix = PolicyRef(name="scripted", script=shared.ground_truth.fix)
    client = await _client(stack)
    async with running_workers(client, stack) as settings:
        results = {s.name: await client.execute_workflow(
            SimulatedIncidentWorkflow.run,
            EpisodeRequest(scenario=s, policy=policy, queues=task_queues(settings)),
            id=f"episode-unfolding-{uuid.uuid4().hex[:8]}", task_queue=settings.queue_agent)
            for s, policy in ((shared, own_fix), (later_fault, PolicyRef(name="expert", version="expert")))}
    stored = {t.workflow_id: t for t in iter_trajectories(object_store(stack), stack.s3_bucket)}
    for name, result in results.items():
        t = stored[result.outcome.workflow_id]
        assert result.outcome.outcome == "resolved", (name, [s.action.command_line() for s in t.steps if s.action],
                                                      t.verdict.reasons if t.verdict else None)
    soon = stored[results["later-soon"].outcome.workflow_id]
    assert {"cart", "payment"} <= {str(s.action.args.get("deployment")) for s in soon.writes if s.action}
    assert soon.incident.limits.settle_s == pytest.approx(120.0 / stack.sim_speed)
