"""Faults outside the workload's own spec: a cordoned node, a taint, a missing volume claim, a too-small quota, a
NetworkPolicy."""

from __future__ import annotations

import copy
from typing import Any

from pydantic import Field

from agent_sre.apps.catalog import PART_OF, AppSpec, labels, nodes_for
from agent_sre.apps.manifests import DATA_VOLUME, STORAGE_CLASS, claim
from agent_sre.faults.base import (
    FaultContext,
    FaultError,
    FaultParams,
    FaultType,
    RolloutFault,
    first_caller,
    restart_cause,
)
from agent_sre.kube.client import Kube, Obj
from agent_sre.kube.netpol import blocking_policy
from agent_sre.kube.selectors import matches
from agent_sre.models.scenario import ExpectedEnding
from agent_sre.models.tools import NAME_PATTERN, ToolCall

QUOTA = "compute-resources"


class CordonedNode(FaultType):
    name = "cordoned_node"
    summary = "cordon and drain the only nodes a pinned service may run on (Pending: node(s) were unschedulable)"
    fault_class = "scheduling/node"
    modelled_on = "ITBench cordoned node / node maintenance left unfinished"
    alert_name = "KubeDeploymentReplicasMismatch"

    def targets(self, app: AppSpec) -> list[str]:
        """Only pinned services: anything else would simply be rescheduled on another node."""
        return [s.name for s in app.services if s.node_selector]

    def nodes(self, ctx: FaultContext) -> list[str]:
        return nodes_for(ctx.svc)

    def _inject(self, k8s: Kube, ctx: FaultContext) -> None:
        for node in self.nodes(ctx):
            k8s.cordon(node, True)
        # the drain: evict what runs there
        for pod in k8s.list("pod", ctx.namespace, label_selector=f"app={ctx.target}"):
            if pod["spec"].get("nodeName") in self.nodes(ctx):
                k8s.remove("pod", ctx.namespace, pod["metadata"]["name"])

    def _clear(self, k8s: Kube, ctx: FaultContext) -> None:
        for node in self.nodes(ctx):
            k8s.cordon(node, False)

    def root_cause(self, ctx: FaultContext) -> str:
        return f"node/{self.nodes(ctx)[0]}"

    def fix(self, ctx: FaultContext) -> list[ToolCall]:
        return [ToolCall(tool="uncordon", args={"node": node}) for node in self.nodes(ctx)]

    def check(self, k8s: Kube, ctx: FaultContext, baseline: Any) -> list[str]:
        cordoned = [n["metadata"]["name"] for n in k8s.list("node") if (n.get("spec") or {}).get("unschedulable")
                    and n["metadata"]["name"] in self.nodes(ctx)]
        return [f"node/{n} is still cordoned" for n in cordoned]


TAINT_PART = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"


class TaintParams(FaultParams):
    key: str = Field(pattern=TAINT_PART, max_length=63)
    value: str = Field(pattern=TAINT_PART, max_length=63)


