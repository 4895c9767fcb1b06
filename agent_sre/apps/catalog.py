"""The demo apps: services, their dependency graph, configuration, secrets, and how to install them fast.

Two apps with realistic topologies: `shop` (an online store) and `bank` (online banking). Each service runs an
image from `images.py`; its manifest here wires the environment that image needs, with some values from secrets
and config maps (the database password must match the one the database was initialised with).

Installing builds the whole namespace once per (app, namespace, seed) - objects, rollout history, settled pod
states and benign noise - and keeps it; every further install of the same key shares its objects (they are never
changed in place) and forks the controllers' memory, which is what lets thousands of episodes start per
minute.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import pickle
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from agent_sre.simulator import admission, workload
from agent_sre.simulator.cluster import SIM_EPOCH, Cluster, Obj, SimClock, rfc3339
from agent_sre.simulator.images import ACME, REGISTRY
from agent_sre.simulator.software import RunContext, Software

FIRST_DEPLOY_AT = SIM_EPOCH - 7 * 86400  # the apps' first release; the current one went out 2 days ago
CURRENT_RELEASE_AT = SIM_EPOCH - 2 * 86400
TEMPLATE_AT = SIM_EPOCH - 300
TEMPLATE_CACHE_SIZE = 256
_NS = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
PART_OF = "app.kubernetes.io/part-of"


@dataclass(frozen=True)
class Ref:
    """An environment value taken from a secret or config map key."""

    kind: Literal["secret", "configmap"]
    name: str
    key: str


@dataclass(frozen=True)
class Edge:
    """A call from one service to another: how many calls per incoming request, and whether a failure of the
    callee fails the caller's request (critical) or only degrades it."""

    callee: str
    calls: float
    critical: bool = True


@dataclass(frozen=True)
class ServiceSpec:
    name: str
    repo: str
    tag: str
    previous_tag: str
    replicas: int
    port: int
    env: tuple[tuple[str, str | Ref], ...]
    cpu: str
    memory: str
    memory_limit: str
    probe: Literal["http", "tcp", "exec"] = "http"
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    deps: tuple[Edge, ...] = ()
    entry_rps: float = 0.0
    node_selector: tuple[tuple[str, str], ...] = ()
    # How a rollout replaces the pods: Recreate, or RollingUpdate's (maxSurge, maxUnavailable) - the apiserver's
    # default 25%/25% unless the service has a reason to differ (a data store recreates: one pod owns its volume).
    rollout: Literal["Recreate"] | tuple[int | str, int | str] = ("25%", "25%")
    tier: str = "backend"
    feature: str = ""  # how a user names what this service does, for symptom sentences

    @property
    def software(self) -> Software:
        return REGISTRY[self.repo]

    @property
    def image(self) -> str:
        return f"{self.repo}:{self.tag}"

    @property
    def container(self) -> str:
        return self.name

    def strategy(self) -> Obj:
        if self.rollout == "Recreate":
            return {"type": "Recreate"}
        surge, unavailable = self.rollout
        return {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}}

    def literal_env(self) -> dict[str, str]:
        return {k: v for k, v in self.env if isinstance(v, str)}

    def refs(self) -> dict[str, Ref]:
        return {k: v for k, v in self.env if isinstance(v, Ref)}


