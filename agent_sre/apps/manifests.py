"""The demo apps' Kubernetes manifests, rendered from the catalog: what the simulator installs and what
`stack/kind` applies to a real cluster, from one definition."""

from __future__ import annotations

import base64
import copy

from agent_sre.apps.catalog import PART_OF, PULL_SECRET, AppSpec, Obj, Ref, ServiceSpec, labels
from agent_sre.apps.images import ACME, DOCKER_CONFIG_JSON, DOCKER_CONFIG_KEY, docker_config

DATA_VOLUME = "data"  # the pod volume a data store's claim is mounted from
STORAGE_CLASS = "standard"
DATA_SIZE = "10Gi"


def _env_entry(name: str, value: str | Ref) -> Obj:
    if isinstance(value, str):
        return {"name": name, "value": value}
    ref_kind = "secretKeyRef" if value.kind == "secret" else "configMapKeyRef"
    return {"name": name, "valueFrom": {ref_kind: {"name": value.name, "key": value.key}}}


def _probe(svc: ServiceSpec, readiness: bool) -> Obj:
    if svc.probe == "http":
        probe: Obj = {"httpGet": {"path": "/ready" if readiness else "/healthz", "port": svc.port, "scheme": "HTTP"}}
    elif svc.probe == "tcp":
        probe = {"tcpSocket": {"port": svc.port}}
    else:
        probe = {"exec": {"command": ["pg_isready", "-U", svc.literal_env().get("POSTGRES_USER", "postgres")]}}
    delay = 5 if readiness else max(10, int(svc.software.startup_s) + 20)
    probe.update(initialDelaySeconds=delay, periodSeconds=10, timeoutSeconds=1, successThreshold=1,
                 failureThreshold=3)
    return probe


def container_spec(svc: ServiceSpec, tag: str | None = None) -> Obj:
    container: Obj = {
        "name": svc.container, "image": f"{svc.repo}:{tag or svc.tag}",
        "ports": [{"name": "http" if svc.probe == "http" else svc.name, "containerPort": svc.port}],
        "env": [_env_entry(k, v) for k, v in svc.env],
        "resources": {"requests": {"cpu": svc.cpu, "memory": svc.memory}, "limits": {"memory": svc.memory_limit}},
        "readinessProbe": _probe(svc, True),
        "livenessProbe": _probe(svc, False),
    }
    if svc.command:
        container["command"] = list(svc.command)
    if svc.args:
        container["args"] = list(svc.args)
    if svc.data_dir:
        container["volumeMounts"] = [{"name": DATA_VOLUME, "mountPath": svc.data_dir}]
    if svc.private:  # every start pulls, so a node's copy never stands in for credentials
        container["imagePullPolicy"] = "Always"
    return container


def deployment(app: AppSpec, svc: ServiceSpec, namespace: str, tag: str | None = None) -> Obj:
    pod_spec: Obj = {"containers": [container_spec(svc, tag)], "terminationGracePeriodSeconds": 30}
    if svc.node_selector:
        pod_spec["nodeSelector"] = dict(svc.node_selector)
    if svc.claim:
        pod_spec["volumes"] = [{"name": DATA_VOLUME, "persistentVolumeClaim": {"claimName": svc.claim}}]
    if svc.private:
        pod_spec["imagePullSecrets"] = [{"name": PULL_SECRET}]
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": svc.name, "namespace": namespace, "labels": labels(app, svc)},
            "spec": {"replicas": svc.replicas, "selector": {"matchLabels": {"app": svc.name}},
                     "strategy": svc.strategy(), "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600,
                     "template": {"metadata": {"labels": labels(app, svc)}, "spec": pod_spec}}}


def claim(app: AppSpec, svc: ServiceSpec, namespace: str) -> Obj:
    """A data store's PersistentVolumeClaim, provisioned by the cluster's default storage class (kind's and the
    simulator's `standard`), which binds it at once."""
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": svc.claim, "namespace": namespace, "labels": labels(app, svc)},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": STORAGE_CLASS,
                     "resources": {"requests": {"storage": DATA_SIZE}}}}


def pull_secret(name: str, namespace: str, user: str, token: str) -> Obj:
    """Credentials for the company registry, as `kubectl create secret docker-registry` makes them."""
    config = docker_config(ACME, user, token)
    return {"metadata": {"name": name, "namespace": namespace}, "type": DOCKER_CONFIG_JSON,
            "data": {DOCKER_CONFIG_KEY: base64.b64encode(config.encode()).decode()}}


def service(app: AppSpec, svc: ServiceSpec, namespace: str) -> Obj:
    port_name = "http" if svc.probe == "http" else svc.name
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": svc.name, "namespace": namespace, "labels": labels(app, svc)},
            "spec": {"selector": {"app": svc.name}, "type": "ClusterIP",
                     "ports": [{"name": port_name, "port": svc.port, "targetPort": svc.port, "protocol": "TCP"}]}}


def manifests(app: AppSpec, namespace: str, seed: int) -> list[tuple[str, Obj]]:
    """Everything but the workloads, as (resource, object) in creation order. Also what `infra/kind` applies."""
    out: list[tuple[str, Obj]] = [("namespaces", {"metadata": {"name": namespace, "labels": {
        "kubernetes.io/metadata.name": namespace, PART_OF: app.name}}})]
    for name, data in app.configmaps.items():
        out.append(("configmaps", {"metadata": {"name": name, "namespace": namespace}, "data": dict(data)}))
    for name, data in app.secret_values(seed).items():
        out.append(("secrets", {"metadata": {"name": name, "namespace": namespace}, "type": "Opaque",
                                "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}))
    out.append(("secrets", pull_secret(PULL_SECRET, namespace, *app.registry_login(seed))))
    out.append(("resourcequotas", {"metadata": {"name": "compute-resources", "namespace": namespace},
                                   "spec": {"hard": dict(app.quota)}}))
    for policy in app.network_policies:
        obj = copy.deepcopy(policy)
        obj["metadata"]["namespace"] = namespace
        out.append(("networkpolicies.networking.k8s.io", obj))
    for svc in app.services:
        if svc.claim:
            out.append(("persistentvolumeclaims", claim(app, svc, namespace)))
        out.append(("services", service(app, svc, namespace)))
    return out
