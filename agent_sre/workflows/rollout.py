"""ModelRolloutWorkflow: a candidate model version replaces production step by step, over days or weeks.

    start (candidate → canary) ─▶ step 1 ─▶ step 2 ─▶ … ─▶ success: candidate → production, old → archived
                                    │  set_weight · bake · ab_test · analyze · pause
                                    │  guardrails every `interval` while the candidate serves traffic
                                    └─▶ rollback (analysis fail, guardrail breach, `rollback` signal):
                                        routing → baseline, candidate → rolled_back, rollback event

Every wait is a durable timer, so a week-long bake survives worker and server restarts. The run continues as new
after each step that waited, and whenever Temporal suggests it, carrying its whole state (`RolloutState`), so a
rollout's history stays short however long it runs. Human controls are updates whose validators refuse what
cannot apply now, with the reason; `rollback(reason)` is a signal so that Alertmanager, the CLI and
`temporal workflow signal` can all send it. An `abort` outranks a promotion that has not yet made the candidate
production, and sticks: until the loop carries it out, every promote is refused with its reason, unless a human
withdraws it with `retry`.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from agent_sre.activities.rollout import RolloutActivities
    from agent_sre.models.rollout import (
        FINISHED,
        AnalysisRequest,
        Decision,
        GuardrailRequest,
        PlanStep,
        RollbackEvent,
        RollbackTrigger,
        RolloutControl,
        RolloutPolicies,
        RolloutRequest,
        RolloutResult,
        RolloutState,
        RolloutStatus,
        RoutingTable,
        StageOutcome,
        StageUpdate,
        describe_step,
        format_duration,
    )
    from agent_sre.workflows import refusal
    from agent_sre.workflows.options import (
        ANALYSIS_TIMEOUT,
        GUARDRAIL_TIMEOUT,
        NOTIFY_RETRY,
        QUICK_TIMEOUT,
        ROUTING_RETRY,
    )

ABORT_OUTRANKS_PROMOTION = "abort-outranks-promotion"  # histories from before it never stopped a promotion


@workflow.defn(name="ModelRolloutWorkflow")
class ModelRolloutWorkflow:
    @workflow.init
    def __init__(self, req: RolloutRequest) -> None:
        self._req = req
        self._plan = req.plan
        info = workflow.info()
        self._s: RolloutState = req.state or RolloutState(rollout_id=f"{info.workflow_id}/{info.run_id}")
        self._wakeups = 0
        self._committed: str | None = None  # the ending the loop is carrying out, past withdrawing or outranking

    # --- the plan -----------------------------------------------------------------------------------------------
    @workflow.run
    async def run(self, req: RolloutRequest) -> RolloutResult:
        s = self._s
        if s.phase == "starting":
            s.policies = await self._stages("started", f"rollout {s.rollout_id}: {req.reason or 'started'}",
                                            req.requested_by)
            s.phase, s.started_at = "running", workflow.now()
            self._decide("started", f"plan {self._plan.name} ({len(self._plan.steps)} steps), candidate "
                                    f"{req.candidate} against {req.baseline}: {req.reason or 'no reason given'}",
                         by=req.requested_by)
        while s.phase not in FINISHED:
            if s.rollback_reason is not None:
                await self._roll_back()
            elif s.abort:
                await self._abort()
            elif s.promote_full or s.step_index >= len(self._plan.steps):
                await self._succeed()
            else:
                step = self._plan.steps[s.step_index]
                if await self._run_step(step):
                    self._next_step()
                    if step.kind != "set_weight" and s.step_index < len(self._plan.steps):
                        await self._continue_as_new()
        return RolloutResult(rollout_id=s.rollout_id, candidate=req.candidate, baseline=req.baseline,
                             outcome=s.phase,  # type: ignore[arg-type]  # the loop ends in a FINISHED phase only
                             reason=s.decisions[-1].reason, decisions=s.decisions, latest_analysis=s.latest_analysis)

    async def _run_step(self, step: PlanStep) -> bool:
        """True when the step is done (or a human skipped it); False when a rollback, abort or full promotion
        interrupts it."""
        s = self._s
        if s.step_started_at is None:
            await self._wait()  # a pause between steps holds the next one
            if self._terminal():
                return False
            s.skip_step = False  # a promote while held between steps lets the next step start now
            await self._enter(step)
        if step.kind in ("ab_test", "analyze"):
            return await self._analyse(step.min_samples or self._plan.analysis.min_samples)
        await self._wait()
        return self._skipped() if self._interrupted() else True

    async def _enter(self, step: PlanStep) -> None:
        s = self._s
        now = workflow.now()
        s.step_started_at, s.deadline, s.extensions = now, None, 0
        self._decide("step", f"step {s.step_index + 1}/{len(self._plan.steps)}: {describe_step(step)}")
        match step.kind:
            case "set_weight":
                await self._set_weight(step.weight)
            case "ab_test":
                await self._set_weight(step.weight)
                s.deadline = workflow.now() + step.duration
            case "bake":
                s.deadline = now + step.duration
            case "pause":
                self._pause(f"plan step: {step.reason}", by="plan")

    async def _analyse(self, min_samples: int) -> bool:
        """Analyse the window since the weight last changed; inconclusive extends the wait up to the plan's limit,
        then pauses for a human. Never passes without a passing analysis, unless a human promotes."""
        s, config = self._s, self._plan.analysis
        while True:
            await self._wait()
            if self._interrupted():
                return self._skipped()
            assert s.window_start is not None
            result = await workflow.execute_activity_method(
                RolloutActivities.analyze_rollout,
                AnalysisRequest(candidate=self._req.candidate, baseline=self._req.baseline,
                                window_start=s.window_start, window_end=workflow.now(), config=config,
                                min_samples=min_samples),
                start_to_close_timeout=ANALYSIS_TIMEOUT)
            s.latest_analysis = result
            summary = "; ".join(result.reasons)
            if result.judgement == "pass":
                self._decide("analysis passed", summary)
                return True
            if result.judgement == "fail":
                self._request_rollback("analysis", f"analysis failed: {summary}")
                return False
            if s.extensions < config.max_extensions:
                s.extensions += 1
                s.deadline = workflow.now() + config.extension
                self._decide("extended", f"inconclusive ({summary}); waiting {format_duration(config.extension)} "
                                         f"more, extension {s.extensions}/{config.max_extensions}")
            else:
                s.deadline = None
                self._pause(f"analysis still inconclusive after {config.max_extensions} extensions ({summary}): "
                            "resume to analyse again, promote to accept the step, or abort / roll back", by="rollout")
                s.inconclusive_pause = True

    async def _wait(self) -> None:
        """Until the current deadline has passed and the rollout is not paused; returns at once on a control.
        Guardrails are checked on their schedule throughout, paused or not, while the candidate serves traffic."""
        s = self._s
        while not self._interrupted():
            now = workflow.now()
            guard_at = s.next_guardrail_at if s.weight > 0 else None
            if guard_at is not None and now >= guard_at:
                await self._check_guardrails()
                continue
            paused = s.phase == "paused"
            if not paused and (s.deadline is None or now >= s.deadline):
                return
            wake = [t for t in (guard_at, None if paused else s.deadline) if t is not None]
            seen = self._wakeups
            try:
                await workflow.wait_condition(lambda: self._wakeups != seen,  # noqa: B023 (awaited in this iteration)
                                              timeout=min(wake) - now if wake else None)
            except TimeoutError:
                pass
            if workflow.info().is_continue_as_new_suggested():
                await self._continue_as_new()

    async def _check_guardrails(self) -> None:
        s, config = self._s, self._plan.guardrails
        now = workflow.now()
        assert s.started_at is not None
        result = await workflow.execute_activity_method(
            RolloutActivities.check_guardrails,
            GuardrailRequest(candidate=self._req.candidate, since=max(s.started_at, now - config.lookback),
                             until=now, config=config),
            start_to_close_timeout=GUARDRAIL_TIMEOUT)
        s.latest_guardrail = result
        s.next_guardrail_at = now + config.interval
        if result.breached:
            self._request_rollback("guardrail", f"guardrail breached: {result.reason}")

    # --- traffic and registry -----------------------------------------------------------------------------------
    async def _route(self, weight: float, reason: str, to_candidate_for_good: bool = False) -> None:
        s = self._s
        assert s.policies is not None
        if to_candidate_for_good:  # the registry's production (now the candidate) serves everything
            table = RoutingTable(baseline=s.policies.candidate, reason=reason, rollout_id=s.rollout_id,
                                 updated_at=workflow.now())
        else:
            table = RoutingTable(baseline=s.policies.baseline, candidate=s.policies.candidate if weight else None,
                                 weight=weight, reason=reason, rollout_id=s.rollout_id, updated_at=workflow.now())
        await workflow.execute_activity_method(RolloutActivities.set_routing, table,
                                               start_to_close_timeout=QUICK_TIMEOUT, retry_policy=ROUTING_RETRY)

    async def _set_weight(self, weight: float) -> None:
        s = self._s
        await self._route(weight, f"step {s.step_index + 1}: {weight:g}% to {self._req.candidate}")
        s.weight, s.window_start = weight, workflow.now()
        if s.next_guardrail_at is None:
            s.next_guardrail_at = workflow.now() + self._plan.guardrails.interval
        self._details()

    async def _stages(self, outcome: StageOutcome, reason: str, by: str) -> RolloutPolicies:
        return await workflow.execute_activity_method(
            RolloutActivities.update_stages,
            StageUpdate(candidate=self._req.candidate, baseline=self._req.baseline, outcome=outcome, by=by,
                        reason=reason),
            start_to_close_timeout=QUICK_TIMEOUT)

    async def _roll_back(self) -> None:
        """Traffic first (that is what stops the harm), then the registry, then the announcements."""
        s = self._s
        reason, trigger = s.rollback_reason or "", s.rollback_trigger or "signal"
        await self._route(0, f"rolled back: {reason}")
        s.weight = 0
        await self._stages("rolled_back", reason, f"rollout:{trigger}")
        event = RollbackEvent(rollout_id=s.rollout_id, candidate=self._req.candidate, baseline=self._req.baseline,
                              trigger=trigger, reason=reason, at=workflow.now(), notify_url=self._req.notify_url)
        await workflow.execute_activity_method(RolloutActivities.record_rollback, event,
                                               start_to_close_timeout=QUICK_TIMEOUT)
        if self._req.notify_url:
            try:
                await workflow.execute_activity_method(RolloutActivities.notify_rollback, event,
                                                       start_to_close_timeout=QUICK_TIMEOUT, retry_policy=NOTIFY_RETRY)
            except ActivityError as exc:
                self._decide("notification failed", f"{self._req.notify_url}: {exc.cause or exc}")
        s.phase = "rolled_back"
        self._decide("rolled back", reason, by=f"rollout:{trigger}")

    async def _abort(self) -> None:
        s = self._s
        self._committed = "aborted"
        reason = self._abort_request().reason
        await self._route(0, f"aborted: {reason}")
        s.weight = 0
        await self._stages("aborted", f"rollout aborted: {reason}", "rollout")
        s.phase = "aborted"
        self._decide("aborted", reason)

    async def _succeed(self) -> None:
        s = self._s
        if s.weight < 100:
            await self._set_weight(100)
        if s.abort and workflow.patched(ABORT_OUTRANKS_PROMOTION):
            return  # the loop aborts: the candidate is not production yet
        self._committed = "promoted"
        why = "promoted to 100% by a human" if s.promote_full else f"all {len(self._plan.steps)} steps passed"
        await self._stages("succeeded", f"rollout {s.rollout_id}: {why}", "rollout")
        await self._route(0, f"{self._req.candidate} is production", to_candidate_for_good=True)
        s.phase = "succeeded"
        self._decide("succeeded", f"{self._req.candidate} is production, {self._req.baseline} archived: {why}")

    # --- state --------------------------------------------------------------------------------------------------
    def _terminal(self) -> bool:
        """A rollback, abort or full promotion is waiting: the main loop ends the rollout."""
        s = self._s
        return s.promote_full or s.abort or s.rollback_reason is not None

    def _interrupted(self) -> bool:
        return self._s.skip_step or self._terminal()

    def _skipped(self) -> bool:
        """After an interruption: True when it was a `promote` (the step is done), False when it ends the rollout."""
        return not self._terminal()

    def _next_step(self) -> None:
        s = self._s
        s.step_index += 1
        s.step_started_at = s.deadline = None
        s.extensions, s.skip_step = 0, False

    def _request_rollback(self, trigger: RollbackTrigger, reason: str) -> None:
        s = self._s
        if s.rollback_reason is None:
            s.rollback_reason, s.rollback_trigger = reason, trigger
            self._wake()

    def _pause(self, reason: str, by: str) -> None:
        s = self._s
        s.phase, s.paused_since, s.pause_reason = "paused", workflow.now(), reason
        self._decide("paused", reason, by=by)

    def _unpause(self) -> None:
        s = self._s
        if s.phase != "paused":
            return
        now = workflow.now()
        if s.deadline is not None and s.paused_since is not None:  # the paused time does not count
            s.deadline = now + max(s.deadline - s.paused_since, timedelta(0))
        if s.inconclusive_pause:  # a fresh round of extensions for the next analysis
            s.extensions, s.inconclusive_pause = 0, False
        s.phase, s.paused_since, s.pause_reason = "running", None, None

    def _decide(self, action: str, reason: str, by: str = "rollout") -> None:
        s = self._s
        step = s.step_index if s.step_index < len(self._plan.steps) else None
        s.decisions.append(Decision(at=workflow.now(), step=step, action=action, reason=reason, by=by))
        self._details()

    def _wake(self) -> None:
        self._wakeups += 1

    def _details(self) -> None:
        """What the Temporal UI shows for this rollout, kept current at every change."""
        s = self._s
        step = self._plan.steps[s.step_index] if s.step_index < len(self._plan.steps) else None
        lines = [f"**{s.phase}** · `{self._req.candidate}` vs `{self._req.baseline}` · weight {s.weight:g}%"]
        if step is not None and s.phase not in FINISHED:
            lines.append(f"step {s.step_index + 1}/{len(self._plan.steps)}: {describe_step(step)}"
                         + (f" · until {s.deadline:%Y-%m-%d %H:%M} UTC" if s.deadline else ""))
        if s.pause_reason:
            lines.append(f"paused: {s.pause_reason}")
        if s.latest_analysis:
            lines.append(f"latest analysis: **{s.latest_analysis.judgement}**")
        if s.decisions:
            lines.append(f"last decision: {s.decisions[-1].action}: {s.decisions[-1].reason}")
        workflow.set_current_details("\n\n".join(lines))

    async def _continue_as_new(self) -> None:
        await workflow.wait_condition(workflow.all_handlers_finished)
        self._s.runs += 1
        workflow.continue_as_new(self._req.model_copy(update={"state": self._s}))

    def _abort_request(self) -> Decision:
        return next(d for d in reversed(self._s.decisions) if d.action == "abort requested")

    # --- controls -----------------------------------------------------------------------------------------------
    def _must_be_active(self, control: str) -> None:
        """Validators: refuse a control that cannot apply now, with the reason."""
        s = self._s
        self._must_be_running(control)
        if s.abort:
            request = self._abort_request()
            raise refusal(f"cannot {control}: the rollout is being aborted (by {request.by}: {request.reason}); "
                             "`retry` withdraws the abort while it has not been carried out")
        if s.promote_full:
            raise refusal(f"cannot {control}: the rollout is being promoted to 100%")

    def _must_be_running(self, control: str) -> None:
        """Refuse a control once the rollout has ended, before it has started, or while it rolls back."""
        s = self._s
        if s.phase in FINISHED:
            raise refusal(f"cannot {control}: the rollout has already {s.phase.replace('_', ' ')}")
        if s.phase == "starting":
            raise refusal(f"cannot {control}: the rollout is still starting; try again in a moment")
        if s.rollback_reason is not None:
            raise refusal(f"cannot {control}: a rollback is under way ({s.rollback_reason})")

    @workflow.update
    def promote(self, control: RolloutControl) -> RolloutStatus:
        """End the current step now (its wait, analysis or pause) and go on with the next."""
        self._s.skip_step = True
        self._unpause()
        self._decide("promoted", control.reason or "promoted to the next step", by=control.by)
        self._wake()
        return self.status()

    @promote.validator
    def _validate_promote(self, control: RolloutControl) -> None:
        self._must_be_active("promote")
        if self._s.skip_step:
            raise refusal("cannot promote: a promote of this step is already under way")

    @workflow.update
    def promote_full(self, control: RolloutControl) -> RolloutStatus:
        """Skip the remaining steps: 100% to the candidate, which becomes production."""
        self._s.promote_full = True
        self._unpause()
        self._decide("promoted to 100%", control.reason or "promoted to 100% by a human", by=control.by)
        self._wake()
        return self.status()

    @promote_full.validator
    def _validate_promote_full(self, control: RolloutControl) -> None:
        self._must_be_active("promote to 100%")

    @workflow.update
    def pause(self, control: RolloutControl) -> RolloutStatus:
        """Hold the rollout where it is: timers stop counting, guardrails keep watching."""
        self._pause(f"paused by {control.by}: {control.reason or 'no reason given'}", by=control.by)
        self._wake()
        return self.status()

    @pause.validator
    def _validate_pause(self, control: RolloutControl) -> None:
        self._must_be_active("pause")
        if self._s.phase == "paused":
            raise refusal(f"cannot pause: the rollout is already paused ({self._s.pause_reason})")

    @workflow.update
    def resume(self, control: RolloutControl) -> RolloutStatus:
        self._unpause()
        self._decide("resumed", control.reason or "resumed", by=control.by)
        self._wake()
        return self.status()

    @resume.validator
    def _validate_resume(self, control: RolloutControl) -> None:
        self._must_be_active("resume")
        if self._s.phase != "paused":
            raise refusal("cannot resume: the rollout is not paused")

    @workflow.update
    def abort(self, control: RolloutControl) -> RolloutStatus:
        """Stop the rollout: all traffic back to the baseline; the candidate returns to the candidate stage."""
        self._s.abort = True
        self._decide("abort requested", control.reason or "aborted by a human", by=control.by)
        self._wake()
        return self.status()

    @abort.validator
    def _validate_abort(self, control: RolloutControl) -> None:
        """A pending promotion to 100% does not stop an abort: only a candidate already being made production."""
        self._must_be_running("abort")
        if self._s.abort:
            raise refusal(f"cannot abort: the rollout is already being aborted ({self._abort_request().reason})")
        if self._committed == "promoted":
            raise refusal(f"cannot abort: {self._req.candidate} is already being made production")

    @workflow.update
    def retry(self, control: RolloutControl) -> RolloutStatus:
        """Withdraw an abort the rollout has not carried out yet: it goes on where it was."""
        self._s.abort = False
        self._decide("abort withdrawn", control.reason or "retry", by=control.by)
        self._wake()
        return self.status()

    @retry.validator
    def _validate_retry(self, control: RolloutControl) -> None:
        self._must_be_running("retry")
        if not self._s.abort:
            raise refusal("cannot retry: no abort is pending")
        if self._committed == "aborted":
            raise refusal("cannot retry: the abort is already being carried out")

    @workflow.signal
    def rollback(self, reason: str) -> None:
        """Roll back now: from Alertmanager, `agent-sre rollout rollback` or `temporal workflow signal`."""
        if self._s.phase in FINISHED:
            workflow.logger.warning("rollback signal after the rollout %s was ignored: %s", self._s.phase, reason)
            return
        self._decide("rollback requested", reason or "no reason given", by="signal")
        self._request_rollback("signal", reason or "no reason given")

    @workflow.query
    def status(self) -> RolloutStatus:
        s = self._s
        step = self._plan.steps[s.step_index] if s.step_index < len(self._plan.steps) else None
        left = None
        if s.deadline is not None and s.phase not in FINISHED:
            end = s.paused_since if s.phase == "paused" and s.paused_since else workflow.now()
            left = max((s.deadline - end).total_seconds(), 0.0)
        return RolloutStatus(
            rollout_id=s.rollout_id, candidate=self._req.candidate, baseline=self._req.baseline,
            plan=self._plan.name, phase=s.phase, step_index=s.step_index, steps=len(self._plan.steps), step=step,
            weight=s.weight, time_left_s=left, pause_reason=s.pause_reason, latest_analysis=s.latest_analysis,
            latest_guardrail=s.latest_guardrail, decisions=s.decisions, runs=s.runs)
