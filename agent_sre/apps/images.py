"""The simulated container registry: every image the apps use, with the tags that exist and what it does.

A tag that is not listed here does not exist (the kubelet reports ErrImagePull / ImagePullBackOff), and a
repository that is not listed is "pull access denied". The company registry (`ACME`) is private: a pull needs the
credentials it issued, from the pod's image pull secrets (`auth_error`).
"""

from __future__ import annotations

import base64
import json

from agent_sre.apps.software import EnvRule, Software

ACME = "registry.acme.internal"
PAUSE_IMAGE = "gcr.io/google-containers/pause:latest"  # what Chaos Mesh pod-failure swaps in

_PORT = EnvRule("port")
_URL = EnvRule("url")
_LOG_LEVEL = EnvRule("enum", required=False, choices=("debug", "info", "warn", "error"))
_DB = {"DB_HOST": EnvRule("host"), "DB_PORT": EnvRule("port"), "DB_USER": EnvRule("nonempty"),
       "DB_NAME": EnvRule("nonempty"), "DB_PASSWORD": EnvRule("db_password")}


def _go(repo: str, program: str, tags: tuple[str, ...], env: dict[str, EnvRule], extra: tuple[str, ...] = (),
        **kw: object) -> Software:
    lines = (f'level=info msg="starting {program}" version={tags[-1]}', *extra,
             'level=info msg="listening" addr=:{port}')
    return Software(repo=f"{ACME}/{repo}", program=program, runtime="go", tags=tags, argv=(f"/app/{program}", "serve"),
                    binaries=frozenset({f"/app/{program}"}), env=env, startup_lines=lines,
                    **kw)  # type: ignore[arg-type]