class NodeTaint(RolloutFault):
    """A `NoSchedule` taint on every node the target may run on (its pool: the nodes its nodeSelector admits), then
    a rollout of the target: the scheduler's TaintToleration filter rejects each node for a pod without a matching
    toleration, "N node(s) had untolerated taint {key: value}" (upstream
    pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go, `ErrReasonNotMatch`;
    https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/). NoSchedule evicts nothing: the
    pods running before keep running, only new ones stay Pending.

    A taint is its node owner's statement about who may run there (a pool dedicated, drained or held for repair),
    set on a cluster-scoped object the agent does not own: its one node write is `uncordon`, the documented end of
    a drain, and a guarded `patch` cannot reach a node. Removing the taint, or adding a toleration to get around it,
    would override that owner. The expected ending is a handover: escalate, naming the taint and its nodes."""

    name = "node_taint"
    summary = "taint the nodes of the target's pool NoSchedule, then roll it: new pods stay Pending (untolerated taint)"
    fault_class = "scheduling/taint"
    modelled_on = "ITBench node taint (NoSchedule) on the nodes a workload needs"
    Params = TaintParams
    expected_ending = "escalated"

    def defaults(self, app: AppSpec, target: str) -> dict[str, Any]:
        return {"key": "dedicated", "value": "batch"}

    def nodes(self, ctx: FaultContext) -> list[str]:
        return nodes_for(ctx.svc)

    def taint(self, ctx: FaultContext) -> dict[str, str]:
        return {"key": ctx.params.key, "value": ctx.params.value, "effect": "NoSchedule"}

    def _set(self, k8s: Kube, ctx: FaultContext, tainted: bool) -> None:
        for node in self.nodes(ctx):
            taints = [t for t in (k8s.get("node", node).get("spec") or {}).get("taints") or []
                      if t.get("key") != ctx.params.key]
            k8s.patch("node", node, {"spec": {"taints": [*taints, self.taint(ctx)] if tainted else taints or None}},
                      "merge", f"fault-{self.name}-{node}")

    def _inject(self, k8s: Kube, ctx: FaultContext) -> None:
        self._set(k8s, ctx, True)
        k8s.rollout_restart(ctx.namespace, ctx.target)

    def _clear(self, k8s: Kube, ctx: FaultContext) -> None:
        self._set(k8s, ctx, False)

    def root_cause(self, ctx: FaultContext) -> str:
        return ", ".join(f"node/{node}" for node in self.nodes(ctx))

    def fix(self, ctx: FaultContext) -> list[ToolCall]:
        taint = f"{ctx.params.key}={ctx.params.value}:NoSchedule"
        return [ToolCall(tool="escalate", args={
            "diagnosis": f"nodes {', '.join(self.nodes(ctx))} carry the taint {taint}, which the pods of deployment "
                         f"{ctx.target} do not tolerate: its new pods stay Pending",
            "summary": "a taint is its node owner's decision and no tool of mine may remove it: remove the taint, or "
                       "say where the deployment should run instead"})]

    def wrong_fix(self, ctx: FaultContext) -> list[ToolCall]:
        """Taken for a cordon: uncordoning changes nothing (the nodes are schedulable; the taint is what repels)."""
        return [*(ToolCall(tool="uncordon", args={"node": node}) for node in self.nodes(ctx)),
                ToolCall(tool="finish", args={"diagnosis": f"nodes of {ctx.target} were unschedulable",
                                              "summary": "uncordoned them"})]

    def _tolerated(self, k8s: Kube, ctx: FaultContext) -> list[str]:
        dep = k8s.find("deployment", ctx.target, ctx.namespace) or {}
        tolerations = ((((dep.get("spec") or {}).get("template") or {}).get("spec") or {}).get("tolerations") or [])
        if not any(t.get("key") in (ctx.params.key, None) and t.get("effect") in ("NoSchedule", None)
                   for t in tolerations):
            return []
        return [f"deployment/{ctx.target} now tolerates the taint {ctx.params.key}: its pods go where the nodes' "
                f"owner keeps them out"]

    def check(self, k8s: Kube, ctx: FaultContext, baseline: Any) -> list[str]:
        tainted = [n for n in self.nodes(ctx) if any(t.get("key") == ctx.params.key for t in
                                                     (k8s.get("node", n).get("spec") or {}).get("taints") or [])]
        return [f"node/{n} still carries the taint {ctx.params.key}" for n in tainted] + self._tolerated(k8s, ctx)

    def handover_check(self, k8s: Kube, ctx: FaultContext, baseline: Any) -> list[str]:
        return self._tolerated(k8s, ctx)


class ClaimParams(FaultParams):
    # the claim the redeployed target names instead of its own (a typo, a name from another environment); absent:
    # its own claim, deleted (its data gone with it)
    claim: str | None = Field(None, pattern=NAME_PATTERN, max_length=253)
    # `claim` is made, of a storage class the cluster lacks: it stays Pending (no volume is ever provisioned for it)
    storage_class: str | None = Field(None, pattern=NAME_PATTERN, max_length=253)


