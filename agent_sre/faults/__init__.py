"""The fault catalog: fault types modelled on ITBench and AIOpsLab, each injected and cleared through the
official Kubernetes client (so the same code breaks a real cluster running Chaos Mesh), with the alert it fires,
a user's description of it, and the ground truth for judging a fix."""

from __future__ import annotations

import time

from kubernetes.client import ApiClient

from agent_sre.faults.base import FaultContext, FaultError, FaultType
from agent_sre.faults.benign import HostileText, PodDeleted, RollingRestart
from agent_sre.faults.chaos import (
    ChaosDns,
    ChaosHttpAbort,
    ChaosIo,
    ChaosNetworkDelay,
    ChaosNetworkLoss,
    ChaosPodFailure,
    ChaosPodKill,
    ChaosStress,
)
from agent_sre.faults.config import BadConfig, ImagePullSecret, SecretDeleted, SecretPassword
from agent_sre.faults.deployment import (
    BadCommand,
    BadEnv,
    BadImage,
    CpuThrottled,
    CpuUnschedulable,
    InitContainerFail,
    InitContainerHang,
    MemoryLeak,
    NodeSelectorMissing,
    OomLimit,
    ReadinessProbe,
)
from agent_sre.faults.load import HpaMaxReplicas, HpaQuotaExceeded, IngressPolicyDeny, TrafficSurge
from agent_sre.faults.none import FalseAlarm
from agent_sre.faults.platform import (
    CordonedNode,
    NetworkPartition,
    NetworkPolicyDeny,
    NodeTaint,
    PvcMissing,
    QuotaExceeded,
)
from agent_sre.faults.service import DependencyDown, ScaledToZero, ServicePort, ServiceSelector, ServiceTargetPort
from agent_sre.kube.client import Kube
from agent_sre.models.scenario import Scenario

FAULTS: dict[str, FaultType] = {f.name: f for f in (
    ServiceTargetPort(), ServicePort(), ServiceSelector(), ScaledToZero(), DependencyDown(),
    BadImage(), BadEnv(), BadCommand(), OomLimit(), MemoryLeak(), CpuThrottled(), CpuUnschedulable(),
    NodeSelectorMissing(), ReadinessProbe(),
    InitContainerHang(), InitContainerFail(),
    SecretPassword(), SecretDeleted(), ImagePullSecret(), BadConfig(),
    CordonedNode(), NodeTaint(), PvcMissing(), QuotaExceeded(), NetworkPolicyDeny(), NetworkPartition(),
    TrafficSurge(), HpaQuotaExceeded(), HpaMaxReplicas(), IngressPolicyDeny(),
    ChaosPodKill(), ChaosPodFailure(), ChaosNetworkDelay(), ChaosNetworkLoss(), ChaosStress(), ChaosHttpAbort(),
    ChaosDns(), ChaosIo(),
    FalseAlarm(), PodDeleted(), RollingRestart(), HostileText(),
)}


def get_fault(name: str) -> FaultType:
    try:
        return FAULTS[name]
    except KeyError:
        raise FaultError(f"unknown fault {name!r}; known faults: {', '.join(sorted(FAULTS))}") from None


OBSERVED_WAIT_S = 30.0  # how long injection waits for the deployment controller to see a fault's change


def inject(api_client: ApiClient, scenario: Scenario) -> None:
    """Break the cluster as the scenario says: each of its faults that arrive at once, in order, each seen by the
    deployment controller before the next is injected. Two changes to one deployment are then two revisions, as two
    changes made minutes apart are on a real cluster, so one `rollout_undo` undoes only the later. A fault with a
    `delay_s` is not injected here: the simulated environment holds it and applies it when its clock passes the
    delay (`agent_sre.simulator.later`), whoever drives the episode."""
    for i, spec in enumerate(f for f in scenario.faults if not f.delay_s):
        if i:
            observed(api_client, scenario.namespace)
        get_fault(spec.fault).inject(api_client, scenario, spec)


def observed(api_client: ApiClient, namespace: str, timeout_s: float = OBSERVED_WAIT_S) -> bool:
    """Wait until the deployment controller has observed every deployment of `namespace` (observedGeneration caught
    up with generation); False if it has not within `timeout_s`. A simulator reconciles on the read itself."""
    deadline = time.monotonic() + timeout_s
    while True:
        pending = [d for d in Kube(api_client, shared=True).list("deployment", namespace)
                   if (d.get("status") or {}).get("observedGeneration", 0) < d["metadata"].get("generation", 1)]
        if not pending:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)


def clear(api_client: ApiClient, scenario: Scenario) -> None:
    """Undo the scenario's injection (idempotent; fine after the incident was already fixed)."""
    for spec in reversed(scenario.faults):
        get_fault(spec.fault).clear(api_client, scenario, spec)


__all__ = ["FAULTS", "FaultContext", "FaultError", "FaultType", "clear", "get_fault", "inject"]
