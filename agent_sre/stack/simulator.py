"""The cluster simulator (`agent-sre sim serve`) as a stack process, writing its kubeconfig into the data dir."""

from __future__ import annotations

import sys

from agent_sre.config import Settings
from agent_sre.stack.binaries import find_binary
from agent_sre.stack.component import Component, Health, short_error
from agent_sre.stack.ports import PortSpec


class SimulatorServer(Component):
    name = "sim"

    def endpoint(self, settings: Settings) -> str:
        return settings.sim_url

    def ports(self, settings: Settings) -> list[PortSpec]:
        return [PortSpec("simulator HTTP", settings.sim_host, settings.sim_port, "AGENT_SRE_SIM_PORT")]

    def command(self, settings: Settings) -> list[str]:
        # Run the console script with this interpreter so the pid file's argv matches /proc exactly.
        script = find_binary("agent-sre", setting="the agent-sre console script", package="agent-sre (this project)")
        argv = [sys.executable, str(script), "sim", "serve"]
        argv += ["--host", settings.sim_host, "--port", str(settings.sim_port)]
        argv += ["--kubeconfig-out", str(settings.sim_kubeconfig.expanduser().resolve())]
        argv += ["--speed", str(settings.sim_speed), "--clock", settings.sim_clock]
        return argv

    async def probe(self, settings: Settings) -> Health:
        import aiohttp  # imported here to keep `agent-sre --help` quick

        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session,
                session.get(f"{settings.sim_url}/healthz") as response,
            ):
                if response.status == 200:
                    return Health(True, "healthz ok")
                return Health(False, f"/healthz answered HTTP {response.status}")
        except Exception as exc:
            return Health(False, short_error(exc))
