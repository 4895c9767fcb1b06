"""Rollback latency: from an Alertmanager webhook POST to the routing table switched back to the baseline.

Each trial: register a candidate, start a rollout (10 % to the candidate, then a one-hour bake), wait until it bakes
with the split in the routing table, then POST an Alertmanager-shaped rollout alert (as infra/prometheus's
success-rate rule labels it: `agent_sre_rollout=<candidate>`) to `agent-sre alerts serve`, and read the routing
table from S3 the way `route_model` reads it (no cache) until it has no candidate. The rollout then finishes
(candidate rolled_back) before the next trial starts. Everything is a real process on the embedded stack: the
Temporal dev server, SeaweedFS, one `agent-sre worker`, the receiver, and this script.

  POST reply       the receiver's answer (it queried the rollout's status and sent the `rollback` signal)
  signal handled   until the workflow recorded the rollback request (its decision's timestamp)
  table switched   until the routing table in S3 sends new incidents to the baseline: the figure that matters
  rollout closed   until the workflow completed (registry stage, rollback event)

Target (issue 5): table switched p99 < 1 s. Prints a table and replaces the
`## Rollback latency (bench/rollback_latency.py)` section of docs/benchmarks.md.

    .venv/bin/python bench/rollback_latency.py [--trials 100] [--no-docs]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from temporalio.client import Client

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchdocs import provenance, write_section

from agent_sre import stack
from agent_sre.config import Settings, get_settings
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
from agent_sre.stack.isolated import isolated_env
from agent_sre.stack.ports import pick_free_ports
from agent_sre.temporal import connect
from agent_sre.workflows.rollout import ModelRolloutWorkflow

HEADING = "## Rollback latency (bench/rollback_latency.py)"
TARGET_P99_S = 1.0
WARMUP = 3
POLL_S = 0.005
TOKEN = "bench-token"
HOUR = timedelta(hours=1)
PLAN = RolloutPlan(name="bench", steps=[SetWeightStep(weight=10), BakeStep(duration=HOUR), AnalyzeStep()],
                   guardrails=GuardrailConfig(interval=HOUR, lookback=HOUR))
COLUMNS = ("POST reply", "signal handled", "table switched", "rollout closed")


@dataclass
class Trial:
    post_reply_s: float
    signal_handled_s: float
    table_switched_s: float
    rollout_closed_s: float

    def values(self) -> tuple[float, ...]:
        return self.post_reply_s, self.signal_handled_s, self.table_switched_s, self.rollout_closed_s


def webhook(candidate: str) -> bytes:
    """A delivery as Alertmanager makes it for infra/prometheus/rollout-alerts.yml's success-rate alert."""
    labels = {"alertname": "AgentSreModelSuccessRateDropped", "agent_sre_rollout": candidate,
              "model_version": candidate, "severity": "page"}
    alert = {"status": "firing", "labels": labels,
             "annotations": {"summary": f"model {candidate} resolved 20% of its incidents in the last 30 minutes"},
             "startsAt": "2026-01-01T00:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
             "generatorURL": "http://prometheus:9090/graph", "fingerprint": ""}
    group_key = f'{{}}/{{agent_sre_rollout=~".+"}}:{{alertname="{labels["alertname"]}"}}'
    return json.dumps({"version": "4", "groupKey": group_key, "truncatedAlerts": 0, "status": "firing",
                       "receiver": "agent-sre-rollout",
                       "groupLabels": {"alertname": labels["alertname"], "agent_sre_rollout": candidate},
                       "commonLabels": labels, "commonAnnotations": alert["annotations"],
                       "externalURL": "http://alertmanager:9093", "alerts": [alert]}).encode()


def post(url: str, body: bytes) -> dict[str, Any]:
    request = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        reply: dict[str, Any] = json.loads(response.read())  # the receiver's JSON object
    return reply


@contextmanager
def process(args: list[str], log: Path, ready: str) -> Iterator[subprocess.Popen[bytes]]:
    """Run `args` until the block ends, once `ready` shows in its output."""
    proc = subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while ready not in log.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{' '.join(args[1:])} did not start:\n{log.read_text()}")
            time.sleep(0.1)
        yield proc
    finally:
        proc.terminate()
        proc.wait(20)