@dataclass(frozen=True)
class AppSpec:
    name: str
    services: tuple[ServiceSpec, ...]
    configmaps: dict[str, dict[str, str]]
    secret_keys: dict[str, dict[str, str]]  # secret -> key -> how its value is made ("token:N", "pw:DB", literal)
    databases: dict[str, tuple[str, str]]  # database service -> (secret, key) holding its initial password
    quota: dict[str, str]
    network_policies: tuple[Obj, ...] = ()
    description: str = ""  # one line for humans (the kind manifests' header)
    _by_name: dict[str, ServiceSpec] = field(default_factory=dict, compare=False, repr=False)
    _callers: dict[str, list[ServiceSpec]] = field(default_factory=dict, compare=False, repr=False)
    _order: list[ServiceSpec] = field(default_factory=list, compare=False, repr=False)
    _labels: dict[str, dict[str, str]] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._by_name.update({s.name: s for s in self.services})
        for s in self.services:
            self._callers[s.name] = [c for c in self.services if any(e.callee == s.name for e in c.deps)]
        done: dict[str, ServiceSpec] = {}

        def visit(s: ServiceSpec) -> None:
            if s.name in done:
                return
            for e in s.deps:
                visit(self.service(e.callee))
            done[s.name] = s

        for s in self.services:
            visit(s)
        self._order.extend(done.values())

    def service(self, name: str) -> ServiceSpec:
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"app {self.name!r} has no service {name!r} (services: "
                           f"{', '.join(s.name for s in self.services)})") from None

    def has(self, name: str) -> bool:
        return name in self._by_name

    def callers(self, name: str) -> list[ServiceSpec]:
        return list(self._callers.get(name, ()))

    def calls_to(self, name: str) -> list[tuple[ServiceSpec, Edge]]:
        """Each caller of `name` with its edge to it."""
        return [(c, next(e for e in c.deps if e.callee == name)) for c in self._callers.get(name, ())]

    def service_labels(self) -> dict[str, dict[str, str]]:
        """Every service's pod labels (shared: do not change them)."""
        if not self._labels:
            self._labels.update({s.name: labels(self, s) for s in self.services})
        return self._labels

    def entry(self) -> ServiceSpec:
        return next(s for s in self.services if s.entry_rps > 0)

    def topological(self) -> list[ServiceSpec]:
        """Callees before callers, so errors can be folded up the graph in one sweep."""
        return list(self._order)

    def secret_values(self, seed: int) -> dict[str, dict[str, str]]:
        """Every secret's values for this seed: passwords and keys differ per seed, so none can be memorised."""
        out: dict[str, dict[str, str]] = {}
        for secret, keys in self.secret_keys.items():
            out[secret] = {k: _secret_value(self.name, seed, how) for k, how in keys.items()}
        return out

    def password(self, seed: int, database: str) -> str:
        secret, key = self.databases[database]
        return self.secret_values(seed)[secret][key]


def _secret_value(app: str, seed: int, how: str) -> str:
    kind, _, arg = how.partition(":")
    if kind not in ("token", "pw"):
        return how
    digest = hashlib.blake2b(f"{app}/{seed}/{how}".encode(), digest_size=32).hexdigest()
    alphabet = "abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"
    n = int(digest, 16)
    chars = []
    for _ in range(int(arg) if kind == "token" else 20):
        n, r = divmod(n, len(alphabet))
        chars.append(alphabet[r])
    return "".join(chars)


def _db_env(secret: str, user: str, name: str, host: str = "postgres") -> tuple[tuple[str, str | Ref], ...]:
    return (("DB_HOST", host), ("DB_PORT", "5432"), ("DB_USER", user), ("DB_NAME", name),
            ("DB_PASSWORD", Ref("secret", secret, "password")))


def _svc(name: str, repo: str, tags: tuple[str, str], replicas: int, **kw: Any) -> ServiceSpec:
    return ServiceSpec(name=name, repo=repo, previous_tag=tags[0], tag=tags[1], replicas=replicas, **kw)


