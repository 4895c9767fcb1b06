"""The in-process incident environment used by training and evaluation: same parser, tools, oracle, rewards."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from llm_fixtures import runbook_episode
from transformers import AutoTokenizer

from agent_sre.apps.catalog import get_app
from agent_sre.episodes import summarize
from agent_sre.models.episode import EpisodeResult
from agent_sre.models.incident import RemediationLimits
from agent_sre.models.remediation import PolicyRef
from agent_sre.models.tools import ToolCall
from agent_sre.models.training import MAX_ACTION_TOKENS, SIMULATED_MAX_ACTIONS
from agent_sre.models.trajectory import Trajectory
from agent_sre.outcome import incident_outcome
from agent_sre.policy.conversation import render_action
from agent_sre.policy.runbook import RunbookPolicy
from agent_sre.scenarios import default_catalog, heldout_suite, load_scenarios
from agent_sre.simulator.simulator import Simulator
from agent_sre.training.environment import IncidentEnvironment
from agent_sre.training.evaluate import play


@pytest.fixture
def simulator() -> Simulator:
    return Simulator(speed=0)


def _scenario(fault: str):
    return next(s for s in load_scenarios() if s.fault == fault)


def test_runbook_episode_resolves_and_is_scored_in_simulated_time(simulator: Simulator) -> None:
    scenario = _scenario("bad_image")
    env = IncidentEnvironment(simulator, scenario, policy="runbook", step_cost_s=3.0)
    prompt = env.reset()
    assert [m.role for m in prompt] == ["system", "user"]
    assert scenario.alert.labels["alertname"] in prompt[1].content and scenario.symptom in prompt[1].content
    policy, ref = RunbookPolicy(), PolicyRef()
    while not env.done:
        env.record(policy.decide(ref, env.trajectory))
    t = env.close()
    assert t.verdict is not None and t.verdict.outcome == "resolved"
    assert t.time_to_mitigate_s == pytest.approx(3.0 * len(t.steps))  # only actions move a speed-0 clock
    assert t.reward is not None and t.reward.total > 0 and len(t.reward.step_rewards) == len(t.steps)
    assert simulator.envs == {}  # the environment is gone


@pytest.mark.parametrize(("fault", "diagnosis"), [
    ("oom_limit", r"deployment \S+ is OOMKilled at its memory limit of \d+Mi"),
    ("bad_image", r"the current revision of deployment \S+ is broken: its image cannot be pulled"),
    ("scaled_to_zero", r"deployment \S+ was scaled to zero replicas \(from \d+\)")])
def test_the_runbook_fixes_textbook_faults_on_a_manual_clock_and_says_what_they_were(
        simulator: Simulator, fault: str, diagnosis: str) -> None:
    env = IncidentEnvironment(simulator, _scenario(fault), policy="runbook")
    env.reset()
    policy, ref = RunbookPolicy(), PolicyRef()
    while not env.done:
        env.record(policy.decide(ref, env.trajectory))
    t = env.close()
    assert t.verdict is not None and t.verdict.outcome == "resolved", (t.verdict, [s.action for s in t.steps])
    assert re.fullmatch(diagnosis, t.diagnosis or ""), t.diagnosis  # in words, not the fix's tool call


def test_a_fix_the_runbook_did_not_choose_is_named_by_its_call(simulator: Simulator) -> None:
    """The runbook taking over an episode someone else wrote in cannot say what that write answered."""
    scenario = _scenario("oom_limit")
    env = IncidentEnvironment(simulator, scenario, policy="runbook")
    env.reset()
    scale = ToolCall(tool="scale", args={"deployment": scenario.target, "replicas": 3})
    assert "scaled" in env.step(render_action(scale))[0].content
    policy, ref = RunbookPolicy(), PolicyRef()
    while not env.done:
        env.record(policy.decide(ref, env.trajectory))
    t = env.close()
    assert t.diagnosis == f"scale {scale.args}"


def test_a_fix_the_cluster_refuses_is_handed_over_with_its_error_not_claimed() -> None:
    """A careful on-call whose `kubectl set resources` errors neither says it rolled out nor retries it blindly."""
    error = "error: memory request 640Mi must be less than or equal to the memory limit 512Mi"
    t = runbook_episode("oom", outcome="unresolved", fix_error=error)
    assert [s.action.tool for s in t.steps if s.action][-2:] == ["set_resources", "escalate"]
    assert t.termination == "escalated" and not t.writes
    assert t.diagnosis == "deployment cart is OOMKilled at its memory limit of 64Mi; set_resources failed"
    assert t.summary == f"set_resources: {error}"


def test_bad_model_output_is_an_invalid_step_and_the_step_limit_ends_the_episode(simulator: Simulator) -> None:
    env = IncidentEnvironment(simulator, _scenario("oom_limit"), limits=RemediationLimits(max_steps=3))
    env.reset()
    reply = env.step("I think we should restart everything!")
    assert reply[0].role == "tool" and reply[0].content.startswith("invalid action: not valid JSON")
    reply = env.step('{"tool": "list_pods", "args": {}}')
    assert "NAME" in reply[0].content
    assert env.step('{"tool": "drop_tables", "args": {}}') == [] and env.done
    t = env.close()
    assert t.termination == "step_limit" and t.verdict.outcome == "unresolved"
    assert [s.action is None for s in t.steps] == [True, False, True]
    assert t.reward.step_rewards[0] < 0 and t.reward.step_rewards[2] < 0
    with pytest.raises(RuntimeError):
        env.step("{}")


def test_a_false_alarm_is_handled_only_by_finishing_with_no_write(simulator: Simulator) -> None:
    """A false alarm's cluster stays healthy whatever an agent that never writes does, so the cluster alone would
    count invalid actions to the step limit, or paging a human, as handling it. Only a finish with no write is."""
    scenario = _scenario("none")
    replicas = get_app(scenario.app).service(scenario.target).replicas

    def episode(*completions: str) -> Trajectory:
        env = IncidentEnvironment(simulator, scenario, limits=RemediationLimits(max_steps=4))
        env.reset()
        for completion in completions:
            env.step(completion)
        assert env.done
        return env.close()

    def call(tool: str, **args: object) -> str:
        return render_action(ToolCall(tool=tool, args=args))

    look, done = call("list_pods"), call("finish", diagnosis="no fault", summary="nothing needs changing")
    invalid = episode(*["I think everything is fine."] * 4)
    assert invalid.termination == "step_limit" and not invalid.writes
    assert invalid.verdict is not None and invalid.verdict.outcome == "unresolved", invalid.verdict
    assert invalid.verdict.reasons == ["the agent ran out of steps: a false alarm is handled only by finishing "
                                       "with nothing changed"]
    outcome = incident_outcome(invalid)
    assert outcome.outcome == "unresolved" and not outcome.false_positive
    assert summarize([EpisodeResult(scenario=scenario.name, fault="none", environment=invalid.run_id,
                                      outcome=outcome)])[-1].success_rate == 0

    paged = episode(look, call("escalate", diagnosis="nothing found", summary="paging a human"))
    assert paged.termination == "escalated" and paged.verdict is not None and paged.verdict.outcome == "unresolved"
    # a write that changes nothing (the replicas it already has) is still acting on a false alarm
    noop = episode(call("scale", deployment=scenario.target, replicas=replicas), done)
    assert len(noop.writes) == 1 and noop.verdict is not None and noop.verdict.outcome == "unresolved"
    assert incident_outcome(noop).false_positive
    right = episode(look, done)
    assert right.termination == "finished" and right.verdict is not None and right.verdict.outcome == "resolved"


def test_waiting_for_a_rollout_costs_simulated_time(simulator: Simulator) -> None:
    """The manual clock moves only with actions, so the environment's pause advances it: the model waits as long
    in simulated time as the rollout takes, and time to mitigate counts the wait."""
    scenario = _scenario("oom_limit")
    env = IncidentEnvironment(simulator, scenario, step_cost_s=3.0)
    env.reset()
    [fix] = scenario.ground_truth.fix
    env.step(render_action(fix))
    reply = env.step(render_action(ToolCall(tool="rollout_status", args={"deployment": scenario.target})))
    assert reply[0].content.endswith(f'deployment "{scenario.target}" successfully rolled out'), reply[0].content
    env.step(render_action(ToolCall(tool="finish", args={"diagnosis": "OOMKilled", "summary": "raised the limit"})))
    t = env.close()
    assert t.verdict is not None and t.verdict.outcome == "resolved"
    assert t.time_to_mitigate_s is not None and t.time_to_mitigate_s > 3.0 * len(t.steps)


def test_the_runbook_leaves_a_model_room_to_slip_within_the_simulated_budgets(simulator: Simulator,
                                                                           tiny_model_dir: Path) -> None:
    """SFT teaches the runbook's episodes and GRPO and the evaluation give a model SIMULATED_MAX_ACTIONS actions of
    MAX_ACTION_TOKENS tokens each (more with several services unhealthy at the alert: `simulated_max_actions`, the
    episode's own budget). A model that copies the longest episode still has two actions for an invalid one
    (with none spare, half the held-out episodes of a model taught by it ran out of actions), and one that copies
    the longest action, end token included, a quarter of the tokens for a longer name (at 64, the escalations of
    the runbook's student were cut off)."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir, local_files_only=True)  # SmolLM2's
    ref, runbook = PolicyRef(name="runbook"), RunbookPolicy()
    played = [play(runbook, ref, s, simulator)
              for s in load_scenarios(default_catalog()) + load_scenarios(heldout_suite())]
    assert max(len(t.steps) for t in played if t.incident.limits.max_steps == SIMULATED_MAX_ACTIONS) \
        <= SIMULATED_MAX_ACTIONS - 2
    assert max(len(t.steps) - t.incident.limits.max_steps for t in played) <= -2
    assert not [t.incident.fault_class for t in played if t.termination == "step_limit"]
    longest = max(len(tokenizer(s.decision.completion, add_special_tokens=False).input_ids) + 1
                  for t in played for s in t.steps)
    assert longest <= 0.75 * MAX_ACTION_TOKENS, longest
