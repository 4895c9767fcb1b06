"""The fault catalog: fault types modelled on ITBench and AIOpsLab, each injected and cleared through the
official Kubernetes client (so the same code breaks a real cluster running Chaos Mesh), with the alert it fires,
a user's description of it, and the ground truth for judging a fix."""

from __future__ import annotations

from kubernetes.client import ApiClient

from agent_sre.faults.base import FaultContext, FaultError, FaultType
from agent_sre.faults.benign import HostileText, PodDeleted, RollingRestart
from agent_sre.faults.chaos import (
    ChaosHttpAbort,
    ChaosNetworkDelay,
    ChaosNetworkLoss,
    ChaosPodFailure,
    ChaosPodKill,
    ChaosStress,
)
from agent_sre.faults.config import BadConfig, SecretPassword
from agent_sre.faults.deployment import (
    BadCommand,
    BadEnv,
    BadImage,
    CpuUnschedulable,
    InitContainerFail,
    InitContainerHang,
    NodeSelectorMissing,
    OomLimit,
    ReadinessProbe,
)
from agent_sre.faults.load import HpaQuotaExceeded, IngressPolicyDeny, TrafficSurge
from agent_sre.faults.none import FalseAlarm
from agent_sre.faults.platform import CordonedNode, NetworkPolicyDeny, QuotaExceeded
from agent_sre.faults.service import DependencyDown, ScaledToZero, ServiceSelector, ServiceTargetPort
from agent_sre.models.scenario import Scenario

FAULTS: dict[str, FaultType] = {f.name: f for f in (
    ServiceTargetPort(), ServiceSelector(), ScaledToZero(), DependencyDown(),
    BadImage(), BadEnv(), BadCommand(), OomLimit(), CpuUnschedulable(), NodeSelectorMissing(), ReadinessProbe(),
    InitContainerHang(), InitContainerFail(),
    SecretPassword(), BadConfig(),
    CordonedNode(), QuotaExceeded(), NetworkPolicyDeny(),
    TrafficSurge(), HpaQuotaExceeded(), IngressPolicyDeny(),
    ChaosPodKill(), ChaosPodFailure(), ChaosNetworkDelay(), ChaosNetworkLoss(), ChaosStress(), ChaosHttpAbort(),
    FalseAlarm(), PodDeleted(), RollingRestart(), HostileText(),
)}


def get_fault(name: str) -> FaultType:
    try:
        return FAULTS[name]
    except KeyError:
        raise FaultError(f"unknown fault {name!r}; known faults: {', '.join(sorted(FAULTS))}") from None


def inject(api_client: ApiClient, scenario: Scenario) -> None:
    """Break the cluster as the scenario says: each of its faults, in order."""
    for spec in scenario.faults:
        get_fault(spec.fault).inject(api_client, scenario, spec)


def clear(api_client: ApiClient, scenario: Scenario) -> None:
    """Undo the scenario's injection (idempotent; fine after the incident was already fixed)."""
    for spec in reversed(scenario.faults):
        get_fault(spec.fault).clear(api_client, scenario, spec)


__all__ = ["FAULTS", "FaultContext", "FaultError", "FaultType", "clear", "get_fault", "inject"]