class PvcMissing(RolloutFault):
    """A data store whose pods claim a PersistentVolumeClaim that does not exist: redeployed naming another claim
    (`claim`; with `storage_class`, a new claim of a class the cluster lacks, which stays Pending), or its own claim
    deleted and the store restarted (no `claim`). The scheduler's VolumeBinding PreFilter leaves the new pod
    Pending, `0/3 nodes are available: persistentvolumeclaim "X" not found` (or `pod has unbound immediate
    PersistentVolumeClaims`; upstream pkg/scheduler/framework/plugins/volumebinding;
    https://kubernetes.io/docs/concepts/storage/persistent-volumes/),
    and the store's Recreate strategy has already ended the old pod, so its callers fail. (A deleted claim in use is
    kept by the `kubernetes.io/pvc-protection` finalizer until its last pod ends; the restart ends it.)

    The ending follows the evidence. A renamed claim leaves the store's own claim Bound beside it: rolling back (or
    naming that claim again) mounts the same data. A deleted claim took its volume with it (the default class's
    reclaim policy is Delete): no tool of the agent's makes storage, and an empty volume in its place would start the
    database without its data, so the expected ending is a handover."""

    name = "pvc_missing"
    summary = "redeploy a data store claiming a PersistentVolumeClaim that does not exist, or delete its own claim " \
              "(Pending: persistentvolumeclaim not found)"
    fault_class = "storage/pvc"
    modelled_on = "ITBench missing PersistentVolumeClaim / unbound PVC leaves the database Pending"
    Params = ClaimParams

    def targets(self, app: AppSpec) -> list[str]:
        return [s.name for s in app.services if s.claim]

    def validate(self, ctx: FaultContext) -> None:
        if ctx.params.claim == ctx.svc.claim:
            raise FaultError(f"{ctx.svc.claim} is {ctx.target}'s own claim, which exists; name another, or none to "
                             f"delete it")
        if ctx.params.storage_class is not None and (not ctx.params.claim or ctx.params.storage_class == STORAGE_CLASS):
            raise FaultError(f"a Pending claim is a new one (`claim`) of a class the cluster lacks (not "
                             f"{STORAGE_CLASS})")

    def ending(self, ctx: FaultContext) -> ExpectedEnding:
        return "finished" if ctx.params.claim else "escalated"

    def _mount(self, k8s: Kube, ctx: FaultContext, name: str, cause: str | None = None) -> None:
        k8s.patch_deployment(ctx.namespace, ctx.target, {"spec": {"template": {"spec": {"volumes": [
            {"name": DATA_VOLUME, "persistentVolumeClaim": {"claimName": name}}]}}}}, cause=cause)

    def _inject(self, k8s: Kube, ctx: FaultContext) -> None:
        if ctx.params.storage_class:
            pending = claim(ctx.app, ctx.svc, ctx.namespace)
            pending["metadata"]["name"] = ctx.params.claim
            k8s.create("persistentvolumeclaim", ctx.namespace,
                       {**pending, "spec": {**pending["spec"], "storageClassName": ctx.params.storage_class}})
        if ctx.params.claim:
            self._mount(k8s, ctx, ctx.params.claim, restart_cause(ctx, f"move {ctx.target} to volume claim "
                                                                       f"{ctx.params.claim}"))
            return
        k8s.remove("persistentvolumeclaim", ctx.namespace, ctx.svc.claim)
        k8s.rollout_restart(ctx.namespace, ctx.target)

    def _clear(self, k8s: Kube, ctx: FaultContext) -> None:
        if k8s.find("persistentvolumeclaim", ctx.svc.claim, ctx.namespace) is None:
            k8s.create("persistentvolumeclaim", ctx.namespace, claim(ctx.app, ctx.svc, ctx.namespace))
        self._mount(k8s, ctx, ctx.svc.claim)
        if ctx.params.storage_class:
            k8s.remove("persistentvolumeclaim", ctx.namespace, ctx.params.claim)

    def root_cause(self, ctx: FaultContext) -> str:
        return f"deployment/{ctx.target}" if ctx.params.claim else f"persistentvolumeclaim/{ctx.svc.claim}"

    def fix(self, ctx: FaultContext) -> list[ToolCall]:
        if ctx.params.claim:
            return [ToolCall(tool="rollout_undo", args={"deployment": ctx.target})]
        return [ToolCall(tool="escalate", args={
            "diagnosis": f"persistentvolumeclaim {ctx.svc.claim}, which deployment {ctx.target} mounts its data "
                         f"from, is gone: its new pod stays Pending",
            "summary": "no tool of mine makes storage, and an empty volume would lose the data: restore the claim "
                       "and its volume from backup; I changed nothing"})]

    def direct_fix(self, ctx: FaultContext) -> list[ToolCall] | None:
        """Under a later rollout: name the store's own claim again."""
        if not ctx.params.claim:
            return self.fix(ctx)
        return [ToolCall(tool="patch", args={"kind": "deployment", "name": ctx.target, "patch": {"spec": {"template": {
            "spec": {"volumes": [{"name": DATA_VOLUME, "persistentVolumeClaim": {"claimName": ctx.svc.claim}}]}}}}})]

    def wrong_fix(self, ctx: FaultContext) -> list[ToolCall]:
        """A renamed claim: a restart names the same missing claim. A deleted one: a rollback, claimed as the fix,
        names the same deleted claim."""
        if ctx.params.claim:
            return super().wrong_fix(ctx)
        return [ToolCall(tool="rollout_undo", args={"deployment": ctx.target}),
                ToolCall(tool="finish", args={"diagnosis": f"the restart of {ctx.target} failed",
                                              "summary": "rolled back"})]

    def _mounted(self, k8s: Kube, ctx: FaultContext) -> list[str]:
        dep = k8s.find("deployment", ctx.target, ctx.namespace) or {}
        volumes = ((((dep.get("spec") or {}).get("template") or {}).get("spec") or {}).get("volumes") or [])
        if any((v.get("persistentVolumeClaim") or {}).get("claimName") == ctx.svc.claim for v in volumes):
            return []
        return [f"deployment/{ctx.target} does not mount its data claim {ctx.svc.claim}"]

    def check(self, k8s: Kube, ctx: FaultContext, baseline: Any) -> list[str]:
        if k8s.find("persistentvolumeclaim", ctx.svc.claim, ctx.namespace) is None:
            return [f"persistentvolumeclaim/{ctx.svc.claim} is missing"]
        return self._mounted(k8s, ctx)

    def handover_check(self, k8s: Kube, ctx: FaultContext, baseline: Any) -> list[str]:
        return self._mounted(k8s, ctx)


