"""TrainingCycleWorkflow: one training cycle, from stored episodes to a judged candidate version.

    collect + validate data ─▶ train (child process, heartbeats, resumable) ─▶ evaluate candidate and parent
        ─▶ gate: the candidate stays a `candidate` (ready for a rollout) or is archived with the reason

It runs on the training task queue with its activities. The `progress` query answers where it stands (phase,
step, latest loss/reward/KL, which the training activity reports with `report_progress` signals); the `stop`
signal cancels the running activity (the training job is terminated, not left running) and the cycle ends with
phase `stopped`. A candidate that was registered but never judged (stopped or failed after training) is archived,
so no ungated version waits in `candidate` for a rollout.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from agent_sre.activities.training import TrainingActivities
    from agent_sre.models.training import (
        ArchiveRequest,
        EvalRequest,
        GateRequest,
        TrainingMetrics,
        TrainingPhase,
        TrainingRequest,
        TrainingStatus,
        TrainJob,
    )
    from agent_sre.workflows.options import (
        COLLECT_OPTIONS,
        EVALUATE_OPTIONS,
        REGISTRY_OPTIONS,
        TRAIN_HEARTBEAT_TIMEOUT,
        TRAIN_RETRY,
    )

T = TypeVar("T")


def version_of_id(workflow_id: str) -> str:
    """The default candidate version: the workflow id, as a valid version name."""
    name = re.sub(r"[^A-Za-z0-9._+-]", "-", workflow_id).lstrip("._+-")[:128]
    return name or "candidate"


class Stopped(Exception):
    """The `stop` signal ended the cycle."""


@workflow.defn(name="TrainingCycleWorkflow")
class TrainingCycleWorkflow:
    @workflow.init
    def __init__(self, request: TrainingRequest) -> None:
        info = workflow.info()
        self._status = TrainingStatus(workflow_id=info.workflow_id, phase="collecting", algorithm=request.algorithm,
                                      base=request.base, candidate=request.version or version_of_id(info.workflow_id))
        self._stop_reason: str | None = None

    @workflow.run
    async def run(self, request: TrainingRequest) -> TrainingStatus:
        s = self._status
        assert s.candidate is not None
        try:
            s.data = await self._step("collecting", "collect and validate the training data",
                                      TrainingActivities.collect_training_data, request, **COLLECT_OPTIONS)
            s.trained = await self._step(
                "training", f"train {s.candidate}: {request.algorithm} from {request.base} on {request.compute}",
                TrainingActivities.train_policy,
                TrainJob(request=request, data=s.data, version=s.candidate, progress_to=s.workflow_id),
                start_to_close_timeout=timedelta(hours=request.time_limit_h), heartbeat_timeout=TRAIN_HEARTBEAT_TIMEOUT,
                retry_policy=TRAIN_RETRY)
            s.metrics = s.trained.metrics or s.metrics
            for version in (s.candidate, request.base):
                s.evaluation.append(await self._step(
                    "evaluating", f"evaluate {version}", TrainingActivities.evaluate_version,
                    EvalRequest(version=version, evaluation=request.evaluation), **EVALUATE_OPTIONS))
            candidate, parent = s.evaluation
            s.gate = await self._step("gating", f"gate {s.candidate} against {request.base}",
                                      TrainingActivities.register_if_better,
                                      GateRequest(candidate=candidate, parent=parent,
                                                  tolerances=request.evaluation.tolerances, by=request.requested_by),
                                      **REGISTRY_OPTIONS)
        except Stopped:
            await self._archive_unjudged(request, f"training cycle stopped before the gate: {self._stop_reason}")
            s.phase, s.stop_reason = "stopped", self._stop_reason
            self._show()
            return s
        except ActivityError as exc:
            message = getattr(exc.cause, "message", None) or str(exc.cause or exc)
            await self._archive_unjudged(request, f"training cycle failed in {s.phase}: {message}")
            raise ApplicationError(f"{s.phase} failed: {message}", type="TrainingCycleFailed",
                                   non_retryable=True) from exc
        s.registered = s.gate.passed
        s.phase = "registered" if s.gate.passed else "archived"
        self._show()
        return s

    async def _step(self, phase: TrainingPhase, what: str, activity: Callable[..., Any], arg: Any,
                    **options: Any) -> Any:
        """Run one activity; a `stop` while it runs cancels it and waits until it has cleaned up."""
        if self._stop_reason is not None:
            raise Stopped
        self._status.phase = phase
        self._show(what)
        handle = workflow.start_activity_method(
            activity, arg, summary=what, cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            **options)
        await workflow.wait_condition(lambda: handle.done() or self._stop_reason is not None)
        if not handle.done():
            handle.cancel()
            try:
                await handle
            except ActivityError:
                pass  # cancelled, as asked
            raise Stopped
        return await handle

    async def _archive_unjudged(self, request: TrainingRequest, reason: str) -> None:
        s = self._status
        if s.gate is not None or s.phase == "collecting":  # judged already, or nothing trained yet
            return
        assert s.candidate is not None
        await workflow.execute_activity_method(
            TrainingActivities.archive_version, ArchiveRequest(version=s.candidate,
                                                       training_request=request.model_dump(mode="json"),
                                                       by=request.requested_by, reason=reason),
            summary=f"archive the unjudged {s.candidate}", **REGISTRY_OPTIONS)

    # --- controls and visibility ------------------------------------------------------------------------------------
    @workflow.signal
    def stop(self, reason: str = "") -> None:
        """End the cycle now: the running activity (e.g. the training job) is cancelled."""
        if self._stop_reason is None:
            self._stop_reason = reason or "stop requested"

    @workflow.signal
    def report_progress(self, metrics: TrainingMetrics) -> None:
        """From the training activity: the latest step and figures (a late one, after training, is dropped)."""
        if self._status.phase == "training":
            self._status.metrics = metrics
            self._show()

    @workflow.query
    def progress(self) -> TrainingStatus:
        return self._status

    def _show(self, what: str | None = None) -> None:
        """Current details for the Temporal UI."""
        s = self._status
        lines = [f"**{s.phase}**" + (f": {what}" if what else ""),
                 f"{s.algorithm} from {s.base} → {s.candidate}"]
        if m := s.metrics:
            figures = [f"{name} {value:.4g}" for name, value in (("loss", m.loss), ("reward", m.reward),
                                                                  ("kl", m.kl)) if value is not None]
            lines.append(f"{m.stage} step {m.step}/{m.max_steps or '?'}" + (f" · {' · '.join(figures)}"
                                                                              if figures else ""))
        if s.gate is not None:
            lines.append(("passed the gate" if s.gate.passed else "failed the gate") + ": "
                         + "; ".join(s.gate.reasons))
        if s.stop_reason:
            lines.append(f"stopped: {s.stop_reason}")
        workflow.set_current_details("\n\n".join(lines))
