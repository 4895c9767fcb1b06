"""The Kustomize base in infra/k8s renders, every object is valid for its Kubernetes schema, the pods run locked down
and configured by real settings, and the RBAC grant is exactly what the code does to a cluster: derived here from
the tool vocabulary (kube/client.py KINDS), the write allow-lists (tools/guardrails.py) and the few paths the tools
build themselves, so a new tool kind or write that the Role lacks (or a grant no code uses) fails this test.

Offline and deterministic: `kubectl kustomize` needs no server, but `kubectl apply --dry-run=client` does (it maps
kinds to resources by discovery, and the simulator serves no RBAC API), so the schema check is the official
client's own models, which are strict (pydantic, extra fields forbidden): an unknown field (a typo such as
`readOnlyRootFileSystem`), a missing required one or a wrong type fails.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import kubernetes.client
import pytest
import yaml

from agent_sre.config import Settings
from agent_sre.kube.client import KINDS, Kind
from agent_sre.models import tools as m
from agent_sre.tools.guardrails import DELETABLE, PATCHABLE

K8S = Path(__file__).resolve().parent.parent / "infra" / "k8s"
NAMESPACE, MANAGED_NAMESPACE = "agent-sre", "shop"
WORKER_ACCOUNT = "agent-sre-worker"
READ = ("get", "list")
METRICS_GROUP = "metrics.k8s.io"  # Kube.metrics: `top` reads metrics.k8s.io/v1beta1

Grant = tuple[str, str, str]  # (API group, resource, verb), as RBAC rules name them
Obj = dict[str, Any]


@dataclass(frozen=True)
class Grants:
    namespaced: frozenset[Grant]  # the Role, in each namespace the agent acts in
    cluster: frozenset[Grant]  # the ClusterRole


def group_resource(kind: Kind) -> tuple[str, str]:
    """The API group and resource of a kind, read off the path the tools send (`/api/v1/pods`,
    `/apis/apps/v1/deployments`)."""
    parts = kind.path(None, None).strip("/").split("/")
    return ("", parts[2]) if parts[0] == "api" else (parts[1], parts[3])


def required_grants() -> Grants:
    """What the tools and the observer do to a cluster. Reads are get and list on every kind the tools name; the
    namespace object is only read as the incident's own (a Role in that namespace grants it); writes are the
    guardrails' allow-lists; the rest are paths the tools build themselves (see each line)."""
    namespaced: set[Grant] = set()
    cluster: set[Grant] = set()
    for name, kind in KINDS.items():
        group, resource = group_resource(kind)
        target = namespaced if kind.namespaced or resource == "namespaces" else cluster
        verbs = ["get"] if resource == "namespaces" else list(READ)
        verbs += [verb for verb, allowed in (("patch", PATCHABLE), ("delete", DELETABLE)) if name in allowed]
        target.update((group, resource, verb) for verb in verbs)
    for resource in get_args(m.Top.model_fields["kind"].annotation):  # top pods / top nodes
        target = namespaced if KINDS[resource.removesuffix("s")].namespaced else cluster
        target.update((METRICS_GROUP, resource, verb) for verb in READ)
    namespaced.add(("", "pods/log", "get"))  # get_logs: Kube.logs
    cluster.add(("", "pods", "list"))  # describe node: the node's pods in every namespace
    cluster.add(("", "events", "list"))  # describe node/namespace: a cluster-scoped object's events are in default
    return Grants(frozenset(namespaced), frozenset(cluster))


@pytest.fixture(scope="module")
def rendered() -> list[Obj]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    done = subprocess.run([kubectl, "kustomize", str(K8S)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def find(objects: list[Obj], kind: str, name: str) -> Obj:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} rendered"
    return found[0]


def model_name(obj: Obj) -> str:
    """The official client's model class of an object: `apps/v1` `Deployment` is `V1Deployment`."""
    return obj["apiVersion"].rsplit("/", 1)[-1].capitalize() + obj["kind"]


def test_every_object_is_valid_for_its_schema(rendered: list[Obj]) -> None:
    """The client's models are strict: an unknown field, a missing required one or a wrong type raises."""
    for obj in rendered:
        getattr(kubernetes.client, model_name(obj)).model_validate(obj)
    assert {(o["kind"], o["metadata"].get("namespace")) for o in rendered} == {
        ("Namespace", None), ("ServiceAccount", NAMESPACE), ("ConfigMap", NAMESPACE), ("Deployment", NAMESPACE),
        ("Service", NAMESPACE), ("ClusterRole", None), ("ClusterRoleBinding", None),
        ("Role", MANAGED_NAMESPACE), ("RoleBinding", MANAGED_NAMESPACE)}


def containers(deployment: Obj) -> list[Obj]:
    return deployment["spec"]["template"]["spec"]["containers"]


def test_pods_run_locked_down_with_probes_and_resources(rendered: list[Obj]) -> None:
    deployments = [o for o in rendered if o["kind"] == "Deployment"]
    assert {d["metadata"]["name"] for d in deployments} == {"agent-sre-worker", "agent-sre-alerts"}
    for deployment in deployments:
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] > 0
        for container in containers(deployment):
            security = container["securityContext"]
            assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
            assert security["capabilities"]["drop"] == ["ALL"]
            assert {"livenessProbe", "readinessProbe"} <= set(container)
            assert set(container["resources"]) == {"requests", "limits"}
            assert {mount["mountPath"] for mount in container["volumeMounts"]} >= {"/tmp"}
    receiver = find(rendered, "Deployment", "agent-sre-alerts")["spec"]["template"]["spec"]
    assert receiver["automountServiceAccountToken"] is False  # it never calls the Kubernetes API


