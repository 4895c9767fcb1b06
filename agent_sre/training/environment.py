"""A simulated incident as an in-process RL environment: training and evaluation need thousands of short
episodes, so they run the workflow's loop without Temporal, on the same pieces — the shared conversation
format and strict parser, the tools with their guardrails, the oracle, the reward functions.

    env = IncidentEnvironment(simulator, scenario)
    messages = env.reset()                        # system + incident: the prompt
    while not env.done:
        messages = env.step(model(messages))      # the tool's answer (or why the action was invalid)
    trajectory = env.close()                      # verdict + reward.v1, environment deleted

Time is simulated: each action costs `step_cost_s` on the environment's clock (an engineer's typing and the
cluster's reaction), and a tool that waits (`rollout_status`) moves it on as it polls, so time-to-mitigate is
comparable across machines and models. Give it a `Simulator(speed=0)` so that only actions move the clock, not
how long a model takes to generate.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from kubernetes.client import ApiClient

from agent_sre import faults
from agent_sre.faults import oracle
from agent_sre.models.incident import MAX_PROBE_WAIT_S, Incident, RemediationLimits
from agent_sre.models.policy import ChatMessage, PolicyDecision
from agent_sre.models.reward import RewardConfig
from agent_sre.models.scenario import Scenario
from agent_sre.models.training import SIMULATED_ACTIONS_PER_EXTRA_SERVICE, SIMULATED_MAX_ACTIONS, simulated_max_actions
from agent_sre.models.trajectory import Step, Trajectory
from agent_sre.models.verdict import HealthSnapshot
from agent_sre.policy.conversation import parse_action, pending_messages
from agent_sre.rewards import compute_reward
from agent_sre.simulator import later
from agent_sre.simulator.simulator import Simulator
from agent_sre.simulator.transport import in_process_api_client
from agent_sre.tools import ToolContext, execute
from agent_sre.tools.context import POLL_S

FAULT_DEVELOP_S = 120.0  # simulated time between injection and the alert


class IncidentEnvironment:
    def __init__(self, simulator: Simulator, scenario: Scenario, *, limits: RemediationLimits | None = None,
                 reward: RewardConfig | None = None, model_version: str = "candidate", policy: str = "llm",
                 step_cost_s: float = 3.0, with_user_report: bool = True,
                 extra_steps_per_service: int = SIMULATED_ACTIONS_PER_EXTRA_SERVICE) -> None:
        """`limits.max_steps` is the budget of an incident with one unhealthy service; `reset()` adds
        `extra_steps_per_service` for each further service unhealthy at the alert (`simulated_max_actions`), and
        each step as much for a fault that arrived later. `limits.settle_s` is the settle window unless the
        scenario asks for a longer one (its `settle_s`)."""
        self.simulator, self.scenario = simulator, scenario
        # Nobody is there to approve a high-risk write: a simulated incident's run as soon as asked.
        self._base_limits = (limits or RemediationLimits(max_steps=SIMULATED_MAX_ACTIONS, settle_s=60.0)).model_copy(
            update={"approve_high_risk": "auto"})
        self.limits = self._base_limits
        self.extra_steps_per_service = extra_steps_per_service
        self.reward_config = reward or RewardConfig()
        self.model_version, self.policy, self.step_cost_s = model_version, policy, step_cost_s
        self.with_user_report = with_user_report
        self.trajectory: Trajectory | None = None
        self._env: str | None = None
        self._baseline: HealthSnapshot | None = None
        self._arrived = 0  # the scenario's later faults that have arrived (see `_count_arrivals`)

    # --- the episode -----------------------------------------------------------------------------------------
    def reset(self) -> list[ChatMessage]:
        """A fresh isolated cluster with the fault in place; returns the prompt (system + incident)."""
        s = self.scenario
        cluster = self.simulator.create_env(apps=s.apps, seed=s.seed)
        self._env = cluster.name
        self._client = api = in_process_api_client(self.simulator, cluster.name)
        faults.inject(api, s)
        later.hold(self.simulator, cluster.name, s)
        self.simulator.advance(cluster.name, FAULT_DEVELOP_S)
        self._baseline = oracle.snapshot(api, s.namespace, s.app, neighbours=s.neighbours)
        self._arrived = 0
        self.limits = self._base_limits.settling(s.settle_s).model_copy(update={"max_steps": self._budget()})
        incident = Incident(id=uuid.uuid4().hex[:16], source="simulation", alert=s.alert, namespace=s.namespace,
                            report=s.symptom if self.with_user_report and s.symptom else None, scenario=s,
                            limits=self.limits)
        self.trajectory = Trajectory(incident=incident, workflow_id=f"sim-{incident.id}", run_id=cluster.name,
                                     policy=self.policy, model_version=self.model_version, started_at=self._now())
        return self._next_prompt()

    def step(self, completion: str, token_ids: list[int] | None = None,
             logprobs: list[float] | None = None) -> list[ChatMessage]:
        """Apply one model answer; returns the messages it gets back (empty once the episode is over)."""
        t = self.require()
        if t.termination is not None:
            raise RuntimeError("the episode is over; call close()")
        action, invalid = parse_action(completion)
        decision = PolicyDecision(action=action, invalid_reason=invalid, completion=completion,
                                  new_messages=self._pending, completion_token_ids=token_ids,
                                  completion_logprobs=logprobs, model_version=self.model_version)
        return self.record(decision)

    def record(self, decision: PolicyDecision) -> list[ChatMessage]:
        """Apply a decision made by any Policy (runbook teacher, scripted, LLM)."""
        t = self.require()
        t.conversation += [*decision.new_messages, ChatMessage(role="assistant", content=decision.completion)]
        step = Step(index=len(t.steps), decision=decision, at=self._now())
        t.steps.append(step)
        self.simulator.advance(self._env_name(), self.step_cost_s)
        action = decision.action
        if action is not None and t.end(action) is None:  # an ending records itself; any other action runs
            step.result = execute(action, ToolContext(api=self._api(), namespace=self.scenario.namespace,
                                                      idempotency_key=f"{t.workflow_id}/{step.index}",
                                                      approved=self.limits.approve_high_risk == "auto",
                                                      pause=self._advance_one_poll))
        self._count_arrivals()
        if t.termination is None and len(t.steps) >= self.limits.max_steps:
            t.termination = "step_limit"
        return [] if t.termination is not None else self._next_prompt()

    @property
    def done(self) -> bool:
        return self.trajectory is not None and self.trajectory.termination is not None

    def require(self) -> Trajectory:
        """The episode so far (what a policy decides on); `reset()` first."""
        if self.trajectory is None:
            raise RuntimeError("call reset() first")
        return self.trajectory

    def close(self) -> Trajectory:
        """Let the cluster settle, judge it, score it, and delete the environment."""
        t = self.require()
        try:
            if t.termination is None:
                t.termination = "cancelled"
            t.mitigated_at = self._now()
            self.simulator.advance(self._env_name(), self.limits.settle_s)
            self._await_liveness_probes()
            assert self._baseline is not None
            t.verdict = oracle.observe_incident(self._api(), t.incident, self._baseline, t.termination,
                                                len(t.writes))
            t.ended_at = self._now()
            t.reward = compute_reward(t, self.reward_config)
        finally:
            self.simulator.delete_env(self._env_name())
        return t

    # --- helpers -----------------------------------------------------------------------------------------------
    def _budget(self) -> int:
        """The action budget for what the namespace has shown: the services unhealthy at the alert, and one more
        for each fault that arrived later (a second service breaking while the agent works gets its room when it
        breaks, not before: the budget tells nothing the tools would not)."""
        assert self._baseline is not None
        return simulated_max_actions(len(self._baseline.unhealthy) + self._arrived, self._base_limits.max_steps,
                                     self.extra_steps_per_service)

    def _count_arrivals(self) -> None:
        """Grow the budget by the faults that arrived since the last step (the environment fired their timers)."""
        arrived = len(self.scenario.held) - len(self.simulator.env(self._env_name()).timers)
        if arrived > self._arrived:
            self._arrived = arrived
            self.limits = self.limits.model_copy(update={"max_steps": self._budget()})
            self.require().incident.limits = self.limits

    def _await_liveness_probes(self) -> None:
        """Settle on until the liveness probes of the namespace's fresh containers have had time to act
        (`oracle.liveness_wait_s`): a restart does not fix a probe that kills a slow starter after the settle
        window. Bounded: containers that keep being replaced do not hold the verdict back forever."""
        waited = 0.0
        while waited < MAX_PROBE_WAIT_S:
            wait = min(oracle.liveness_wait_s(self._api(), self.scenario.namespace), MAX_PROBE_WAIT_S - waited)
            if wait <= 0:
                return
            self.simulator.advance(self._env_name(), wait)
            waited += wait

    def _advance_one_poll(self, reads: int) -> None:
        """A waiting tool's pause: only actions move this clock, so waiting moves it by one poll, a second of
        cluster time after every read (the wall clock's backoff would only make simulated waits cheaper)."""
        self.simulator.advance(self._env_name(), POLL_S)

    def _next_prompt(self) -> list[ChatMessage]:
        self._pending = pending_messages(self.require())
        return self._pending

    def _api(self) -> ApiClient:
        self._env_name()
        return self._client

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self.simulator.env(self._env_name()).clock.now(), UTC)

    def _env_name(self) -> str:
        if self._env is None:
            raise RuntimeError("call reset() first")
        return self._env