SHOP = AppSpec(
    name="shop",
    description="online store: frontend, cart, checkout, payment, catalog, recommendation, redis, postgres",
    services=(
        _svc("frontend", f"{ACME}/shop/frontend", ("1.9.0", "1.9.1"), 2, port=8080, tier="web",
             command=("node",), args=("server.js",), cpu="100m", memory="192Mi", memory_limit="256Mi",
             env=(("PORT", "8080"), ("CATALOG_URL", "http://catalog:8080"), ("CART_URL", "http://cart:8080"),
                  ("CHECKOUT_URL", "http://checkout:8080"), ("RECOMMENDATION_URL", "http://recommendation:8080"),
                  ("SESSION_SECRET", Ref("secret", "frontend-session", "secret")),
                  ("LOG_LEVEL", Ref("configmap", "shop-config", "LOG_LEVEL"))),
             deps=(Edge("catalog", 1.0), Edge("cart", 0.4),
                   Edge("recommendation", 0.5, critical=False),
                   Edge("checkout", 0.05)),
             entry_rps=120.0, feature="the shop website"),
        _svc("cart", f"{ACME}/shop/cart", ("2.4.0", "2.4.1"), 1, port=8080,
             command=("/app/cart",), args=("serve",), cpu="50m", memory="128Mi", memory_limit="256Mi",
             env=(("PORT", "8080"), ("REDIS_ADDR", "redis:6379"),
                  ("CART_TTL_HOURS", Ref("configmap", "shop-config", "CART_TTL_HOURS")),
                  ("LOG_LEVEL", Ref("configmap", "shop-config", "LOG_LEVEL"))),
             deps=(Edge("redis", 1.5),), feature="adding items to the cart"),
        _svc("checkout", f"{ACME}/shop/checkout", ("3.2.0", "3.2.1"), 1, port=8080,
             command=("/app/checkout",), args=("serve",), cpu="100m", memory="128Mi", memory_limit="256Mi",
             env=(("PORT", "8080"), ("CART_URL", "http://cart:8080"), ("PAYMENT_URL", "http://payment:8080"),
                  ("CATALOG_URL", "http://catalog:8080"), *_db_env("shop-db-credentials", "shop", "orders"),
                  ("LOG_LEVEL", Ref("configmap", "shop-config", "LOG_LEVEL"))),
             deps=(Edge("cart", 1.0), Edge("payment", 1.0),
                   Edge("catalog", 1.0), Edge("postgres", 2.0)),
             feature="checking out"),
        _svc("payment", f"{ACME}/shop/payment", ("5.0.3", "5.1.0"), 1, port=8080,
             command=("java", "-jar", "/app/payment.jar"), cpu="250m", memory="512Mi", memory_limit="768Mi",
             env=(("PORT", "8080"), ("PSP_API_KEY", Ref("secret", "payment-psp", "api-key")), ("PSP_MODE", "live")),
             node_selector=(("workload-class", "pci"),), feature="paying for an order",
             rollout="Recreate"),  # one PSP session per merchant key: two payment pods must never overlap
        _svc("catalog", f"{ACME}/shop/catalog", ("1.12.1", "1.13.0"), 2, port=8080,
             command=("/app/catalog",), args=("serve",), cpu="100m", memory="192Mi", memory_limit="256Mi",
             env=(("PORT", "8080"), *_db_env("shop-db-credentials", "shop", "catalog"),
                  ("CACHE_TTL_SECONDS", Ref("configmap", "shop-config", "CACHE_TTL_SECONDS")),
                  ("LOG_LEVEL", Ref("configmap", "shop-config", "LOG_LEVEL"))),
             deps=(Edge("postgres", 0.3),), feature="product pages",
             rollout=(0, 1)),  # its two pods use the catalog database's whole connection budget: no surge pod
        _svc("recommendation", f"{ACME}/shop/recommendation", ("0.10.0", "0.10.1"), 1, port=8080,
             command=("python", "-m", "recommendation"), cpu="200m", memory="512Mi", memory_limit="640Mi",
             env=(("PORT", "8080"), ("CATALOG_URL", "http://catalog:8080"),
                  ("WORKERS", Ref("configmap", "shop-config", "RECS_WORKERS"))),
             deps=(Edge("catalog", 0.2, critical=False),),
             feature="the 'you may also like' suggestions",
             rollout=(0, 1)),  # the model fills the pod's memory request: no room reserved for a surge pod
        _svc("redis", "docker.io/library/redis", ("7.2.4", "7.2.5"), 1, port=6379, probe="tcp", tier="data",
             args=("--appendonly", "no"), cpu="50m", memory="128Mi", memory_limit="256Mi", env=(),
             rollout="Recreate", feature="the shopping cart"),
        _svc("postgres", "docker.io/library/postgres", ("16.2", "16.3"), 1, port=5432, probe="exec", tier="data",
             cpu="250m", memory="512Mi", memory_limit="1Gi",
             env=(("POSTGRES_USER", "shop"), ("POSTGRES_PASSWORD", Ref("secret", "postgres-credentials", "password")),
                  ("PGDATA", "/var/lib/postgresql/data/pgdata")),
             node_selector=(("storage-tier", "ssd"),), rollout="Recreate",
             feature="orders and product pages"),
    ),
    configmaps={"shop-config": {"LOG_LEVEL": "info", "CART_TTL_HOURS": "72", "CACHE_TTL_SECONDS": "300",
                                "RECS_WORKERS": "2"}},
    secret_keys={"postgres-credentials": {"username": "shop", "password": "pw:postgres"},
                 "shop-db-credentials": {"username": "shop", "password": "pw:postgres"},
                 "payment-psp": {"api-key": "token:32"},
                 "frontend-session": {"secret": "token:24"}},
    databases={"postgres": ("postgres-credentials", "password")},
    quota={"pods": "30", "requests.cpu": "10", "requests.memory": "8Gi", "limits.memory": "12Gi"},
    network_policies=({
        "metadata": {"name": "postgres-ingress"},
        "spec": {"podSelector": {"matchLabels": {"app": "postgres"}}, "policyTypes": ["Ingress"],
                 "ingress": [{"from": [{"podSelector": {"matchExpressions": [
                     {"key": "app", "operator": "In", "values": ["catalog", "checkout", "db-backup"]}]}}],
                     "ports": [{"port": 5432, "protocol": "TCP"}]}]},
    },),
)

