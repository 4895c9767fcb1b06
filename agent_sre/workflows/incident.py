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
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import ActivityError, FailureError

from agent_sre.activities import escalation, locks, rewards
from agent_sre.activities.observer import ObserverActivities
from agent_sre.activities.policy import PolicyActivities
from agent_sre.activities.routing import RoutingActivities
from agent_sre.activities.tools import ToolActivities
from agent_sre.activities.trajectories import TrajectoryActivities
from agent_sre.models.alert import Alert
from agent_sre.models.endings import Termination
from agent_sre.models.incident import MAX_PROBE_WAIT_S, Incident
from agent_sre.models.lock import LEASE_GRANTED, AcquireRequest, LeaseGrant, LeaseRequest, lock_id
from agent_sre.models.policy import ChatMessage, PolicyDecision
from agent_sre.models.remediation import (
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
    Waiting,
)
from agent_sre.models.reward import HumanFeedback
from agent_sre.models.tools import TOOL_SPECS, ToolCall, ToolInvocation, ToolResult, WriteAssessment
from agent_sre.models.trajectory import Step, Trajectory
from agent_sre.models.verdict import Verdict
from agent_sre.outcome import escalation_notice, incident_outcome
from agent_sre.workflows import BAD_INPUT, refusal
from agent_sre.workflows.lock import NamespaceLockWorkflow
from agent_sre.workflows.options import (
    CLUSTER_READ_RETRY,
    MODEL_DECISION_TIMEOUT,
    NOTIFY_RETRY,
    QUICK_TIMEOUT,
    STORE_RETRY,
)

FAULT_CLASS = SearchAttributeKey.for_keyword("FaultClass")
SERVICE = SearchAttributeKey.for_keyword("Service")
MODEL_VERSION = SearchAttributeKey.for_keyword("ModelVersion")
OUTCOME = SearchAttributeKey.for_keyword("Outcome")
ENDING = SearchAttributeKey.for_keyword("Ending")  # how the agent stopped: "escalated" is a page for a human

# A write the rules judge high-risk waits for a human and runs again approved (histories before it never did).
WRITE_ASSESSMENT_PATCH = "write-assessment"
# An incident holds its namespace's lease (NamespaceLockWorkflow) from its first write until it has observed the
# outcome (histories before it wrote without one).
NAMESPACE_LEASE_PATCH = "namespace-lease"
# A cancel also ends the wait for a model's decision, the settle timer, the observer and the feedback window
# (histories before it waited them out).
CANCEL_PATCH = "cancel-any-phase"
# The observer retries within the incident's `cluster_timeout_s`; failing for good, it ends the incident as
# `cluster_lost` (histories before it retried forever).
CLUSTER_LOST_PATCH = "cluster-lost"
RULE_BASED_POLICIES = frozenset({"runbook", "expert", "scripted"})
Arg = TypeVar("Arg")
Result = TypeVar("Result")


def near_cluster(queues: TaskQueues, method: Callable[[Any, Arg], Result], arg: Arg,
                 timeout: timedelta = QUICK_TIMEOUT, heartbeat_timeout: timedelta | None = None,
                 retry_policy: RetryPolicy | None = None,
                 deadline: timedelta | None = None) -> workflow.ActivityHandle[Result]:
    """An activity method that reads the cluster (or sets up the simulator) and is safe to run again; `deadline`
    bounds it with its retries (none: the retry policy's attempts, or forever).

    `local`: a local activity beside the workflow, no task-queue round trip; a worker that crashes before its
    workflow task completes re-runs it. `queue`: an activity on the tools queue, for workers that cannot reach the
    cluster. (Local activities cannot heartbeat: they are bounded by `timeout` alone.)
    """
    if queues.tool_execution == "local":
        return workflow.start_local_activity_method(method, arg, start_to_close_timeout=timeout,
                                                    retry_policy=retry_policy, schedule_to_close_timeout=deadline)
    return workflow.start_activity_method(method, arg, start_to_close_timeout=timeout,
                                          heartbeat_timeout=heartbeat_timeout, retry_policy=retry_policy,
                                          schedule_to_close_timeout=deadline, task_queue=queues.tools)


