"""Fixtures for the simulator API tests: a served simulator and a small cluster built through the API itself.

The seeded environment has no workload model: objects (and their status) are written over the Kubernetes API,
and the figures the workload model would own (logs, usage) are set directly, so the API layer is tested on its
own. Tests that need the workload model use `workload_available()` and skip with a reason when it is missing.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_sre.kube.times import rfc3339
from agent_sre.simulator import api
from agent_sre.simulator.cluster import Cluster
from agent_sre.simulator.server import SimulatorServer, write_kubeconfig
from agent_sre.simulator.simulator import Simulator

SEEDED_ENV = "seeded"
NS = "shop"


def workload_available() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("agent_sre.simulator.workload", "agent_sre.apps"))


def call(sim: Simulator, method: str, path: str, body: Any = None, content_type: str = "application/json",
         query: dict[str, list[str]] | None = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """One in-process API request; returns (status, decoded JSON or text)."""
    raw = body if isinstance(body, bytes) else (json.dumps(body).encode() if body is not None else b"")
    status, resp_headers, data = api.handle(sim, method, path, query or {},
                                            {"Content-Type": content_type, **(headers or {})}, raw)
    if resp_headers.get("Content-Type", "").startswith("application/json") and data:
        return status, json.loads(data)
    return status, data.decode()


def _ok(result: tuple[int, Any]) -> Any:
    status, doc = result
    assert 200 <= status < 300, doc
    return doc


def _pod(name: str, rs: dict[str, Any], node: str, image: str, template_hash: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "cart", "pod-template-hash": template_hash},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "controller": True,
                                              "name": rs["metadata"]["name"], "uid": rs["metadata"]["uid"]}]},
            "spec": {"nodeName": node, "containers": [{"name": "cart", "image": image,
                                                       "ports": [{"containerPort": 8080}]},
                                                      {"name": "proxy", "image": "envoy:1.30"}]}}


def seed(sim: Simulator, env: str) -> Cluster:
    """Build a small shop: 2 nodes, deployment `cart` at revision 2 (rev 1 kept for undo), a crashing pod,
    a service with endpoints, events, config, a quota, a network policy, logs and usage figures."""
    cluster = sim.add_env(Cluster(env))
    base = f"/envs/{env}"
    now = rfc3339(cluster.clock.now())
    _ok(call(sim, "POST", f"{base}/api/v1/namespaces", {"metadata": {"name": NS}}))
    _ok(call(sim, "POST", f"{base}/api/v1/namespaces", {"metadata": {"name": "default"}}))
    for i, role in ((1, "control-plane"), (2, "worker")):
        _ok(call(sim, "POST", f"{base}/api/v1/nodes", {
            "metadata": {"name": f"node-{i}", "labels": {f"node-role.kubernetes.io/{role}": "",
                                                          "kubernetes.io/hostname": f"node-{i}"}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "addresses": [{"type": "InternalIP", "address": f"10.0.0.{10 + i}"}],
                       "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                       "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                       "nodeInfo": {"kubeletVersion": "v1.32.0", "kubeProxyVersion": "v1.32.0",
                                    "osImage": "Ubuntu 24.04", "kernelVersion": "6.8.0",
                                    "containerRuntimeVersion": "containerd://1.7.20", "architecture": "amd64",
                                    "operatingSystem": "linux", "machineID": f"m{i}", "systemUUID": f"u{i}",
                                    "bootID": f"b{i}"}}}))
    template = {"metadata": {"labels": {"app": "cart"}},
                "spec": {"containers": [{"name": "cart", "image": "shop/cart:1.4.2",
                                         "ports": [{"containerPort": 8080}],
                                         "env": [{"name": "REDIS_ADDR", "value": "cache:6379"}]},
                                        {"name": "proxy", "image": "envoy:1.30"}]}}
    deploy = _ok(call(sim, "POST", f"{base}/apis/apps/v1/namespaces/{NS}/deployments", {
        "metadata": {"name": "cart", "labels": {"app": "cart"},
                     "annotations": {"deployment.kubernetes.io/revision": "2"}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "cart"}}, "template": template}}))
    replica_sets = []
    for revision, image, template_hash in ((1, "shop/cart:1.4.1", "5d8f7"), (2, "shop/cart:1.4.2", "7c9b4")):
        rs_template = json.loads(json.dumps(template))
        rs_template["metadata"]["labels"]["pod-template-hash"] = template_hash
        rs_template["spec"]["containers"][0]["image"] = image
        rs = _ok(call(sim, "POST", f"{base}/apis/apps/v1/namespaces/{NS}/replicasets", {
            "metadata": {"name": f"cart-{template_hash}", "labels": {"app": "cart", "pod-template-hash": template_hash},
                         "annotations": {"deployment.kubernetes.io/revision": str(revision)},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "cart",
                                              "uid": deploy["metadata"]["uid"], "controller": True}]},
            "spec": {"replicas": 0 if revision == 1 else 2,
                     "selector": {"matchLabels": {"app": "cart", "pod-template-hash": template_hash}},
                     "template": rs_template}}))
        replica_sets.append(rs)
    rs = replica_sets[1]
    rs["status"] = {"replicas": 2, "readyReplicas": 1, "availableReplicas": 1, "fullyLabeledReplicas": 2}
    _ok(call(sim, "PUT", f"{base}/apis/apps/v1/namespaces/{NS}/replicasets/{rs['metadata']['name']}/status", rs))
    deploy = _ok(call(sim, "GET", f"{base}/apis/apps/v1/namespaces/{NS}/deployments/cart"))
    deploy["status"] = {"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 1,
                        "availableReplicas": 1, "unavailableReplicas": 1,
                        "conditions": [{"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable",
                                        "message": "Deployment does not have minimum availability."}]}
    _ok(call(sim, "PUT", f"{base}/apis/apps/v1/namespaces/{NS}/deployments/cart/status", deploy))

    healthy, crashing = "cart-7c9b4-aaaaa", "cart-7c9b4-bbbbb"
    for name, node, ip in ((healthy, "node-1", "10.244.1.5"), (crashing, "node-2", "10.244.2.7")):
        pod = _ok(call(sim, "POST", f"{base}/api/v1/namespaces/{NS}/pods",
                       _pod(name, rs, node, "shop/cart:1.4.2", "7c9b4")))
        running = {"running": {"startedAt": now}}
        image = {"image": "shop/cart:1.4.2", "imageID": "sha256:cart142"}
        if name == healthy:
            cart_state: dict[str, Any] = {"name": "cart", "ready": True, "restartCount": 0, "state": running,
                                          **image}
            conditions = [{"type": "Ready", "status": "True"}]
        else:
            cart_state = {"name": "cart", "ready": False, "restartCount": 4, **image,
                          "state": {"waiting": {"reason": "CrashLoopBackOff",
                                                "message": "back-off 1m20s restarting failed container"}},
                          "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": now}}}
            conditions = [{"type": "Ready", "status": "False"}]
        pod["status"] = {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": "10.0.0.11",
                         "conditions": conditions,
                         "containerStatuses": [cart_state, {"name": "proxy", "ready": True, "restartCount": 0,
                                                            "state": running, "image": "envoy:1.30",
                                                            "imageID": "sha256:envoy130"}]}
        _ok(call(sim, "PUT", f"{base}/api/v1/namespaces/{NS}/pods/{name}/status", pod))
        cluster.record_event(pod, "Scheduled", f"Successfully assigned {NS}/{name} to {node}")
    crashing_pod = cluster.must_get("pods", NS, crashing)
    cluster.record_event(crashing_pod, "BackOff", "Back-off restarting failed container cart in pod "
                                                  f"{crashing}_{NS}", type_="Warning", count=4)
    cluster.logs[(NS, healthy, "cart")] = {"current": [f"cart: served request {i}" for i in range(1, 101)],
                                           "previous": []}
    cluster.logs[(NS, crashing, "cart")] = {
        "current": ["cart: starting", "cart: connecting to cache:6379"],
        "previous": ["cart: starting", "cart: connecting to cache:6379",
                     "FATAL: dial tcp cache:6379: connection refused"]}
    cluster.logs[(NS, healthy, "proxy")] = {"current": ["envoy: ready"], "previous": []}

    _ok(call(sim, "POST", f"{base}/api/v1/namespaces/{NS}/services", {
        "metadata": {"name": "cart", "labels": {"app": "cart"}},
        "spec": {"selector": {"app": "cart"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}))
    _ok(call(sim, "POST", f"{base}/api/v1/namespaces/{NS}/endpoints", {
        "metadata": {"name": "cart"},
        "subsets": [{"addresses": [{"ip": "10.244.1.5", "targetRef": {"kind": "Pod", "name": healthy}}],
                     "notReadyAddresses": [{"ip": "10.244.2.7", "targetRef": {"kind": "Pod", "name": crashing}}],
                     "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}]}))
    _ok(call(sim, "POST", f"{base}/api/v1/namespaces/{NS}/configmaps",
             {"metadata": {"name": "cart-config"}, "data": {"LOG_LEVEL": "info", "CACHE_TTL": "30"}}))
    _ok(call(sim, "POST", f"{base}/api/v1/namespaces/{NS}/secrets",
             {"metadata": {"name": "db-credentials"}, "data": {"password": base64.b64encode(b"s3cret").decode()}}))
    _ok(call(sim, "POST", f"{base}/api/v1/namespaces/{NS}/resourcequotas", {
        "metadata": {"name": "compute"}, "spec": {"hard": {"pods": "20", "requests.cpu": "4", "limits.memory": "8Gi"}},
        "status": {"hard": {"pods": "20", "requests.cpu": "4", "limits.memory": "8Gi"},
                   "used": {"pods": "2", "requests.cpu": "500m", "limits.memory": "1Gi"}}}))
    _ok(call(sim, "POST", f"{base}/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies", {
        "metadata": {"name": "allow-frontend"},
        "spec": {"podSelector": {"matchLabels": {"app": "cart"}}, "policyTypes": ["Ingress"],
                 "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "frontend"}}}]}]}}))
    cluster.model["usage"] = {(NS, healthy): {"cart": (120, 96 * 1024 * 1024), "proxy": (5, 20 * 1024 * 1024)},
                              (NS, crashing): {"cart": (3, 12 * 1024 * 1024), "proxy": (4, 18 * 1024 * 1024)}}
    cluster.model["node_usage"] = {"node-1": (900, 2 * 1024 ** 3), "node-2": (350, 1024 ** 3)}
    return cluster


@dataclass
class Served:
    """A simulator served over HTTP, with a seeded environment and a kubeconfig for it."""

    simulator: Simulator
    server: SimulatorServer
    cluster: Cluster
    kubeconfig: Path
    home: Path

    @property
    def env_url(self) -> str:
        return f"{self.server.url}/envs/{self.cluster.name}"

    def kubeconfig_for(self, env: str) -> Path:
        return write_kubeconfig(self.home / f"{env}.kubeconfig", f"{self.server.url}/envs/{env}", f"sim-{env}")

    def kubectl(self, *args: str, check: bool = True,
                kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
        """Run kubectl 1.32 against the simulator (its discovery cache in a private HOME)."""
        result = subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig or self.kubeconfig), *args],
                                capture_output=True, text=True, timeout=60,
                                env={**os.environ, "HOME": str(self.home)})
        if check:
            assert result.returncode == 0, f"kubectl {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
        return result


def serve_seeded(home: Path) -> Iterator[Served]:
    """The body of the session's `served` fixture (tests/conftest.py): kubectl's HOME and the kubeconfig in `home`."""
    simulator = Simulator()
    cluster = seed(simulator, SEEDED_ENV)
    with SimulatorServer(simulator) as server:
        kubeconfig = write_kubeconfig(home / "kubeconfig", f"{server.url}/envs/{SEEDED_ENV}", "sim-seeded")
        yield Served(simulator, server, cluster, kubeconfig, home)
