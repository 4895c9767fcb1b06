"""ContinuousLearningWorkflow: one cycle of learning from production, as a Temporal Schedule runs it every few hours.

    claim the stream ─▶ gather: episodes written since the watermark, validated, quarantined, de-duplicated,
        │               redacted, rewards with late feedback; sim-replay scenarios
        │             ─▶ fewer usable episodes than the threshold: skipped (the data waits)
        │             ─▶ TrainingCycleWorkflow (child): train, evaluate on the held-out suite, gate
        │             ─▶ candidate and production on re-created recent incidents, gate again
        │             ─▶ registered: start ModelRolloutWorkflow (abandoned child: it outlives the cycle)
        └─ skipped: another cycle or a rollout is running             ─▶ commit the watermark, store the record

Only a cycle whose candidate passed every gate commits its data (the watermark and the episodes learnt, in one
compare-and-swap), so a skipped, rejected or failed cycle leaves its data to the next, and a retried cycle never
counts data twice. The record (learning.cycle.v1) is stored whatever the outcome; `progress` answers meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeKey, WorkflowIDReusePolicy
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError, WorkflowAlreadyStartedError
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from agent_sre.activities.learning import LearningActivities
    from agent_sre.activities.training import TrainingActivities
    from agent_sre.models.learning import (
        BeginCycle,
        CycleClaim,
        CycleData,
        CycleRecord,
        CycleStatus,
        FinishRequest,
        GatherRequest,
        LearningConfig,
        LearningCycleInput,
        RolloutPrep,
        RolloutStarted,
    )
    from agent_sre.models.training import EvalRequest, GateRequest, TrainingRequest
    from agent_sre.training.gate import failures
    from agent_sre.workflows.options import COLLECT_OPTIONS, EVALUATE_OPTIONS, RECORD_CYCLE_OPTIONS, REGISTRY_OPTIONS
    from agent_sre.workflows.rollout import ModelRolloutWorkflow
    from agent_sre.workflows.training import TrainingCycleWorkflow

SCHEDULED_AT = SearchAttributeKey.for_datetime("TemporalScheduledStartTime")  # set on runs a Schedule starts


def cutoff_of(input: LearningCycleInput) -> datetime:
    """Learn up to the given cutoff, else the run's scheduled time (a backfilled run learns up to its own time),
    else its start."""
    return input.cutoff or workflow.info().typed_search_attributes.get(SCHEDULED_AT) or workflow.now()


def cycle_version(config: LearningConfig, cutoff: datetime) -> str:
    """One name per cycle: a rerun of the same scheduled time trains (and registers) the same version."""
    return f"{config.name}-{cutoff:%Y%m%d-%H%M%S}"


def training_request(config: LearningConfig, record: CycleRecord, data: CycleData) -> TrainingRequest:
    """The template, with the cycle's base, version name, dataset and replay scenarios."""
    template = config.training.model_dump(mode="json")
    template["data"]["trajectories"]["objects"] = [data.dataset_key]
    trajectories = template["data"]["trajectories"]
    trajectories["exclude_scenarios"] = [*trajectories["exclude_scenarios"], *data.replay.evaluate]  # its gate's
    if (rehearsal := config.training.data.rehearsal) is not None:  # stored by the window's end, however late it runs
        until = min(t for t in (rehearsal.written_until, data.window_end) if t is not None)
        template["data"]["rehearsal"]["written_until"] = until.isoformat()
    if data.replay.train_file is not None:
        template["data"]["simulated"]["scenarios"] = data.replay.train_file
    return TrainingRequest.model_validate({
        **template, "base": record.base, "version": record.version,
        "reason": f"continuous learning, cycle {record.cycle_id}: {data.episodes} episodes ({data.usable} usable) "
                  f"from {data.source_objects} objects written until {data.window_end:%F %T} UTC, "
                  f"{len(data.replay.train)} re-created incidents"})


