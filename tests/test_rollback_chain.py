"""The whole rollback chain, every part a real process: a rollout sends half of the new incidents to a degraded
candidate; real incidents (faults injected into the simulator, remediated by the worker) show the degradation in
the worker's own metrics; Prometheus scrapes them and evaluates the shipped rules (infra/prometheus/, with `for`
shortened); Alertmanager (infra/alertmanager/) posts the alert to `agent-sre alerts serve`; the receiver signals
the rollout, which rolls back; the routing then sends every new incident to the baseline.

Needs Debian's Prometheus and Alertmanager: apt-get install -y prometheus prometheus-alertmanager.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
import yaml
from isolated_workers import isolated_queues, terminate_running
from prometheus_client.parser import text_string_to_metric_families
from store_fixtures import settings_with_own_bucket
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment
from worker_process import start_worker, stop_worker

from agent_sre import faults
from agent_sre.activities.routing import RoutingActivities
from agent_sre.config import Settings
from agent_sre.models.incident import Incident, RemediationLimits
from agent_sre.models.remediation import IncidentOutcome
from agent_sre.models.rollout import (
    AnalyzeStep,
    BakeStep,
    GuardrailConfig,
    RolloutPlan,
    RolloutRequest,
    RolloutResult,
    SetWeightStep,
)
from agent_sre.registry import Registry
from agent_sre.rollout.client import start_rollout
from agent_sre.rollout.routing import read_table
from agent_sre.scenarios import load_scenarios
from agent_sre.simulator.client import SimulatorClient
from agent_sre.stack.ports import pick_free_ports
from agent_sre.temporal import connect, start_incident
from agent_sre.tools.client import api_client
from agent_sre.workflows.rollout import ModelRolloutWorkflow

PROMETHEUS = shutil.which("prometheus")
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
INFRA = Path(__file__).resolve().parent.parent / "infra"
DASHBOARD = INFRA / "grafana" / "agent-sre-rollout.json"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.asyncio(loop_scope="session"),
    pytest.mark.skipif(PROMETHEUS is None or ALERTMANAGER is None, reason="needs Prometheus and Alertmanager "
                       "(Debian): apt-get install -y prometheus prometheus-alertmanager"),
]

TOKEN = "chain-token-5c1e"
BASELINE = "runbook-v1"
CANDIDATE = "scripted-noop"  # the scripted policy without a script: claims a fix at once, fixes nothing
HOUR = timedelta(hours=1)
# Half the traffic to the candidate for an hour; the guardrails would look only after that hour, so the alert chain
# is what rolls it back.
PLAN = RolloutPlan(name="alert-chain", steps=[SetWeightStep(weight=50), BakeStep(duration=HOUR), AnalyzeStep()],
                   guardrails=GuardrailConfig(interval=HOUR, lookback=HOUR))
CONCURRENT_INCIDENTS = 4
CHAIN_TIMEOUT_S = 240.0


@dataclass
class Chain:
    client: Client
    settings: Settings
    registry: Registry
    prometheus: str
    receiver: str
    tmp: Path


@contextmanager
def process(args: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def prometheus_config(tmp: Path, targets: dict[str, str], alertmanager: str) -> Path:
    """The shipped scrape config and rules, pointed at this test's processes, scraping and evaluating every second;
    the alerts' `for` is shortened so the test does not wait minutes for what the expressions already say."""
    config = yaml.safe_load((INFRA / "prometheus" / "prometheus.yml").read_text())
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    assert {job["job_name"] for job in config["scrape_configs"]} == set(targets)
    for job in config["scrape_configs"]:
        job["static_configs"] = [{"targets": [targets[job["job_name"]]]}]
    config["alerting"]["alertmanagers"] = [{"static_configs": [{"targets": [alertmanager]}]}]
    for rules_file in config["rule_files"]:
        rules = yaml.safe_load((INFRA / "prometheus" / rules_file).read_text())
        for group in rules["groups"]:
            for rule in group["rules"]:
                if "for" in rule:
                    rule["for"] = "1s"
        (tmp / rules_file).write_text(yaml.safe_dump(rules))
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def alertmanager_config(tmp: Path, receiver: str) -> Path:
    """The shipped routing, delivering to this test's receiver with this test's token."""
    config = yaml.safe_load((INFRA / "alertmanager" / "alertmanager.yml").read_text())
    token = tmp / "alerts-token"
    token.write_text(TOKEN)
    for r in config["receivers"]:
        for hook in r.get("webhook_configs", []):
            hook["url"] = f"{receiver}/alerts"
            hook["http_config"]["authorization"]["credentials_file"] = str(token)
    path = tmp / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config))
    return path


