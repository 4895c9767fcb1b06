"""What the images in the simulated registry do when the kubelet starts them.

An image is a piece of software with a fixed behaviour: which tags exist, which executables it contains, which
environment variables it needs and how it fails when one is wrong, how much memory it holds, which port it
listens on and which HTTP routes answer. The simulator's kubelet asks `start()` what one run of a container
does; the answer is an `Outcome` with the log lines a real process of that runtime would print. It lives with the
app catalog, not the simulator, because the faults ask it too (`check_value`: does this value break the program).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

MiB = 1024 * 1024
Runtime = Literal["go", "node", "python", "java", "redis", "postgres", "shell"]
RuleKind = Literal["port", "int", "enum", "url", "addr", "host", "db_password", "nonempty", "secret"]


@dataclass(frozen=True)
class EnvRule:
    """How the program reads one variable at start-up (and rejects a bad value)."""

    kind: RuleKind
    required: bool = True
    choices: tuple[str, ...] = ()
    low: int = 0
    high: int = 1 << 31
    min_len: int = 1


@dataclass(frozen=True)
class Software:
    repo: str  # image reference without the tag
    program: str  # how the program names itself in its messages
    runtime: Runtime
    tags: tuple[str, ...]  # the tags that exist in the registry; any other tag (and not a leak's) is "not found"
    argv: tuple[str, ...]  # the command line the image is meant to run (ENTRYPOINT + CMD)
    binaries: frozenset[str]  # executables present in the image
    entrypoint: tuple[str, ...] = ()  # the image's ENTRYPOINT (a prefix of argv); `command` replaces it
    env: Mapping[str, EnvRule] = field(default_factory=dict)
    port: int = 8080  # default listening port (PORT overrides it when the program reads PORT)
    routes: frozenset[str] = frozenset({"/healthz", "/ready", "/metrics"})
    memory_mib: int = 64  # steady working set
    cpu_millicores: int = 20  # usage at the app's base load
    startup_s: float = 4.0  # from process start to the first successful readiness probe
    oom_after_s: float = 25.0  # how long it runs before a too-small memory limit kills it
    p99_ms: float = 20.0  # own p99 latency at base load, without dependencies
    capacity_rps: float = 400.0  # requests per second one pod serves before it saturates
    startup_lines: tuple[str, ...] = ()
    request_paths: tuple[str, ...] = ("GET /",)
    noise: tuple[str, ...] = ()  # benign warnings a healthy instance prints now and then
    data_dir: str = ""  # where a data store keeps its files (the image's VOLUME): what IOChaos can act on
    # Published builds that leak: tag -> MiB its working set grows per minute of running, until the memory limit
    # OOM-kills it (an unbounded cache, a listener never removed). They exist in the registry too.
    leaks: Mapping[str, float] = field(default_factory=dict)

    def image(self, tag: str) -> str:
        return f"{self.repo}:{tag}"

    def keeps_files_under(self, path: str) -> bool:
        """Whether the program's data files lie under `path` (or `path` within its data directory): the files an
        IOChaos on that volume path acts on."""
        path = path.rstrip("/") or "/"
        data = self.data_dir
        return bool(data) and (data == path or data.startswith(path.rstrip("/") + "/") or path.startswith(data + "/"))

    def publishes(self, tag: str) -> bool:
        """Whether the registry holds this tag (a leaking build included)."""
        return tag in self.tags or tag in self.leaks


@dataclass(frozen=True)
class Outcome:
    """What one run of a container does. `kind` decides the container state the kubelet reports."""

    kind: Literal["run", "crash", "start_error", "complete", "hang", "pull_error", "config_error"]
    exit_code: int = 0
    reason: str = ""  # terminated reason: Error, OOMKilled, StartError, Completed
    run_s: float = 0.0  # crash/complete: seconds until the process exits
    message: str = ""  # start_error / pull_error / config_error: the error the kubelet reports
    lines: tuple[str, ...] = ()  # what one run writes to stdout/stderr (untimed)
    listen_port: int | None = None
    startup_s: float = 0.0
    wait_for: tuple[str, int] | None = None  # hang: the (service, port) an init script waits for
    missing_secrets: tuple[str, ...] = ()  # pull_error: the image pull secrets the kubelet could not retrieve


@dataclass(frozen=True)
class RunContext:
    """What a starting process can observe of the cluster."""

    namespace: str
    services: Mapping[str, tuple[int, ...]]  # service name -> ports, for DNS lookups at start-up
    passwords: Mapping[str, str]  # database service -> the password its data directory was initialised with
    memory_limit: int | None  # bytes; None = unlimited


# --- start-up ---------------------------------------------------------------------------------------------------

def start(sw: Software, argv: tuple[str, ...], env: Mapping[str, str], ctx: RunContext, tag: str = "") -> Outcome:
    """One run of `sw` (its build `tag`) with this command line and environment."""
    if argv[0] not in sw.binaries:
        return Outcome("start_error", exit_code=128, reason="StartError", message=(
            "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create "
            f'failed: unable to start container process: exec: "{argv[0]}": executable file not found in $PATH: '
            "unknown"))
    if sw.runtime == "shell":
        return _shell(argv, ctx)
    if argv != sw.argv:
        return _crash(sw, 1 if sw.runtime != "go" else 2, (*sw.startup_lines[:1], *_argv_error(sw, argv)))
    problem = _check_env(sw, env, ctx)
    if problem is not None:
        return _crash(sw, 1, (*sw.startup_lines[:1], *_FORMAT[sw.runtime](sw, *problem)))
    port = _listen_port(sw, env)
    working_set = sw.memory_mib * MiB
    if ctx.memory_limit is not None and ctx.memory_limit < working_set:
        return Outcome("crash", exit_code=137, reason="OOMKilled", run_s=sw.oom_after_s,
                       lines=_started(sw, port), listen_port=port, startup_s=sw.startup_s)
    leak = sw.leaks.get(tag, 0.0)
    if leak and ctx.memory_limit is not None:  # serves until the growing working set reaches the limit
        run_s = (ctx.memory_limit - working_set) / (leak * MiB) * 60.0
        return Outcome("crash", exit_code=137, reason="OOMKilled", run_s=max(run_s, sw.startup_s + 10.0),
                       lines=_started(sw, port), listen_port=port, startup_s=sw.startup_s)
    return Outcome("run", lines=_started(sw, port), listen_port=port, startup_s=sw.startup_s)


def _crash(sw: Software, code: int, lines: tuple[str, ...]) -> Outcome:
    return Outcome("crash", exit_code=code, reason="Error", run_s=0.6 if sw.runtime != "java" else 2.5, lines=lines)


def _listen_port(sw: Software, env: Mapping[str, str]) -> int:
    if "PORT" in sw.env and env.get("PORT", "").isdigit():
        return int(env["PORT"])
    return sw.port


def _started(sw: Software, port: int) -> tuple[str, ...]:
    return tuple(line.replace("{port}", str(port)) for line in sw.startup_lines)


# --- environment validation ------------------------------------------------------------------------------------

# (variable, problem, value, detail): problem is missing | syntax | range | choice | dns | auth | empty
Problem = tuple[str, str, str, str]


def _resolves(host: str, ctx: RunContext) -> bool:
    parts = host.split(".")
    if len(parts) > 1 and parts[1] != ctx.namespace:
        return False
    return parts[0] in ctx.services and (len(parts) <= 2 or ".".join(parts[2:]) in ("svc", "svc.cluster.local"))


def _split_hostport(value: str, default_port: int) -> tuple[str, int] | None:
    m = re.fullmatch(r"([a-z0-9][-a-z0-9.]*)(?::(\d{1,5}))?", value)
    if m is None:
        return None
    return m.group(1), int(m.group(2) or default_port)


def _check_env(sw: Software, env: Mapping[str, str], ctx: RunContext) -> Problem | None:
    for name, rule in sw.env.items():
        value = env.get(name)
        if value is None:
            if rule.required:
                return name, "missing", "", ""
            continue
        problem = check_value(name, rule, value, env, ctx)
        if problem is not None:
            return problem
    return None


def check_value(name: str, rule: EnvRule, value: str, env: Mapping[str, str], ctx: RunContext) -> Problem | None:
    """Why the program rejects `value` for `name` at start-up, or None when it accepts it."""
    kind = rule.kind
    if kind in ("port", "int"):
        if not re.fullmatch(r"-?\d+", value):
            return name, "syntax", value, ""
        low, high = (1, 65535) if kind == "port" else (rule.low, rule.high)
        return None if low <= int(value) <= high else (name, "range", value, f"{low}..{high}")
    if kind == "enum":
        return None if value in rule.choices else (name, "choice", value, ", ".join(rule.choices))
    if kind in ("nonempty", "secret"):
        return None if len(value) >= rule.min_len else (name, "empty", value, str(rule.min_len))
    if kind == "url":
        m = re.fullmatch(r"https?://([^/]+)(/.*)?", value)
        hostport = _split_hostport(m.group(1), 80) if m else None
        if hostport is None:
            return name, "syntax", value, ""
        return None if _resolves(hostport[0], ctx) else (name, "dns", value, hostport[0])
    if kind in ("addr", "host"):
        hostport = _split_hostport(value, 0)
        if hostport is None or (kind == "addr" and hostport[1] == 0):
            return name, "syntax", value, ""
        return None if _resolves(hostport[0], ctx) else (name, "dns", value, hostport[0])
    if kind == "db_password":
        host = env.get("DB_HOST", "").split(".")[0]
        expected = ctx.passwords.get(host)
        return None if expected is None or value == expected else (name, "auth", value, env.get("DB_USER", ""))
    raise ValueError(f"unknown env rule kind {kind!r}")


def _go(sw: Software, name: str, problem: str, value: str, detail: str) -> tuple[str, ...]:
    if problem == "dns":
        return (f'level=fatal msg="startup check failed" dependency={name} error="dial tcp: lookup {detail} on '
                f'10.96.0.10:53: no such host"',)
    if problem == "auth":
        return (f'level=fatal msg="cannot connect to database" error="pq: password authentication failed for user '
                f'\\"{detail}\\""',)
    why = {"missing": "required environment variable is not set",
           "syntax": f'strconv.Atoi: parsing "{value}": invalid syntax' if value and not value.startswith("http")
           else f'invalid value "{value}"',
           "range": f"value {value} out of range [{detail}]",
           "choice": f'invalid value "{value}" (expected one of: {detail})',
           "empty": f"must be at least {detail} characters"}[problem]
    return (f'level=fatal msg="invalid configuration" error="env: {name}: {why}"',)


def _node(sw: Software, name: str, problem: str, value: str, detail: str) -> tuple[str, ...]:
    if problem == "dns":
        return (f"Error: getaddrinfo ENOTFOUND {detail}", "    at GetAddrInfoReqWrap.onlookup [as oncomplete] "
                "(node:dns:107:26) {", "  errno: -3008,", "  code: 'ENOTFOUND',", f"  hostname: '{detail}'", "}",
                "Node.js v20.11.1")
    if problem == "missing":
        return (f"Error: Missing required environment variable {name}", "    at requireEnv (/app/config.js:12:11)",
                "Node.js v20.11.1")
    return (f"Error: Invalid configuration: {name}={value!r} ({problem} {detail})".rstrip(),
            "    at loadConfig (/app/config.js:31:9)", "Node.js v20.11.1")


def _python(sw: Software, name: str, problem: str, value: str, detail: str) -> tuple[str, ...]:
    head = ("Traceback (most recent call last):", f'  File "/app/{sw.program}/settings.py", line 41, in <module>')
    if problem == "missing":
        return (*head, f"    {name.lower()} = os.environ[{name!r}]", f"KeyError: {name!r}")
    if problem == "dns":
        return (*head, f"    wait_for({name.lower()})",
                "httpx.ConnectError: [Errno -2] Name or service not known")
    if problem == "syntax":
        return (*head, f"    {name.lower()} = int(os.environ[{name!r}])",
                f"ValueError: invalid literal for int() with base 10: {value!r}")
    return (*head, f"ValueError: {name}={value!r} is not valid ({detail})")


def _java(sw: Software, name: str, problem: str, value: str, detail: str) -> tuple[str, ...]:
    if problem == "auth":
        cause = f'org.postgresql.util.PSQLException: FATAL: password authentication failed for user "{detail}"'
    elif problem == "dns":
        cause = f"java.net.UnknownHostException: {detail}: Name or service not known"
    elif problem == "missing":
        cause = f"java.lang.IllegalStateException: required environment variable {name} is not set"
    else:
        cause = f"java.lang.IllegalArgumentException: invalid value {value!r} for {name}"
    return ("ERROR o.s.boot.SpringApplication - Application run failed", cause,
            f"\tat com.acme.{sw.program}.Application.main(Application.java:18)")


def _postgres(sw: Software, name: str, problem: str, value: str, detail: str) -> tuple[str, ...]:
    return ("Error: Database is uninitialized and superuser password is not specified.",
            '       You must specify POSTGRES_PASSWORD to a non-empty value for the superuser.')


_FORMAT: dict[str, Callable[..., tuple[str, ...]]] = {
    "go": _go, "node": _node, "python": _python, "java": _java, "postgres": _postgres, "redis": _go,
}


def _argv_error(sw: Software, argv: tuple[str, ...]) -> tuple[str, ...]:
    """The message a runtime prints when its binary exists but the arguments are wrong."""
    rest = argv[1:]
    if sw.runtime == "node":
        script = rest[0] if rest else "<none>"
        return ("node:internal/modules/cjs/loader:1228", "  throw err;", "  ^", "",
                f"Error: Cannot find module '/app/{script}'", "Node.js v20.11.1")
    if sw.runtime == "python":
        module = rest[rest.index("-m") + 1] if "-m" in rest and rest.index("-m") + 1 < len(rest) else " ".join(rest)
        return (f"/usr/local/bin/python: No module named {module}",)
    if sw.runtime == "java":
        jar = rest[rest.index("-jar") + 1] if "-jar" in rest and rest.index("-jar") + 1 < len(rest) else "?"
        return (f"Error: Unable to access jarfile {jar}",)
    if sw.runtime == "redis":
        unknown = [a for a in rest if a.startswith("--") and a not in sw.argv] or list(rest[-1:])
        return ("*** FATAL CONFIG FILE ERROR (Redis 7.2.5) ***", "Reading the configuration file, at line 2",
                f">>> '{unknown[0].lstrip('-')}'", "Bad directive or wrong number of arguments")
    flags = [a for a in rest if a.startswith("-")]
    if flags and [a for a in sw.argv[1:] if a.startswith("-")] != flags:
        return (f"Error: unknown flag: {flags[0].split('=')[0]}", f"Usage:\n  {sw.program} serve [flags]")
    word = next((a for a in rest if not a.startswith("-")), "")
    return (f'Error: unknown command "{word}" for "{sw.program}"', f"Run '{sw.program} --help' for usage.")


# --- shell scripts (init containers) ----------------------------------------------------------------------------

_WAIT_FOR = re.compile(r"nc -z\s+([a-z0-9][-a-z0-9.]*)\s+(\d+)")
_EXIT = re.compile(r"exit\s+(\d+)")


def _shell(argv: tuple[str, ...], ctx: RunContext) -> Outcome:
    """A busybox `sh -c` script: waits for a service with `nc -z`, fails with `exit N`, else completes."""
    script = argv[-1] if len(argv) >= 3 and argv[1] == "-c" else " ".join(argv[1:])
    echoes = tuple(m.group(1) for m in re.finditer(r'echo\s+"([^"]*)"', script))
    wait = _WAIT_FOR.search(script)
    if wait is not None:
        host, port = wait.group(1), int(wait.group(2))
        return Outcome("hang", lines=echoes[:1] or (f"waiting for {host}:{port}",), wait_for=(host.split(".")[0], port))
    failed = _EXIT.search(script)
    if failed is not None and failed.group(1) != "0":
        return Outcome("crash", exit_code=int(failed.group(1)), reason="Error", run_s=1.5, lines=echoes)
    return Outcome("complete", exit_code=0, reason="Completed", run_s=2.0, lines=echoes)


def effective_argv(container: Mapping[str, Any], sw: Software) -> tuple[str, ...]:
    """Docker semantics: `command` replaces the entrypoint (and drops the image's CMD), `args` replace CMD."""
    command, args = container.get("command"), container.get("args")
    if command:
        return (*command, *(args or ()))
    cmd = sw.argv[len(sw.entrypoint):]
    if args and sw.entrypoint and args[0].startswith("-"):
        args = [cmd[0], *args]  # the official images' entrypoint scripts treat leading flags as server options
    return (*sw.entrypoint, *(args if args else cmd))
