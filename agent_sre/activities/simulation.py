"""Activities of simulated episodes: an isolated environment per episode, fault injection, clean-up."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from temporalio import activity
from temporalio.exceptions import ApplicationError

from agent_sre import faults
from agent_sre.config import get_settings
from agent_sre.faults import oracle
from agent_sre.models.episode import InjectedFault, InjectRequest, SimEnvironment
from agent_sre.models.scenario import Scenario
from agent_sre.simulator.client import SimulatorClient, SimulatorError
from agent_sre.tools.client import api_client

MANIFEST_TIMEOUT_S = 60.0
POLL_S = 0.2


def _simulator() -> SimulatorClient:
    return SimulatorClient(get_settings().sim_url)


@activity.defn
def create_environment(scenario: Scenario) -> SimEnvironment:
    env = _simulator().create_env(apps=[scenario.app], seed=scenario.seed)
    return SimEnvironment(name=env["name"], server=env["server"])


@activity.defn
def inject_and_wait_for_alert(req: InjectRequest) -> InjectedFault:
    """Inject the fault, then wait until the app is visibly unhealthy — when its alert would fire.

    A false alarm (`none`) fires at once. A fault that never shows is a broken scenario, not a retryable error.
    """
    client = api_client(req.environment.server)
    scenario = req.scenario
    faults.inject(client, scenario)
    deadline = time.monotonic() + MANIFEST_TIMEOUT_S
    while scenario.fault != "none":
        if oracle.snapshot(client, scenario.namespace, scenario.app).unhealthy:
            break
        if time.monotonic() > deadline:
            raise ApplicationError(f"scenario {scenario.name}: fault {scenario.fault} did not show within "
                                   f"{MANIFEST_TIMEOUT_S:.0f}s", non_retryable=True)
        activity.heartbeat()
        time.sleep(POLL_S)
    alert = scenario.alert.model_copy(update={"status": "firing", "startsAt": datetime.now(UTC)})
    return InjectedFault(environment=req.environment, alert=alert)


@activity.defn
def delete_environment(env: SimEnvironment) -> None:
    try:
        _simulator().delete_env(env.name)
    except SimulatorError as e:
        if e.status != 404:  # already gone: deleting is idempotent
            raise