def unjudged(why: str) -> Verdict:
    """The verdict of an incident whose outcome was never observed: not known to be resolved."""
    return Verdict(outcome="unresolved", reasons=[f"not judged: {why}"])


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
        self._cancels = 0  # cancel signals so far: each one ends what the incident is waiting on then
        self._waiting: Waiting | None = None
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
        except (Exception, asyncio.CancelledError):  # failed or cancelled: the next remediation of the namespace
            if workflow.in_workflow():  # need not wait for the lease to run out. (Not a coroutine closed outside the
                await self._release_namespace()  # workflow's loop, as a worker that shuts down leaves them.)
            raise

    async def _remediate(self, request: RemediationRequest) -> IncidentOutcome:
        incident = request.incident
        info = workflow.info()
        policy_ref = request.policy
        if policy_ref is None:  # a read of the routing table
            policy_ref = await self._waiting_for("activity route_model", workflow.execute_local_activity_method(
                RoutingActivities.route_model, incident, start_to_close_timeout=QUICK_TIMEOUT))
        self._model_version = policy_ref.version
        known = info.typed_search_attributes  # as the workflow was started, or upserted since
        unset = [key.value_set(value) for key, value in search_attributes(incident, policy_ref)
                 if known.get(key) != value]
        if unset:
            workflow.upsert_search_attributes(unset)  # one event, not one per attribute
        baseline = request.baseline
        if baseline is None:
            baseline = await self._waiting_for("activity snapshot_cluster", near_cluster(
                self._queues, ObserverActivities.snapshot_cluster, incident, retry_policy=CLUSTER_READ_RETRY,
                deadline=timedelta(seconds=incident.limits.cluster_timeout_s)))

        self._trajectory = trajectory = Trajectory(
            incident=self._incident, workflow_id=info.workflow_id, run_id=info.run_id, policy=policy_ref.name,
            model_version=policy_ref.version, started_at=workflow.now())
        trajectory.termination = await self._investigate(policy_ref, trajectory)
        trajectory.mitigated_at = workflow.now()
        if trajectory.termination == "escalated" and request.escalation_url is not None:
            await self._page(request.escalation_url, trajectory)

        if incident.limits.settle_s > 0:  # a zero-length durable timer still costs a timer-queue round trip
            self._set_phase("settling")  # a timer either way: histories before CANCEL_PATCH slept it out
            await self._until("timer settle", self._cancelled_from_now(), timedelta(seconds=incident.limits.settle_s))
        self._set_phase("observing")
        verdict = await self._observe(ObserveRequest(incident=incident, baseline=baseline,
                                                     termination=trajectory.termination,
                                                     writes=len(trajectory.writes)), trajectory)
        trajectory.verdict, self._outcome = verdict, verdict.outcome
        await self._release_namespace()  # the fix is observed: the next writer reads a settled namespace
        workflow.upsert_search_attributes([OUTCOME.value_set(verdict.outcome),  # one event, as above
                                           ENDING.value_set(trajectory.termination)])

        if incident.limits.feedback_window_s > 0:
            self._set_phase("awaiting_feedback")
            self._feedback_open = True
            cancelled = self._cancelled_from_now()
            # Nobody commented by its end: the window closes and the incident is scored without feedback.
            await self._until("human feedback (agent-sre incident feedback)",
                              lambda: bool(self._feedback) or cancelled(),
                              timedelta(seconds=incident.limits.feedback_window_s))
            self._feedback_open = False
        trajectory.feedback = list(self._feedback)
        trajectory.alert_resolved = self._alert_resolved
        trajectory.ended_at = workflow.now()

        self._set_phase("rewarding")
        trajectory.reward = await self._waiting_for("activity compute_reward", workflow.execute_local_activity(
            rewards.compute_reward, RewardRequest(trajectory=trajectory, config=request.reward),
            start_to_close_timeout=QUICK_TIMEOUT))  # pure computation: no queue round trip

        key = None
        if request.store_trajectory:
            self._set_phase("storing")
            stored = await self._waiting_for("activity store_trajectory", workflow.execute_local_activity_method(
                TrajectoryActivities.store_trajectory, trajectory, start_to_close_timeout=QUICK_TIMEOUT,
                retry_policy=STORE_RETRY))  # re-running it rewrites the same object
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
            if decision is None:
                return "cancelled"
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
            code = await self._waiting_for("activity notify_escalation", workflow.execute_activity(
                escalation.notify_escalation, args=[url, notice], start_to_close_timeout=QUICK_TIMEOUT,
                retry_policy=NOTIFY_RETRY))
            self._escalation = f"notified {url} (HTTP {code})"
        except ActivityError as exc:
            self._escalation = f"notifying {url} failed: {exc.cause or exc}"
            workflow.logger.warning("escalation of %s not delivered: %s", trajectory.incident.id, self._escalation)

    async def _decide(self, policy_ref: PolicyRef, trajectory: Trajectory) -> PolicyDecision | None:
        """Rule-based policies answer in microseconds and load nothing: they run as local activities beside the
        workflow. Models run on the policy queue, where the inference hardware is. None: cancelled meanwhile."""
        request = PolicyRequest(policy=policy_ref, trajectory=trajectory.for_policy())
        if policy_ref.name in RULE_BASED_POLICIES:
            decision = workflow.start_local_activity_method(PolicyActivities.decide_next_action, request,
                                                            start_to_close_timeout=QUICK_TIMEOUT)
        else:
            decision = workflow.start_activity_method(PolicyActivities.decide_next_action, request,
                                                      task_queue=self._queues.policy,
                                                      start_to_close_timeout=MODEL_DECISION_TIMEOUT)
        return await self._unless_cancelled("activity decide_next_action", decision, self._cancelled_from_now())

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
        what = f"activity run_tool ({action.tool})"
        if spec is None or not spec.write:  # a waiting read (rollout_status) gets its longest wait on top
            timeout = QUICK_TIMEOUT + timedelta(seconds=spec.max_wait_s if spec else 0.0)
            return await self._waiting_for(what, near_cluster(self._queues, ToolActivities.run_tool, invocation,
                                                              timeout))
        # A write is always an activity of its own, in history before the agent moves on: re-running a chain of
        # local activities after a crash re-reads a cluster the write has changed, and the agent could then decide
        # differently and lose the write from its trajectory. `local` puts it on the workflow's own queue, where
        # eager dispatch hands it straight back to this worker.
        queue = info.task_queue if self._queues.tool_execution == "local" else self._queues.tools
        return await self._waiting_for(what, workflow.execute_activity_method(
            ToolActivities.run_tool, invocation, start_to_close_timeout=QUICK_TIMEOUT, task_queue=queue))

    async def _await_approval(self, action: ToolCall, index: int, timeout_s: float,
                              assessment: WriteAssessment | None = None) -> str | None:
        """Block a risky write until a human approves it. Returns the reason it may not run, or None."""
        self._pending, self._pending_step, self._approval = action, index, None
        self._pending_assessment = assessment
        self._set_phase("awaiting_approval")
        try:
            if not await self._until(f"a human to approve or reject step {index} ({action.tool})",
                                     lambda: (self._approval is not None and self._approval.step == index)
                                     or self._cancelled, timedelta(seconds=timeout_s)):
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
                lock_id=self._lock_id, task_queue=info.task_queue, lease=lease), start_to_close_timeout=QUICK_TIMEOUT)
        self._set_phase("awaiting_lease")
        try:
            granted = await self._until(f"the write lease of namespace {incident.namespace} ({self._lock_id})",
                                        lambda: self._lease is not None or self._cancelled,
                                        timedelta(seconds=incident.limits.deadline_s))
        finally:
            self._set_phase("investigating")
        if not granted:
            return (f"not run: another remediation has been writing to namespace {incident.namespace} for "
                    f"{incident.limits.deadline_s:.0f}s ({self._lock_id})")
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
        lock, self._lock_id, self._lease = self._lock_id, None, None
        try:
            await workflow.get_external_workflow_handle_for(NamespaceLockWorkflow.run, lock).signal(
                NamespaceLockWorkflow.release, workflow.info().workflow_id)
        except FailureError:  # the lock has ended (it took the lease back long ago and went idle)
            pass

    async def _observe(self, request: ObserveRequest, trajectory: Trajectory) -> Verdict:
        """The verdict, taken again while it is provisional (`Verdict.probes_pending_s`: a restarted slow starter
        whose liveness probe is broken looks healthy until the kubelet kills it), in doubling pauses from 2 s (a
        simulator's clock may run faster than the workflow's), at most `MAX_PROBE_WAIT_S` in all. A cluster clock
        that stands still (a simulator's manual one) ends the wait. Histories recorded before verdicts said so hold
        none pending: they replay without the wait."""
        cancelled = self._cancelled_from_now()
        verdict = await self._judge(request, trajectory)
        waited, pause = 0.0, 2.0
        while verdict.probes_pending_s > 0 and waited < MAX_PROBE_WAIT_S:
            step = min(verdict.probes_pending_s, pause, MAX_PROBE_WAIT_S - waited)
            if await self._until("timer liveness probes", cancelled, timedelta(seconds=step)):
                trajectory.termination = "cancelled"
                return unjudged("the incident was cancelled while it was being observed")
            waited, pause, pending = waited + step, pause * 2, verdict.probes_pending_s
            verdict = await self._judge(request, trajectory)
            if verdict.probes_pending_s == pending:
                break
        return verdict

    async def _judge(self, request: ObserveRequest, trajectory: Trajectory) -> Verdict:
        """One observation. An observer that fails for good (the cluster or its namespace is gone, or it kept failing
        for `cluster_timeout_s`) ends the incident as `cluster_lost`, and a cancel abandons it: both unjudged."""
        if not workflow.patched(CLUSTER_LOST_PATCH):
            return await near_cluster(self._queues, ObserverActivities.observe, request)
        deadline = timedelta(seconds=request.incident.limits.cluster_timeout_s)
        observing = near_cluster(self._queues, ObserverActivities.observe, request, retry_policy=CLUSTER_READ_RETRY,
                                 deadline=deadline)
        try:  # the timer too: a local activity's retries do not stop at its schedule-to-close timeout
            verdict = await self._unless_cancelled("activity observe", observing, self._cancelled_from_now(),
                                                   deadline)
        except TimeoutError:
            trajectory.termination = "cluster_lost"
            return unjudged(f"the cluster did not answer the observer for {deadline.total_seconds():.0f}s")
        except FailureError as exc:  # a local activity's failure comes unwrapped, a queued one's as ActivityError
            trajectory.termination = "cluster_lost"
            why = exc.cause if isinstance(exc, ActivityError) and isinstance(exc.cause, FailureError) else exc
            return unjudged(f"the cluster could not be observed: {why.message}")
        if verdict is None:
            trajectory.termination = "cancelled"
            return unjudged("the incident was cancelled while it was being observed")
        return verdict

    @property
    def _cancelled(self) -> bool:
        return self._cancels > 0

    def _cancelled_from_now(self) -> Callable[[], bool]:
        """A condition that holds once a cancel arrives after this call; never, in histories before CANCEL_PATCH."""
        if not workflow.patched(CANCEL_PATCH):
            return lambda: False
        cancels = self._cancels
        return lambda: self._cancels > cancels

    async def _waiting_for(self, what: str, work: Awaitable[Result], timeout: timedelta | None = None) -> Result:
        """Await `work`, which `status` names meanwhile as what the incident waits on, since when and until when."""
        now = workflow.now()
        self._waiting = Waiting(on=what, since=now, until=now + timeout if timeout is not None else None)
        try:
            return await work
        finally:
            self._waiting = None

    async def _until(self, what: str, condition: Callable[[], bool], timeout: timedelta) -> bool:
        """Wait for `condition` (a durable timer bounds it); False when `timeout` ran out first."""
        try:
            await self._waiting_for(what, workflow.wait_condition(condition, timeout=timeout), timeout)
        except TimeoutError:
            return False
        return True

    async def _unless_cancelled(self, what: str, activity: workflow.ActivityHandle[Result],
                                cancelled: Callable[[], bool], timeout: timedelta | None = None) -> Result | None:
        """`activity`'s result (or its failure), or None once `cancelled` holds first; TimeoutError once `timeout` has
        passed. The activity is then cancelled, not waited out (an observer retrying against a lost cluster, a model
        still thinking)."""
        try:
            await self._waiting_for(what, workflow.wait_condition(lambda: activity.done() or cancelled(),
                                                                  timeout=timeout), timeout)
        except TimeoutError:
            await self._abandon(activity)
            raise
        if activity.done():
            return activity.result()
        await self._abandon(activity)
        return None

    @staticmethod
    async def _abandon(activity: workflow.ActivityHandle[Result]) -> None:
        activity.cancel()
        try:
            await activity
        except (FailureError, asyncio.CancelledError):
            pass  # what cancelling it was for

    def _set_phase(self, phase: Phase, last_action: str | None = None) -> None:
        self._phase = phase
        steps = len(self._trajectory.steps) if self._trajectory else 0
        detail = f"**{phase}** · model `{self._model_version or '?'}` · step {steps}"
        if last_action:
            detail += f" · last action `{last_action}`"
        if workflow.in_workflow():  # not from a `finally` of a coroutine a shutting-down worker closes
            workflow.set_current_details(detail)

    # --- signals and queries ----------------------------------------------------------------------------------
    @workflow.signal
    def alerts_fired(self, alerts: list[Alert]) -> None:
        """Alertmanager sent the incident's alerts again, maybe one more of its group: the incident keeps the latest
        of each, and its trajectory records them."""
        self._incident = self._incident.with_alerts(alerts)
        if self._trajectory is not None:
            self._trajectory.incident = self._incident

    @workflow.signal(name=LEASE_GRANTED)
    def lease_granted(self, grant: LeaseGrant) -> None:
        """The namespace's lock lets this incident write (sent again while the lease is held: a liveness check)."""
        if self._lock_id == grant.lock_id:  # not one that arrives after this incident let go
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
        """`approve` as a signal, for callers from before it: a wrong step is ignored, not refused."""
        self._approval = decision.model_copy(update={"approved": True})

    @workflow.signal
    def reject_action(self, decision: ApprovalDecision) -> None:
        """`reject` as a signal, for callers from before it."""
        self._approval = decision.model_copy(update={"approved": False})

    @workflow.update
    async def approve(self, decision: ApprovalDecision) -> RemediationStatus:
        """Let the write waiting at `decision.step` run. Returns the state the incident moves on to."""
        return await self._answer(decision)

    @approve.validator
    def _validate_approve(self, decision: ApprovalDecision) -> None:
        self._must_await(decision, approved=True)

    @workflow.update
    async def reject(self, decision: ApprovalDecision) -> RemediationStatus:
        """Refuse the write waiting at `decision.step`: the agent reads the refusal, with `decision.reason`, as the
        step's result. Returns the state the incident moves on to."""
        return await self._answer(decision)

    @reject.validator
    def _validate_reject(self, decision: ApprovalDecision) -> None:
        self._must_await(decision, approved=False)

    async def _answer(self, decision: ApprovalDecision) -> RemediationStatus:
        self._approval = decision
        await workflow.wait_condition(lambda: self._pending_step != decision.step)
        return self.status()

    def _must_await(self, decision: ApprovalDecision, approved: bool) -> None:
        """Validators of approve and reject: refuse a decision that does not answer the approval awaited now."""
        verb = "approve" if approved else "reject"
        if decision.approved != approved:
            raise refusal(f"cannot {verb}: the decision says approved={decision.approved}")
        if self._pending is None:
            raise refusal(f"cannot {verb}: nothing is waiting for approval (the incident is {self._phase})")
        if decision.step != self._pending_step:
            raise refusal(f"cannot {verb}: step {decision.step} is not waiting for approval; step "
                          f"{self._pending_step} ({self._pending.tool}) is")
        if self._approval is not None and self._approval.step == decision.step:
            raise refusal(f"cannot {verb}: step {decision.step} has been answered already, by "
                          f"{self._approval.by or 'a human'}")

    @workflow.update
    async def feedback(self, feedback: HumanFeedback) -> RemediationStatus:
        """Rate the remediation in its feedback window: the rating goes into the reward it stores. Returns the
        state once the window has closed."""
        self._feedback.append(feedback)
        await workflow.wait_condition(lambda: not self._feedback_open)
        return self.status()

    @feedback.validator
    def _validate_feedback(self, feedback: HumanFeedback) -> None:
        """Only in the window: before the verdict there is nothing to rate; after it the reward is being computed."""
        if self._feedback_open:
            return
        if self._incident.limits.feedback_window_s <= 0:
            raise refusal("cannot rate: the incident has no feedback window; rate it once it has completed")
        if self._phase in ("rewarding", "storing", "done"):
            raise refusal("cannot rate: the feedback window has closed and its trajectory is being stored; rate it "
                          "in a moment")
        raise refusal(f"cannot rate: the incident is {self._phase}: rate it once it has been judged (after the "
                      "verdict)")

    @workflow.signal
    def cancel(self) -> None:
        """Stop acting: at once while the agent waits for its model, else at the next step boundary; the incident
        is still observed and recorded. A cancel while it settles, observes or takes feedback ends that wait (an
        observation abandoned leaves the incident unjudged)."""
        self._cancels += 1

    @workflow.query
    def status(self) -> RemediationStatus:
        t = self._trajectory
        return RemediationStatus(
            incident_id=self._incident.id, phase=self._phase, model_version=self._model_version,
            steps=len(t.steps) if t else 0,
            last_action=t.steps[-1].action.tool if t and t.steps and t.steps[-1].action else None,
            pending_approval=self._pending, pending_step=self._pending_step,
            pending_assessment=self._pending_assessment, outcome=self._outcome,
            alert_resolved=self._alert_resolved, escalation=self._escalation, waiting=self._waiting)

    @workflow.query
    def trajectory(self) -> Trajectory | None:
        return self._trajectory

    @workflow.query
    def incident(self) -> Incident:
        """The incident with every alert Alertmanager has sent it so far (`alerts_fired`)."""
        return self._incident
