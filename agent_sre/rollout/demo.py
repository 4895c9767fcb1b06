"""The rollout part of `agent-sre demo`: a real `ModelRolloutWorkflow` compressed into minutes, fed by simulated
incidents that the routing activity assigns exactly as it assigns production's.

No model is trained in the demo (that takes hours on a CPU), so the versions are rule-based and named for what they
are: `runbook-vN` is the runbook policy registered again as a new version, and `noop-vN` is the scripted policy
without a script, which claims a fix at once and fixes nothing. Versions are immutable and a rolled-out version
cannot be rolled out again, so every run registers the next free `runbook-vN` and `noop-vN`: each run's baseline
is the production version the previous run promoted, and reruns behave the same.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from agent_sre.config import Settings
from agent_sre.episodes import run_episodes_until
from agent_sre.models.episode import EpisodeResult, OutcomeStats
from agent_sre.models.rollout import (
    FINISHED,
    AbTestStep,
    AnalysisConfig,
    BakeStep,
    Decision,
    GuardrailConfig,
    RolloutControl,
    RolloutPlan,
    RolloutRequest,
    RolloutResult,
    RolloutStatus,
    SetWeightStep,
)
from agent_sre.models.scenario import Scenario
from agent_sre.registry import Registry
from agent_sre.rollout.client import ROLLOUT_WORKFLOW_ID, RolloutRunningError, preflight, start_rollout
from agent_sre.workflows.rollout import ModelRolloutWorkflow

DEMO_BY = "agent-sre demo"
POLL_S = 1.0

# The shipped plans' shape (a guarded canary, an A/B test that must pass, then everything), in seconds instead of
# days. Minutes of traffic are tens of incidents, so the margins are wider than the shipped plans' and the samples
# smaller: two equal versions pass with ten incidents each, and a version that fixes nothing trips the success
# guardrail within seconds. Not a plan for real traffic, which is why it is not among `rollout start --plan`'s.
DEMO_PLAN = RolloutPlan(
    name="demo-compressed",
    steps=[SetWeightStep(weight=10), BakeStep(duration=timedelta(seconds=20)),
           AbTestStep(weight=50, duration=timedelta(seconds=45)), SetWeightStep(weight=100)],
    analysis=AnalysisConfig(min_samples=10, min_ttm_samples=5, success_margin=0.2, false_positive_margin=0.2,
                            harmful_margin=0.2, ttm_tolerance=0.5, extension=timedelta(seconds=15),
                            max_extensions=4),
    guardrails=GuardrailConfig(interval=timedelta(seconds=5), lookback=timedelta(minutes=2), min_incidents=8,
                               min_success_rate=0.5),
)
TIME_LIMIT = timedelta(minutes=6)  # the plan's waits with every extension, and room for a loaded machine


@dataclass
class DemoRollout:
    """One rollout as the demo drove it: the workflow's result and every incident served while it ran."""

    candidate: str
    baseline: str
    plan: str
    result: RolloutResult | None = None
    served: list[EpisodeResult] = field(default_factory=list)
    wall_s: float = 0.0

    def served_by(self, version: str) -> list[EpisodeResult]:
        return [r for r in self.served if r.outcome.model_version == version]

    def success_rate(self, version: str) -> float | None:
        mine = self.served_by(version)
        return sum(r.outcome.outcome == "resolved" for r in mine) / len(mine) if mine else None


def next_version(registry: Registry, stem: str) -> str:
    """`<stem>-v<N+1>` for the highest N registered (v1 when there is none)."""
    pattern = re.compile(rf"^{re.escape(stem)}-v(\d+)$")
    taken = [int(m[1]) for v in registry.index().versions if (m := pattern.match(v))]
    return f"{stem}-v{max(taken, default=0) + 1}"


def register_candidate(registry: Registry) -> str:
    """The next `runbook-vN`: the runbook policy under a new version name, standing in for a trained model."""
    version = next_version(registry, "runbook")
    registry.register(version, policy="runbook", by=DEMO_BY, parent=registry.production().version,
                      reason="demo: the runbook policy registered again as a new version (no model is trained in "
                             "the demo)")
    return version


def register_degraded(registry: Registry) -> str:
    """The next `noop-vN`: the scripted policy without a script, a version that is deliberately useless."""
    version = next_version(registry, "noop")
    registry.register(version, policy="scripted", by=DEMO_BY,
                      reason="demo: a deliberately degraded version (claims a fix at once, fixes nothing)")
    return version


def reliably_resolved(scenarios: Sequence[Scenario], stats: Sequence[OutcomeStats]) -> list[Scenario]:
    """The scenarios of the fault types resolved in every episode of `stats` (all scenarios when there are none):
    two versions differ by noise alone on a mix the baseline half fails, and minutes of traffic cannot average it
    out."""
    resolved = {row.group for row in stats if row.group != "all" and row.success_rate == 1.0}
    return [s for s in scenarios if s.fault in resolved] or list(scenarios)


