"""The demo apps: services, their dependency graph, configuration, secrets and the nodes they run on.

Two apps with realistic topologies: `shop` (an online store) and `bank` (online banking). Each service runs an
image from `images.py`; its manifest (`manifests.py`) wires the environment that image needs, with some values
from secrets and config maps (the database password must match the one the database was initialised with).
The catalog is what the simulator installs, what the faults break, and what `stack/kind` deploys to a real
cluster, so it depends on none of them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Literal

from agent_sre.apps.images import ACME, PRIVATE_REGISTRIES, REGISTRY, registry_of
from agent_sre.apps.software import RunContext, Software

Obj = dict[str, Any]

PART_OF = "app.kubernetes.io/part-of"
PULL_SECRET = "acme-registry"  # each app's credentials for the private company registry (images.ACME)


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
    data_dir: str = ""  # where a data store keeps its files: a volume of its own PersistentVolumeClaim (`claim`)

    @property
    def software(self) -> Software:
        return REGISTRY[self.repo]

    @property
    def image(self) -> str:
        return f"{self.repo}:{self.tag}"

    @property
    def container(self) -> str:
        return self.name

    @property
    def private(self) -> bool:
        """Its image comes from the private company registry: its pods pull with the app's `PULL_SECRET`."""
        return registry_of(self.image) in PRIVATE_REGISTRIES

    @property
    def claim(self) -> str:
        """The PersistentVolumeClaim its data lives on ("" for a stateless service)."""
        return f"{self.name}-data" if self.data_dir else ""

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

    def registry_login(self, seed: int) -> tuple[str, str]:
        """The user and token the company registry issued this app's install (per seed, as its other secrets)."""
        return f"{self.name}-puller", _secret_value(self.name, seed, "token:40")

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
             rollout="Recreate", feature="the shopping cart", data_dir="/data"),
        _svc("postgres", "docker.io/library/postgres", ("16.2", "16.3"), 1, port=5432, probe="exec", tier="data",
             cpu="250m", memory="512Mi", memory_limit="1Gi",
             env=(("POSTGRES_USER", "shop"), ("POSTGRES_PASSWORD", Ref("secret", "postgres-credentials", "password")),
                  ("PGDATA", "/var/lib/postgresql/data/pgdata")),
             node_selector=(("storage-tier", "ssd"),), rollout="Recreate",
             feature="orders and product pages", data_dir="/var/lib/postgresql/data"),
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
             feature="everything that touches account data", data_dir="/var/lib/postgresql/data"),
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


def labels(app: AppSpec, svc: ServiceSpec) -> dict[str, str]:
    """The labels of a service's objects and pods: what its selectors, the signals and the oracle match on."""
    return {"app": svc.name, "app.kubernetes.io/name": svc.name, PART_OF: app.name, "tier": svc.tier}


def get_app(name: str) -> AppSpec:
    try:
        return APPS[name]
    except KeyError:
        raise KeyError(f"unknown app {name!r} (known apps: {', '.join(sorted(APPS))})") from None
