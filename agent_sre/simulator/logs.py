"""Container logs as the programs would write them, for `kubectl logs [--previous]`.

Lines come from the container's current run (`kubelet.Run`): start-up lines, then a sample of request lines on
a fixed time grid (so the same moment always shows the same lines), with failing calls to dependencies and
occasional benign warnings mixed in. A crash-looping container shows its last run, and its run before that
under `previous`. Each line keeps the moment it was written (`LazyLog.timed`), which `kubectl logs --timestamps`,
`--since` and `-f` read.
"""

from __future__ import annotations

import copy
import hashlib
import struct
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from functools import lru_cache

from agent_sre.apps.images import lookup
from agent_sre.apps.software import Software
from agent_sre.simulator.cluster import Obj, SimClock
from agent_sre.simulator.kubelet import Run, backoff_of, crash_timeline

MAX_LINES = 60
REQUEST_EVERY_S = 7.0
NOISE_SHARE = 0.04
# (callee, calls per request, error ratio of the calls, what the client reports, p99 of the call, critical, since)
FailingEdge = tuple[str, float, float, str, float, bool, float]
# what a data store's own requests run into, since when: ("auth", database user whose clients fail to authenticate,
# since) or ("eio", share of file operations failing, since) under IOChaos
Inbound = tuple[str, str, float]
_QUARTERS = struct.Struct(">4Q")  # a 32-byte digest as four big-endian 64-bit numbers
HANG_EVERY_S = 2.0  # a hung container repeats what it waits for
Timed = list[tuple[float, str]]  # (when the line was written, the line)


@lru_cache(maxsize=65536)
def _second(second: int) -> str:
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S.")


def _iso(ts: float) -> str:
    return f"{_second(int(ts))}{int(ts * 1000) % 1000:03d}Z"


def _fraction(*parts: object) -> float:
    digest = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2 ** 64


def _fractions(*parts: object) -> tuple[float, float, float, float]:
    """Four independent fractions from one digest: a sampled request's dice, rolled once."""
    a, b, c, d = _QUARTERS.unpack(hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=32).digest())
    return a / 2 ** 64, b / 2 ** 64, c / 2 ** 64, d / 2 ** 64


def _stamp(sw: Software | None, ts: float, line: str) -> str:
    """Prefix a program's line with the timestamp its runtime writes (banners and stack traces carry none;
    redis stamps its own lines)."""
    runtime = sw.runtime if sw else "shell"
    if runtime == "go" and line.startswith("level="):
        return f"time={_iso(ts)} {line}"
    if runtime == "node" and line.startswith("["):
        return f"{_iso(ts)} {line}"
    if runtime == "java" and line.startswith(("INFO", "WARN", "ERROR", "DEBUG")):
        return f"{_iso(ts)}  {line}"
    if runtime == "postgres" and line.startswith(("LOG:", "FATAL:", "DETAIL:", "ERROR:")):
        return f"{datetime.fromtimestamp(ts, UTC).strftime('%Y-%m-%d %H:%M:%S.%f')[:-3]} UTC [1] {line}"
    return line


def _request_line(sw: Software, pod: str, ts: float, failing: Sequence[FailingEdge]) -> list[str]:
    """One sampled request at `ts`: fine, or failed because a dependency failed (two lines then)."""
    roll, speed, noise, which = _fractions(pod, ts)
    path = sw.request_paths[int(roll * 1e6) % len(sw.request_paths)].replace("{id}", str(int(roll * 1e4) % 9000 + 100))
    method, _, url = path.partition(" ")
    millis = int(sw.p99_ms * (0.2 + 0.6 * speed))
    for callee, calls, ratio, error, latency, critical, since in failing:
        if ts < since:
            continue
        called, failed, _, _ = _fractions(pod, ts, callee)
        if called >= calls:
            continue  # this request did not call that dependency
        if failed < ratio:
            if critical:
                return _failed(sw, method, url, callee, error, max(millis, int(latency * 1000)))
            return [_degraded(sw, callee, error)]
        millis += int(latency * 1000 * 0.6) if latency > 0.5 and critical else 0
    if sw.noise and noise < NOISE_SHARE:
        return [sw.noise[int(which * len(sw.noise))]]
    if sw.runtime == "go":
        return [f'level=info msg="request" method={method} path={url} status=200 duration_ms={millis}']
    if sw.runtime == "node":
        return [f"[{sw.program}] info: {method} {url} 200 {millis}ms"]
    if sw.runtime == "python":
        return [f'INFO:     10.244.{int(roll * 3) + 1}.{int(roll * 200) + 20}:{40000 + int(roll * 20000)} - '
                f'"{method} {url} HTTP/1.1" 200 OK']
    if sw.runtime == "java":
        return [f"INFO 1 --- [nio-8080-exec-{int(roll * 10) + 1}] c.a.{sw.program}.api.Controller : "
                f"{method} {url} 200 ({millis} ms)"]
    return []