class QuotaParams(FaultParams):
    pods: int = Field(ge=0)


class QuotaExceeded(RolloutFault):
    name = "quota_exceeded"
    summary = "shrink the namespace's pod quota, then roll the target: its new pods are forbidden (FailedCreate)"
    fault_class = "capacity/quota"
    modelled_on = "ITBench ResourceQuota too small"
    Params = QuotaParams

    def defaults(self, app: AppSpec, target: str) -> dict[str, Any]:
        return {"pods": sum(s.replicas for s in app.services) - 1}

    def validate(self, ctx: FaultContext) -> None:
        running = sum(s.replicas for s in ctx.app.services)
        if ctx.params.pods >= running:
            raise FaultError(f"the app runs {running} pods; a quota of {ctx.params.pods} pods leaves room for the "
                             f"rollout (use at most {running - 1})")

    def _inject(self, k8s: Kube, ctx: FaultContext) -> None:
        k8s.set_quota(ctx.namespace, QUOTA, {"pods": str(ctx.params.pods)})
        k8s.rollout_restart(ctx.namespace, ctx.target)

    def _clear(self, k8s: Kube, ctx: FaultContext) -> None:
        k8s.set_quota(ctx.namespace, QUOTA, {"pods": ctx.app.quota["pods"]})

    def root_cause(self, ctx: FaultContext) -> str:
        return f"resourcequota/{QUOTA}"

    def fix(self, ctx: FaultContext) -> list[ToolCall]:
        return [ToolCall(tool="patch_quota", args={"name": QUOTA, "hard": {"pods": ctx.app.quota["pods"]}})]


class PolicyParams(FaultParams):
    policy: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def guarding(app: AppSpec, service: str) -> Obj | None:
    """The app's own NetworkPolicy that selects this service's pods, if any."""
    pod_labels = labels(app, app.service(service))
    return next((p for p in app.network_policies
                 if matches((p.get("spec") or {}).get("podSelector") or {}, pod_labels)), None)


def guarded(app: AppSpec, service: str) -> bool:
    """Does a baseline NetworkPolicy of the app already select this service's pods?"""
    return guarding(app, service) is not None


