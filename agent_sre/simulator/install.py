"""Installing a demo app into a simulated cluster, fast.

Installing builds the whole namespace once per (app, namespace, seed) - objects, rollout history, settled pod
states and benign noise - and keeps it; every further install of the same key shares its objects (they are never
changed in place) and forks the controllers' memory, which is what lets thousands of episodes start per
minute.
"""

from __future__ import annotations

import pickle
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any

from agent_sre.apps.catalog import APPS, NODE_ALLOCATABLE_CPU, NODES, AppSpec, get_app
from agent_sre.apps.manifests import deployment, manifests
from agent_sre.kube.times import rfc3339
from agent_sre.simulator import admission, noise, workload
from agent_sre.simulator.cluster import Cluster, Obj, SimClock
from agent_sre.simulator.controllers.state import Index, WorkloadState, stable_uid

# Before the epoch an environment's clock starts from (SIM_EPOCH, or the wall clock's present): the apps' first
# release, a week before; the current one, 2 days before; the built namespace is captured 5 minutes before.
FIRST_DEPLOY_AGO, CURRENT_RELEASE_AGO, TEMPLATE_AGO = 7 * 86400, 2 * 86400, 300
TEMPLATE_CACHE_SIZE = 256
_NS = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass
class AppInstance:
    """An installed app, as the workload model needs to know it."""

    app: str
    namespace: str
    seed: int
    passwords: dict[str, str]  # database service -> the password its data directory was initialised with

    @property
    def spec(self) -> AppSpec:
        return APPS[self.app]


def _node(name: str, zone: str, extra: dict[str, str], index: int, epoch: float) -> Obj:
    first_deploy_at = epoch - FIRST_DEPLOY_AGO
    return {
        "metadata": {"name": name, "uid": stable_uid("node", name), "labels": {
            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
            "node.kubernetes.io/instance-type": "m6i.xlarge", "topology.kubernetes.io/zone": zone,
            "node-role.kubernetes.io/worker": "", **extra}},
        "spec": {"podCIDR": f"10.244.{index}.0/24", "providerID": f"aws:///{zone}/i-0{index}4f2c9a1b7d3e5f{index}"},
        "status": {
            "capacity": {"cpu": "4", "memory": "16265540Ki", "pods": "110", "ephemeral-storage": "104845292Ki"},
            "allocatable": {"cpu": NODE_ALLOCATABLE_CPU, "memory": "15114564Ki", "pods": "110",
                            "ephemeral-storage": "96625420693"},
            "conditions": [
                {"type": t, "status": "False", "reason": r, "message": m,
                 "lastHeartbeatTime": rfc3339(epoch), "lastTransitionTime": rfc3339(first_deploy_at - 86400)}
                for t, r, m in (("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory "
                                 "available"),
                                ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                                ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"))
            ] + [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                  "message": "kubelet is posting ready status", "lastHeartbeatTime": rfc3339(epoch),
                  "lastTransitionTime": rfc3339(first_deploy_at - 86400)}],
            "addresses": [{"type": "InternalIP", "address": f"10.0.1.{10 + index}"},
                          {"type": "Hostname", "address": name}],
            "nodeInfo": {"machineID": stable_uid("machine", name).replace("-", ""),
                         "systemUUID": stable_uid("system", name).upper(),
                         "bootID": stable_uid("boot", name),
                         "kubeletVersion": "v1.32.0", "kubeProxyVersion": "v1.32.0",
                         "containerRuntimeVersion": "containerd://1.7.22", "osImage": "Ubuntu 22.04.5 LTS",
                         "kernelVersion": "6.8.0-1019-aws", "architecture": "amd64", "operatingSystem": "linux"},
        },
    }


def _create(cluster: Cluster, resource: str, obj: Obj, *uid_parts: object) -> Obj:
    """Create as the API would (defaulting and validation), with a uid derived from the install's identity."""
    admission.apply_defaults(cluster, resource, obj)
    admission.validate(resource, obj)
    obj["metadata"].setdefault("uid", stable_uid(*uid_parts, resource, obj["metadata"]["name"]))
    return cluster.create(resource, obj)


def _settle(cluster: Cluster, until: float) -> None:
    cluster.clock.advance(until - cluster.clock.now())
    cluster.sync()


