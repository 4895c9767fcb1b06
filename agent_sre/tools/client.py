"""Kubernetes API clients built from kubeconfigs, one per cluster, shared by every tool call in the process.

Building an `ApiClient` parses the kubeconfig and opens a connection pool, which costs far more than a tool call,
so clients are cached: by the file's path and modification time (a rewritten kubeconfig, say the simulator
restarted on another port, gets a fresh client), or by the simulator URL when no kubeconfig is configured.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import yaml
from kubernetes.client import ApiClient
from kubernetes.config import ConfigException, new_client_from_config, new_client_from_config_dict

from agent_sre.config import get_settings


class KubeconfigError(ValueError):
    """The kubeconfig is missing or cannot be used; the message says which file and why."""


_clients: dict[tuple[str, int], ApiClient] = {}
_lock = threading.Lock()


def simulator_kubeconfig(server_url: str) -> dict[str, object]:
    """A kubeconfig (as a dict) for a plain-HTTP server without auth: the simulator's."""
    return {"apiVersion": "v1", "kind": "Config", "current-context": "simulator",
            "clusters": [{"name": "simulator", "cluster": {"server": server_url}}],
            "users": [{"name": "simulator", "user": {}}],
            "contexts": [{"name": "simulator", "context": {"cluster": "simulator", "user": "simulator"}}]}


def api_client(kubeconfig: Path | str | None = None) -> ApiClient:
    """The cached client for a kubeconfig file, or for a simulator environment's URL (`http://…/envs/E`);
    without either, `KUBECONFIG` from the settings, and without that the embedded simulator's "default"
    environment at `AGENT_SRE_SIM_HOST`/`_PORT`."""
    settings = get_settings()
    if kubeconfig is None or str(kubeconfig) == "":
        kubeconfig = settings.kubeconfig
    if kubeconfig is None or str(kubeconfig).startswith(("http://", "https://")):
        server = str(kubeconfig) if kubeconfig is not None else settings.sim_url
        key = (server, 0)
        with _lock:
            if key not in _clients:
                _clients[key] = new_client_from_config_dict(simulator_kubeconfig(server), persist_config=False)
            return _clients[key]
    path = Path(os.path.expanduser(str(kubeconfig))).resolve()
    try:
        key = (str(path), path.stat().st_mtime_ns)
    except FileNotFoundError:
        raise KubeconfigError(f"kubeconfig {path} does not exist (set KUBECONFIG, or write one for the simulator "
                              f"with `agent-sre sim serve --kubeconfig-out FILE`)") from None
    with _lock:
        client = _clients.get(key)
        if client is None:
            try:
                client = new_client_from_config(config_file=str(path), persist_config=False)
            except (ConfigException, yaml.YAMLError, ValueError, TypeError, KeyError, OSError) as exc:
                raise KubeconfigError(f"kubeconfig {path} is not usable: {exc}") from None
            _clients[key] = client
    return client