class DenyingPolicy(FaultType):
    """A NetworkPolicy on the target that admits only `admitted` sources on its port; the fix deletes it."""

    fault_class = "network/policy"
    Params = PolicyParams
    alert_name = "HighErrorRate"

    def admitted(self, ctx: FaultContext) -> list[dict[str, Any]]:
        raise NotImplementedError

    def _inject(self, k8s: Kube, ctx: FaultContext) -> None:
        k8s.create_network_policy(ctx.namespace, {
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": ctx.params.policy, "labels": {PART_OF: ctx.app.name}},
            "spec": {"podSelector": {"matchLabels": {"app": ctx.target}}, "policyTypes": ["Ingress"],
                     "ingress": [{"from": self.admitted(ctx),
                                  "ports": [{"port": ctx.svc.port, "protocol": "TCP"}]}]}})

    def _clear(self, k8s: Kube, ctx: FaultContext) -> None:
        k8s.remove("networkpolicy", ctx.namespace, ctx.params.policy)

    def root_cause(self, ctx: FaultContext) -> str:
        return f"networkpolicy/{ctx.params.policy}"

    def fix(self, ctx: FaultContext) -> list[ToolCall]:
        return [ToolCall(tool="delete_network_policy", args={"name": ctx.params.policy})]


class NetworkPolicyDeny(DenyingPolicy):
    name = "network_policy_deny"
    summary = "apply a NetworkPolicy that admits only the monitoring namespace (callers time out)"
    modelled_on = "ITBench NetworkPolicy blocking ingress, AIOpsLab network partition"

    def targets(self, app: AppSpec) -> list[str]:
        # policies add up: a service that an existing policy already admits callers to cannot be blocked by a new one
        return [s.name for s in app.services if app.callers(s.name) and not guarded(app, s.name)]

    def defaults(self, app: AppSpec, target: str) -> dict[str, Any]:
        return {"policy": f"{target}-allow-monitoring-only"}

    def alerted_service(self, ctx: FaultContext) -> str:
        return first_caller(ctx)

    def involved(self, ctx: FaultContext) -> set[str]:
        return {ctx.target, first_caller(ctx)}

    def admitted(self, ctx: FaultContext) -> list[dict[str, Any]]:
        return [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]


class PartitionParams(FaultParams):
    deny_from: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    policy: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


OUTSIDER = {"app": "not-a-caller"}  # a pod no least-privilege policy of the apps admits


def _without(peer: Obj, caller: str) -> Obj | None:
    """A policy peer with `caller` taken out of the pods it names (None: it named only that caller)."""
    selector = peer.get("podSelector")
    if selector is None or "namespaceSelector" in peer:
        return peer
    if (selector.get("matchLabels") or {}).get("app") == caller:
        return None
    expressions = [{**e, "values": [v for v in e.get("values") or [] if v != caller]}
                   if e.get("key") == "app" and e.get("operator") == "In" else e
                   for e in selector.get("matchExpressions") or []]
    return {**peer, "podSelector": {**selector, "matchExpressions": expressions}} if expressions else peer