async def wait_until(fetch: Any, what: str, timeout_s: float = 60.0, every_s: float = 0.5) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        try:
            value = await fetch()
        except (aiohttp.ClientError, ConnectionError):
            value = None
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f}s waiting for {what}")
        await asyncio.sleep(every_s)


async def ready(http: aiohttp.ClientSession, url: str) -> bool:
    async with http.get(url) as resp:
        return resp.status == 200


@pytest_asyncio.fixture(loop_scope="session")
async def chain(stack: Settings, tmp_path: Path) -> AsyncIterator[Chain]:
    """Worker, receiver, Prometheus and Alertmanager as processes, on a bucket and task queues of this test's own."""
    worker_port, receiver_port, prometheus_port, alertmanager_port = pick_free_ports(4, "127.0.0.1")
    receiver, prometheus = f"http://127.0.0.1:{receiver_port}", f"http://127.0.0.1:{prometheus_port}"
    alertmanager = f"127.0.0.1:{alertmanager_port}"
    with settings_with_own_bucket(stack, "chain") as own, ExitStack() as running:
        settings = isolated_queues(own)
        queues = {"AGENT_SRE_QUEUE_AGENT": settings.queue_agent, "AGENT_SRE_QUEUE_TOOLS": settings.queue_tools,
                  "AGENT_SRE_QUEUE_POLICY": settings.queue_policy, "AGENT_SRE_QUEUE_TRAINING": settings.queue_training}
        worker = start_worker(tmp_path / "worker.log", metrics_port=worker_port, **queues)
        running.callback(stop_worker, worker)
        running.enter_context(process([sys.executable, "-m", "agent_sre.cli", "alerts", "serve", "--port",
                                       str(receiver_port), "--token", TOKEN], tmp_path / "receiver.log"))
        targets = {"agent-sre-worker": f"127.0.0.1:{worker_port}", "agent-sre-alerts": f"127.0.0.1:{receiver_port}",
                   "agent-sre-simulator": f"{stack.sim_host}:{stack.sim_port}"}
        assert PROMETHEUS is not None and ALERTMANAGER is not None
        running.enter_context(process([
            PROMETHEUS, f"--config.file={prometheus_config(tmp_path, targets, alertmanager)}",
            f"--storage.tsdb.path={tmp_path / 'prometheus'}", f"--web.listen-address=127.0.0.1:{prometheus_port}"],
            tmp_path / "prometheus.log"))
        running.enter_context(process([
            ALERTMANAGER, f"--config.file={alertmanager_config(tmp_path, receiver)}",
            f"--storage.path={tmp_path / 'alertmanager'}", f"--web.listen-address={alertmanager}",
            "--cluster.listen-address="], tmp_path / "alertmanager.log"))
        async with aiohttp.ClientSession() as http:
            for url in (f"{receiver}/healthz", f"{prometheus}/-/ready", f"http://{alertmanager}/-/ready"):
                await wait_until(lambda url=url: ready(http, url), f"{url} to answer", timeout_s=90)
        client = await connect(settings)
        yield Chain(client, settings, Registry.from_settings(own), prometheus, receiver, tmp_path)


