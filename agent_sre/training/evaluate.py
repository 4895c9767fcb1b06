"""Evaluating a policy on a scenario suite in-process (the held-out suite by default): the figures a version is
registered with and gated on."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agent_sre.episodes import summarize
from agent_sre.models.episode import EpisodeResult, OutcomeStats
from agent_sre.models.remediation import PolicyRef
from agent_sre.models.scenario import Scenario
from agent_sre.outcome import incident_outcome
from agent_sre.policy.base import Policy
from agent_sre.simulator.simulator import Simulator
from agent_sre.training.environment import IncidentEnvironment


def run_policy(policy: Policy, ref: PolicyRef, scenarios: Sequence[Scenario], *,
               on_done: Callable[[EpisodeResult], None] | None = None) -> list[EpisodeResult]:
    """One episode per scenario, each in its own isolated environment on a manual clock."""
    simulator = Simulator(speed=0)
    results = []
    for scenario in scenarios:
        env = IncidentEnvironment(simulator, scenario, policy=ref.name, model_version=ref.version)
        env.reset()
        while not env.done:
            env.record(policy.decide(ref, env.trajectory))
        result = EpisodeResult(scenario=scenario.name, fault=scenario.fault, environment=env.trajectory.run_id,
                               outcome=incident_outcome(env.close()))
        results.append(result)
        if on_done:
            on_done(result)
    return results


def evaluate(policy: Policy, ref: PolicyRef, scenarios: Sequence[Scenario]) -> list[OutcomeStats]:
    return summarize(run_policy(policy, ref, scenarios))
