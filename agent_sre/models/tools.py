"""The agent's tool vocabulary: names, typed arguments (their JSON schemas go into the model's prompt), risk.

The implementations live in `agent_sre.tools`; this module is only the contract, shared by policies, the
workflow, guardrails, scenarios (ground-truth fixes are tool calls) and training.
"""

from __future__ import annotations

import json
from enum import IntEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"  # an object name (DNS-1123 subdomain)
Name = Field(pattern=NAME_PATTERN, max_length=253)
ReadableKind = Literal["pod", "deployment", "replicaset", "service", "node", "configmap", "secret", "networkpolicy",
                       "resourcequota", "endpoints", "namespace", "horizontalpodautoscaler", "job", "cronjob",
                       "persistentvolumeclaim"]
ChaosKind = Literal["PodChaos", "StressChaos", "NetworkChaos", "HTTPChaos", "DNSChaos", "IOChaos", "Schedule"]


class Risk(IntEnum):
    READ = 0
    LOW = 1  # reversible and self-healing (delete a pod, restart a rollout)
    MEDIUM = 2  # changes a spec (patch, scale, set image, edit config)
    HIGH = 3  # could take a service down (scale to zero, remove policies)


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NoArgs(_Args):
    pass


class ListPods(_Args):
    namespace: str | None = Field(None, description="defaults to the incident's namespace")
    selector: str | None = Field(None, description="label selector, e.g. app=cart")


class Describe(_Args):
    kind: ReadableKind
    name: str = Name
    namespace: str | None = None


class GetLogs(_Args):
    pod: str = Name
    container: str | None = None
    tail: int = Field(50, ge=1, le=500)
    previous: bool = False
    namespace: str | None = None


class GetEvents(_Args):
    namespace: str | None = None
    object_name: str | None = Field(None, description="only events about this object")


class ServiceRef(_Args):
    service: str = Name
    namespace: str | None = None


class Top(_Args):
    kind: Literal["pods", "nodes"] = "pods"
    namespace: str | None = None


class DeploymentRef(_Args):
    deployment: str = Name


MAX_WAIT_S = 120  # the longest a tool may block waiting for the cluster: its activity's timeout allows for it


class RolloutStatus(_Args):
    deployment: str = Name
    timeout_s: int = Field(60, ge=1, le=MAX_WAIT_S, description="seconds to wait on the cluster's clock")


class ListChaos(_Args):
    namespace: str | None = None


class ListNetworkPolicies(_Args):
    namespace: str | None = None


class GetResource(_Args):
    kind: ReadableKind
    name: str = Name
    namespace: str | None = None


class Patch(_Args):
    kind: Literal["deployment", "service", "configmap", "secret", "networkpolicy", "resourcequota"]
    name: str = Name
    patch: dict[str, Any] | list[dict[str, Any]]
    patch_type: Literal["strategic", "merge", "json"] = "strategic"


