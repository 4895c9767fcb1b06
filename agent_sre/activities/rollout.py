"""The rollout workflow's activities: registry stages, the routing table, analysis, guardrails, rollback events.

Registry refusals (an unknown version, a stage change that is not allowed) are raised as non-retryable errors:
retrying cannot make them succeed, and the workflow reports them. Store errors are retried by Temporal.
"""

from __future__ import annotations

from datetime import datetime

from temporalio import activity
from temporalio.exceptions import ApplicationError

from agent_sre.models.rollout import (
    AnalysisRequest,
    AnalysisResult,
    GuardrailRequest,
    GuardrailResult,
    RollbackEvent,
    RolloutPolicies,
    RoutingTable,
    StageUpdate,
)
from agent_sre.registry import Registry, RegistryError
from agent_sre.rollout import analysis, events, routing, samples


class RolloutActivities:
    """Built once per worker with the registry (short store timeouts: Temporal's retry policy owns the retries);
    the routing table and the served outcomes are in its store and bucket too."""

    def __init__(self, registry: Registry) -> None:
        self._registry = registry

    @activity.defn
    def update_stages(self, update: StageUpdate) -> RolloutPolicies:
        """started: candidate → canary (baseline must be production); succeeded: candidate → production and the
        old production → archived; rolled_back / aborted: candidate → rolled_back / candidate. Returns how each
        version is served, for the routing table."""
        versions = self._registry
        try:
            if update.outcome == "started":
                baseline = versions.get(update.baseline)
                if baseline.stage != "production":
                    raise RegistryError(f"the baseline {update.baseline} is {baseline.stage}, not production")
                versions.start_canary(update.candidate, by=update.by, reason=update.reason)
            elif update.outcome == "succeeded":
                versions.promote(update.candidate, by=update.by, reason=update.reason, ending_rollout=True)
            else:
                versions.end_canary(update.candidate,
                                    "rolled_back" if update.outcome == "rolled_back" else "candidate",
                                    by=update.by, reason=update.reason)
            return RolloutPolicies(candidate=versions.policy_ref(update.candidate),
                                   baseline=versions.policy_ref(update.baseline))
        except RegistryError as exc:
            raise ApplicationError(str(exc), type=type(exc).__name__, non_retryable=True) from exc

    @activity.defn
    def set_routing(self, table: RoutingTable) -> RoutingTable:
        return routing.write_table(self._registry.client, self._registry.bucket, table)

    def _served(self, version: str, start: datetime, end: datetime) -> list[samples.OutcomeSample]:
        return samples.served(self._registry.client, self._registry.bucket, version, start, end)

    @activity.defn
    def analyze_rollout(self, req: AnalysisRequest) -> AnalysisResult:
        candidate = self._served(req.candidate, req.window_start, req.window_end)
        baseline = self._served(req.baseline, req.window_start, req.window_end)
        return analysis.analyze(analysis.summarize_arm(req.candidate, candidate),
                                analysis.summarize_arm(req.baseline, baseline), candidate, baseline, req.config,
                                req.min_samples, (req.window_start, req.window_end))

    @activity.defn
    def check_guardrails(self, req: GuardrailRequest) -> GuardrailResult:
        return analysis.check_guardrails(self._served(req.candidate, req.since, req.until), req.config, req.until)

    @activity.defn
    def record_rollback(self, event: RollbackEvent) -> str:
        return events.record_rollback(event)

    @activity.defn
    def notify_rollback(self, event: RollbackEvent) -> int:
        if event.notify_url is None:
            raise ApplicationError("no notification URL", non_retryable=True)
        return events.post_webhook(event.notify_url, event)