BANK = AppSpec(
    name="bank",
    description="online banking: web, auth, accounts, ledger, notifications, db",
    services=(
        _svc("web", f"{ACME}/bank/web", ("4.3.0", "4.3.1"), 2, port=8080, tier="web",
             command=("node",), args=("server.js",), cpu="100m", memory="192Mi", memory_limit="256Mi",
             env=(("PORT", "8080"), ("AUTH_URL", "http://auth:8080"), ("ACCOUNTS_URL", "http://accounts:8080"),
                  ("LOG_LEVEL", Ref("configmap", "bank-config", "LOG_LEVEL"))),
             deps=(Edge("auth", 1.0), Edge("accounts", 0.6)),
             entry_rps=80.0, feature="the online banking site"),
        _svc("auth", f"{ACME}/bank/auth", ("2.0.1", "2.1.0"), 2, port=8080,
             command=("/app/auth",), args=("serve",), cpu="50m", memory="96Mi", memory_limit="192Mi",
             env=(("PORT", "8080"), *_db_env("bank-db-credentials", "bank", "auth", host="db"),
                  ("JWT_SIGNING_KEY", Ref("secret", "auth-jwt", "signing-key")),
                  ("TOKEN_TTL_MINUTES", Ref("configmap", "bank-config", "TOKEN_TTL_MINUTES"))),
             deps=(Edge("db", 0.3),), feature="logging in",
             rollout=("25%", "50%")),  # stateless and quick to start: rolls half the pods at a time
        _svc("accounts", f"{ACME}/bank/accounts", ("1.8.0", "1.8.2"), 1, port=8080,
             command=("/app/accounts",), args=("serve",), cpu="100m", memory="128Mi", memory_limit="256Mi",
             env=(("PORT", "8080"), ("LEDGER_URL", "http://ledger:8080"), ("AUTH_URL", "http://auth:8080"),
                  *_db_env("bank-db-credentials", "bank", "accounts", host="db")),
             deps=(Edge("ledger", 0.5), Edge("auth", 0.1),
                   Edge("db", 1.0)), feature="the account overview"),
        _svc("ledger", f"{ACME}/bank/ledger", ("3.4.0", "3.5.1"), 1, port=8080,
             command=("java", "-jar", "/app/ledger.jar"), cpu="250m", memory="640Mi", memory_limit="896Mi",
             env=(("PORT", "8080"), *_db_env("bank-db-credentials", "bank", "ledger", host="db"),
                  ("NOTIFICATIONS_URL", "http://notifications:8080"),
                  ("LEDGER_BATCH_SIZE", Ref("configmap", "bank-config", "LEDGER_BATCH_SIZE"))),
             deps=(Edge("db", 2.0),
                   Edge("notifications", 0.5, critical=False)),
             node_selector=(("workload-class", "pci"),), feature="money transfers",
             rollout="Recreate"),  # the ledger has a single writer: old and new pods must never overlap
        _svc("notifications", f"{ACME}/bank/notifications", ("1.1.0", "1.2.0"), 1, port=8080,
             command=("python", "-m", "notifications"), cpu="50m", memory="128Mi", memory_limit="192Mi",
             env=(("PORT", "8080"), ("NOTIFY_CHANNEL", Ref("configmap", "bank-config", "NOTIFY_CHANNEL")),
                  ("WORKERS", "2")), feature="transfer confirmation e-mails",
             rollout=(0, 1)),  # a queue consumer that must not send an e-mail twice: one instance at a time
        _svc("db", "docker.io/library/postgres", ("16.2", "16.3"), 1, port=5432, probe="exec", tier="data",
             cpu="250m", memory="512Mi", memory_limit="1Gi",
             env=(("POSTGRES_USER", "bank"), ("POSTGRES_PASSWORD", Ref("secret", "db-credentials", "password")),
                  ("PGDATA", "/var/lib/postgresql/data/pgdata")),
             node_selector=(("storage-tier", "ssd"),), rollout="Recreate",
             feature="everything that touches account data"),
    ),
    configmaps={"bank-config": {"LOG_LEVEL": "info", "TOKEN_TTL_MINUTES": "30", "LEDGER_BATCH_SIZE": "100",
                                "NOTIFY_CHANNEL": "email"}},
    secret_keys={"db-credentials": {"username": "bank", "password": "pw:db"},
                 "bank-db-credentials": {"username": "bank", "password": "pw:db"},
                 "auth-jwt": {"signing-key": "token:48"}},
    databases={"db": ("db-credentials", "password")},
    quota={"pods": "24", "requests.cpu": "8", "requests.memory": "6Gi", "limits.memory": "10Gi"},
    network_policies=({
        "metadata": {"name": "db-ingress"},
        "spec": {"podSelector": {"matchLabels": {"app": "db"}}, "policyTypes": ["Ingress"],
                 "ingress": [{"from": [{"podSelector": {"matchExpressions": [
                     {"key": "app", "operator": "In", "values": ["auth", "accounts", "ledger"]}]}}],
                     "ports": [{"port": 5432, "protocol": "TCP"}]}]},
    },),
)