class NetworkPartition(FaultType):
    """A least-privilege NetworkPolicy on the target that names its callers and leaves one out (`deny_from`): that
    caller's connections are dropped (its calls time out) while every other caller is let in. On a service the app
    already guards, its own policy is edited (policies add up, so only that one can shut a caller out); elsewhere
    a new one is applied. The ingress semantics are upstream's (https://kubernetes.io/docs/concepts/services-networking/network-policies/:
    a pod selected by a policy admits only what some rule's peers and ports allow; `kube/netpol.py` follows them).

    The fix admits the caller again, keeping the policy: deleting it (or admitting every pod) opens the target to
    whatever runs in the namespace, which the policy's owner meant to keep out; the check says so."""

    name = "network_partition"
    summary = "a NetworkPolicy naming the target's callers leaves one out: only that caller times out"
    fault_class = "network/partition"
    modelled_on = "AIOpsLab network partition between two services, ITBench NetworkPolicy blocking one caller"
    Params = PartitionParams
    alert_name = "HighErrorRate"

    def targets(self, app: AppSpec) -> list[str]:
        """Services with two callers or more: one is shut out while another still gets through."""
        return [s.name for s in app.services if len(app.callers(s.name)) >= 2]

    def defaults(self, app: AppSpec, target: str) -> dict[str, Any]:
        own = guarding(app, target)
        return {"deny_from": app.callers(target)[-1].name,
                "policy": own["metadata"]["name"] if own else f"{target}-ingress"}

    def validate(self, ctx: FaultContext) -> None:
        callers = [c.name for c in ctx.app.callers(ctx.target)]
        if ctx.params.deny_from not in callers:
            raise FaultError(f"{ctx.params.deny_from!r} does not call {ctx.target} (its callers: {', '.join(callers)})")
        own = guarding(ctx.app, ctx.target)
        if own is not None and ctx.params.policy != own["metadata"]["name"]:
            raise FaultError(f"network policy {own['metadata']['name']} already admits {ctx.target}'s callers and "
                             f"policies add up: the partition must edit it (policy: {own['metadata']['name']})")

    def spec(self, ctx: FaultContext) -> Obj:
        """The policy's spec with the caller left out."""
        own = guarding(ctx.app, ctx.target)
        if own is None:
            others = [c.name for c in ctx.app.callers(ctx.target) if c.name != ctx.params.deny_from]
            return {"podSelector": {"matchLabels": {"app": ctx.target}}, "policyTypes": ["Ingress"],
                    "ingress": [{"from": [{"podSelector": {"matchExpressions": [
                        {"key": "app", "operator": "In", "values": others}]}}],
                        "ports": [{"port": ctx.svc.port, "protocol": "TCP"}]}]}
        spec: Obj = copy.deepcopy(own["spec"])
        for rule in spec.get("ingress") or []:
            rule["from"] = [p for p in (_without(peer, ctx.params.deny_from) for peer in rule.get("from") or [])
                            if p is not None]
        return spec

    def _replace(self, k8s: Kube, ctx: FaultContext, spec: Obj | None) -> None:
        k8s.remove("networkpolicy", ctx.namespace, ctx.params.policy)
        if spec is not None:
            k8s.create_network_policy(ctx.namespace, {
                "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"name": ctx.params.policy, "labels": {PART_OF: ctx.app.name}}, "spec": spec})

    def _inject(self, k8s: Kube, ctx: FaultContext) -> None:
        self._replace(k8s, ctx, self.spec(ctx))

    def _clear(self, k8s: Kube, ctx: FaultContext) -> None:
        own = guarding(ctx.app, ctx.target)
        self._replace(k8s, ctx, copy.deepcopy(own["spec"]) if own else None)

    def alerted_service(self, ctx: FaultContext) -> str:
        return str(ctx.params.deny_from)

    def involved(self, ctx: FaultContext) -> set[str]:
        return {ctx.target, ctx.params.deny_from}

    def root_cause(self, ctx: FaultContext) -> str:
        return f"networkpolicy/{ctx.params.policy}"

    def fix(self, ctx: FaultContext) -> list[ToolCall]:
        """Add the caller to the pods the policy names (a JSON patch appending to its `app In` values)."""
        rules = self.spec(ctx).get("ingress") or []
        for i, rule in enumerate(rules):
            for j, peer in enumerate(rule.get("from") or []):
                for k, e in enumerate((peer.get("podSelector") or {}).get("matchExpressions") or []):
                    if e.get("key") == "app" and e.get("operator") == "In":
                        path = f"/spec/ingress/{i}/from/{j}/podSelector/matchExpressions/{k}/values/-"
                        return [ToolCall(tool="patch", args={
                            "kind": "networkpolicy", "name": ctx.params.policy,
                            "patch": [{"op": "add", "path": path, "value": ctx.params.deny_from}],
                            "patch_type": "json"})]
        raise FaultError(f"network policy {ctx.params.policy} names no callers by `app In`: nothing to add to")

    def wrong_fix(self, ctx: FaultContext) -> list[ToolCall]:
        """Delete the policy: the caller gets through, and so does every other pod of the namespace."""
        return [ToolCall(tool="delete_network_policy", args={"name": ctx.params.policy})]

    def check(self, k8s: Kube, ctx: FaultContext, baseline: Any) -> list[str]:
        policies = k8s.list("networkpolicy", ctx.namespace)
        ns_labels = k8s.get("namespace", ctx.namespace)["metadata"].get("labels") or {}
        port_name = "http" if ctx.svc.probe == "http" else ctx.svc.name
        if blocking_policy(policies, ctx.namespace, labels(ctx.app, ctx.svc), ctx.namespace, OUTSIDER, ns_labels,
                           ctx.svc.port, port_name) is None:
            return [f"{ctx.target} now admits every pod of the namespace: the least-privilege policy "
                    f"{ctx.params.policy} was deleted or opened up instead of naming {ctx.params.deny_from}"]
        return []
