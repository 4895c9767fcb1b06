"""Container logs: each run's lines (`simulator/logs.py`), with errors from the moment a call or a database
login began failing, tracked at every pass so a clock jump does not move the onset."""

from __future__ import annotations

from typing import Any

from agent_sre.simulator import logs, received, signals
from agent_sre.simulator.controllers.context import Pass


def failing_since(p: Pass, computed: signals.Computed) -> tuple[dict[Any, Any], dict[Any, Any]]:
    """The failing calls and database logins per service and the failing file operations per pod (IOChaos), each
    with the moment it started failing (logs show errors from then on), tracked at every pass so a clock jump does
    not move the onset."""
    seen: set[tuple[str, ...]] = set()

    def since(*key: str) -> float:
        seen.add(key)
        return p.st.failing_since.setdefault(key, p.now)

    failing = {(ns, caller): tuple((callee, calls, ratio, why, p99, critical, since(ns, caller, callee, why))
                                   for callee, calls, ratio, why, p99, critical in edges)
               for (ns, caller), edges in computed.failing_edges.items()}
    inbound = {(ns, db): tuple(("auth", user, since(ns, db, "auth", user)) for user in users)
               for (ns, db), users in computed.auth_failures.items()}
    inbound |= {key: (("eio", f"{fx.io_error:.2f}", since(*key, "eio", f"{fx.io_error:.2f}")),)
                for key, fx in p.effects.items() if fx.io_error}
    p.st.failing_since = {k: v for k, v in p.st.failing_since.items() if k in seen}
    return failing, inbound


def write(p: Pass, failing: dict[Any, Any], inbound: dict[Any, Any]) -> None:
    for (ns, name), ps in p.st.pods.items():
        pod = p.c.get("pods", ns, name)
        if pod is None:
            continue
        app = (pod["metadata"].get("labels") or {}).get("app", "")
        edges, users = failing.get((ns, app), ()), inbound.get((ns, app), ()) + inbound.get((ns, name), ())
        served = received.of(p.c, ns, name)  # requests sent through the API's proxy: the program logs them
        key = (tuple((k, r.since, r.restarts_before, r.outcome.kind) for k, r in ps.runs.items()),
               ps.failure_since, edges, users, served)
        minute, (last_key, last_minute) = int(p.now // 60), ps.log_key or (None, None)
        if key == last_key and minute == last_minute:
            continue
        ps.log_key = (key, minute)
        for container_key, run in ps.runs.items():
            container = container_key.split("/", 1)[1]
            if key == last_key:  # only the minute moved on: a log of the same run starts over (as a new one)
                entry = p.c.logs.get((ns, name, container))
                if isinstance(entry, logs.LazyLog) and entry.renew(p.c.clock, p.now, run):
                    continue
            rendered = logs.render(pod, run, p.now, edges, ps.failure_since is not None, users, p.c.clock)
            if rendered is None:
                p.c.logs.pop((ns, name, container), None)
            else:
                p.c.logs[(ns, name, container)] = received.WithRequests(rendered, run.image, run.since, served) \
                    if served else rendered
