"""Temporal payload encryption: what the server stores is ciphertext, the keys rotate, a wrong key says so, and the
codec server decodes for those allowed."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from google.protobuf import json_format
from pydantic import ValidationError
from temporalio import activity, workflow
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.api.history.v1 import History
from temporalio.client import Client, WorkflowHistory
from temporalio.common import RetryPolicy
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ActivityError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner, Worker

from agent_sre.codec import ENCODING, KEY_ID, EncryptionCodec, PayloadKeyError, codec_app, key_id
from agent_sre.config import Settings, bad_settings
from agent_sre.models.tools import ToolResult
from agent_sre.temporal import data_converter
from agent_sre.workflows.incident import IncidentRemediationWorkflow
from agent_sre.workflows.simulated import SimulatedIncidentWorkflow

KEY, OLD_KEY, OTHER_KEY = (bytes([n]) * 32 for n in (1, 2, 3))
PLANTED = "pl4nted-Db-Passw0rd-7731"
HISTORIES = Path(__file__).with_name("histories")


def b64(key: bytes) -> str:
    return base64.b64encode(key).decode()


def keyed(key: bytes, *old: bytes) -> Settings:
    return Settings(payload_key=b64(key), payload_old_keys=",".join(map(b64, old)) or None)


def plain(text: str) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(text).encode())


async def test_a_sealed_payload_hides_its_data_and_opens_again() -> None:
    codec = EncryptionCodec([KEY])
    [sealed] = await codec.encode([plain(PLANTED)])
    assert sealed.metadata["encoding"] == ENCODING and sealed.metadata[KEY_ID] == key_id(KEY).encode()
    assert PLANTED.encode() not in sealed.SerializeToString()
    assert await codec.decode([sealed]) == [plain(PLANTED)]
    assert (await codec.encode([plain(PLANTED)]))[0].data != sealed.data  # a fresh nonce each time


async def test_unsealed_payloads_pass_through() -> None:
    """Histories written before encryption was turned on still decode (and replay)."""
    assert await EncryptionCodec([KEY]).decode([plain("old")]) == [plain("old")]


async def test_keys_rotate_and_a_missing_key_fails_clearly() -> None:
    [by_old] = await EncryptionCodec([OLD_KEY]).encode([plain(PLANTED)])
    rotated = EncryptionCodec(keyed(KEY, OLD_KEY).payload_keys)
    assert await rotated.decode([by_old]) == [plain(PLANTED)]
    assert (await rotated.encode([plain("new")]))[0].metadata[KEY_ID] == key_id(KEY).encode()
    with pytest.raises(PayloadKeyError, match=f"sealed with key '{key_id(OLD_KEY)}'.*AGENT_SRE_PAYLOAD_OLD_KEYS"):
        await EncryptionCodec([KEY]).decode([by_old])


async def test_an_altered_payload_fails_authentication() -> None:
    codec = EncryptionCodec([KEY])
    [sealed] = await codec.encode([plain(PLANTED)])
    sealed.data = sealed.data[:-1] + bytes([sealed.data[-1] ^ 1])
    with pytest.raises(PayloadKeyError, match="fails authentication"):
        await codec.decode([sealed])


def test_a_bad_key_setting_is_named_and_not_repeated() -> None:
    with pytest.raises(ValidationError) as caught:
        Settings(payload_key="c2hvcnQ=")  # 5 bytes
    message = bad_settings(caught.value)
    assert message.startswith("error: AGENT_SRE_PAYLOAD_KEY: Value error, decodes to 5 bytes")
    assert "c2hvcnQ" not in message
    assert Settings().payload_keys == [] and data_converter(Settings()) is pydantic_data_converter


@activity.defn
def read_secret(name: str) -> ToolResult:
    return ToolResult(tool="get_resource", ok=True, output=f"secret {name}\ndata:\n  password: {PLANTED}")


@activity.defn
def connect_with_it() -> None:
    raise RuntimeError(f"auth failed for postgres with {PLANTED}")


@workflow.defn(sandboxed=False)
class ReadsASecret:
    """A workflow whose input, activity result, failure and result all carry the planted secret."""

    @workflow.run
    async def run(self, name: str) -> str:
        read = await workflow.execute_activity(read_secret, name, start_to_close_timeout=timedelta(seconds=10))
        try:
            await workflow.execute_activity(connect_with_it, start_to_close_timeout=timedelta(seconds=10),
                                            retry_policy=RetryPolicy(maximum_attempts=1))
        except ActivityError as err:
            return f"{read.output}\n{err.cause}"
        return read.output


Run = Callable[[Settings | None], Awaitable[tuple[Client, str, bytes]]]


@pytest.fixture
async def run_workflow(time_skipping_env: Callable[[], Awaitable[WorkflowEnvironment]]) -> Run:
    """Run `ReadsASecret` with the data converter of `settings` (plain when None): the client, the result, and the
    history's bytes as the server stores and serves them to anyone without the key."""
    env = await time_skipping_env()

    async def run(settings: Settings | None) -> tuple[Client, str, bytes]:
        converter = data_converter(settings) if settings else pydantic_data_converter
        client = Client(**{**env.client.config(), "data_converter": converter})
        queue = f"codec-{uuid.uuid4()}"
        with ThreadPoolExecutor(2) as executor:
            async with Worker(client, task_queue=queue, workflows=[ReadsASecret],
                              activities=[read_secret, connect_with_it], activity_executor=executor,
                              workflow_runner=UnsandboxedWorkflowRunner()):
                result = await client.execute_workflow(ReadsASecret.run, f"db-{PLANTED}", id=queue, task_queue=queue)
        raw = Client(**{**env.client.config(), "data_converter": pydantic_data_converter})
        history = await raw.get_workflow_handle(queue).fetch_history()
        return client, result, History(events=history.events).SerializeToString()

    return run