APPS: dict[str, AppSpec] = {a.name: a for a in (SHOP, BANK)}

NODE_ALLOCATABLE_CPU = "3800m"
NODES: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("worker-1", "eu-west-1a", {}),
    ("worker-2", "eu-west-1b", {"storage-tier": "ssd"}),
    ("worker-3", "eu-west-1c", {"workload-class": "pci"}),
)


def nodes_for(svc: ServiceSpec) -> list[str]:
    """The nodes whose labels satisfy the service's nodeSelector (all nodes when it has none)."""
    return [name for name, _, extra in NODES if all(extra.get(k) == v for k, v in svc.node_selector)]


def run_context(app: AppSpec, namespace: str, seed: int) -> RunContext:
    """What the app's programs see at start-up in a healthy install: for checking whether a value breaks one."""
    return RunContext(namespace, {s.name: (s.port,) for s in app.services},
                      {db: app.password(seed, db) for db in app.databases}, None)


def get_app(name: str) -> AppSpec:
    try:
        return APPS[name]
    except KeyError:
        raise KeyError(f"unknown app {name!r} (known apps: {', '.join(sorted(APPS))})") from None


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


# --- manifests --------------------------------------------------------------------------------------------------

def labels(app: AppSpec, svc: ServiceSpec) -> dict[str, str]:
    return {"app": svc.name, "app.kubernetes.io/name": svc.name, PART_OF: app.name, "tier": svc.tier}


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
    return container


