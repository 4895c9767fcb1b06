"""Kubernetes API clients, one per cluster, shared by every tool call in the process.

The cluster is picked as kubectl picks it: a kubeconfig, or a `KUBECONFIG` list of them merged as kubectl merges
them, and a context of it (`AGENT_SRE_KUBE_CONTEXT`, `--context`; else the current one). Without a kubeconfig, the
pod's service account when `AGENT_SRE_KUBE_IN_CLUSTER` says so, and otherwise the embedded simulator: in-cluster
config is never guessed from the mounted token, since a pod running the tests or the dev stack has one too
(docs/deploy.md).

Building an `ApiClient` parses the kubeconfig and opens a connection pool, which costs far more than a tool call,
so clients are cached: by the files' paths and modification times and the context (a rewritten kubeconfig, say
the simulator restarted on another port, gets a fresh client), or by the simulator URL, or once for in-cluster
config (whose token the client itself re-reads as the kubelet rotates it).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Hashable
from pathlib import Path

import yaml
from kubernetes.client import ApiClient, Configuration
from kubernetes.config import ConfigException, new_client_from_config_dict
from kubernetes.config.incluster_config import InClusterConfigLoader
from kubernetes.config.kube_config import KubeConfigMerger

from agent_sre.config import Settings, get_settings

# Where Kubernetes mounts a pod's service-account token and the cluster's CA.
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
KUBECONFIG_ERRORS = (ConfigException, yaml.YAMLError, ValueError, TypeError, KeyError, OSError)


class KubeconfigError(ValueError):
    """The kubeconfig is missing or cannot be used; the message says which file and why."""


_clients: dict[Hashable, ApiClient] = {}
_lock = threading.Lock()


def simulator_kubeconfig(server_url: str) -> dict[str, object]:
    """A kubeconfig (as a dict) for a plain-HTTP server without auth: the simulator's."""
    return {"apiVersion": "v1", "kind": "Config", "current-context": "simulator",
            "clusters": [{"name": "simulator", "cluster": {"server": server_url}}],
            "users": [{"name": "simulator", "user": {}}],
            "contexts": [{"name": "simulator", "context": {"cluster": "simulator", "user": "simulator"}}]}


def api_client(kubeconfig: Path | str | None = None, context: str | None = None,
               settings: Settings | None = None) -> ApiClient:
    """The cached client for a kubeconfig (a path, or a `KUBECONFIG`-style list) and context, or for a simulator
    environment's URL (`http://…/envs/E`, which has no contexts); without either, `KUBECONFIG` and
    `AGENT_SRE_KUBE_CONTEXT` from the settings, then in-cluster config if `AGENT_SRE_KUBE_IN_CLUSTER`, then the
    embedded simulator's "default" environment at `AGENT_SRE_SIM_HOST`/`_PORT`. `settings`: a worker's own
    (default: the environment's)."""
    if str(kubeconfig or "").startswith(("http://", "https://")):
        return _simulator_client(str(kubeconfig))
    settings = settings or get_settings()
    source = str(kubeconfig or settings.kubeconfig or "")
    context = context or settings.kube_context
    if source.startswith(("http://", "https://")):
        return _simulator_client(source)
    if source:
        return _kubeconfig_client(source, context)
    if context:
        raise KubeconfigError(f"context {context!r} was asked for, but there is no kubeconfig to take it from "
                              f"(set KUBECONFIG, or unset AGENT_SRE_KUBE_CONTEXT)")
    if settings.kube_in_cluster:
        return _cached(("in-cluster", str(SERVICE_ACCOUNT_DIR)), _in_cluster_client)
    return _simulator_client(settings.sim_url)


def _cached(key: Hashable, build: Callable[[], ApiClient]) -> ApiClient:
    with _lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = build()
        return client


def _simulator_client(server: str) -> ApiClient:
    return _cached(("url", server), lambda: new_client_from_config_dict(simulator_kubeconfig(server),
                                                                        persist_config=False))


def _kubeconfig_client(source: str, context: str | None) -> ApiClient:
    """The client for the files of `source` that exist (kubectl skips the missing ones of a list), merged."""
    paths = [Path(os.path.expanduser(part)).resolve() for part in source.split(os.pathsep) if part]
    present = [path for path in paths if path.is_file()]
    if not present:
        missing = (f"{paths[0]} does not exist" if len(paths) == 1 else
                   f"list {os.pathsep.join(map(str, paths))}: none of its files exists")
        raise KubeconfigError(f"kubeconfig {missing} (set KUBECONFIG, or write one for the simulator with "
                              f"`agent-sre sim serve --kubeconfig-out FILE`)")
    key = ("kubeconfig", context, *((str(path), path.stat().st_mtime_ns) for path in present))
    return _cached(key, lambda: _merged_client(os.pathsep.join(map(str, present)), context))


def _merged_client(files: str, context: str | None) -> ApiClient:
    try:
        merged = KubeConfigMerger(files)
        client: ApiClient = new_client_from_config_dict(merged.config, persist_config=False,
                                                        context=_chosen_context(files, merged, context))
        return client
    except KubeconfigError:
        raise
    except KUBECONFIG_ERRORS as exc:
        raise KubeconfigError(f"kubeconfig {files} is not usable: {exc}") from None


def _chosen_context(files: str, merged: KubeConfigMerger, context: str | None) -> str:
    """`context`, else the current one as kubectl reads it: "the first file to set a value wins" (the merger lets
    the last file's current-context win). Raises with the known contexts when the chosen one is not among them."""
    contexts = [node["name"] for node in merged.config.value["contexts"]]
    current = next((config["current-context"] for config in merged.config_files.values()
                    if config.get("current-context")), None)
    chosen = context or current
    if chosen is None or chosen not in contexts:
        problem = (f"has no context {context!r}" if context else
                   f"names current-context {current!r}, which it does not define" if current else
                   "sets no current-context (choose one with --context or AGENT_SRE_KUBE_CONTEXT)")
        raise KubeconfigError(f"kubeconfig {files} {problem}; its contexts: {', '.join(contexts) or 'none'}")
    return chosen


def _in_cluster_client() -> ApiClient:
    """The pod's service account: `KUBERNETES_SERVICE_HOST`/`_PORT` and the mounted token and CA."""
    configuration = Configuration()
    loader = InClusterConfigLoader(token_filename=str(SERVICE_ACCOUNT_DIR / "token"),
                                   cert_filename=str(SERVICE_ACCOUNT_DIR / "ca.crt"))
    try:
        loader.load_and_set(configuration)
    except KUBECONFIG_ERRORS as exc:
        raise KubeconfigError(f"AGENT_SRE_KUBE_IN_CLUSTER is set, but this process has no in-cluster config "
                              f"(service account in {SERVICE_ACCOUNT_DIR}): {exc}") from None
    return ApiClient(configuration)