async def trial(client: Client, settings: Settings, registry: Registry, receiver: str, index: int) -> Trial:
    candidate = f"bench-{index:03d}"
    registry.register(candidate, policy="runbook", by="bench", reason="rollback latency trial")
    request = RolloutRequest(candidate=candidate, baseline="runbook-v1", plan=PLAN, requested_by="bench")
    handle = await start_rollout(client, request, settings)
    while True:  # baking, with the split in the table route_model reads
        status = await handle.query(ModelRolloutWorkflow.status)
        table = read_table(registry.client, settings.s3_bucket)
        if status.step is not None and status.step.kind == "bake" and table is not None and table.candidate:
            break
        await asyncio.sleep(0.02)

    body = webhook(candidate)
    began_wall, began = time.time(), time.perf_counter()
    reply = await asyncio.to_thread(post, f"{receiver}/alerts", body)
    replied = time.perf_counter()
    [receipt] = reply["receipts"]
    if receipt["handling"] != "rollback_signalled":
        raise RuntimeError(f"trial {index}: the receiver did not signal the rollout: {reply}")
    while (table := read_table(registry.client, settings.s3_bucket)) is None or table.candidate is not None:
        await asyncio.sleep(POLL_S)
    switched = time.perf_counter()
    result: RolloutResult = await handle.result()
    closed = time.perf_counter()
    if result.outcome != "rolled_back":
        raise RuntimeError(f"trial {index}: the rollout ended {result.outcome}: {result.reason}")
    [requested] = [d for d in result.decisions if d.action == "rollback requested"]
    return Trial(replied - began, requested.at.timestamp() - began_wall, switched - began, closed - began)


async def run_trials(settings: Settings, receiver: str, n: int) -> list[Trial]:
    registry = Registry.from_settings(settings)
    client = await connect(settings)
    trials = []
    for i in range(WARMUP + n):
        done = await trial(client, settings, registry, receiver, i)
        if i >= WARMUP:
            trials.append(done)
    return trials


def percentile(values: list[float], q: int) -> float:
    """The q-th percentile (inclusive method: the sample's own range, as bench/simulator.py computes it)."""
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args()
    if args.trials < 1:
        parser.error("--trials must be at least 1")
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as data_dir, ExitStack() as running:
        os.environ.update(isolated_env(Path(data_dir)))
        get_settings.cache_clear()
        settings = get_settings()
        asyncio.run(stack.up(settings, ["temporal", "s3"]))
        running.callback(lambda: asyncio.run(stack.down(settings)))
        [port] = pick_free_ports(1, "127.0.0.1")
        cli = [sys.executable, "-m", "agent_sre.cli"]
        running.enter_context(process([*cli, "worker", "--metrics-port", "0"], Path(data_dir) / "worker.log",
                                      "worker on"))
        running.enter_context(process([*cli, "alerts", "serve", "--port", str(port), "--token", TOKEN],
                                      Path(data_dir) / "receiver.log", "alert receiver on"))
        trials = asyncio.run(run_trials(settings, f"http://127.0.0.1:{port}", args.trials))
    load_after = os.getloadavg()[0]

    rows = []
    for name, values in zip(COLUMNS, zip(*(t.values() for t in trials), strict=True), strict=True):
        ms = [v * 1000 for v in values]
        rows.append((name, percentile(ms, 50), percentile(ms, 90), percentile(ms, 99), max(ms)))
    table = Table("from the POST to", "p50 ms", "p90 ms", "p99 ms", "max ms",
                  title=f"Rollback latency, {len(trials)} trials")
    for name, *figures in rows:
        table.add_row(name, *(f"{f:.0f}" for f in figures))
    Console(width=120).print(table)

    p99 = rows[COLUMNS.index("table switched")][3] / 1000
    verdict = "met" if p99 < TARGET_P99_S else "NOT met"
    body = provenance().rstrip(".\n") + (
        f"; 1-minute load average {load_before:.2f} before and {load_after:.2f} after the run (other work on the "
        "machine slows it).\n\n"
        f"{len(trials)} trials after {WARMUP} warm-up ones, one at a time. Each: a rollout of a fresh candidate "
        "baking at 10 %, an Alertmanager-shaped delivery of the success-rate alert (`agent_sre_rollout=<candidate>`) "
        "POSTed to `agent-sre alerts serve`, then the routing table read from S3 as `route_model` reads it, every "
        f"{POLL_S * 1000:.0f} ms, until it has no candidate. Processes: Temporal dev server, SeaweedFS, one worker, "
        "the receiver, this script.\n\n"
        "| from the POST to | p50 ms | p90 ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|\n"
        + "".join(f"| {name} | {p50:.0f} | {p90:.0f} | {p99_:.0f} | {mx:.0f} |\n" for name, p50, p90, p99_, mx in rows)
        + f"\n- Target: table switched p99 < {TARGET_P99_S:g} s: {verdict} ({p99 * 1000:.0f} ms).\n"
        "- signal handled: when the workflow recorded the rollback request (its decision's timestamp, the same "
        "machine's clock).\n")
    if not args.no_docs:
        write_section(HEADING, body)


if __name__ == "__main__":
    main()
