"""The simulator over HTTP: the Kubernetes API per environment, a small control API, and Prometheus metrics.

Layout: `/envs/E/...` is environment E's Kubernetes API (kubeconfig `server: http://HOST:PORT/envs/E`), bare
Kubernetes paths are the "default" environment, `/sim/v1/...` creates, advances and inspects environments
(and hands one the faults of a scenario that arrive later).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import signal
import ssl
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web
from pydantic import ValidationError

from agent_sre.kube.times import rfc3339
from agent_sre.models.scenario import Scenario
from agent_sre.simulator import api
from agent_sre.simulator.simulator import Simulator

SIMULATOR_KEY: web.AppKey[Simulator] = web.AppKey("simulator", Simulator)
CLOSING_KEY: web.AppKey[asyncio.Event] = web.AppKey("closing", asyncio.Event)
WATCH_POLL_S = 0.2  # real seconds between a watch's looks at its environment
WATCH_MAX_S = 1800.0  # the apiserver's default longest watch
LOG_POLL_S = 0.2  # real seconds between a followed log's looks at its container
PROMETHEUS_TYPE = "text/plain; version=0.0.4"
log = logging.getLogger(__name__)


def kubeconfig_yaml(server_url: str, context_name: str, namespace: str | None = None) -> str:
    """A kubeconfig for an insecure (plain HTTP, no auth) server, usable by kubectl and the Python client."""
    context: dict[str, Any] = {"cluster": context_name, "user": context_name}
    if namespace:
        context["namespace"] = namespace
    doc = {"apiVersion": "v1", "kind": "Config", "preferences": {},
           "clusters": [{"name": context_name, "cluster": {"server": server_url}}],
           "users": [{"name": context_name, "user": {}}],
           "contexts": [{"name": context_name, "context": context}],
           "current-context": context_name}
    text: str = yaml.safe_dump(doc, sort_keys=False)
    return text


def write_kubeconfig(path: str | Path, server_url: str, context_name: str, namespace: str | None = None) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(kubeconfig_yaml(server_url, context_name, namespace))
    return path


def _env_url(request: web.Request, env: str) -> str:
    return f"{request.scheme}://{request.host}/envs/{env}"


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _abort(error: type[web.HTTPException], message: str) -> web.HTTPException:
    """An exception aiohttp turns into a JSON error response (for helpers that cannot return one)."""
    return error(text=json.dumps({"error": message}), content_type="application/json")


async def _json_body(request: web.Request) -> dict[str, Any]:
    if not request.can_read_body:
        return {}
    try:
        body = await request.json()
    except ValueError as exc:
        raise _abort(web.HTTPBadRequest, f"invalid JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise _abort(web.HTTPBadRequest, "the body must be a JSON object")
    return body


# --- control API --------------------------------------------------------------------------------------------------

async def create_env(request: web.Request) -> web.Response:
    sim = request.app[SIMULATOR_KEY]
    body = await _json_body(request)
    unknown = set(body) - {"name", "apps", "seed", "speed", "clock"}
    if unknown:
        return _error(400, f"unknown fields: {', '.join(sorted(unknown))} (allowed: name, apps, seed, speed, clock)")
    apps, seed, speed, name = body.get("apps", ["shop"]), body.get("seed", 0), body.get("speed"), body.get("name")
    clock = body.get("clock", "fixed")  # episodes' environments start at SIM_EPOCH, reproducibly
    if clock not in ("fixed", "wall"):
        return _error(400, "clock must be fixed or wall")
    if not isinstance(apps, list) or not all(isinstance(a, str) for a in apps):
        return _error(400, "apps must be a list of app names")
    if not isinstance(seed, int) or isinstance(seed, bool):
        return _error(400, "seed must be an integer")
    if speed is not None and (not isinstance(speed, int | float) or isinstance(speed, bool)):
        return _error(400, "speed must be a number")
    if name is not None and not isinstance(name, str):
        return _error(400, "name must be a string")
    try:
        cluster = sim.create_env(name=name, apps=apps, seed=seed, speed=speed, clock=clock)
    except (ValueError, KeyError) as exc:
        status = 409 if "already exists" in str(exc) else 400
        return _error(status, str(exc).strip("'\""))
    except Exception as exc:  # the workload model failed to build the environment: say why, not just "500"
        log.exception("creating environment %r failed", name)
        return _error(500, f"creating the environment failed: {type(exc).__name__}: {exc}")
    return web.json_response({"name": cluster.name, "server": _env_url(request, cluster.name),
                              "speed": cluster.clock.speed}, status=201)


def _env_or_404(request: web.Request) -> tuple[Simulator, str]:
    sim, name = request.app[SIMULATOR_KEY], request.match_info["env"]
    if name not in sim.envs:
        absence = sim.absence(name)
        raise _abort(web.HTTPGone if absence.code == 410 else web.HTTPNotFound, absence.message)
    return sim, name


async def list_envs(request: web.Request) -> web.Response:
    sim = request.app[SIMULATOR_KEY]
    return web.json_response([{"name": name, "server": _env_url(request, name),
                               "now": rfc3339(cluster.clock.now()), "speed": cluster.clock.speed}
                              for name, cluster in sorted(sim.envs.items())])


async def delete_env(request: web.Request) -> web.Response:
    sim, name = _env_or_404(request)
    sim.delete_env(name)
    return web.json_response({"name": name, "deleted": True})


async def advance(request: web.Request) -> web.Response:
    sim, name = _env_or_404(request)
    seconds = (await _json_body(request)).get("seconds")
    if not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds < 0:
        return _error(400, "seconds must be a non-negative number")
    now = sim.advance(name, float(seconds))
    return web.json_response({"name": name, "now": rfc3339(now), "now_ts": now})


async def hold(request: web.Request) -> web.Response:
    """Hold a scenario's later faults in the environment (`later.hold`): `{"scenario": {...}}`."""
    from agent_sre.simulator import later  # the fault catalog: imported on use, as the workload model is

    sim, name = _env_or_404(request)
    try:
        scenario = Scenario.model_validate((await _json_body(request)).get("scenario"))
    except ValidationError as exc:
        return _error(400, f"scenario: {exc.errors()[0]['msg']} at {'.'.join(map(str, exc.errors()[0]['loc']))}")
    timers = later.hold(sim, name, scenario)
    return web.json_response([{"what": t.what, "at": rfc3339(t.at), "at_ts": t.at} for t in timers], status=201)