SHOP_IMAGES = (
    Software(repo=f"{ACME}/shop/frontend", program="frontend", runtime="node", tags=("1.8.2", "1.9.0", "1.9.1"),
             argv=("node", "server.js"), binaries=frozenset({"node", "npm", "sh"}),
             env={"PORT": _PORT, "CATALOG_URL": _URL, "CART_URL": _URL, "CHECKOUT_URL": _URL,
                  "RECOMMENDATION_URL": _URL, "SESSION_SECRET": EnvRule("secret", min_len=16),
                  "LOG_LEVEL": _LOG_LEVEL},
             memory_mib=150, cpu_millicores=60, startup_s=6, oom_after_s=40, p99_ms=35, capacity_rps=150,
             leaks={"1.10.0": 75.0},
             startup_lines=("> shop-frontend@1.9.1 start", "> node server.js", "",
                            "[frontend] info: session store ready", "[frontend] info: listening on :{port}"),
             request_paths=("GET /", "GET /product/{id}", "POST /cart", "GET /cart", "POST /checkout"),
             noise=("warn: dns lookup catalog.shop.svc.cluster.local timed out after 5000ms, retrying",
                    "warn: (node:1) [DEP0040] DeprecationWarning: The `punycode` module is deprecated.")),
    _go("shop/cart", "cart", ("2.3.0", "2.4.0", "2.4.1"),
        {"PORT": _PORT, "REDIS_ADDR": EnvRule("addr"), "CART_TTL_HOURS": EnvRule("int", low=1, high=720),
         "LOG_LEVEL": _LOG_LEVEL},
        ('level=info msg="connected to redis" db=0',),
        memory_mib=96, cpu_millicores=25, startup_s=3, p99_ms=8, capacity_rps=500, leaks={"2.5.0": 110.0},
        request_paths=("GET /v1/cart/{id}", "POST /v1/cart/{id}/items", "DELETE /v1/cart/{id}"),
        noise=('level=warn msg="redis: connection pool: idle connection closed by server" addr=redis:6379',)),
    _go("shop/checkout", "checkout", ("3.1.0", "3.2.0", "3.2.1"),
        {"PORT": _PORT, "CART_URL": _URL, "PAYMENT_URL": _URL, "CATALOG_URL": _URL, **_DB, "LOG_LEVEL": _LOG_LEVEL},
        ('level=info msg="database pool ready" max_conns=20', 'level=info msg="migrations up to date" version=41'),
        memory_mib=110, cpu_millicores=30, startup_s=4, p99_ms=40, capacity_rps=200, leaks={"3.4.0": 100.0},
        request_paths=("POST /v1/checkout", "GET /v1/orders/{id}"),
        noise=('level=warn msg="slow query" duration_ms=812 query="SELECT * FROM orders WHERE customer_id = $1"',)),
    Software(repo=f"{ACME}/shop/payment", program="payment", runtime="java", tags=("5.0.3", "5.1.0"),
             argv=("java", "-jar", "/app/payment.jar"), binaries=frozenset({"java", "sh"}),
             env={"PORT": _PORT, "PSP_API_KEY": EnvRule("secret", min_len=20),
                  "PSP_MODE": EnvRule("enum", choices=("sandbox", "live"))},
             memory_mib=420, cpu_millicores=80, startup_s=25, oom_after_s=35, p99_ms=180, capacity_rps=120,
             startup_lines=("  .   ____          _            __ _ _", " :: Spring Boot ::                (v3.2.4)",
                            "INFO c.a.payment.Application - Starting Application v5.1.0 using Java 21.0.2",
                            "INFO c.a.payment.psp.PspClient - payment provider client ready (mode=live)",
                            "INFO o.s.b.w.embedded.tomcat.TomcatWebServer - Tomcat started on port {port} (http)"),
             request_paths=("POST /v1/charge", "POST /v1/refund"),
             noise=("WARN c.a.payment.psp.PspClient - PSP responded 429 Too Many Requests, retrying in 200ms",)),
    _go("shop/catalog", "catalog", ("1.12.0", "1.12.1", "1.13.0"),
        {"PORT": _PORT, **_DB, "CACHE_TTL_SECONDS": EnvRule("int", low=0, high=86400), "LOG_LEVEL": _LOG_LEVEL},
        ('level=info msg="database pool ready" max_conns=20', 'level=info msg="product cache warmed" items=1841'),
        memory_mib=140, cpu_millicores=40, startup_s=5, p99_ms=25, capacity_rps=400, leaks={"1.14.0": 80.0},
        request_paths=("GET /v1/products", "GET /v1/products/{id}", "GET /v1/search?q=lamp"),
        noise=('level=warn msg="config key CACHE_TTL is deprecated, use CACHE_TTL_SECONDS"',)),
    Software(repo=f"{ACME}/shop/recommendation", program="recommendation", runtime="python",
             tags=("0.9.4", "0.10.0", "0.10.1"), argv=("python", "-m", "recommendation"),
             binaries=frozenset({"python", "pip", "sh"}),
             env={"PORT": _PORT, "CATALOG_URL": _URL, "WORKERS": EnvRule("int", low=1, high=16)},
             memory_mib=380, cpu_millicores=150, startup_s=40, oom_after_s=60, p99_ms=120, capacity_rps=80,
             leaks={"0.11.0": 180.0},
             startup_lines=("INFO:recommendation:loading model /models/als-2025-12.pkl",
                            "INFO:recommendation:model loaded (312 MB, 41.2s)",
                            "INFO:     Uvicorn running on http://0.0.0.0:{port} (Press CTRL+C to quit)"),
             request_paths=("GET /v1/recommendations?product={id}",),
             noise=("WARNING:recommendation:feature store lag 42s, serving cached embeddings",)),
)