@workflow.defn(name="ContinuousLearningWorkflow")
class ContinuousLearningWorkflow:
    @workflow.init
    def __init__(self, input: LearningCycleInput) -> None:
        info = workflow.info()
        self._record = CycleRecord(name=input.config.name, cycle_id=info.workflow_id, run_id=info.run_id,
                                   cutoff=cutoff_of(input), started_at=workflow.now())

    @workflow.run
    async def run(self, input: LearningCycleInput) -> CycleRecord:
        config, r = input.config, self._record
        info = workflow.info()
        try:
            start = await self._activity("claim the stream", LearningActivities.begin_cycle, BeginCycle(
                config=config, claim=CycleClaim(cycle_id=r.cycle_id, workflow_id=r.cycle_id, run_id=r.run_id,
                                                since=r.started_at)), **REGISTRY_OPTIONS)
            r.production, r.base = start.production, start.base
            if start.skip is not None:
                return await self._end("skipped", start.skip, config)
            r.data = data = await self._activity(
                "read the episodes written since the watermark", LearningActivities.gather_cycle_data,
                GatherRequest(config=config, cycle_id=r.cycle_id, cutoff=r.cutoff), **COLLECT_OPTIONS)
            if data.nothing_to_learn is not None:
                return await self._end("skipped", f"nothing to learn from the {data.episodes} new episodes "
                                                  f"({data.nothing_to_learn}): the data waits", config)
            if data.usable < config.min_episodes:
                return await self._end("skipped", f"{data.usable} usable new episodes ({data.episodes} accepted), "
                                                  f"fewer than {config.min_episodes}: the data waits", config)
            r.version = cycle_version(config, r.cutoff)
            self._show(f"train {r.version} from {r.base}")
            r.training = await workflow.execute_child_workflow(
                TrainingCycleWorkflow.run, training_request(config, r, data), id=f"{r.cycle_id}-training",
                task_queue=info.task_queue)
            if not r.training.registered:
                why = r.training.stop_reason or "; ".join(r.training.gate.reasons if r.training.gate else [])
                return await self._end("failed" if r.training.phase == "stopped" else "rejected",
                                       f"training {r.training.phase}: {why}", config)
            if data.replay.evaluate_file is not None and not await self._production_gate(config, data):
                assert r.production_gate is not None
                return await self._end("rejected", f"{r.version} is worse than production {r.production} on "
                                                   f"re-created recent incidents: "
                                                   f"{'; '.join(failures(r.production_gate.reasons))}", config)
            reason = f"{r.version} passed its gates"
            if config.rollout_plan is not None:
                reason += "; " + await self._roll_out(config)
            return await self._end("registered", reason, config, commit=True)
        except (ActivityError, ChildWorkflowError) as exc:
            message = getattr(exc.cause, "message", None) or str(exc.cause or exc)
            await self._end("failed", message, config)
            raise ApplicationError(f"learning cycle failed: {message}", type="LearningCycleFailed",
                                   non_retryable=True) from exc

    async def _production_gate(self, config: LearningConfig, data: CycleData) -> bool:
        """Candidate against production on incidents production saw, re-created in the simulator."""
        r = self._record
        assert r.version is not None and r.production is not None
        evaluation = config.training.evaluation.model_copy(update={"suite": data.replay.evaluate_file, "limit": None})
        for version in (r.version, r.production):
            r.production_eval.append(await self._activity(
                f"evaluate {version} on re-created recent incidents", TrainingActivities.evaluate_version,
                EvalRequest(version=version, evaluation=evaluation), **EVALUATE_OPTIONS))
        candidate, production = r.production_eval
        r.production_gate = await self._activity(
            f"gate {r.version} against production {r.production}", TrainingActivities.register_if_better,
            GateRequest(candidate=candidate, parent=production, tolerances=evaluation.tolerances,
                        by=config.training.requested_by), **REGISTRY_OPTIONS)
        return r.production_gate.passed

    async def _roll_out(self, config: LearningConfig) -> str:
        """Start the rollout as an abandoned child, so it runs on for days after this cycle ends. A rollout that
        cannot start leaves the candidate for an operator; the cycle still commits what it learnt."""
        r = self._record
        assert r.version is not None
        try:
            request = await self._activity("check the registry for a rollout", LearningActivities.prepare_rollout,
                                           RolloutPrep(config=config, candidate=r.version, cycle_id=r.cycle_id),
                                           **REGISTRY_OPTIONS)
            handle = await workflow.start_child_workflow(
                ModelRolloutWorkflow.run, request, id=config.rollout_workflow_id, task_queue=config.rollout_queue,
                parent_close_policy=ParentClosePolicy.ABANDON, id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
                static_summary=f"rollout {request.candidate} against {request.baseline}, plan {request.plan.name}")
        except ActivityError as exc:
            return f"no rollout: {getattr(exc.cause, 'message', None) or exc.cause}"
        except WorkflowAlreadyStartedError:
            return f"no rollout: another one is running as {config.rollout_workflow_id}"
        r.rollout = RolloutStarted(workflow_id=handle.id, first_execution_run_id=handle.first_execution_run_id,
                                   request=request)
        return f"rollout started as {handle.id} (plan {request.plan.name})"

    async def _end(self, status: CycleStatus, reason: str, config: LearningConfig,
                   commit: bool = False) -> CycleRecord:
        r = self._record
        r.status, r.reason, r.ended_at = status, reason, workflow.now()
        self._show()
        self._record = await self._activity(f"{'commit and ' if commit else ''}record the cycle",
                                            LearningActivities.finish_cycle,
                                            FinishRequest(record=r, commit=commit, late_days=config.late_days),
                                            **RECORD_CYCLE_OPTIONS)
        return self._record

    async def _activity(self, what: str, activity: Callable[..., Any], arg: Any, **options: Any) -> Any:
        self._show(what)
        return await workflow.execute_activity_method(activity, arg, summary=what, **options)

    @workflow.query
    def progress(self) -> CycleRecord:
        return self._record

    def _show(self, doing: str | None = None) -> None:
        """Current details for the Temporal UI."""
        r = self._record
        lines = [f"**{r.status}**" + (f": {doing}" if doing else f": {r.reason}" if r.reason else ""),
                 f"cutoff {r.cutoff:%F %T} UTC · production {r.production or '?'} · base {r.base or '?'}"]
        if (d := r.data) is not None:
            lines.append(f"{d.episodes} new episodes ({d.usable} usable) from {d.source_objects} objects; "
                         f"{len(d.quarantined)} quarantined; {d.late_feedback} with late feedback; "
                         f"{len(d.replay.train)}/{len(d.replay.evaluate)} re-created incidents to train/evaluate")
        if r.rollout is not None:
            lines.append(f"rollout {r.rollout.workflow_id}: {r.rollout.request.candidate} against "
                         f"{r.rollout.request.baseline}")
        workflow.set_current_details("\n\n".join(lines))