async def audit(request: web.Request) -> web.Response:
    sim, name = _env_or_404(request)
    try:
        since = int(request.query.get("since", "0"))
    except ValueError:
        return _error(400, "since must be an integer index into the audit log")
    if since < 0:
        return _error(400, "since must be non-negative")
    return web.json_response([dataclasses.asdict(r) for r in sim.envs[name].audit[since:]])


async def kubeconfig(request: web.Request) -> web.Response:
    _, name = _env_or_404(request)
    return web.Response(text=kubeconfig_yaml(_env_url(request, name), f"agent-sre-{name}"),
                        content_type="application/yaml")


# --- metrics, health and the Kubernetes API ---------------------------------------------------------------------

async def metrics(request: web.Request) -> web.Response:
    from agent_sre.simulator.signals import render_prometheus  # the workload model's signals; imported on use

    sim = request.app[SIMULATOR_KEY]
    if "env" in request.match_info:
        _, name = _env_or_404(request)
        envs = {name: sim.envs[name]}
    else:
        envs = dict(sim.envs)
    with sim.lock:
        for cluster in envs.values():
            cluster.sync()
        text = render_prometheus(envs)
    return web.Response(body=text.encode(), headers={"Content-Type": PROMETHEUS_TYPE})


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def kube(request: web.Request) -> web.StreamResponse:
    query = {key: request.query.getall(key) for key in request.query}
    if api.is_log_follow(request.method, request.path, query):
        return await _stream_log(request, query)
    status, headers, body = api.handle(request.app[SIMULATOR_KEY], request.method, request.path, query,
                                       request.headers, await request.read())
    if status == 200 and api.is_watch(request.method, query):
        return await _stream_watch(request, query, headers, body)
    return web.Response(status=status, body=body, headers=headers)


async def _stream_watch(request: web.Request, query: dict[str, list[str]], headers: dict[str, str],
                        snapshot: bytes) -> web.StreamResponse:
    """Keep a watch open: poll the environment and stream ADDED/MODIFIED/DELETED events until `timeoutSeconds`,
    the client leaves or the server stops (kubectl rollout status, kubectl wait and informers rely on this)."""
    sim = request.app[SIMULATOR_KEY]
    try:
        timeout = min(float((query.get("timeoutSeconds") or [str(WATCH_MAX_S)])[-1]), WATCH_MAX_S)
    except ValueError:
        timeout = WATCH_MAX_S
    response = web.StreamResponse(status=200, headers=headers)
    await response.prepare(request)
    initial, known = api.watch_events({}, snapshot)
    try:
        if (query.get("resourceVersion") or ["0"])[-1] in ("", "0"):
            await response.write(initial)  # a watch from a resourceVersion only wants what changes after it
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        closing = request.app[CLOSING_KEY]
        while loop.time() < deadline and not closing.is_set():
            await asyncio.sleep(WATCH_POLL_S)
            status, _, fresh = api.handle(sim, "GET", request.path, query, request.headers, b"")
            if status != 200:
                break
            events, known = api.watch_events(known, fresh)
            if events:
                await response.write(events)
        await response.write_eof()
    except ConnectionResetError:
        log.debug("watch client left: %s", request.path)
    return response


