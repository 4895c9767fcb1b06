"""Requests sent to a pod through the API server's proxy (`GET /api/v1/namespaces/{ns}/pods/{pod}:{port}/proxy/
{path}`), and the access-log lines the program writes for them.

Whoever can reach a service can put text in its logs: a program logs the path and query of every request it
serves. The API records each proxied request (`record`); the pod's log (`controllers/logs.py`) shows the line the
program's runtime writes for it (`with_requests`), in time order among its own lines, for as long as the container
run that served it lasts.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from agent_sre.apps.images import lookup
from agent_sre.apps.software import Software
from agent_sre.simulator import logs
from agent_sre.simulator.cluster import Cluster, Obj

MODEL_KEY = "received"  # cluster.model[MODEL_KEY]: (namespace, pod) -> ((time, method, path and query), ...)
Received = tuple[float, str, str]
ACCESS_LOG_RUNTIMES = ("go", "node", "python", "java")  # the runtimes whose programs log each request


def record(cluster: Cluster, namespace: str, pod: str, method: str, target: str) -> None:
    """Remember a request the pod served; the table is replaced, never changed in place (environments installed
    from one template share their model until they write it)."""
    table: dict[tuple[str, str], tuple[Received, ...]] = cluster.model.get(MODEL_KEY, {})
    key = (namespace, pod)
    cluster.model[MODEL_KEY] = {**table, key: (*table.get(key, ()), (cluster.clock.now(), method, target))}
    cluster.revision += 1  # the next sync writes the pod's log again


def of(cluster: Cluster, namespace: str, pod: str) -> tuple[Received, ...]:
    table: dict[tuple[str, str], tuple[Received, ...]] = cluster.model.get(MODEL_KEY, {})
    return table.get((namespace, pod), ())


def access_line(sw: Software, method: str, target: str, status: int = 200) -> str | None:
    """The line the program writes for a request it answered with `status` (None: it logs no requests)."""
    reason = {200: "OK", 404: "Not Found"}.get(status, "")
    if sw.runtime == "go":
        return f'level=info msg="request" method={method} path={target} status={status} duration_ms=1'
    if sw.runtime == "node":
        return f"[{sw.program}] info: {method} {target} {status} 1ms"
    if sw.runtime == "python":
        return f'INFO:     10.244.0.1:47312 - "{method} {target} HTTP/1.1" {status} {reason}'
    if sw.runtime == "java":
        return f"INFO 1 --- [nio-8080-exec-1] c.a.{sw.program}.api.Controller : {method} {target} {status} (1 ms)"
    return None


class WithRequests(Mapping[str, list[str]]):
    """A container's logs (`simulator/logs.py`'s `{"current": [...], "previous": [...]}`) with the lines of the
    requests its current run served, in time order: `since` is when that run started."""

    def __init__(self, inner: Mapping[str, list[str]], image: str, since: float,
                 received: tuple[Received, ...]) -> None:
        self.inner, self.since = inner, since
        sw, _ = lookup(image)
        self.lines = [(t, logs._stamp(sw, t, line)) for t, method, target in received if t >= since and sw is not None
                      for line in [access_line(sw, method, target)] if line is not None]

    def timed(self, key: str) -> list[tuple[float, str]]:
        """The lines with when each was written (as `LazyLog.timed`, where the inner log gives them)."""
        own = getattr(self.inner, "timed", None)
        inner: list[tuple[float, str]] = own(key) if own is not None else [(self.since, line) for line in
                                                                            self.inner[key]]
        if key != "current" or not self.lines:
            return inner
        return sorted([*inner, *self.lines], key=lambda pair: pair[0])

    def __getitem__(self, key: str) -> list[str]:
        if key != "current" or not self.lines:
            return self.inner[key]
        if getattr(self.inner, "timed", None) is not None:
            return [line for _, line in self.timed(key)]
        return [*self.inner[key], *(line for _, line in self.lines)]  # no times to place them by: newest last

    def __iter__(self) -> Iterator[str]:
        return iter(self.inner)

    def __len__(self) -> int:
        return len(self.inner)



def pod_port(pod: Obj) -> int | None:
    """The first port the pod's containers declare."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("containerPort"):
                return int(port["containerPort"])
    return None