BANK_IMAGES = (
    Software(repo=f"{ACME}/bank/web", program="web", runtime="node", tags=("4.2.0", "4.3.0", "4.3.1"),
             argv=("node", "server.js"), binaries=frozenset({"node", "npm", "sh"}),
             env={"PORT": _PORT, "AUTH_URL": _URL, "ACCOUNTS_URL": _URL, "LOG_LEVEL": _LOG_LEVEL},
             memory_mib=140, cpu_millicores=50, startup_s=5, oom_after_s=40, p99_ms=30, capacity_rps=150,
             leaks={"4.4.0": 80.0},
             startup_lines=("> bank-web@4.3.1 start", "> node server.js", "", "[web] info: listening on :{port}"),
             request_paths=("GET /", "GET /accounts", "POST /transfers", "POST /login"),
             noise=("warn: dns lookup auth.bank.svc.cluster.local timed out after 5000ms, retrying",)),
    _go("bank/auth", "auth", ("2.0.1", "2.1.0"),
        {"PORT": _PORT, **_DB, "JWT_SIGNING_KEY": EnvRule("secret", min_len=32),
         "TOKEN_TTL_MINUTES": EnvRule("int", low=1, high=1440)},
        ('level=info msg="database pool ready" max_conns=10', 'level=info msg="signing key loaded" alg=HS256'),
        memory_mib=70, cpu_millicores=30, startup_s=3, p99_ms=15, capacity_rps=600, leaks={"2.2.0": 85.0},
        request_paths=("POST /v1/token", "GET /v1/introspect"),
        noise=('level=warn msg="token rejected" reason="expired" sub=customer-88123',)),
    _go("bank/accounts", "accounts", ("1.7.0", "1.8.0", "1.8.2"),
        {"PORT": _PORT, "LEDGER_URL": _URL, "AUTH_URL": _URL, **_DB},
        ('level=info msg="database pool ready" max_conns=20',),
        memory_mib=100, cpu_millicores=35, startup_s=4, p99_ms=30, capacity_rps=300, leaks={"1.10.0": 110.0},
        request_paths=("GET /v1/accounts/{id}", "POST /v1/transfers"),
        noise=('level=warn msg="transfer declined" reason="insufficient funds" account=DE89370400440532013000',)),
    Software(repo=f"{ACME}/bank/ledger", program="ledger", runtime="java", tags=("3.4.0", "3.5.1"),
             argv=("java", "-jar", "/app/ledger.jar"), binaries=frozenset({"java", "sh"}),
             env={"PORT": _PORT, **_DB, "NOTIFICATIONS_URL": _URL,
                  "LEDGER_BATCH_SIZE": EnvRule("int", low=1, high=1000)},
             memory_mib=520, cpu_millicores=90, startup_s=30, oom_after_s=45, p99_ms=60, capacity_rps=250,
             startup_lines=(" :: Spring Boot ::                (v3.2.4)",
                            "INFO c.a.ledger.Application - Starting Application v3.5.1 using Java 21.0.2",
                            "INFO com.zaxxer.hikari.HikariDataSource - HikariPool-1 - Start completed.",
                            "INFO o.s.b.w.embedded.tomcat.TomcatWebServer - Tomcat started on port {port} (http)"),
             request_paths=("POST /v1/entries", "GET /v1/balances/{id}"),
             noise=("WARN com.zaxxer.hikari.pool.HikariPool - HikariPool-1 - Thread starvation or clock leap "
                    "detected (housekeeper delta=1m2s).",)),
    Software(repo=f"{ACME}/bank/notifications", program="notifications", runtime="python", tags=("1.1.0", "1.2.0"),
             argv=("python", "-m", "notifications"), binaries=frozenset({"python", "pip", "sh"}),
             env={"PORT": _PORT, "NOTIFY_CHANNEL": EnvRule("enum", choices=("email", "sms", "push")),
                  "WORKERS": EnvRule("int", low=1, high=16)},
             memory_mib=90, cpu_millicores=20, startup_s=4, oom_after_s=30, p99_ms=50, capacity_rps=300,
             leaks={"1.3.0": 70.0},
             startup_lines=("INFO:notifications:channel=email workers=2",
                            "INFO:     Uvicorn running on http://0.0.0.0:{port} (Press CTRL+C to quit)"),
             request_paths=("POST /v1/notify",),
             noise=("WARNING:notifications:smtp relay answered 421, message requeued",)),
)

INFRA_IMAGES = (
    Software(repo="docker.io/library/redis", program="redis", runtime="redis", tags=("7.0.15", "7.2.4", "7.2.5"),
             argv=("docker-entrypoint.sh", "redis-server", "--appendonly", "no"), entrypoint=("docker-entrypoint.sh",),
             binaries=frozenset({"docker-entrypoint.sh", "redis-server", "redis-cli", "sh"}),
             port=6379, routes=frozenset(), memory_mib=60, cpu_millicores=15, startup_s=1, oom_after_s=60,
             p99_ms=2, capacity_rps=5000, data_dir="/data",
             startup_lines=("1:C 01 Jan 2026 00:00:00.000 * oO0OoO0OoO0Oo Redis is starting oO0OoO0OoO0Oo",
                            "1:M 01 Jan 2026 00:00:00.002 * Running mode=standalone, port={port}.",
                            "1:M 01 Jan 2026 00:00:00.003 * Ready to accept connections tcp")),
    Software(repo="docker.io/library/postgres", program="postgres", runtime="postgres", tags=("15.6", "16.2", "16.3"),
             argv=("docker-entrypoint.sh", "postgres"), entrypoint=("docker-entrypoint.sh",),
             binaries=frozenset({"docker-entrypoint.sh", "postgres", "psql", "pg_isready", "pg_dump", "sh", "bash"}),
             env={"POSTGRES_PASSWORD": EnvRule("nonempty"), "POSTGRES_USER": EnvRule("nonempty")},
             port=5432, routes=frozenset(), memory_mib=300, cpu_millicores=60, startup_s=5, oom_after_s=50,
             p99_ms=6, capacity_rps=3000, data_dir="/var/lib/postgresql/data",
             startup_lines=("PostgreSQL Database directory appears to contain a database; Skipping initialization",
                            "LOG:  starting PostgreSQL 16.3 on x86_64-pc-linux-gnu",
                            'LOG:  listening on IPv4 address "0.0.0.0", port {port}',
                            "LOG:  database system is ready to accept connections")),
    Software(repo="docker.io/library/busybox", program="sh", runtime="shell", tags=("1.36", "1.36.1", "latest"),
             argv=("sh",), binaries=frozenset({"sh", "nc", "nslookup", "wget", "echo", "sleep", "until"}),
             routes=frozenset(), memory_mib=2, cpu_millicores=1, startup_s=0),
)