async def _stream_log(request: web.Request, query: dict[str, list[str]]) -> web.StreamResponse:
    """`kubectl logs -f`: the lines so far, then each new one as the simulated workload writes it, until the
    container stops running (as the kubelet follows a log), the client leaves or the server stops."""
    follow = api.LogFollow(request.app[SIMULATOR_KEY], request.path, query, request.headers)
    status, headers, body = follow.first
    if status != 200 or follow.done:
        return web.Response(status=status, body=body, headers=headers)
    response = web.StreamResponse(status=200, headers=headers)
    await response.prepare(request)
    try:
        await response.write(body)
        closing = request.app[CLOSING_KEY]
        going_on = True
        while going_on and not closing.is_set():
            await asyncio.sleep(LOG_POLL_S)
            if request.transport is None or request.transport.is_closing():
                return response  # the client left
            text, going_on = follow.more()
            if text:
                await response.write(text)
        await response.write_eof()
    except ConnectionResetError:
        log.debug("log follower left: %s", request.path)
    return response


def make_app(simulator: Simulator) -> web.Application:
    app = web.Application(client_max_size=16 * 1024 * 1024)
    app[SIMULATOR_KEY] = simulator
    app[CLOSING_KEY] = asyncio.Event()

    async def closing(app: web.Application) -> None:
        app[CLOSING_KEY].set()  # ends open watches, so shutdown does not wait for them

    app.on_shutdown.append(closing)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/envs/{env}/metrics", metrics)
    app.router.add_post("/sim/v1/envs", create_env)
    app.router.add_get("/sim/v1/envs", list_envs)
    app.router.add_delete("/sim/v1/envs/{env}", delete_env)
    app.router.add_post("/sim/v1/envs/{env}/advance", advance)
    app.router.add_post("/sim/v1/envs/{env}/held", hold)
    app.router.add_get("/sim/v1/envs/{env}/audit", audit)
    app.router.add_get("/sim/v1/envs/{env}/kubeconfig", kubeconfig)
    app.router.add_route("*", "/{tail:.*}", kube)
    return app


class SimulatorServer:
    """Runs the HTTP server on its own thread and event loop (tests, benchmarks, the dev stack in-process).

    `port=0` picks a free port; `url` is known once `start()` returns. With `ssl_context` it serves HTTPS, as an
    apiserver does (in-cluster config speaks nothing else).
    """

    def __init__(self, simulator: Simulator, host: str = "127.0.0.1", port: int = 0,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.simulator, self.host, self.port, self.ssl_context = simulator, host, port, ssl_context
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="sim-http", daemon=True)

    @property
    def url(self) -> str:
        return f"{'https' if self.ssl_context else 'http'}://{self.host}:{self.port}"

    async def _start(self) -> None:
        self._runner = web.AppRunner(make_app(self.simulator), access_log=None, shutdown_timeout=5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self.ssl_context)
        await site.start()
        self.port = self._runner.addresses[0][1]

    def start(self) -> SimulatorServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)
        return self

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()

    def __enter__(self) -> SimulatorServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_forever(simulator: Simulator, host: str, port: int,
                  on_ready: Callable[[str], None] | None = None) -> None:
    """Serve in the foreground until SIGINT or SIGTERM (the `agent-sre sim serve` command).

    `on_ready` gets the server's URL once it listens (with the real port when `port` is 0).
    """

    async def main() -> None:
        runner = web.AppRunner(make_app(simulator), access_log=None, shutdown_timeout=5)
        await runner.setup()
        await web.TCPSite(runner, host, port).start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            if on_ready is not None:
                on_ready(f"http://{client_host(host)}:{runner.addresses[0][1]}")
            await stop.wait()
        finally:
            await runner.cleanup()

    asyncio.run(main())


def client_host(host: str) -> str:
    """The address clients should dial for a listening host: a wildcard bind is reached on loopback."""
    return "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
