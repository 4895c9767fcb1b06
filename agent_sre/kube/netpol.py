"""NetworkPolicy ingress semantics as a pure function over API objects.

Used by the simulator (callers of a blocked service see timeouts) and by the health oracle and the faults (which
read the same objects from any cluster), so all agree on what a policy blocks. Policies are additive: a pod
selected by at least one ingress policy accepts only traffic that some selecting policy allows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agent_sre.kube.selectors import matches

Obj = dict[str, Any]


def _isolates_ingress(policy: Obj) -> bool:
    spec = policy.get("spec") or {}
    types = spec.get("policyTypes")
    return "Ingress" in types if types else True


def _peer_allows(peer: Obj, policy_ns: str, src_ns: str, src_labels: Mapping[str, str],
                 src_ns_labels: Mapping[str, str]) -> bool:
    pod_sel, ns_sel = peer.get("podSelector"), peer.get("namespaceSelector")
    if pod_sel is None and ns_sel is None:
        return False  # an ipBlock: pod IPs in the simulated cluster are never inside the blocks apps use
    if ns_sel is None and src_ns != policy_ns:
        return False
    if ns_sel is not None and not matches(ns_sel, src_ns_labels):
        return False
    return pod_sel is None or matches(pod_sel, src_labels)


def _port_allows(ports: list[Obj] | None, port: int, port_name: str | None) -> bool:
    if not ports:
        return True
    for p in ports:
        value = p.get("port")
        if value is None or value == port or (port_name is not None and value == port_name):
            if p.get("protocol", "TCP") == "TCP":
                return True
    return False


def blocking_policy(policies: Iterable[Obj], dest_ns: str, dest_labels: Mapping[str, str], src_ns: str,
                    src_labels: Mapping[str, str], src_ns_labels: Mapping[str, str], port: int,
                    port_name: str | None = None) -> str | None:
    """The name of a policy that isolates the destination pod and lets no rule admit this source on this port,
    or None when the connection is allowed."""
    isolating = []
    for policy in policies:
        if policy["metadata"].get("namespace") != dest_ns or not _isolates_ingress(policy):
            continue
        if not matches((policy.get("spec") or {}).get("podSelector") or {}, dest_labels):
            continue
        isolating.append(policy)
        for rule in (policy.get("spec") or {}).get("ingress") or []:
            peers = rule.get("from")
            if not _port_allows(rule.get("ports"), port, port_name):
                continue
            if not peers or any(_peer_allows(peer, dest_ns, src_ns, src_labels, src_ns_labels) for peer in peers):
                return None
    return min(p["metadata"]["name"] for p in isolating) if isolating else None
