"""IncidentRemediationWorkflow: route → investigate/act loop → settle → observe → reward → store.

    routing ─▶ investigating ⇄ (awaiting_approval) ─▶ settling ─▶ observing ─▶ rewarding
                  │  policy: decide_next_action                                 │
                  │  tools:  run_tool (guardrails, idempotency key per step)    ▼
                  └─ until finish|escalate, step limit,                (awaiting_feedback) ─▶ storing ─▶ done
                     deadline or cancel; an escalation is POSTed to the request's escalation_url at once

Where the activities that reach the cluster run is the request's `queues.tool_execution` (see `near_cluster`).

Both incident workflows run outside Temporal's sandbox (`sandboxed=False`): the sandbox re-imports the workflow's
module for every run and enters itself for every payload, about a fifth of the worker's CPU per episode
(bench/orchestration.py). What it would catch, a non-deterministic call, these modules do not make: activities do
all I/O and read all clocks, and the workflows read time only from `workflow.now()`.
tests/test_replay.py replays recorded histories of both against the current code.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import ActivityError, FailureError

from agent_sre.activities import escalation, locks, observer, policy, rewards, routing, tools, trajectories
from agent_sre.models.alert import Alert
from agent_sre.models.incident import Incident
from agent_sre.models.lock import LEASE_GRANTED, AcquireRequest, LeaseGrant, LeaseRequest, lock_id
from agent_sre.models.policy import ChatMessage, PolicyDecision
from agent_sre.models.remediation import (
    ALERTS_FIRED,
    ApprovalDecision,
    IncidentOutcome,
    ObserveRequest,
    Phase,
    PolicyRef,
    PolicyRequest,
    RemediationRequest,
    RemediationStatus,
    RewardRequest,
    TaskQueues,
)
from agent_sre.models.reward import HumanFeedback
from agent_sre.models.tools import TOOL_SPECS, ToolCall, ToolInvocation, ToolResult, WriteAssessment
from agent_sre.models.trajectory import Step, Termination, Trajectory
from agent_sre.outcome import escalation_notice, incident_outcome
from agent_sre.webhooks import NOTIFY_RETRY
from agent_sre.workflows import BAD_INPUT
from agent_sre.workflows.lock import NamespaceLockWorkflow

FAULT_CLASS = SearchAttributeKey.for_keyword("FaultClass")
SERVICE = SearchAttributeKey.for_keyword("Service")
MODEL_VERSION = SearchAttributeKey.for_keyword("ModelVersion")
OUTCOME = SearchAttributeKey.for_keyword("Outcome")
ENDING = SearchAttributeKey.for_keyword("Ending")  # how the agent stopped: "escalated" is a page for a human

QUICK = timedelta(seconds=30)
# A write the rules judge high-risk waits for a human and runs again approved (histories before it never did).
WRITE_ASSESSMENT_PATCH = "write-assessment"
# An incident holds its namespace's lease (NamespaceLockWorkflow) from its first write until it has observed the
# outcome (histories before it wrote without one).
NAMESPACE_LEASE_PATCH = "namespace-lease"
RULE_BASED_POLICIES = frozenset({"runbook", "expert", "scripted"})
STORE_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), backoff_coefficient=2.0,
                          maximum_interval=timedelta(minutes=2))  # unlimited attempts: the trajectory must land
Arg = TypeVar("Arg")
Result = TypeVar("Result")


def near_cluster(queues: TaskQueues, fn: Callable[[Arg], Result], arg: Arg, timeout: timedelta = QUICK,
                 heartbeat_timeout: timedelta | None = None) -> Awaitable[Result]:
    """An activity that reads the cluster (or sets up the simulator) and is safe to run again.

    `local`: a local activity beside the workflow, no task-queue round trip; a worker that crashes before its
    workflow task completes re-runs it. `queue`: an activity on the tools queue, for workers that cannot reach the
    cluster. (Local activities cannot heartbeat: they are bounded by `timeout` alone.)
    """
    if queues.tool_execution == "local":
        return workflow.execute_local_activity(fn, arg, start_to_close_timeout=timeout)
    return workflow.execute_activity(fn, arg, start_to_close_timeout=timeout, heartbeat_timeout=heartbeat_timeout,
                                     task_queue=queues.tools)


def search_attributes(incident: Incident, policy_ref: PolicyRef | None) -> TypedSearchAttributes:
    """What an incident is listed by. A parent that knows them sets them when it starts the remediation, which
    then has none to upsert: one history event and one visibility write fewer."""
    pairs = [SearchAttributePair(FAULT_CLASS, incident.fault_class),
             SearchAttributePair(SERVICE, incident.service or "unknown")]
    if policy_ref is not None:
        pairs.append(SearchAttributePair(MODEL_VERSION, policy_ref.version))
    return TypedSearchAttributes(pairs)


@workflow.defn(name="IncidentRemediationWorkflow", sandboxed=False, failure_exception_types=BAD_INPUT)
class IncidentRemediationWorkflow:
    @workflow.init
    def __init__(self, request: RemediationRequest) -> None:
        self._incident: Incident = request.incident
        self._queues = request.queues
        self._phase: Phase = "routing"
        self._trajectory: Trajectory | None = None
        self._model_version: str | None = None
        self._cancelled = False
        self._alert_resolved = False
        self._pending: ToolCall | None = None
        self._pending_step: int | None = None
        self._pending_assessment: WriteAssessment | None = None
        self._approval: ApprovalDecision | None = None
        self._feedback: list[HumanFeedback] = []
        self._feedback_open = False
        self._outcome: str | None = None
        self._escalation: str | None = None
        self._lock_id: str | None = None  # the namespace lock asked for a lease, until released
        self._lease: LeaseGrant | None = None

    # --- the state machine ------------------------------------------------------------------------------------
    @workflow.run
    async def run(self, request: RemediationRequest) -> IncidentOutcome:
        try:
            return await self._remediate(request)
        except (Exception, asyncio.CancelledError):  # failed or cancelled (not evicted from a worker's cache): the
            await self._release_namespace()  # next remediation of the namespace need not wait for the lease to run out
            raise

    async def _remediate(self, request: RemediationRequest) -> IncidentOutcome:
        incident = request.incident
        info = workflow.info()
        policy_ref = request.policy
        if policy_ref is None:
            policy_ref = await workflow.execute_local_activity(  # a read of the routing table
                routing.route_model, incident, start_to_close_timeout=QUICK)
        self._model_version = policy_ref.version
        known = info.typed_search_attributes  # as the workflow was started, or upserted since
        unset = [key.value_set(value) for key, value in search_attributes(incident, policy_ref)
                 if known.get(key) != value]
        if unset:
            workflow.upsert_search_attributes(unset)  # one event, not one per attribute
        baseline = request.baseline
        if baseline is None:
            baseline = await near_cluster(self._queues, observer.snapshot_cluster, incident)

        self._trajectory = trajectory = Trajectory(
            incident=self._incident, workflow_id=info.workflow_id, run_id=info.run_id, policy=policy_ref.name,
            model_version=policy_ref.version, started_at=workflow.now())
        trajectory.termination = await self._investigate(policy_ref, trajectory)
        trajectory.mitigated_at = workflow.now()
        if trajectory.termination == "escalated" and request.escalation_url is not None:
            await self._page(request.escalation_url, trajectory)

        if incident.limits.settle_s > 0:  # a zero-length durable timer still costs a timer-queue round trip
            self._set_phase("settling")
            await workflow.sleep(timedelta(seconds=incident.limits.settle_s))
        self._set_phase("observing")
        verdict = await near_cluster(self._queues, observer.observe,
                                     ObserveRequest(incident=incident, baseline=baseline,
                                                    termination=trajectory.termination,
                                                    writes=len(trajectory.writes)))
        trajectory.verdict, self._outcome = verdict, verdict.outcome
        await self._release_namespace()  # the fix is observed: the next writer reads a settled namespace
        workflow.upsert_search_attributes([OUTCOME.value_set(verdict.outcome),  # one event, as above
                                           ENDING.value_set(trajectory.termination)])

        if incident.limits.feedback_window_s > 0:
            self._set_phase("awaiting_feedback")
            self._feedback_open = True
            try:
                await workflow.wait_condition(lambda: bool(self._feedback),
                                              timeout=timedelta(seconds=incident.limits.feedback_window_s))
            except TimeoutError:
                pass  # nobody commented: the window closes and the incident is scored without feedback
            self._feedback_open = False
        trajectory.feedback = list(self._feedback)
        trajectory.alert_resolved = self._alert_resolved
        trajectory.ended_at = workflow.now()

        self._set_phase("rewarding")
        trajectory.reward = await workflow.execute_local_activity(  # pure computation: no queue round trip
            rewards.compute_reward, RewardRequest(trajectory=trajectory, config=request.reward),
            start_to_close_timeout=QUICK)

        key = None
        if request.store_trajectory:
            self._set_phase("storing")
            stored = await workflow.execute_local_activity(  # re-running it rewrites the same object
                trajectories.store_trajectory, trajectory, start_to_close_timeout=QUICK, retry_policy=STORE_RETRY)
            key = stored.key
        self._set_phase("done")
        return incident_outcome(trajectory, key)

    async def _investigate(self, policy_ref: PolicyRef, trajectory: Trajectory) -> Termination:
        """The agent loop. Every exit is a termination reason; nothing here raises on bad model output."""
        limits = trajectory.incident.limits
        deadline = workflow.now() + timedelta(seconds=limits.deadline_s)
        self._set_phase("investigating")
        while True:
            if self._cancelled:
                return "cancelled"
            if len(trajectory.steps) >= limits.max_steps:
                return "step_limit"
            if workflow.now() >= deadline:
                return "deadline"
            decision = await self._decide(policy_ref, trajectory)
            trajectory.conversation.extend(decision.new_messages)
            trajectory.conversation.append(ChatMessage(role="assistant", content=decision.completion))
            step = Step(index=len(trajectory.steps), decision=decision, at=workflow.now())
            trajectory.steps.append(step)
            action = decision.action
            if action is None:
                continue  # the policy explains the invalid action to the model on its next turn
            self._set_phase("investigating", last_action=action.tool)
            if (ending := trajectory.end(action)) is not None:
                return ending
            step.result = await self._act(action, step.index, trajectory.incident)

    async def _page(self, url: str, trajectory: Trajectory) -> None:
        """Tell a human at once. A webhook that stays down is noted in `status` and the log; the incident goes on
        to its verdict, its reward and its stored trajectory all the same."""
        notice = escalation_notice(trajectory, workflow.now())
        try:
            code = await workflow.execute_activity(escalation.notify_escalation, args=[url, notice],
                                                   start_to_close_timeout=QUICK, retry_policy=NOTIFY_RETRY)
            self._escalation = f"notified {url} (HTTP {code})"
        except ActivityError as exc:
            self._escalation = f"notifying {url} failed: {exc.cause or exc}"
            workflow.logger.warning("escalation of %s not delivered: %s", trajectory.incident.id, self._escalation)

    async def _decide(self, policy_ref: PolicyRef, trajectory: Trajectory) -> PolicyDecision:
        """Rule-based policies answer in microseconds and load nothing: they run as local activities beside the
        workflow. Models run on the policy queue, where the inference hardware is."""
        request = PolicyRequest(policy=policy_ref, trajectory=trajectory.for_policy())
        if policy_ref.name in RULE_BASED_POLICIES:
            return await workflow.execute_local_activity(policy.decide_next_action, request,
                                                         start_to_close_timeout=QUICK)
        return await workflow.execute_activity(policy.decide_next_action, request, task_queue=self._queues.policy,
                                               start_to_close_timeout=timedelta(minutes=5))

    async def _act(self, action: ToolCall, index: int, incident: Incident) -> ToolResult:
        """Run the step's tool call; a write held for approval (`needs_approval`) runs again once a human approves
        it, under a key of its own. A human who approved the call at `approval_risk` has approved its writes."""
        spec = TOOL_SPECS.get(action.tool)
        if spec is not None and spec.write and workflow.patched(NAMESPACE_LEASE_PATCH):
            if (stale := await self._hold_namespace(incident)) is not None:
                return ToolResult(tool=action.tool, ok=False, stale=True, output=stale)
        limits = incident.limits
        threshold = limits.approval_risk
        approved = limits.approve_high_risk == "auto"
        if spec is not None and spec.write and threshold is not None and spec.risk >= threshold:
            rejection = await self._await_approval(action, index, limits.approval_timeout_s)
            if rejection is not None:
                return ToolResult(tool=action.tool, ok=False, refused=True, output=f"refused: {rejection}")
            approved = True
        info = workflow.info()
        key = f"{info.workflow_id}/{info.run_id}/{index}"
        result = await self._run_tool(action, key, incident, approved)
        assessment = result.needs_approval
        if assessment is None or not workflow.patched(WRITE_ASSESSMENT_PATCH):
            return result
        rejection = await self._await_approval(action, index, limits.approval_timeout_s, assessment)
        if rejection is not None:
            return result.model_copy(update={"output": f"refused: {rejection} ({result.output})"})
        return await self._run_tool(action, f"{key}/approved", incident, approved=True)

    async def _run_tool(self, action: ToolCall, key: str, incident: Incident, approved: bool) -> ToolResult:
        spec = TOOL_SPECS.get(action.tool)
        info = workflow.info()
        invocation = ToolInvocation(call=action, namespace=incident.namespace, kubeconfig=incident.kubeconfig,
                                    idempotency_key=key, approved=approved)
        if spec is None or not spec.write:  # a waiting read (rollout_status) gets its longest wait on top
            timeout = QUICK + timedelta(seconds=spec.max_wait_s if spec else 0.0)
            return await near_cluster(self._queues, tools.run_tool, invocation, timeout)
        # A write is always an activity of its own, in history before the agent moves on: re-running a chain of
        # local activities after a crash re-reads a cluster the write has changed, and the agent could then decide
        # differently and lose the write from its trajectory. `local` puts it on the workflow's own queue, where
        # eager dispatch hands it straight back to this worker.
        queue = info.task_queue if self._queues.tool_execution == "local" else self._queues.tools
        return await workflow.execute_activity(tools.run_tool, invocation, start_to_close_timeout=QUICK,
                                               task_queue=queue)

    async def _await_approval(self, action: ToolCall, index: int, timeout_s: float,
                              assessment: WriteAssessment | None = None) -> str | None:
        """Block a risky write until a human approves it. Returns the reason it may not run, or None."""
        self._pending, self._pending_step, self._approval = action, index, None
        self._pending_assessment = assessment
        self._set_phase("awaiting_approval")
        try:
            await workflow.wait_condition(
                lambda: (self._approval is not None and self._approval.step == index) or self._cancelled,
                timeout=timedelta(seconds=timeout_s))
        except TimeoutError:
            return f"no human approved {action.tool} within {timeout_s:.0f}s"
        finally:
            self._pending = self._pending_step = self._pending_assessment = None
            self._set_phase("investigating")
        if self._cancelled:
            return "the incident was cancelled"
        assert self._approval is not None
        if not self._approval.approved:
            return f"rejected by {self._approval.by or 'a human'}: {self._approval.reason or 'no reason given'}"
        return None

    async def _hold_namespace(self, incident: Incident) -> str | None:
        """Hold the namespace's lease before the first write, waiting behind other remediations of the namespace.

        Returns why this write must not run: another remediation wrote to the namespace since this one began
        reading it (its fix may have cured this incident too, or changed what is to be fixed: a second rollback
        undoes the first, a second memory bump doubles it), or the namespace stayed busy. The agent reads again and
        decides anew; its next write runs under the lease it now holds.
        """
        if self._lease is not None:
            return None
        info = workflow.info()
        if self._lock_id is None:
            self._lock_id = lock_id(incident.namespace, incident.kubeconfig)
            lease = LeaseRequest(holder=info.workflow_id, lease_s=incident.limits.namespace_lease_seconds)
            await workflow.execute_activity(locks.request_lease, AcquireRequest(
                lock_id=self._lock_id, task_queue=info.task_queue, lease=lease), start_to_close_timeout=QUICK)
        self._set_phase("awaiting_lease")
        try:
            await workflow.wait_condition(lambda: self._lease is not None or self._cancelled,
                                          timeout=timedelta(seconds=incident.limits.deadline_s))
        except TimeoutError:
            return (f"not run: another remediation has been writing to namespace {incident.namespace} for "
                    f"{incident.limits.deadline_s:.0f}s ({self._lock_id})")
        finally:
            self._set_phase("investigating")
        grant = self._lease
        if grant is None:
            return "not run: the incident was cancelled"
        began = self._trajectory.started_at if self._trajectory else info.start_time
        if grant.previous_released_at is not None and grant.previous_released_at > began:
            return (f"not run: another remediation ({grant.previous}) wrote to namespace {incident.namespace} after "
                    "this incident began reading it. Read the namespace again before writing: the problem may be "
                    "fixed already, or look different now.")
        return None

    async def _release_namespace(self) -> None:
        """Let the next remediation of the namespace have the lease (or leave the queue, if still waiting)."""
        if self._lock_id is None:
            return
        lock, self._lock_id = self._lock_id, None
        try:
            await workflow.get_external_workflow_handle_for(NamespaceLockWorkflow.run, lock).signal(
                NamespaceLockWorkflow.release, workflow.info().workflow_id)
        except FailureError:  # the lock has ended (it took the lease back long ago and went idle)
            pass

    def _set_phase(self, phase: Phase, last_action: str | None = None) -> None:
        self._phase = phase
        steps = len(self._trajectory.steps) if self._trajectory else 0
        detail = f"**{phase}** · model `{self._model_version or '?'}` · step {steps}"
        if last_action:
            detail += f" · last action `{last_action}`"
        workflow.set_current_details(detail)

    # --- signals and queries ----------------------------------------------------------------------------------
    @workflow.signal(name=ALERTS_FIRED)
    def alerts_fired(self, alerts: list[Alert]) -> None:
        """Alertmanager sent the incident's alerts again, maybe one more of its group: the incident keeps the latest
        of each, and its trajectory records them."""
        self._incident = self._incident.with_alerts(alerts)
        if self._trajectory is not None:
            self._trajectory.incident = self._incident

    @workflow.signal(name=LEASE_GRANTED)
    def lease_granted(self, grant: LeaseGrant) -> None:
        """The namespace's lock lets this incident write."""
        self._lease = grant

    @workflow.signal
    def alert_resolved(self) -> None:
        """Alertmanager says the alert stopped firing; recorded for the reward, the agent carries on."""
        self._alert_resolved = True

    @workflow.signal
    def human_feedback(self, feedback: HumanFeedback) -> None:
        if self._feedback_open:
            self._feedback.append(feedback)
        else:
            workflow.logger.warning("feedback outside the feedback window was ignored: %s", feedback.comment)

    @workflow.signal
    def approve_action(self, decision: ApprovalDecision) -> None:
        self._approval = decision.model_copy(update={"approved": True})

    @workflow.signal
    def reject_action(self, decision: ApprovalDecision) -> None:
        self._approval = decision.model_copy(update={"approved": False})

    @workflow.signal
    def cancel(self) -> None:
        """Stop acting at the next step boundary; the episode is still observed and recorded."""
        self._cancelled = True

    @workflow.query
    def status(self) -> RemediationStatus:
        t = self._trajectory
        return RemediationStatus(
            incident_id=self._incident.id, phase=self._phase, model_version=self._model_version,
            steps=len(t.steps) if t else 0,
            last_action=t.steps[-1].action.tool if t and t.steps and t.steps[-1].action else None,
            pending_approval=self._pending, pending_step=self._pending_step,
            pending_assessment=self._pending_assessment, outcome=self._outcome,
            alert_resolved=self._alert_resolved, escalation=self._escalation)

    @workflow.query
    def trajectory(self) -> Trajectory | None:
        return self._trajectory

    @workflow.query
    def incident(self) -> Incident:
        """The incident with every alert Alertmanager has sent it so far (`alerts_fired`)."""
        return self._incident