def _degraded(sw: Software, callee: str, error: str) -> str:
    """An optional dependency failed: the program logs a warning and answers without it."""
    if sw.runtime == "go":
        return f'level=warn msg="optional dependency failed, serving without it" upstream={callee} error="{error}"'
    if sw.runtime == "node":
        return f"[{sw.program}] warn: {callee} unavailable ({error}), rendering without it"
    if sw.runtime == "python":
        return f"WARNING:{sw.program}:{callee} unavailable ({error}), using fallback"
    return f"WARN 1 --- [nio-8080-exec-2] c.a.{sw.program}.client.{callee.title()}Client : {callee} unavailable " \
           f"({error}), continuing without it"


def _failed(sw: Software, method: str, url: str, callee: str, error: str, millis: int) -> list[str]:
    if sw.runtime == "go":
        return [f'level=error msg="upstream request failed" upstream={callee} error="{error}"',
                f'level=info msg="request" method={method} path={url} status=503 duration_ms={millis}']
    if sw.runtime == "node":
        return [f"[{sw.program}] error: request to {callee} failed: {error}",
                f"[{sw.program}] info: {method} {url} 502 {millis}ms"]
    if sw.runtime == "python":
        return [f"ERROR:{sw.program}:call to {callee} failed: {error}",
                f'INFO:     10.244.1.9:51514 - "{method} {url} HTTP/1.1" 503 Service Unavailable']
    if sw.runtime == "java":
        return [f"ERROR 1 --- [nio-8080-exec-3] c.a.{sw.program}.client.{callee.title()}Client : call to {callee} "
                f"failed: {error}", f"WARN 1 --- [nio-8080-exec-3] c.a.{sw.program}.api.Controller : "
                f"{method} {url} 503 ({millis} ms)"]
    return []


def _periodic(sw: Software, ts: float, inbound: Sequence[Inbound]) -> list[str]:
    """What a data store prints in steady state (and the authentication failures its clients cause, and the file
    operations IOChaos fails: PostgreSQL reports each failed read or write as an ERROR of the query)."""
    if sw.runtime == "postgres":
        eio = max((float(share) for what, share, since in inbound if what == "eio" and ts >= since), default=0.0)
        if eio and _fraction(ts, "eio") < min(0.9, 0.3 + eio):
            if _fraction(ts, "op") < 0.7:
                return ['ERROR:  could not read block 7 in file "base/16384/16397": Input/output error']
            return [f'ERROR:  could not write to file "pg_wal/xlogtemp.{int(_fraction(ts) * 900) + 60}": '
                    f'Input/output error']
        users = [user for what, user, since in inbound if what == "auth" and ts >= since]
        if users and _fraction(ts, "auth") < 0.7:
            user = users[int(_fraction(ts, "who") * len(users))]
            return [f'FATAL:  password authentication failed for user "{user}"',
                    'DETAIL:  Connection matched file "/var/lib/postgresql/data/pgdata/pg_hba.conf" line 128: '
                    '"host all all all scram-sha-256"']
        if int(ts) % 300 < REQUEST_EVERY_S:
            return ["LOG:  checkpoint starting: time",
                    f"LOG:  checkpoint complete: wrote {int(_fraction(ts) * 400) + 20} buffers"]
        return []
    if sw.runtime == "redis" and int(ts) % 300 < REQUEST_EVERY_S:
        stamp = datetime.fromtimestamp(ts, UTC).strftime("%d %b %Y %H:%M:%S.000")
        return [f"1:M {stamp} * 100 changes in 300 seconds. Saving...",
                f"1:M {stamp} * Background saving started by pid {int(_fraction(ts) * 900) + 20}",
                f"1:M {stamp} * Background saving terminated with success"]
    return []