class Incidents:
    """Real incidents, one after another on a few lanes: a fault injected into a fresh simulator environment, the
    remediation started as the receiver starts it (no policy named: the routing activity decides)."""

    def __init__(self, chain: Chain) -> None:
        self.chain = chain
        self.sim = SimulatorClient(chain.settings.sim_url)
        self.scenario = next(s for s in load_scenarios() if s.fault == "bad_image")  # the runbook fixes it
        self.outcomes: list[IncidentOutcome] = []
        self.workflow_ids: list[str] = []

    def _inject(self) -> tuple[str, Incident]:
        env = self.sim.create_env(apps=[self.scenario.app], seed=self.scenario.seed)
        faults.inject(api_client(env["server"]), self.scenario)
        return env["name"], Incident(id=uuid.uuid4().hex[:12], alert=self.scenario.alert,
                                     namespace=self.scenario.namespace, kubeconfig=env["server"],
                                     scenario=self.scenario, limits=RemediationLimits(settle_s=1.0))

    async def one(self) -> IncidentOutcome:
        env, incident = await asyncio.to_thread(self._inject)
        try:
            started = await start_incident(self.chain.client, incident, settings=self.chain.settings)
            self.workflow_ids.append(started.workflow_id)
            outcome: IncidentOutcome = await asyncio.wait_for(started.handle.result(), timeout=120)
        finally:
            await asyncio.to_thread(self.sim.delete_env, env)
        self.outcomes.append(outcome)
        return outcome

    async def until(self, done: asyncio.Event) -> None:
        async def lane() -> None:
            while not done.is_set():
                await self.one()

        await asyncio.gather(*(lane() for _ in range(CONCURRENT_INCIDENTS)))

    def served(self, version: str) -> list[IncidentOutcome]:
        return [o for o in self.outcomes if o.model_version == version]


async def prometheus_alerts(chain: Chain, http: aiohttp.ClientSession, name: str) -> list[dict[str, Any]]:
    async with http.get(f"{chain.prometheus}/api/v1/alerts") as resp:
        alerts = (await resp.json())["data"]["alerts"]
    return [a for a in alerts if a["labels"]["alertname"] == name and a["state"] == "firing"]


async def receiver_handled(chain: Chain, http: aiohttp.ClientSession, handling: str) -> float:
    async with http.get(f"{chain.receiver}/metrics") as resp:
        text = await resp.text()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "agent_sre_alerts_received_total" and s.labels.get("handling") == handling)


async def query(chain: Chain, http: aiohttp.ClientSession, expr: str) -> list[dict[str, Any]]:
    async with http.get(f"{chain.prometheus}/api/v1/query", params={"query": expr}) as resp:
        body = await resp.json()
    assert body["status"] == "success", body
    return body["data"]["result"]


