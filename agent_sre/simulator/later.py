"""Faults that arrive later (a scenario fault's `delay_s`): the environment holds them and applies each when its
clock passes the delay, as a second bad rollout or a second service breaking does while an engineer works.

Held by the environment, not by whoever drives the episode: the in-process environment's clock moves with the
agent's actions, the served one's with real time (scaled by its speed), and a Temporal episode's activities never
see the moment a fault is due. Each fault is injected as `faults.inject` injects one, through the Kubernetes API
(the environment's own, in process), so it reads and writes what the cluster holds then: a rollout on top of
whatever the agent already did, as a CI pipeline that ships on its own timetable does on a real cluster.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from agent_sre.faults import get_fault
from agent_sre.models.scenario import FaultSpec, Scenario
from agent_sre.simulator.cluster import Timer
from agent_sre.simulator.simulator import Simulator
from agent_sre.simulator.transport import in_process_api_client

log = logging.getLogger(__name__)


def hold(simulator: Simulator, env: str, scenario: Scenario) -> list[Timer]:
    """Hold `scenario`'s later faults in environment `env`, each due `delay_s` from now (the injection of the
    others); returns the timers set."""
    with simulator.lock:
        cluster = simulator.env(env)
        now = cluster.clock.now()
        timers = [Timer(now + spec.delay_s, f"{spec.fault} on {spec.target}", _arrival(simulator, env, scenario, spec))
                  for spec in scenario.held]
        for timer in timers:
            cluster.schedule(timer)
        return timers


def _arrival(simulator: Simulator, env: str, scenario: Scenario, spec: FaultSpec) -> Callable[[], None]:
    def fire() -> None:
        """Inject it now; a fault that cannot be injected any more (its target deleted meanwhile) is logged, not
        raised: it fires inside a request that must still be answered."""
        try:
            get_fault(spec.fault).inject(in_process_api_client(simulator, env), scenario, spec)
        except Exception:
            log.exception("environment %s: the later fault %s on %s could not be injected", env, spec.fault,
                          spec.target)

    return fire