def _run_lines(sw: Software | None, run: Run, begin: float, end: float, pod: str, failing: Sequence[FailingEdge],
               inbound: Sequence[Inbound], complete: bool) -> Timed:
    """The lines of one run of the process, from `begin` to `end` (`complete`: the run has ended), each with when
    it was written."""
    out = run.outcome
    lines = [(begin + 0.05 * i, _stamp(sw, begin + 0.05 * i, line)) for i, line in enumerate(out.lines)]
    if out.kind == "crash" and 0 < out.run_s <= out.startup_s and lines:
        lines = lines[:-1]  # killed by its liveness probe while starting: it never got to say it listens
    if out.kind == "hang":
        waiting = out.lines[0] if out.lines else "waiting"
        ticks = int((end - begin) // HANG_EVERY_S) + 1
        return [(begin + HANG_EVERY_S * k, waiting) for k in range(max(0, ticks - MAX_LINES), ticks)]
    if sw is None or out.kind != "run" and not (out.kind == "crash" and out.reason == "OOMKilled"):
        return lines
    ready_at = begin + out.startup_s
    if out.kind == "crash" and complete:
        end = begin + out.run_s  # OOMKilled: the log just stops
    first = max(ready_at, end - REQUEST_EVERY_S * MAX_LINES)
    t = (int(first // REQUEST_EVERY_S) + 1) * REQUEST_EVERY_S
    sampled: Timed = []
    while t <= end:
        produced = _periodic(sw, t, inbound) if sw.runtime in ("postgres", "redis") else \
            _request_line(sw, pod, t, failing)
        sampled.extend((t, _stamp(sw, t, line)) for line in produced)
        t += REQUEST_EVERY_S
    if ready_at < first:
        lines = []  # the start-up lines have scrolled out of the window kept here
    return (lines + sampled)[-MAX_LINES:]


class LazyLog(Mapping[str, list[str]]):
    """A container's `{"current": [...], "previous": [...]}`, each rendered when read.

    Most logs are never read, and rendering them at every reconcile would cost more than the rest of the pass; a
    read of the current log does not render the previous one. A read renders up to the clock's present: the state
    the lines come from holds until the next reconcile pass, and the API syncs before serving a read.
    """

    __slots__ = ("_args", "_at", "_clock", "_bucket", "_end", "_value", "_text", "_source")
    KEYS = ("current", "previous")

    def __init__(self, clock: SimClock | None, at: float, *args: object, source: Run | None = None) -> None:
        self._clock, self._at, self._args, self._source = clock, at, args, source
        self._bucket: int | None = None
        self._end = at
        self._value: dict[str, Timed] = {}
        self._text: dict[str, list[str]] = {}

    def renew(self, clock: SimClock, at: float, run: Run) -> bool:
        """Start over from `at`, as the log `render` would give now, if this is the log of `run` itself following
        `clock` and the caller knows the rest is unchanged (the run's fields, its failing calls, pause and database
        logins); False when a new one must be rendered. Cheaper than copying the run for a new one."""
        if self._clock is not clock or self._source is not run:
            return False
        self._at, self._bucket, self._end, self._value, self._text = at, None, at, {}, {}
        return True

    def timed(self, key: str) -> Timed:
        """The lines of log `key` with the moment each was written."""
        if key not in self.KEYS:
            raise KeyError(key)
        end = max(self._at, self._clock.now()) if self._clock is not None else self._at
        bucket = int(end // REQUEST_EVERY_S)
        if bucket != self._bucket:  # both logs of one bucket are rendered at the moment of its first read
            self._bucket, self._end, self._value, self._text = bucket, end, {}, {}
        lines = self._value.get(key)
        if lines is None:
            name, run, failing, paused, inbound = self._args
            lines = self._value[key] = _render(name, run, self._end, failing, paused, inbound,  # type: ignore[arg-type]
                                               previous=key == "previous")
        return lines

    def __getitem__(self, key: str) -> list[str]:
        timed = self.timed(key)
        text = self._text.get(key)
        if text is None:
            text = self._text[key] = [line for _, line in timed]
        return text

    def __iter__(self) -> Iterator[str]:
        return iter(self.KEYS)

    def __len__(self) -> int:
        return len(self.KEYS)

    def __getstate__(self) -> tuple[float, tuple[object, ...]]:
        return self._at, self._args  # a pickled log (an install template) no longer follows a clock

    def __setstate__(self, state: tuple[float, tuple[object, ...]]) -> None:
        self._at, self._args = state
        self._clock, self._bucket, self._end, self._value, self._text, self._source = None, None, self._at, {}, {}, None


def render(pod: Obj, run: Run, now: float, failing: Sequence[FailingEdge], paused: bool,
           inbound: Sequence[Inbound] = (), clock: SimClock | None = None) -> LazyLog | None:
    """The container's logs from `now` on (rendered when read), or None if it never started."""
    if run.outcome.kind in ("pull_error", "config_error"):
        return None
    return LazyLog(clock, now, pod["metadata"]["name"], copy.copy(run), tuple(failing), paused, tuple(inbound),
                   source=run)


def _render(name: str, run: Run, now: float, failing: Sequence[FailingEdge], paused: bool,
            inbound: Sequence[Inbound], previous: bool) -> Timed:
    """The current log of the container at `now`, or (`previous`) the log of its run before."""
    out = run.outcome
    sw, _ = lookup(run.image)
    if out.kind in ("crash", "start_error"):
        if out.kind == "start_error":
            return []
        k, running, begin, _ = crash_timeline(now - run.since, out.run_s)
        start = run.since + begin
        if not previous:
            return _run_lines(sw, run, start, now if running else start + out.run_s, name, failing, inbound,
                              not running)
        if k > 0:
            prev_start = start - backoff_of(k - 1) - out.run_s
            return _run_lines(sw, run, prev_start, prev_start + out.run_s, name, failing, inbound, True)
        if running and run.restarts_before:
            return _run_lines(sw, run, run.since - out.run_s - 10, run.since - 10, name, failing, inbound, True)
        return []
    if paused:  # pod-failure chaos: the process's lines so far belong to the paused container, the previous one
        return _run_lines(sw, run, run.since, now, name, failing, inbound, out.kind == "complete") if previous else []
    if not previous:
        return _run_lines(sw, run, run.since, now, name, failing, inbound, out.kind == "complete")
    if run.last_term is None:
        return []
    last_end = run.since - 10
    return _run_lines(sw, run, last_end - 3600, last_end, name, (), inbound, True)

