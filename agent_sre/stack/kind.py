"""The demo apps as plain manifests for a real cluster (`infra/kind/`), rendered from the app catalog (`apps/`)
that the simulator installs too, so the simulated shop and the one deployed on kind cannot drift apart.

Regenerate after changing an app: `.venv/bin/python -m agent_sre.stack.kind shop > infra/kind/shop.yaml`
(tests/test_stack.py fails while the committed file differs).
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

from agent_sre.apps.catalog import get_app
from agent_sre.apps.manifests import deployment, manifests

# The resource names `apps.manifests.manifests` yields -> (apiVersion, kind) for kubectl.
API_KINDS = {
    "namespaces": ("v1", "Namespace"),
    "configmaps": ("v1", "ConfigMap"),
    "secrets": ("v1", "Secret"),
    "resourcequotas": ("v1", "ResourceQuota"),
    "persistentvolumeclaims": ("v1", "PersistentVolumeClaim"),
    "networkpolicies.networking.k8s.io": ("networking.k8s.io/v1", "NetworkPolicy"),
    "services": ("v1", "Service"),
}


def app_manifests(app_name: str, seed: int = 0) -> str:
    """Every object of `app_name` (in its own namespace) as a multi-document YAML, in the order to apply it."""
    app = get_app(app_name)
    documents: list[dict[str, Any]] = []
    for resource, obj in manifests(app, app.name, seed):
        api_version, kind = API_KINDS[resource]
        documents.append({"apiVersion": api_version, "kind": kind, **obj})
    documents += [deployment(app, service, app.name) for service in app.services]
    header = (
        f"# The {app.name} demo app: {app.description}.\n"
        f"# Rendered from agent_sre/apps/ by `python -m agent_sre.stack.kind {app.name}`; do not edit.\n"
        f"# Secrets hold demo values (seed {seed}).\n"
    )
    rendered: str = yaml.safe_dump_all(documents, sort_keys=False)
    return header + rendered


if __name__ == "__main__":
    sys.stdout.write(app_manifests(sys.argv[1] if len(sys.argv) > 1 else "shop"))
