"""Where the agent may act: namespaces from the configuration, and the cluster from the worker's own settings.

An alert names its namespace and a workflow's input names its cluster, and whoever can send either would otherwise
choose what the agent writes to. So the namespace must match `AGENT_SRE_ALLOWED_NAMESPACES` (the cluster's own
namespaces only when listed by exact name, never through a pattern), and the activities act only on the cluster
the worker is configured for: its KUBECONFIG, or its simulator and that simulator's environments.
"""

from __future__ import annotations

import os
import re
from fnmatch import fnmatchcase
from pathlib import Path

from agent_sre.config import Settings
from agent_sre.tools.client import KubeconfigError

SYSTEM_NAMESPACES = frozenset({"default", "kube-public"})  # and every kube-*
SIM_ENVIRONMENT = re.compile(r"^/envs/[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class ForeignCluster(KubeconfigError):
    """A cluster other than the worker's own was asked for; the message names it and what is configured."""


def namespace_allowed(namespace: str, patterns: tuple[str, ...]) -> bool:
    """Whether `namespace` matches a pattern; the cluster's own namespaces only by exact name."""
    if namespace in SYSTEM_NAMESPACES or namespace.startswith("kube-"):
        return namespace in patterns
    return any(fnmatchcase(namespace, pattern) for pattern in patterns)


def out_of_scope(namespace: str, settings: Settings) -> str | None:
    """Why the agent may not act in `namespace`, or None when it may."""
    if namespace_allowed(namespace, settings.allowed_namespaces):
        return None
    allowed = ", ".join(settings.allowed_namespaces) or "none"
    return f"namespace {namespace!r} is outside the agent's scope (AGENT_SRE_ALLOWED_NAMESPACES: {allowed})"


def worker_cluster(requested: str | None, settings: Settings) -> str | None:
    """The cluster to use for `requested` (None: the worker's default), once it is known to be the worker's own.

    Raises ForeignCluster for any other: a kubeconfig the worker is not configured with, or a server that is not
    its simulator."""
    if not requested or _resolved(requested) in _own_kubeconfigs(settings) or _own_simulator(requested, settings):
        return requested or None
    configured = settings.kubeconfig or f"the simulator at {settings.sim_url}"
    raise ForeignCluster(f"kubeconfig {requested} is not this worker's cluster ({configured}); the cluster an "
                         "incident acts on comes from the worker's configuration (KUBECONFIG), not from its input")


def _own_kubeconfigs(settings: Settings) -> set[str]:
    return {_resolved(str(p)) for p in (settings.kubeconfig, settings.sim_kubeconfig) if p is not None}


def _resolved(path: str) -> str:
    return str(Path(os.path.expanduser(path)).resolve())


def _own_simulator(requested: str, settings: Settings) -> bool:
    """The worker's simulator itself, or one of its environments (`…/envs/NAME`, as simulated episodes use)."""
    base = settings.sim_url
    return requested == base or (requested.startswith(base) and bool(SIM_ENVIRONMENT.match(requested[len(base):])))