class SetImage(_Args):
    deployment: str = Name
    container: str = Name
    image: str = Field(min_length=1, max_length=512, pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*$")


class RolloutUndo(_Args):
    deployment: str = Name
    to_revision: int | None = Field(None, ge=1)


class Scale(_Args):
    deployment: str = Name
    replicas: int = Field(ge=0, le=50)


class PatchService(_Args):
    service: str = Name
    port: int | None = Field(None, ge=1, le=65535)
    target_port: int | str | None = None
    selector: dict[str, str] | None = None


class SetResources(_Args):
    deployment: str = Name
    container: str = Name
    memory_limit: str | None = Field(None, pattern=r"^[0-9]+(Ki|Mi|Gi)?$")
    memory_request: str | None = Field(None, pattern=r"^[0-9]+(Ki|Mi|Gi)?$")
    cpu_limit: str | None = Field(None, pattern=r"^[0-9]+m?$")
    cpu_request: str | None = Field(None, pattern=r"^[0-9]+m?$")


class SetEnv(_Args):
    deployment: str = Name
    container: str = Name
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    value: str = Field(max_length=4096)


class NodeRef(_Args):
    node: str = Name


class PodRef(_Args):
    pod: str = Name


class ChaosRef(_Args):
    kind: ChaosKind
    name: str = Name


class SetConfigKey(_Args):
    kind: Literal["configmap", "secret"]
    name: str = Name
    key: str = Field(pattern=r"^[-._a-zA-Z0-9]+$")
    value: str = Field(max_length=65536)


class NetworkPolicyRef(_Args):
    name: str = Name


class PatchQuota(_Args):
    name: str = Name
    hard: dict[str, str] = Field(min_length=1)


class SetHpaMax(_Args):
    name: str = Name
    max_replicas: int = Field(ge=1, le=50)


class Finish(_Args):
    diagnosis: str = Field(min_length=1, max_length=2000, description="root cause, e.g. 'deployment/cart: OOMKilled'")
    summary: str = Field(max_length=4000, description="what was done and why")


class Escalate(_Args):
    diagnosis: str = Field(min_length=1, max_length=2000, description="what was found, e.g. 'deployment/cart: "
                           "CrashLoopBackOff after rollback'")
    summary: str = Field(min_length=1, max_length=4000, description="what was tried and why a human must take over")


class ToolSpec(BaseModel):
    name: str
    description: str
    args: type[_Args]
    risk: Risk
    write: bool
    max_wait_s: float = 0.0  # how long the tool may wait for the cluster beyond an ordinary call


def _spec(name: str, args: type[_Args], risk: Risk, description: str, max_wait_s: float = 0.0) -> ToolSpec:
    return ToolSpec(name=name, description=description, args=args, risk=risk, write=risk > Risk.READ,
                    max_wait_s=max_wait_s)


# The descriptions follow each signature in the model's prompt, at every turn: a few words, none where the name and
# arguments say it all (policy.conversation.system_prompt).
TOOL_SPECS: dict[str, ToolSpec] = {s.name: s for s in (
    _spec("list_pods", ListPods, Risk.READ, "kubectl get pods"),
    _spec("describe", Describe, Risk.READ, "kubectl describe: spec, status, events"),
    _spec("get_logs", GetLogs, Risk.READ, "kubectl logs; previous: before the last restart"),
    _spec("get_events", GetEvents, Risk.READ, "kubectl get events, newest last"),
    _spec("get_endpoints", ServiceRef, Risk.READ, "the ready pod addresses behind a service"),
    _spec("top", Top, Risk.READ, "CPU and memory usage"),
    _spec("rollout_history", DeploymentRef, Risk.READ, "revisions and what each changed"),
    _spec("rollout_status", RolloutStatus, Risk.READ, "wait until its new pods are all available",
          max_wait_s=MAX_WAIT_S),
    _spec("list_chaos_experiments", ListChaos, Risk.READ, "Chaos Mesh experiments"),
    _spec("list_network_policies", ListNetworkPolicies, Risk.READ, "the pods each selects and whom it lets in"),
    _spec("list_nodes", NoArgs, Risk.READ, "status (cordoned, not ready) and labels"),
    _spec("get_resource", GetResource, Risk.READ, "kubectl get -o yaml, secret values decoded"),
    _spec("patch", Patch, Risk.MEDIUM, "kubectl patch"),
    _spec("set_image", SetImage, Risk.MEDIUM, ""),
    _spec("rollout_undo", RolloutUndo, Risk.MEDIUM, "back to the previous revision"),
    _spec("scale", Scale, Risk.MEDIUM, ""),
    _spec("rollout_restart", DeploymentRef, Risk.LOW, ""),
    _spec("patch_service", PatchService, Risk.MEDIUM, ""),
    _spec("set_resources", SetResources, Risk.MEDIUM, ""),
    _spec("set_env", SetEnv, Risk.MEDIUM, ""),
    _spec("remove_scheduling_constraints", DeploymentRef, Risk.MEDIUM, "drop nodeSelector and affinity"),
    _spec("uncordon", NodeRef, Risk.MEDIUM, ""),
    _spec("delete_pod", PodRef, Risk.LOW, "its controller recreates it"),
    _spec("delete_chaos_experiment", ChaosRef, Risk.MEDIUM, "ends its fault"),
    _spec("set_config_key", SetConfigKey, Risk.MEDIUM, ""),
    _spec("delete_network_policy", NetworkPolicyRef, Risk.HIGH, ""),
    _spec("patch_quota", PatchQuota, Risk.MEDIUM, "raise a ResourceQuota's hard limits"),
    _spec("set_hpa_max", SetHpaMax, Risk.MEDIUM, "set a HorizontalPodAutoscaler's maxReplicas"),
    _spec("finish", Finish, Risk.READ, "end with the root cause and what you did"),
    _spec("escalate", Escalate, Risk.READ, "hand over to a human: what you found and tried, why it is not fixed"),
)}


class ToolCall(BaseModel):
    """One action of the agent. `args` are validated against the tool's spec by `validate()`."""

    tool: str
    args: dict[str, Any] = Field(default_factory=dict)

    def validate_args(self) -> _Args:
        """Raise KeyError for an unknown tool or pydantic.ValidationError for bad arguments."""
        return TOOL_SPECS[self.tool].args.model_validate(self.args)

    def command_line(self) -> str:
        """The action as a person reads it: `rollout_undo deployment=cart`."""
        args = " ".join(f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in self.args.items())
        return f"{self.tool} {args}".strip()


WriteRisk = Literal["low", "high", "forbidden"]  # runs; runs once a human approves; never runs
WRITE_RISKS: tuple[WriteRisk, ...] = ("low", "high", "forbidden")  # in increasing order


class WriteFinding(BaseModel):
    """One rule's judgement of what a write does to an object (agent_sre.tools.write_rules)."""

    rule: str
    reason: str = Field(description="a plain sentence: what the write would do and why that matters")
    risk: WriteRisk


class WriteAssessment(BaseModel):
    """A write's findings and the highest of their risks."""

    risk: WriteRisk
    findings: list[WriteFinding] = Field(default_factory=list)

    @classmethod
    def of(cls, findings: list[WriteFinding]) -> WriteAssessment:
        return cls(risk=max((f.risk for f in findings), key=WRITE_RISKS.index, default="low"), findings=findings)

    def reasons(self, risk: WriteRisk) -> str:
        """The reasons of the findings at `risk`, as one line."""
        return "; ".join(f"{f.reason} ({f.rule})" for f in self.findings if f.risk == risk)


class ToolResult(BaseModel):
    tool: str
    ok: bool
    output: str  # kubectl-like text, bounded in length, exactly what the model reads
    refused: bool = False  # stopped by a guardrail before reaching the cluster
    error: str | None = None
    idempotent_replay: bool = False  # a retried write found its own earlier effect and did nothing
    duration_ms: float = 0.0
    needs_approval: WriteAssessment | None = Field(
        default=None, description="a write the rules judged high-risk, not sent: it runs once re-invoked approved")
    stale: bool = Field(default=False, description="a write not sent: another remediation wrote to the namespace "
                                                   "since the agent read it, so what it read before is stale")


class ToolInvocation(BaseModel):
    """One tool call as the tool activity receives it: the call plus where and as which write it runs."""

    call: ToolCall
    namespace: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63,
                           description="the incident's namespace: the only one writes may touch")
    kubeconfig: str | None = Field(default=None, description="cluster to act on; None = the worker's default")
    idempotency_key: str = Field(min_length=1, max_length=253, description="unique per call; the same on retries")
    max_chars: int = Field(default=2000, ge=200, le=100_000, description="bound on the rendered output")
    approved: bool = Field(default=False, description="a human (or the incident's limits) approved a high-risk write")
