"""A small synchronous client for the simulator's control API (`/sim/v1`), for tools, faults and tests."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from agent_sre.models.scenario import Scenario


class SimulatorError(RuntimeError):
    """The control API refused a request; the message is the server's own."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"simulator returned {status}: {message}")
        self.status = status


class SimulatorClient:
    def __init__(self, base_url: str, timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> bytes:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{self.base_url}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data else {})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                answer: bytes = resp.read()
                return answer
        except urllib.error.HTTPError as exc:
            text = exc.read().decode(errors="replace")
            try:
                text = json.loads(text).get("error", text)
            except (ValueError, AttributeError):
                pass
            raise SimulatorError(exc.code, text) from None

    def _object(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        document: dict[str, Any] = json.loads(self._call(method, path, body))
        return document

    def _objects(self, method: str, path: str, body: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        documents: list[dict[str, Any]] = json.loads(self._call(method, path, body))
        return documents

    def create_env(self, name: str | None = None, apps: list[str] | tuple[str, ...] = ("shop",), seed: int = 0,
                   speed: float | None = None) -> dict[str, Any]:
        """Returns {"name", "server", "speed"}: `server` is the Kubernetes API URL for a kubeconfig, `speed` its
        clock's simulated seconds per real second."""
        body: dict[str, Any] = {"apps": list(apps), "seed": seed}
        if name is not None:
            body["name"] = name
        if speed is not None:
            body["speed"] = speed
        return self._object("POST", "/sim/v1/envs", body)

    def list_envs(self) -> list[dict[str, Any]]:
        return self._objects("GET", "/sim/v1/envs")

    def delete_env(self, name: str) -> None:
        self._call("DELETE", f"/sim/v1/envs/{name}")

    def advance(self, name: str, seconds: float) -> dict[str, Any]:
        return self._object("POST", f"/sim/v1/envs/{name}/advance", {"seconds": seconds})

    def hold(self, name: str, scenario: Scenario) -> list[dict[str, Any]]:
        """Have environment `name` hold `scenario`'s later faults, each due `delay_s` from now; returns them, with
        the simulated time each is due (`agent_sre.simulator.later`)."""
        return self._objects("POST", f"/sim/v1/envs/{name}/held",
                             {"scenario": scenario.model_dump(mode="json")})

    def audit(self, name: str, since: int = 0) -> list[dict[str, Any]]:
        return self._objects("GET", f"/sim/v1/envs/{name}/audit?since={since}")

    def kubeconfig(self, name: str) -> str:
        return self._call("GET", f"/sim/v1/envs/{name}/kubeconfig").decode()

    def healthy(self) -> bool:
        try:
            return self._call("GET", "/healthz") == b"ok"
        except (OSError, SimulatorError):
            return False
