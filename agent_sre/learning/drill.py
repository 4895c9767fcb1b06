"""The production drill: simulated "production" served by the production model while the learning schedule runs.

    traffic  ── incidents routed like production's (policy chosen by the routing activity) ──────────────────▶
    mix      ── the usual families ──▶ shift: a share of a family the policy handles badly ────────────────────▶
    schedule ── cycle ─── cycle ─── … (read the new episodes, train, gate, roll out; skipped while a rollout runs)
    windows  ── production's figures between two cycles; the last window after the last rollout ended

Serving never stops: incidents keep arriving while cycles train and while their rollouts shift traffic, and the
workers serve each new version as soon as the routing table or the registry names it. Each window serves at most
`incidents_per_cycle` incidents (the compute budget) unless a rollout needs traffic to be judged. The drill has no
human to decide a rollout: one that pauses for a human is aborted, with that reason in its history. It can have
an on-call (`DrillPlan.escalate`): an incident production leaves unhealthy is handed over, re-created as it fired,
to the runbook policy, and that episode is stored like production's. A real on-call's fix is logged the same way
when it goes through the agent's tools; it is how a cycle gets to see a fix of a family production never fixes.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from statistics import fmean

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError

from agent_sre.config import Settings
from agent_sre.episodes import interleave_by_fault, run_episode
from agent_sre.learning import store as streams
from agent_sre.learning.schedule import started, upsert_schedule
from agent_sre.models.endings import Outcome
from agent_sre.models.incident import RemediationLimits
from agent_sre.models.learning import DrillCycle, DrillIncident, DrillPlan, DrillReport, WindowStats
from agent_sre.models.remediation import PolicyRef
from agent_sre.models.rollout import (
    AbTestStep,
    AnalysisConfig,
    GuardrailConfig,
    RolloutControl,
    RolloutPlan,
    RolloutResult,
    SetWeightStep,
)
from agent_sre.models.scenario import Scenario
from agent_sre.registry import Registry
from agent_sre.registry import weights as stored_files
from agent_sre.workflows.learning import ContinuousLearningWorkflow
from agent_sre.workflows.rollout import ModelRolloutWorkflow
from agent_sre.workflows.training import TrainingCycleWorkflow, version_of_id

log = logging.getLogger(__name__)

BY = "agent-sre drill"
POLL_S = 1.0
PROGRESS_S = 20.0  # a progress line at least this often: on a CPU a cycle trains for minutes without a new record


def drill_plan(every: timedelta, incidents_per_cycle: int) -> RolloutPlan:
    """A rollout compressed to the drill's pace: half the traffic for half a cycle interval, judged on a quarter of
    a window's incidents per arm, then everything."""
    samples = max(3, incidents_per_cycle // 4)
    return RolloutPlan(
        name="drill", steps=[AbTestStep(weight=50, duration=every / 2, min_samples=samples), SetWeightStep(weight=100)],
        analysis=AnalysisConfig(min_samples=samples, min_ttm_samples=max(2, samples // 2), success_margin=0.2,
                                false_positive_margin=0.2, harmful_margin=0.2, ttm_tolerance=0.5,
                                extension=every / 4, max_extensions=4),
        guardrails=GuardrailConfig(interval=every / 10, lookback=every, min_incidents=samples, max_harmful_rate=0.5))


def families(scenarios: Sequence[Scenario], names: Sequence[str]) -> list[Scenario]:
    """The scenarios of the named families (a family's name is among its scenarios' tags)."""
    chosen = [s for s in scenarios if set(s.tags) & set(names)]
    missing = sorted(set(names) - {t for s in chosen for t in s.tags})
    if missing:
        raise ValueError(f"no scenarios of the famil{'ies' if len(missing) > 1 else 'y'} {', '.join(missing)}")
    return chosen


def production_model(registry: Registry, model: str, models_dir: Path) -> str:
    """The version to serve: a registered one, or a model directory (or 'base', the converted SmolLM2) registered
    under a name derived from its files' hashes, so a rerun finds it registered."""
    from agent_sre.policy.llm.policy import BASE_VERSION, local_version_dir

    if model in registry.index().versions:
        return model
    path = local_version_dir(BASE_VERSION, models_dir) if model == BASE_VERSION else Path(model)
    if not (path / "config.json").is_file():
        raise ValueError(f"{model!r} is neither a registered version nor a model directory (no config.json)")
    digest = hashlib.sha256("".join(f.sha256 for f in stored_files.manifest(path)).encode()).hexdigest()[:8]
    name = version_of_id(f"drill-{path.name[:40]}-{digest}")
    registry.register(name, policy="llm", by=BY, weights_dir=path, reason=f"the drill's production model, from {path}")
    return name


def window(incidents: Sequence[DrillIncident]) -> WindowStats:
    def rate(flags: list[bool]) -> float | None:
        return fmean(flags) if flags else None

    ttm = [i.time_to_mitigate_s for i in incidents if i.time_to_mitigate_s is not None]
    escalated = [i.escalated for i in incidents if i.escalated is not None]
    return WindowStats(incidents=len(incidents), shifted=sum(i.shifted for i in incidents),
                       escalated=len(escalated), escalations_resolved=escalated.count("resolved"),
                       served_by=dict(Counter(i.version for i in incidents)),
                       shifted_success=rate([i.outcome == "resolved" for i in incidents if i.shifted]),
                       success=rate([i.outcome == "resolved" for i in incidents]),
                       false_positive_rate=rate([i.false_positive for i in incidents]),
                       mean_ttm_s=fmean(ttm) if ttm else None)


@dataclass
class Traffic:
    """Production's incidents: `concurrency` lanes, the mix shifting after `shift_after` incidents, at most
    `incidents_per_cycle` started per window unless a rollout is running."""

    client: Client
    settings: Settings
    plan: DrillPlan
    usual: list[Scenario]
    shifted: list[Scenario]
    served: list[DrillIncident] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # incidents whose workflow failed: reported, not fatal
    started: int = 0
    usual_started: int = 0  # its own count: indexing the usual mix by `started` would skip every other scenario
    in_window: int = 0
    rollout_running: bool = False
    shifted_at: datetime | None = None

    def _next(self) -> tuple[Scenario, bool]:
        after, share = self.started - self.plan.shift_after, self.plan.shift_share
        if after == 0:
            self.shifted_at = datetime.now(UTC)
        if after >= 0 and math.floor((after + 1) * share) > math.floor(after * share):  # every 1/share-th, evenly
            return self.shifted[math.floor(after * share) % len(self.shifted)], True
        self.usual_started += 1
        return self.usual[(self.usual_started - 1) % len(self.usual)], False

    async def lane(self, stop: asyncio.Event) -> None:
        limits = RemediationLimits(max_steps=self.plan.max_steps, settle_s=2.0, deadline_s=600.0)
        while not stop.is_set():
            if not self.rollout_running and self.in_window >= self.plan.incidents_per_cycle:
                await asyncio.sleep(POLL_S)
                continue
            scenario, shifted = self._next()
            number = self.started
            self.started += 1
            self.in_window += 1
            workflow_id = f"drill-{self.plan.learning.name}-{number:05d}-{scenario.name}"
            try:
                result = await run_episode(self.client, self.settings, scenario, None, workflow_id, limits)
            except WorkflowFailureError as exc:
                self.failed.append(f"{workflow_id}: {getattr(exc.cause, 'message', None) or exc.cause}")
                continue
            o = result.outcome
            escalated = (await self._escalate(scenario, workflow_id)
                         if self.plan.escalate is not None and o.outcome != "resolved" else None)
            self.served.append(DrillIncident(ended_at=datetime.now(UTC), scenario=scenario.name, shifted=shifted,
                                             version=o.model_version, outcome=o.outcome,
                                             false_positive=o.false_positive, time_to_mitigate_s=o.time_to_mitigate_s,
                                             escalated=escalated))

    async def _escalate(self, scenario: Scenario, workflow_id: str) -> Outcome | None:
        """The on-call's episode of an incident production left unhealthy (its outcome), on the incident re-created
        as it fired, not held to the agent's step budget; None when its workflow failed (reported like an
        incident's)."""
        assert self.plan.escalate is not None
        escalation = f"{workflow_id}-escalated"
        try:
            result = await run_episode(self.client, self.settings, scenario, PolicyRef(name=self.plan.escalate),
                                       escalation, RemediationLimits(settle_s=2.0, deadline_s=600.0))
        except WorkflowFailureError as exc:
            self.failed.append(f"{escalation}: {getattr(exc.cause, 'message', None) or exc.cause}")
            return None
        return result.outcome.outcome


class Rollouts:
    """The rollouts the cycles started: whether one runs, how each ended; one paused for a human is aborted."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.open: dict[str, tuple[DrillCycle, WorkflowHandle[ModelRolloutWorkflow, RolloutResult]]] = {}

    def track(self, cycle: DrillCycle) -> None:
        started = cycle.record.rollout
        if started is not None:
            self.open[cycle.record.cycle_id] = (cycle, self.client.get_workflow_handle(
                started.workflow_id, first_execution_run_id=started.first_execution_run_id, result_type=RolloutResult))

    async def running(self) -> bool:
        for cycle_id, (cycle, handle) in list(self.open.items()):
            if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                status = await handle.query(ModelRolloutWorkflow.status)
                if status.phase == "paused":
                    await self._abort(handle, f"the drill has no human to decide: {status.pause_reason}")
                continue
            result: RolloutResult = await handle.result()
            cycle.rollout_outcome, cycle.rollout_reason = result.outcome, result.reason
            del self.open[cycle_id]
        return bool(self.open)

    @staticmethod
    async def _abort(handle: WorkflowHandle[ModelRolloutWorkflow, RolloutResult], reason: str) -> None:
        try:
            await handle.execute_update(ModelRolloutWorkflow.abort, RolloutControl(by=BY, reason=reason))
        except (WorkflowUpdateFailedError, RPCError) as exc:  # ending already, or not abortable now: look again
            log.info("the rollout did not take the abort (yet): %s", exc)


async def run_drill(client: Client, settings: Settings, registry: Registry, plan: DrillPlan, usual: list[Scenario],
                    shifted: list[Scenario], on_cycle: Callable[[DrillCycle], None] = lambda c: None,
                    on_progress: Callable[[str], None] = lambda line: None) -> DrillReport:
    """Serve production traffic, let the learning schedule run `plan.cycles` training cycles on it (and their
    rollouts end), then serve one more window; the schedule is deleted at the end. `on_progress` gets a line on
    where it stands every PROGRESS_S."""
    report = DrillReport(plan=plan, started_at=datetime.now(UTC))
    name = plan.learning.name
    if registry.production().version != plan.model:
        registry.promote(plan.model, by=BY, reason=f"drill {name}: production serves the drill's model")
    traffic = Traffic(client, settings, plan, interleave_by_fault(usual), interleave_by_fault(shifted))
    rollouts = Rollouts(client)
    await upsert_schedule(client, plan.learning, plan.every, settings.queue_training, paused=False,
                          note=f"drill {name}")
    stop = asyncio.Event()
    lanes = [asyncio.create_task(traffic.lane(stop)) for _ in range(plan.concurrency)]
    deadline = time.monotonic() + plan.time_limit.total_seconds()
    final_from: int | None = None  # index into traffic.served where the last window begins
    next_progress = time.monotonic() + PROGRESS_S
    try:
        while True:
            for lane in lanes:
                if lane.done() and lane.exception() is not None:
                    raise lane.exception()  # type: ignore[misc]
            records = await asyncio.to_thread(streams.list_records, registry.client, registry.bucket, name)
            for record in records[len(report.cycles):]:
                assert record.ended_at is not None  # a record is written as its cycle ends
                since = (report.cycles[-1].record.ended_at if report.cycles else None) or report.started_at
                # A cycle that was already running when the schedule paused ends inside the final window: the
                # incidents of that window are the after window's alone.
                served = traffic.served if final_from is None else traffic.served[:final_from]
                cycle = DrillCycle(record=record, before=window([i for i in served
                                                                 if since < i.ended_at <= record.ended_at]))
                report.cycles.append(cycle)
                rollouts.track(cycle)
                traffic.in_window = 0
                on_cycle(cycle)
            traffic.rollout_running = await rollouts.running()
            trained = sum(c.record.training is not None for c in report.cycles)
            if final_from is None and trained >= plan.cycles and not traffic.rollout_running:
                await client.get_schedule_handle(name).pause(note=f"drill {name}: {trained} cycles trained")
                final_from, traffic.in_window = len(traffic.served), 0
            if final_from is not None and len(traffic.served) - final_from >= plan.incidents_per_cycle:
                break
            if time.monotonic() > deadline:
                report.notes.append(f"the time limit ({plan.time_limit}) passed with {trained} of {plan.cycles} "
                                    "cycles trained" + ("; a rollout is still running" if rollouts.open else ""))
                break
            if time.monotonic() >= next_progress:
                on_progress(await _progress(client, name, traffic, len(report.cycles), bool(rollouts.open)))
                next_progress = time.monotonic() + PROGRESS_S
            await asyncio.sleep(POLL_S)
    finally:
        stop.set()
        await client.get_schedule_handle(name).delete()
        await asyncio.gather(*lanes, return_exceptions=True)
    if final_from is not None:
        report.after = window(traffic.served[final_from:])
    if traffic.failed:
        report.notes.append(f"{len(traffic.failed)} incident workflows failed, e.g. {traffic.failed[0]}")
    report.shifted_at, report.ended_at = traffic.shifted_at, datetime.now(UTC)
    report.production_at_end = registry.production().version
    return report


# --- the report -----------------------------------------------------------------------------------------------------
async def _progress(client: Client, name: str, traffic: Traffic, cycles: int, rollout_open: bool) -> str:
    """Where the drill stands: incidents served, cycles ended, and what a running cycle's training is doing."""
    served = traffic.served
    parts = [f"{len(served)} incidents served ({sum(i.shifted for i in served)} shifted, {len(traffic.failed)} "
             f"failed)", f"{cycles} cycles ended"]
    for cycle_id in started((await client.get_schedule_handle(name).describe()).info.running_actions):
        try:
            parts.append(f"a learning cycle is {await _cycle_doing(client, cycle_id)}")
        except (RPCError, WorkflowQueryFailedError):
            parts.append("a learning cycle is starting")
    if rollout_open:
        parts.append("its rollout is running")
    return " · ".join(parts)


async def _cycle_doing(client: Client, cycle_id: str) -> str:
    """What a running learning cycle does, from its record and, while it trains, its training child's phase
    (the learning workflow names its child `{cycle id}-training`)."""
    record = await client.get_workflow_handle(cycle_id).query(ContinuousLearningWorkflow.progress)
    if record.rollout is not None:
        return "starting its candidate's rollout"
    if record.training is not None:
        return "judging its candidate against production on re-created recent incidents"
    if record.version is None:
        return "reading the episodes production served"
    training = await client.get_workflow_handle(f"{cycle_id}-training").query(TrainingCycleWorkflow.progress)
    return f"{training.phase} its candidate" if training.phase in ("training", "evaluating") else \
        f"training its candidate ({training.phase})"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _window_cells(w: WindowStats) -> list[str]:
    served = ", ".join(f"{v} {n}" for v, n in sorted(w.served_by.items()))
    handed = f", {w.escalated} escalated, {w.escalations_resolved} of them resolved" if w.escalated else ""
    return [f"{w.incidents} ({w.shifted} shifted{handed})", served or "-", _pct(w.shifted_success), _pct(w.success),
            _pct(w.false_positive_rate), "-" if w.mean_ttm_s is None else f"{w.mean_ttm_s:.0f}"]


COLUMNS = ["cycle", "incidents before it", "served by", "success on the shifted family", "success", "false pos.",
           "TTM wall s", "data used", "held-out success cand/parent", "production replay cand/prod", "decision"]


def rows(report: DrillReport) -> list[list[str]]:
    """One row per cycle (production in the window before it, what it learnt, how it was judged, what came of
    it), and a last row for the window after the last rollout."""
    out = []
    for n, c in enumerate(report.cycles, start=1):
        r, d = c.record, c.record.data
        data = f"{d.episodes} episodes ({d.usable} usable), {len(d.replay.train)} replayed" if d else "-"
        held = r.training.evaluation if r.training else []
        decision = f"{r.status}" + (f", rollout {c.rollout_outcome or 'running'}" if r.rollout else "")
        out.append([str(n), *_window_cells(c.before), data,
                    " / ".join(_pct(e.overall.success_rate) for e in held) or "-",
                    " / ".join(_pct(e.overall.success_rate) for e in r.production_eval) or "-",
                    decision + (f": {c.rollout_reason or r.reason}" if r.status != "registered" or c.rollout_reason
                                else "")])
    if report.after is not None:
        out.append(["after", *_window_cells(report.after), "", "", "", f"production {report.production_at_end}"])
    return out


def markdown(report: DrillReport) -> str:
    table = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    table += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in rows(report)]
    p = report.plan
    head = (f"Production model {p.model}; mix {', '.join(p.mix)}, shifting to {p.shift_share:.0%} {p.shifted} after "
            f"{p.shift_after} incidents; a learning cycle every {p.every} ({p.learning.training.algorithm}, at least "
            f"{p.learning.min_episodes} usable episodes); {p.incidents_per_cycle} incidents per window, "
            f"{p.concurrency} at a time" + (f"; an incident left unhealthy escalated to the {p.escalate} policy (its "
                                            "episode stored for learning, not counted as production's)."
                                            if p.escalate else "."))
    return "\n".join([head, "", *table, *(f"\nNote: {n}" for n in report.notes)]) + "\n"