def deployment(app: AppSpec, svc: ServiceSpec, namespace: str, tag: str | None = None) -> Obj:
    pod_spec: Obj = {"containers": [container_spec(svc, tag)], "terminationGracePeriodSeconds": 30}
    if svc.node_selector:
        pod_spec["nodeSelector"] = dict(svc.node_selector)
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": svc.name, "namespace": namespace, "labels": labels(app, svc)},
            "spec": {"replicas": svc.replicas, "selector": {"matchLabels": {"app": svc.name}},
                     "strategy": svc.strategy(), "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600,
                     "template": {"metadata": {"labels": labels(app, svc)}, "spec": pod_spec}}}


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
    out.append(("resourcequotas", {"metadata": {"name": "compute-resources", "namespace": namespace},
                                   "spec": {"hard": dict(app.quota)}}))
    for policy in app.network_policies:
        obj = copy.deepcopy(policy)
        obj["metadata"]["namespace"] = namespace
        out.append(("networkpolicies.networking.k8s.io", obj))
    for svc in app.services:
        out.append(("services", service(app, svc, namespace)))
    return out


# --- installing -------------------------------------------------------------------------------------------------

def _node(name: str, zone: str, extra: dict[str, str], index: int) -> Obj:
    return {
        "metadata": {"name": name, "uid": workload.stable_uid("node", name), "labels": {
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
                 "lastHeartbeatTime": rfc3339(SIM_EPOCH), "lastTransitionTime": rfc3339(FIRST_DEPLOY_AT - 86400)}
                for t, r, m in (("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory "
                                 "available"),
                                ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                                ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"))
            ] + [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                  "message": "kubelet is posting ready status", "lastHeartbeatTime": rfc3339(SIM_EPOCH),
                  "lastTransitionTime": rfc3339(FIRST_DEPLOY_AT - 86400)}],
            "addresses": [{"type": "InternalIP", "address": f"10.0.1.{10 + index}"},
                          {"type": "Hostname", "address": name}],
            "nodeInfo": {"machineID": workload.stable_uid("machine", name).replace("-", ""),
                         "systemUUID": workload.stable_uid("system", name).upper(),
                         "bootID": workload.stable_uid("boot", name),
                         "kubeletVersion": "v1.32.0", "kubeProxyVersion": "v1.32.0",
                         "containerRuntimeVersion": "containerd://1.7.22", "osImage": "Ubuntu 22.04.5 LTS",
                         "kernelVersion": "6.8.0-1019-aws", "architecture": "amd64", "operatingSystem": "linux"},
        },
    }


def _create(cluster: Cluster, resource: str, obj: Obj, *uid_parts: object) -> Obj:
    """Create as the API would (defaulting and validation), with a uid derived from the install's identity."""
    admission.apply_defaults(cluster, resource, obj)
    admission.validate(resource, obj)
    obj["metadata"].setdefault("uid", workload.stable_uid(*uid_parts, resource, obj["metadata"]["name"]))
    return cluster.create(resource, obj)


def _settle(cluster: Cluster, until: float) -> None:
    cluster.clock.advance(until - cluster.clock.now())
    cluster.sync()


