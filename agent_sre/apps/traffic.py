"""Where the apps' traffic comes from and how much of it there is.

Users reach each app's entry service from outside its namespace, through the ingress controller (pods of the
`ingress-nginx` namespace): a NetworkPolicy on the entry service that does not admit them turns every user away.
The load generator that plays the users is configured per app namespace by a ConfigMap in its own namespace
(`loadgen/<namespace>`): each key a service, each value how many times its normal traffic it receives (a surge of
users on the entry service, a batch client hammering an internal one); what a service receives it passes on to its
dependencies. The agent acts only in the app's namespace, so it cannot wish the users away: it must serve them.

`demand` is the one model of requests per second that the simulator's signals and the faults' checks share.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from agent_sre.apps.catalog import AppSpec

LOADGEN_NAMESPACE = "loadgen"
INGRESS_NAMESPACE = "ingress-nginx"
INGRESS_LABELS: dict[str, str] = {"app.kubernetes.io/name": "ingress-nginx",
                                  "app.kubernetes.io/component": "controller"}
INGRESS_NAMESPACE_LABELS: dict[str, str] = {"kubernetes.io/metadata.name": INGRESS_NAMESPACE}
INGRESS_TIMEOUT_S = 5.0  # ingress-nginx's proxy-connect-timeout: then the user gets a 504
SERVED_UTILISATION = 0.85  # of a pod's capacity: below it no request fails and latency stays within a few times normal


def factors(data: Mapping[str, str] | None) -> dict[str, float]:
    """The load generator's ConfigMap data as service -> factor (unreadable values count as 1)."""
    out: dict[str, float] = {}
    for service, value in (data or {}).items():
        try:
            factor = float(value)
        except ValueError:
            continue
        if factor >= 0 and factor != 1.0:
            out[service] = factor
    return out


def demand(app: AppSpec, surge: Mapping[str, float] | None = None,
           blocked_entry: bool = False) -> dict[str, float]:
    """Requests per second arriving at each service: the users' at the entry service (none when the ingress cannot
    reach it), times each service's surge factor, passed down the dependency graph."""
    surge = surge or {}
    order = app.topological()
    rps = {s.name: 0.0 if blocked_entry else s.entry_rps for s in order}
    for s in reversed(order):  # callers first: demand flows down the graph
        rps[s.name] *= surge.get(s.name, 1.0)
        for edge in s.deps:
            rps[edge.callee] += rps[s.name] * edge.calls
    return rps


def needed_pods(app: AppSpec, service: str, surge: Mapping[str, float] | None = None) -> int:
    """Pods the service needs to serve its demand (`SERVED_UTILISATION` of their capacity at most)."""
    svc = app.service(service)
    rps = demand(app, surge)[service]
    return max(1, math.ceil(rps / (svc.software.capacity_rps * SERVED_UTILISATION) - 1e-9))