def _build(app: AppSpec, namespace: str, seed: int, epoch: float) -> _Template:
    """The namespace as it looks 5 minutes before the simulated `epoch`."""
    first_deploy_at, current_release_at = epoch - FIRST_DEPLOY_AGO, epoch - CURRENT_RELEASE_AGO
    cluster = Cluster("template", clock=SimClock(speed=0.0, start=first_deploy_at - 3600))
    workload.attach(cluster)
    for name in ("default", "kube-system", "kube-public", "kube-node-lease"):
        _create(cluster, "namespaces", {"metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}}})
    for index, (name, zone, extra) in enumerate(NODES, start=1):
        cluster.create("nodes", _node(name, zone, extra, index, epoch))
    for resource, obj in manifests(app, namespace, seed):
        _create(cluster, resource, obj, app.name, namespace, seed)
    instance = AppInstance(app.name, namespace, seed, {db: app.password(seed, db) for db in app.databases})
    cluster.model.setdefault("apps", {})[namespace] = instance
    _settle(cluster, first_deploy_at)
    for svc in app.services:  # the previous release first, so every deployment has a rollout history
        _create(cluster, "deployments.apps", deployment(app, svc, namespace, svc.previous_tag), app.name, namespace,
                seed)
    _settle(cluster, first_deploy_at + 600)
    _settle(cluster, current_release_at)
    for svc in app.services:
        current = cluster.snapshot("deployments.apps", namespace, svc.name)
        assert current is not None
        current["spec"]["template"]["spec"]["containers"][0]["image"] = svc.image
        cluster.replace("deployments.apps", current)
    for step in (60, 600, 3600):
        _settle(cluster, current_release_at + step)
    _settle(cluster, epoch - TEMPLATE_AGO - 3600)
    noise.add(cluster, app, namespace, seed, epoch)
    _settle(cluster, epoch - TEMPLATE_AGO)
    objects, logs = pickle.loads(pickle.dumps((cluster.objects, cluster.logs), protocol=pickle.HIGHEST_PROTOCOL))
    highest = max(int(o["metadata"].get("resourceVersion", 0)) for items in objects.values() for o in items.values())
    return _Template(objects, logs, highest, workload.export(cluster, namespace).fork(), instance,
                     Index.of(objects))


@dataclass(frozen=True)
class _Template:
    """A built namespace. Its objects and logs are shared by every install of it: stored objects are never changed
    in place (a write stores a new object, see `Cluster.replace`), so an install is a copy of the indexes, not of
    the objects. The controllers' memory and the app instance change in place: each install forks its own."""

    objects: dict[str, dict[tuple[str, str], Obj]]
    logs: dict[tuple[str, str, str], Any]
    highest: int  # the highest resourceVersion among the objects
    state: WorkloadState
    instance: AppInstance
    index: Index  # of its ReplicaSets and pods: an install into an empty cluster forks it


_templates: OrderedDict[tuple[str, str, int, float], _Template] = OrderedDict()
_templates_lock = threading.Lock()


def _template(app: AppSpec, namespace: str, seed: int, epoch: float) -> _Template:
    key = (app.name, namespace, seed, epoch)
    with _templates_lock:
        blob = _templates.get(key)
        if blob is not None:
            _templates.move_to_end(key)
            return blob
    blob = _build(app, namespace, seed, epoch)
    with _templates_lock:
        _templates[key] = blob
        while len(_templates) > TEMPLATE_CACHE_SIZE:
            _templates.popitem(last=False)
    return blob


def install(cluster: Cluster, app: str, namespace: str | None = None, seed: int = 0) -> str:
    """Install `app` into `cluster` (creating the namespace, and the nodes if absent); returns the namespace. The
    app's history (releases, restarts, events) is dated relative to the cluster's clock start."""
    spec = get_app(app)
    ns = namespace or spec.name
    if not _NS.match(ns):
        raise ValueError(f"invalid namespace {ns!r}: use lowercase letters, digits and '-' (at most 63 characters)")
    if cluster.get("namespaces", "", ns) is not None:
        raise ValueError(f'namespace "{ns}" already exists in cluster {cluster.name!r}; pick another namespace')
    workload.attach(cluster)
    template = _template(spec, ns, seed, cluster.clock.start)
    state, instance = template.state.fork(), replace(template.instance, passwords=dict(template.instance.passwords))
    empty = not any(cluster.objects.values())
    for resource, items in template.objects.items():
        bucket = cluster.objects.setdefault(resource, {})
        if not bucket:
            bucket.update(items)
            continue
        for key, obj in items.items():
            if key not in bucket:  # shared cluster-scoped objects (nodes, system namespaces) are kept as they are
                bucket[key] = obj
    cluster.continue_versions_after(template.highest)
    if cluster.logs:
        for container, lines in template.logs.items():
            cluster.logs.setdefault(container, lines)
    else:
        cluster.logs.update(template.logs)
    cluster.model.setdefault("apps", {})[ns] = instance
    cluster.revision += 1
    cluster.written = None  # stored in bulk: the next pass after a write looks at everything
    workload.adopt(cluster, state, settled=empty, index=template.index)
    return ns