def _build(app: AppSpec, namespace: str, seed: int) -> _Template:
    """The namespace as it looks 5 minutes before the simulated epoch."""
    cluster = Cluster("template", clock=SimClock(speed=0.0, start=FIRST_DEPLOY_AT - 3600))
    workload.attach(cluster)
    for name in ("default", "kube-system", "kube-public", "kube-node-lease"):
        _create(cluster, "namespaces", {"metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}}})
    for index, (name, zone, extra) in enumerate(NODES, start=1):
        cluster.create("nodes", _node(name, zone, extra, index))
    for resource, obj in manifests(app, namespace, seed):
        _create(cluster, resource, obj, app.name, namespace, seed)
    instance = AppInstance(app.name, namespace, seed, {db: app.password(seed, db) for db in app.databases})
    cluster.model.setdefault("apps", {})[namespace] = instance
    _settle(cluster, FIRST_DEPLOY_AT)
    for svc in app.services:  # the previous release first, so every deployment has a rollout history
        _create(cluster, "deployments.apps", deployment(app, svc, namespace, svc.previous_tag), app.name, namespace,
                seed)
    _settle(cluster, FIRST_DEPLOY_AT + 600)
    _settle(cluster, CURRENT_RELEASE_AT)
    for svc in app.services:
        current = cluster.snapshot("deployments.apps", namespace, svc.name)
        assert current is not None
        current["spec"]["template"]["spec"]["containers"][0]["image"] = svc.image
        cluster.replace("deployments.apps", current)
    for step in (60, 600, 3600):
        _settle(cluster, CURRENT_RELEASE_AT + step)
    _settle(cluster, TEMPLATE_AT - 3600)
    from agent_sre.simulator import noise

    noise.add(cluster, app, namespace, seed)
    _settle(cluster, TEMPLATE_AT)
    objects, logs = pickle.loads(pickle.dumps((cluster.objects, cluster.logs), protocol=pickle.HIGHEST_PROTOCOL))
    highest = max(int(o["metadata"].get("resourceVersion", 0)) for items in objects.values() for o in items.values())
    return _Template(objects, logs, highest, workload.export(cluster, namespace).fork(), instance,
                     workload.Index.of(objects))


@dataclass(frozen=True)
class _Template:
    """A built namespace. Its objects and logs are shared by every install of it: stored objects are never changed
    in place (a write stores a new object, see `Cluster.replace`), so an install is a copy of the indexes, not of
    the objects. The controllers' memory and the app instance change in place: each install forks its own."""

    objects: dict[str, dict[tuple[str, str], Obj]]
    logs: dict[tuple[str, str, str], Any]
    highest: int  # the highest resourceVersion among the objects
    state: workload.WorkloadState
    instance: AppInstance
    index: workload.Index  # of its ReplicaSets and pods: an install into an empty cluster forks it


_templates: OrderedDict[tuple[str, str, int], _Template] = OrderedDict()
_templates_lock = threading.Lock()


def _template(app: AppSpec, namespace: str, seed: int) -> _Template:
    key = (app.name, namespace, seed)
    with _templates_lock:
        blob = _templates.get(key)
        if blob is not None:
            _templates.move_to_end(key)
            return blob
    blob = _build(app, namespace, seed)
    with _templates_lock:
        _templates[key] = blob
        while len(_templates) > TEMPLATE_CACHE_SIZE:
            _templates.popitem(last=False)
    return blob


def install(cluster: Cluster, app: str, namespace: str | None = None, seed: int = 0) -> str:
    """Install `app` into `cluster` (creating the namespace, and the nodes if absent); returns the namespace."""
    spec = get_app(app)
    ns = namespace or spec.name
    if not _NS.match(ns):
        raise ValueError(f"invalid namespace {ns!r}: use lowercase letters, digits and '-' (at most 63 characters)")
    if cluster.get("namespaces", "", ns) is not None:
        raise ValueError(f'namespace "{ns}" already exists in cluster {cluster.name!r}; pick another namespace')
    workload.attach(cluster)
    template = _template(spec, ns, seed)
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