async def test_the_history_holds_no_plaintext_of_a_planted_secret(run_workflow: Run) -> None:
    _, result, unsealed = await run_workflow(None)
    assert PLANTED.encode() in unsealed  # what issue #37 found: input, tool output and error, in the clear
    client, result, sealed = await run_workflow(keyed(KEY))
    assert PLANTED.encode() not in sealed
    assert result.count(PLANTED) == 3  # with the key, the client reads it all: input, tool output, error message
    assert f"auth failed for postgres with {PLANTED}" in result

    events = WorkflowHistory("x", list(History.FromString(sealed).events)).events
    [completed] = [e.activity_task_completed_event_attributes for e in events
                   if e.HasField("activity_task_completed_event_attributes")]
    [output] = await client.data_converter.decode(completed.result.payloads, [ToolResult])
    assert output.output.endswith(f"password: {PLANTED}")
    wrong = Client(**{**client.config(), "data_converter": data_converter(keyed(OTHER_KEY))})
    with pytest.raises(PayloadKeyError, match="no configured key"):
        await wrong.data_converter.decode(completed.result.payloads, [ToolResult])


async def test_a_failed_workflow_error_is_sealed_too(run_workflow: Run) -> None:
    """Failure messages travel as encoded attributes: the server's copy of an error names no secret."""
    _, _, sealed = await run_workflow(keyed(KEY))
    assert b"auth failed for postgres" not in sealed and b"Encoded failure" in sealed


@pytest.mark.parametrize("recorded", ["simulated-incident.json", "incident-remediation.json"])
async def test_histories_recorded_without_a_codec_replay_with_one(recorded: str) -> None:
    saved = json.loads((HISTORIES / recorded).read_text())
    history = WorkflowHistory.from_json(saved["workflow_id"], saved["history"])
    await Replayer(workflows=[IncidentRemediationWorkflow, SimulatedIncidentWorkflow],
                   data_converter=data_converter(keyed(KEY))).replay_workflow(history)


UI = "http://127.0.0.1:8233"


async def codec_server(token: str | None = None) -> TestClient:
    client = TestClient(TestServer(codec_app(EncryptionCodec([KEY]), [UI], token)))
    await client.start_server()
    return client


def body(*payloads: Payload) -> str:
    return json_format.MessageToJson(Payloads(payloads=payloads))


async def test_the_codec_server_round_trips_for_the_ui() -> None:
    server = await codec_server()
    try:
        encoded = await server.post("/encode", data=body(plain(PLANTED)), headers={"Origin": UI})
        assert encoded.status == 200 and encoded.headers["Access-Control-Allow-Origin"] == UI
        text = await encoded.text()
        assert PLANTED not in base64.b64decode(json.loads(text)["payloads"][0]["data"]).decode(errors="replace")
        decoded = await server.post("/decode", data=text, headers={"Content-Type": "application/json"})
        assert json_format.Parse(await decoded.text(), Payloads()).payloads == [plain(PLANTED)]
        preflight = await server.options("/decode", headers={"Origin": UI, "Access-Control-Request-Method": "POST"})
        assert "authorization" in preflight.headers["Access-Control-Allow-Headers"]
        elsewhere = await server.options("/decode", headers={"Origin": "https://evil.example"})
        assert "Access-Control-Allow-Origin" not in elsewhere.headers
        [foreign] = await EncryptionCodec([OTHER_KEY]).encode([plain("x")])
        refused = await server.post("/decode", data=body(foreign))
        assert refused.status == 400 and "no configured key" in (await refused.json())["error"]
    finally:
        await server.close()


async def test_the_codec_server_wants_its_token() -> None:
    server = await codec_server(token="s3rver-token")
    try:
        assert (await server.post("/decode", data=body(plain("x")))).status == 401
        wrong = await server.post("/decode", data=body(plain("x")), headers={"Authorization": "Bearer nope"})
        assert wrong.status == 401
        right = await server.post("/decode", data=body(plain("x")), headers={"Authorization": "Bearer s3rver-token"})
        assert right.status == 200
    finally:
        await server.close()