def secret_refs(deployment: Obj) -> dict[str, tuple[str, str]]:
    return {env["name"]: (env["valueFrom"]["secretKeyRef"]["name"], env["valueFrom"]["secretKeyRef"]["key"])
            for container in containers(deployment) for env in container.get("env") or []
            if "secretKeyRef" in env.get("valueFrom", {})}


def test_settings_come_from_the_configmap_and_credentials_from_secrets(rendered: list[Obj]) -> None:
    prefix = Settings.model_config["env_prefix"]
    settings = {prefix + name.upper() for name in Settings.model_fields}
    config = find(rendered, "ConfigMap", "agent-sre")["data"]
    assert set(config) <= settings, set(config) - settings
    assert config["AGENT_SRE_KUBE_IN_CLUSTER"] == "true"
    Settings(**{k.removeprefix(prefix).lower(): v for k, v in config.items()})  # the values parse
    worker = find(rendered, "Deployment", "agent-sre-worker")
    receiver = find(rendered, "Deployment", "agent-sre-alerts")
    assert set(secret_refs(worker)) == {"AGENT_SRE_S3_ACCESS_KEY", "AGENT_SRE_S3_SECRET_KEY", "AGENT_SRE_PAYLOAD_KEY"}
    assert set(secret_refs(receiver)) == {"AGENT_SRE_ALERTS_TOKEN", "AGENT_SRE_PAYLOAD_KEY"}
    assert set(secret_refs(worker)) | set(secret_refs(receiver)) <= settings
    assert all(c["envFrom"] == [{"configMapRef": {"name": "agent-sre"}}] for d in (worker, receiver)
               for c in containers(d))
    port = {p["name"]: p["containerPort"] for p in containers(receiver)[0]["ports"]}["http"]
    service = find(rendered, "Service", "agent-sre-alerts")["spec"]
    assert port == int(config["AGENT_SRE_ALERTS_PORT"]) == service["ports"][0]["port"]
    assert service["selector"].items() <= receiver["spec"]["template"]["metadata"]["labels"].items()
    metrics = {p["name"]: p["containerPort"] for p in containers(worker)[0]["ports"]}["metrics"]
    assert metrics == int(config["AGENT_SRE_METRICS_PORT"])


def granted(role: Obj) -> frozenset[Grant]:
    """The (group, resource, verb) triples a Role or ClusterRole grants; wildcards and name limits are refused."""
    grants = set()
    for rule in role["rules"]:
        assert set(rule) == {"apiGroups", "resources", "verbs"}, rule  # no resourceNames, no nonResourceURLs
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert "*" not in (group, resource, verb), rule
                    grants.add((group, resource, verb))
    return frozenset(grants)


def test_rbac_grants_exactly_what_the_code_uses(rendered: list[Obj]) -> None:
    required = required_grants()
    role = find(rendered, "Role", "agent-sre-remediate")
    cluster_role = find(rendered, "ClusterRole", "agent-sre-nodes")
    assert granted(role) == required.namespaced, (
        f"missing {sorted(required.namespaced - granted(role))}, extra {sorted(granted(role) - required.namespaced)}")
    assert granted(cluster_role) == required.cluster, (
        f"missing {sorted(required.cluster - granted(cluster_role))}, "
        f"extra {sorted(granted(cluster_role) - required.cluster)}")
    worker = find(rendered, "Deployment", "agent-sre-worker")["spec"]["template"]["spec"]
    assert worker["serviceAccountName"] == WORKER_ACCOUNT
    subject = [{"kind": "ServiceAccount", "name": WORKER_ACCOUNT, "namespace": NAMESPACE}]
    for binding, role_kind, name in (("RoleBinding", "Role", "agent-sre-remediate"),
                                     ("ClusterRoleBinding", "ClusterRole", "agent-sre-nodes")):
        bound = find(rendered, binding, name)
        assert bound["subjects"] == subject
        assert bound["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": name}