async def test_a_degraded_candidate_is_rolled_back_by_the_alert_chain(chain: Chain) -> None:
    chain.registry.register(CANDIDATE, policy="scripted", by="test", reason="a candidate that fixes nothing")
    request = RolloutRequest(candidate=CANDIDATE, baseline=BASELINE, plan=PLAN, requested_by="test",
                             reason="alert chain test")
    rollout = await start_rollout(chain.client, request, chain.settings)
    incidents = Incidents(chain)
    done = asyncio.Event()
    try:
        async def split() -> bool:
            return (await rollout.query(ModelRolloutWorkflow.status)).weight == 50

        await wait_until(split, "the rollout to route 50% to the candidate")
        table = read_table(chain.registry.client, chain.settings.s3_bucket)
        assert table is not None and table.candidate is not None and table.weight == 50

        serving = asyncio.create_task(incidents.until(done))
        try:
            result: RolloutResult = await asyncio.wait_for(rollout.result(), timeout=CHAIN_TIMEOUT_S)
        except TimeoutError:
            status = await rollout.query(ModelRolloutWorkflow.status)
            pytest.fail(f"no rollback after {CHAIN_TIMEOUT_S:.0f}s: {len(incidents.served(CANDIDATE))} incidents "
                        f"served by {CANDIDATE}, {len(incidents.served(BASELINE))} by {BASELINE}; rollout "
                        f"{status.phase}, decisions {[d.action for d in status.decisions]} (logs in {chain.tmp})")
        finally:
            done.set()
            await serving

        # The rollout was rolled back by the alert, through the receiver's signal, not by its own checks.
        assert result.outcome == "rolled_back", result
        assert result.reason.startswith(f"alert AgentSreModelSuccessRateDropped firing: model {CANDIDATE} "
                                        "resolved 0% of its incidents"), result.reason
        assert [d.by for d in result.decisions if d.action == "rollback requested"] == ["signal"]
        assert result.decisions[-1].action == "rolled back" and result.decisions[-1].by == "rollout:signal"
        assert chain.registry.get(CANDIDATE).stage == "rolled_back"
        # What Prometheus saw came from real incidents: the candidate resolved none, the baseline most.
        degraded, baseline = incidents.served(CANDIDATE), incidents.served(BASELINE)
        assert len(degraded) >= 10 and len(baseline) >= 10, (len(degraded), len(baseline))
        assert all(o.outcome != "resolved" for o in degraded)
        assert sum(o.outcome == "resolved" for o in baseline) > 0.5 * len(baseline)

        # The routing table has switched: every new incident goes to the baseline, as route_model reads it.
        table = read_table(chain.registry.client, chain.settings.s3_bucket)
        assert table is not None and table.candidate is None and table.weight == 0
        probes = [Incident(id=f"after-{i}", namespace="shop", report="checkout fails") for i in range(50)]
        route_model = RoutingActivities(chain.registry).route_model
        routed = {ActivityEnvironment().run(route_model, probe).version for probe in probes}
        assert routed == {BASELINE}
        after = [await incidents.one() for _ in range(2)]
        assert {o.model_version for o in after} == {BASELINE}

        async with aiohttp.ClientSession() as http:
            # The rollback itself is alerted on, and delivered: the receiver finds no rollout left to roll back.
            [rolled_back] = await wait_until(lambda: prometheus_alerts(chain, http, "AgentSreModelRolledBack"),
                                             "the rollback alert", timeout_s=60)
            assert rolled_back["labels"] | {"candidate": CANDIDATE, "trigger": "signal",
                                            "agent_sre_rollout": CANDIDATE} == rolled_back["labels"]
            await wait_until(lambda: receiver_handled(chain, http, "no_rollout_running"),
                             "Alertmanager to deliver the rollback alert", timeout_s=60)
            assert await receiver_handled(chain, http, "rollback_signalled") >= 1
            await dashboard_shows_the_rollout(chain, http)
    finally:
        await terminate_running(chain.client, [rollout.id, *incidents.workflow_ids])


async def dashboard_shows_the_rollout(chain: Chain, http: aiohttp.ClientSession) -> None:
    """The Grafana dashboard's queries, run against this Prometheus, show what happened."""
    panels = {p["title"]: [t["expr"] for t in p["targets"]] for p in json.loads(DASHBOARD.read_text())["panels"]}

    async def run(title_start: str) -> dict[str, float]:
        [(title, [expr, *_])] = [(t, e) for t, e in panels.items() if t.startswith(title_start)]
        expr = expr.replace("$__rate_interval", "1m").replace("$window", "10m").replace("$__range", "10m")
        return {",".join(r["metric"].values()): float(r["value"][1]) for r in await query(chain, http, expr)}

    split = await run("Traffic split")
    assert set(split) == {CANDIDATE, BASELINE} and abs(sum(split.values()) - 1) < 1e-9, split
    success = await run("Success rate by model version")
    assert success[CANDIDATE] == 0 and success[BASELINE] > 0.5, success
    assert await run("Time to mitigate"), "no time to mitigate recorded"
    rollbacks = await run("Rollbacks by candidate")
    assert rollbacks == {f"{CANDIDATE},signal": 1.0}, rollbacks
