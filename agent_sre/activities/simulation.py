"""Activities of simulated episodes: an isolated environment per episode, fault injection, clean-up.

Both are safe to run again (as a retried activity, or a local activity re-run after a crash): the environment's
name comes from the episode, so a second attempt replaces what the first left instead of leaking it.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from temporalio import activity
from temporalio.exceptions import ApplicationError

from agent_sre import faults
from agent_sre.faults import oracle
from agent_sre.models.episode import InjectedFault, InjectRequest, SimEnvironment
from agent_sre.simulator.client import SimulatorClient, SimulatorError
from agent_sre.tools.client import api_client

MANIFEST_TIMEOUT_S = 60.0
POLL_S = 0.2


class SimulationActivities:
    """Built once per worker with the simulator's client (`workers.main.build_activities`)."""

    def __init__(self, simulator: SimulatorClient) -> None:
        self._simulator = simulator

    @classmethod
    def of(cls, sim_url: str) -> SimulationActivities:
        """For the simulator at `sim_url` (the worker's `settings.sim_url`): only code that runs a simulator imports
        its client (docs/architecture.md, "Layers")."""
        return cls(SimulatorClient(sim_url))

    def _fresh_environment(self, req: InjectRequest) -> tuple[SimEnvironment, float | None]:
        """The environment, and its clock's speed (None from a simulator that does not say)."""
        sim, scenario = self._simulator, req.scenario
        try:
            env = sim.create_env(name=req.environment, apps=scenario.apps, seed=scenario.seed)
        except SimulatorError as e:
            if e.status != 409:
                raise
            sim.delete_env(req.environment)  # an earlier attempt's: it may be half injected
            env = sim.create_env(name=req.environment, apps=scenario.apps, seed=scenario.seed)
        return SimEnvironment(name=env["name"], server=env["server"]), env.get("speed")

    @activity.defn
    def create_and_inject(self, req: InjectRequest) -> InjectedFault:
        """Create the environment, inject the fault, then wait until the app is visibly unhealthy — when its alert
        would fire. One activity, not two: one round trip less per episode, and nothing to leak between them. The
        snapshot that saw it is the remediation's baseline: the namespace as the alert fired, before anyone acted.

        A false alarm (nothing to fix: `none`, a transient or benign event) fires at once. A fault that never shows
        is a broken scenario, not a retryable error. The faults that arrive later are handed to the simulator, which
        applies each when its clock passes the delay (`agent_sre.simulator.later`): nothing here waits for them. The
        scenario's settle window, in simulated seconds, goes back in the real seconds of the remediation's timers.
        """
        environment, speed = self._fresh_environment(req)
        client = api_client(environment.server)
        scenario = req.scenario
        faults.inject(client, scenario)
        if scenario.held:
            self._simulator.hold(environment.name, scenario)
        deadline = time.monotonic() + MANIFEST_TIMEOUT_S
        while True:
            health = oracle.snapshot(client, scenario.namespace, scenario.app, neighbours=scenario.neighbours)
            if health.unhealthy or scenario.false_alarm:
                break
            if time.monotonic() > deadline:
                raise ApplicationError(f"scenario {scenario.name}: fault {scenario.fault} did not show within "
                                       f"{MANIFEST_TIMEOUT_S:.0f}s", non_retryable=True)
            if not activity.info().is_local:  # a local activity cannot heartbeat: its timeout bounds it
                activity.heartbeat()
            time.sleep(POLL_S)
        alert = scenario.alert.model_copy(update={"status": "firing", "startsAt": datetime.now(UTC)})
        settle_s = scenario.settle_s / speed if scenario.settle_s is not None and speed else None
        return InjectedFault(environment=environment, alert=alert, health=health, settle_s=settle_s)

    @activity.defn
    def delete_environment(self, name: str) -> None:
        try:
            self._simulator.delete_env(name)
        except SimulatorError as e:
            if e.status != 404:  # already gone: deleting is idempotent
                raise