REGISTRY: dict[str, Software] = {sw.repo: sw for sw in (*SHOP_IMAGES, *BANK_IMAGES, *INFRA_IMAGES)}


def _canonical(repo: str) -> str:
    """`redis` and `library/redis` are `docker.io/library/redis`, as the container runtime reads them."""
    first = repo.split("/", 1)[0]
    if "/" not in repo:
        return f"docker.io/library/{repo}"
    if "." not in first and ":" not in first and first != "localhost":
        return f"docker.io/{repo}"
    return repo


def lookup(image: str) -> tuple[Software | None, str]:
    """Split an image reference into (software, tag); software is None for a repository nobody publishes."""
    ref = image.split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    repo, tag = (ref.rsplit(":", 1)[0], last.split(":", 1)[1]) if ":" in last else (ref, "latest")
    return REGISTRY.get(_canonical(repo)), tag


def pull_error(image: str) -> str | None:
    """The container runtime's pull failure for `image`, or None when the image exists."""
    sw, tag = lookup(image)
    if sw is not None and sw.publishes(tag):
        return None
    if image == PAUSE_IMAGE:
        return None
    if sw is None:
        return (f'failed to pull and unpack image "{image}": failed to resolve reference "{image}": pull access '
                "denied, repository does not exist or may require authorization: server message: "
                "insufficient_scope: authorization failed")
    return f'failed to pull and unpack image "{image}": failed to resolve reference "{image}": {image}: not found'


PRIVATE_REGISTRIES = frozenset({ACME})
DOCKER_CONFIG_JSON = "kubernetes.io/dockerconfigjson"  # the Secret type the kubelet reads registry credentials from
DOCKER_CONFIG_KEY = ".dockerconfigjson"


def registry_of(image: str) -> str:
    """The registry host of an image reference (docker.io when it names none)."""
    first, _, rest = image.partition("/")
    return first if rest and ("." in first or ":" in first or first == "localhost") else "docker.io"


def basic_auth(user: str, token: str) -> str:
    """A docker config's `auth`: base64 of `user:token`."""
    return base64.b64encode(f"{user}:{token}".encode()).decode()


def docker_config(registry: str, user: str, token: str) -> str:
    """A `.dockerconfigjson` of one registry's credentials, as `kubectl create secret docker-registry` writes it."""
    return json.dumps({"auths": {registry: {"username": user, "password": token, "auth": basic_auth(user, token)}}},
                      separators=(",", ":"))


def offered_auth(config: str, registry: str) -> str | None:
    """The `auth` a `.dockerconfigjson` offers `registry` (from `auth`, or `username` and `password`), or None."""
    try:
        entry = (json.loads(config).get("auths") or {}).get(registry)
    except (ValueError, AttributeError):
        return None
    if not isinstance(entry, dict):
        return None
    if entry.get("auth"):
        return str(entry["auth"])
    return basic_auth(entry["username"], entry["password"]) if entry.get("username") and entry.get("password") \
        else None


def auth_error(image: str, offered: list[str], accepted: str | None) -> str | None:
    """containerd's failure for a pull from a private registry with the `auth` values the pull secrets offer, when
    none is the one the registry accepts: its HEAD of the manifest answers 401 (upstream containerd
    remotes/docker/resolver.go, `unexpected status from HEAD request to ...: 401 Unauthorized`). None for a public
    registry or accepted credentials."""
    registry = registry_of(image)
    if registry not in PRIVATE_REGISTRIES or (accepted is not None and accepted in offered):
        return None
    ref = image.split("@", 1)[0]
    path, _, tag = ref[len(registry) + 1:].rpartition(":") if ":" in ref.rsplit("/", 1)[-1] else \
        (ref[len(registry) + 1:], "", "latest")
    return (f'failed to pull and unpack image "{image}": failed to resolve reference "{image}": unexpected status '
            f"from HEAD request to https://{registry}/v2/{path}/manifests/{tag}: 401 Unauthorized")