async def end_previous_demo_rollout(client: Client, workflow_id: str = ROLLOUT_WORKFLOW_ID) -> str | None:
    """The rollout workflow id is fixed (one rollout at a time): abort what an interrupted demo left running, and
    refuse to touch anyone else's rollout. Returns the aborted rollout's id, if any."""
    handle = client.get_workflow_handle(workflow_id, result_type=RolloutResult)
    try:
        if (await handle.describe()).status != WorkflowExecutionStatus.RUNNING:
            return None
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    while (status := await _status(handle)).phase == "starting":  # who started it is its first decision
        await asyncio.sleep(POLL_S)
    if status.decisions[0].by != DEMO_BY:
        raise RolloutRunningError(f"a rollout of {status.candidate} (not the demo's) is running as {workflow_id}; "
                                  "end it first: `agent-sre rollout abort --reason …`")
    while not await _abort(handle, "a new demo run replaces this one"):
        if (await _status(handle)).phase in FINISHED:
            break
        await asyncio.sleep(POLL_S)
    await handle.result()
    return status.rollout_id


async def run_rollout(client: Client, settings: Settings, registry: Registry, candidate: str,
                      scenarios: Sequence[Scenario], plan: RolloutPlan = DEMO_PLAN, concurrency: int = 10,
                      on_decision: Callable[[Decision, DemoRollout], None] | None = None,
                      workflow_id: str = ROLLOUT_WORKFLOW_ID, time_limit: timedelta = TIME_LIMIT) -> DemoRollout:
    """Roll `candidate` out against production while simulated incidents arrive, until the rollout ends.

    Every incident is routed by the routing table the rollout writes, so the analysis and the guardrails judge
    real outcomes. The demo has no human: a rollout that pauses for one (analysis still inconclusive) or runs past
    `time_limit` is aborted, with that reason in its history."""
    baseline = await asyncio.to_thread(preflight, registry, candidate, None)
    request = RolloutRequest(candidate=candidate, baseline=baseline, plan=plan, requested_by=DEMO_BY,
                             reason="agent-sre demo: a compressed rollout")
    began = time.monotonic()
    started = await start_rollout(client, request, settings, workflow_id)
    handle = client.get_workflow_handle(started.id, result_type=RolloutResult)  # the latest run, after continue-as-new
    demo = DemoRollout(candidate=candidate, baseline=baseline, plan=plan.name)
    stop = asyncio.Event()
    traffic = asyncio.create_task(run_episodes_until(client, settings, scenarios, stop, policy=None,
                                                     concurrency=concurrency, on_done=demo.served.append))
    try:
        await _follow(handle, demo, began + time_limit.total_seconds(), on_decision)
        demo.result = await handle.result()
    except BaseException:
        traffic.cancel()  # interrupted: the episodes in flight are left to the server (and the next worker)
        raise
    stop.set()
    await traffic  # the episodes in flight finish: every incident the rollout routed is counted
    demo.wall_s = time.monotonic() - began
    return demo


async def _follow(handle: WorkflowHandle[ModelRolloutWorkflow, RolloutResult], demo: DemoRollout, deadline: float,
                  on_decision: Callable[[Decision, DemoRollout], None] | None) -> None:
    """Report each new decision until the rollout ends; stand in for the absent human when it waits for one."""
    shown = 0
    aborting = False
    while True:
        status = await _status(handle)
        for decision in status.decisions[shown:]:
            if on_decision:
                on_decision(decision, demo)
        shown = len(status.decisions)
        if status.phase in FINISHED:
            return
        if not aborting and status.phase == "paused":
            aborting = await _abort(handle, f"the demo has no human to decide: {status.pause_reason}")
        elif not aborting and time.monotonic() > deadline:
            aborting = await _abort(handle, "the demo's time limit passed before the rollout ended")
        await asyncio.sleep(POLL_S)


async def _status(handle: WorkflowHandle[ModelRolloutWorkflow, RolloutResult]) -> RolloutStatus:
    return await handle.query(ModelRolloutWorkflow.status)


async def _abort(handle: WorkflowHandle[ModelRolloutWorkflow, RolloutResult], reason: str) -> bool:
    """True once the abort is accepted; False when it cannot apply now (the rollout is still starting, already
    ending, or over), which the caller's next look at the status settles."""
    try:
        await handle.execute_update(ModelRolloutWorkflow.abort, RolloutControl(by=DEMO_BY, reason=reason))
    except (WorkflowUpdateFailedError, RPCError):
        return False
    return True
