"""Evaluating a policy on a scenario suite in-process (the held-out suite by default): the figures a version is
registered with and gated on."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from agent_sre.episodes import summarize
from agent_sre.models.episode import EpisodeResult, OutcomeStats
from agent_sre.models.remediation import PolicyRef
from agent_sre.models.scenario import Scenario
from agent_sre.models.training import MAX_ACTION_TOKENS, SIMULATED_ACTIONS_PER_EXTRA_SERVICE, SIMULATED_MAX_ACTIONS
from agent_sre.models.trajectory import Trajectory
from agent_sre.outcome import incident_outcome
from agent_sre.policy.base import Policy
from agent_sre.simulator.simulator import Simulator
from agent_sre.training.environment import IncidentEnvironment


def play(policy: Policy, ref: PolicyRef, scenario: Scenario, simulator: Simulator) -> Trajectory:
    """One whole episode of `policy` on `scenario`, in its own isolated environment: the judged trajectory."""
    env = IncidentEnvironment(simulator, scenario, policy=ref.name, model_version=ref.version)
    env.reset()
    while not env.done:
        env.record(policy.decide(ref, env.require()))
    return env.close()


def generated_tokens(t: Trajectory) -> int | None:
    """The tokens the policy generated in `t`: None when no decision carries any (a rule-based policy)."""
    counts = [len(s.decision.completion_token_ids) for s in t.steps if s.decision.completion_token_ids is not None]
    return sum(counts) if counts else None


def run_policy(policy: Policy, ref: PolicyRef, scenarios: Sequence[Scenario], *,
               on_done: Callable[[EpisodeResult], None] | None = None) -> list[EpisodeResult]:
    """One episode per scenario, each in its own isolated environment on a manual clock."""
    simulator = Simulator(speed=0)
    results = []
    for scenario in scenarios:
        trajectory = play(policy, ref, scenario, simulator)
        result = EpisodeResult(scenario=scenario.name, fault=scenario.fault, environment=trajectory.run_id,
                               outcome=incident_outcome(trajectory), generated_tokens=generated_tokens(trajectory))
        results.append(result)
        if on_done:
            on_done(result)
    return results


def run_model(model_dir: Path, scenarios: Sequence[Scenario], *, version: str = "candidate",
              max_turns: int = SIMULATED_MAX_ACTIONS, max_new_tokens: int = MAX_ACTION_TOKENS, batch: int = 16,
              device: str = "auto", constrained: bool = True,
              extra_turns_per_service: int = SIMULATED_ACTIONS_PER_EXTRA_SERVICE,
              on_trajectory: Callable[[Trajectory], None] | None = None) -> list[EpisodeResult]:
    """A language model on the suite with greedy decoding, many episodes per forward pass (the CPU-friendly
    path; `run_policy` with an LLMPolicy gives the same episodes one call at a time, as serving does). Decoding is
    under the action grammar, as served, unless `constrained` is False; `on_trajectory` sees each judged episode.
    `max_turns` is the budget of an incident with one unhealthy service, as `play` gives a rule-based policy
    (`simulated_max_actions`)."""
    from agent_sre.models.llm import SamplingConfig
    from agent_sre.models.training import GRPOTrainingConfig
    from agent_sre.policy.llm.checkpoint import load_policy_model
    from agent_sre.training.grpo import run_rollouts

    loaded = load_policy_model(model_dir, device=device)
    config = GRPOTrainingConfig(max_turns=max_turns, max_new_tokens=max_new_tokens,
                                extra_turns_per_service=extra_turns_per_service)
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=max_new_tokens, constrained=constrained)
    simulator = Simulator(speed=0)
    results = []
    for start in range(0, len(scenarios), batch):
        chunk = scenarios[start:start + batch]
        for scenario, rollout in zip(chunk, run_rollouts(loaded, chunk, config, simulator, greedy, version),
                                     strict=True):
            assert rollout.trajectory is not None
            if on_trajectory:
                on_trajectory(rollout.trajectory)
            results.append(EpisodeResult(scenario=scenario.name, fault=scenario.fault,
                                         environment=rollout.trajectory.run_id,
                                         outcome=incident_outcome(rollout.trajectory),
                                         generated_tokens=generated_tokens(rollout.trajectory)))
    return results


def evaluate(policy: Policy, ref: PolicyRef, scenarios: Sequence[Scenario]) -> list[OutcomeStats]:
    return summarize(run_policy(policy, ref, scenarios))
