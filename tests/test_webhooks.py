"""What leaves by webhook is redacted: escalation notices (with the incident's own secrets removed) and rollback
notices, as a local HTTP server receives them; and the rollback's log line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from trajectory_factory import make_trajectory, step

from agent_sre.activities.escalation import notify_escalation
from agent_sre.models.alert import Alert
from agent_sre.models.rollout import RollbackEvent
from agent_sre.models.tools import ToolCall, ToolResult
from agent_sre.outcome import escalation_notice
from agent_sre.rollout import events
from agent_sre.webhooks import post_json, receiving

AT = datetime(2026, 3, 14, 9, 30, tzinfo=UTC)
SECRET_YAML = ("apiVersion: v1\nkind: Secret\nmetadata:\n  name: db-credentials\ndata:\n  username: cart_service\n"
               "  password: Zq8-opaque-Pw\n")
ENV = "DB_HOST=db.shop.svc\nDB_PASSWORD=Zq8-opaque-Pw\nAWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE\n"


@pytest.fixture
def received() -> Iterator[tuple[str, list[bytes]]]:
    """A webhook receiver on a free port: its URL and the bodies POSTed to it."""
    with receiving() as endpoint:
        yield endpoint


def test_post_json_redacts_any_body(received: tuple[str, list[bytes]]) -> None:
    url, bodies = received
    assert post_json(url, {"text": "db password=hunter22, key AKIAIOSFODNN7EXAMPLE, mail ops@acme.io"}) == 204
    assert json.loads(bodies[0]) == {"text": "db password=<redacted:secret>, key <redacted:aws_key>, "
                                             "mail <redacted:email>"}


def test_an_escalation_that_restates_what_the_agent_read(received: tuple[str, list[bytes]]) -> None:
    """The attack of issue #37: the diagnosis quotes the password from the Secret, the key id and an e-mail."""
    url, bodies = received
    restated = "cart logs in with Zq8-opaque-Pw (key AKIAIOSFODNN7EXAMPLE), owner ops@acme.io"
    t = make_trajectory(
        [step(ToolCall(tool="get_resource", args={"kind": "secret", "name": "db-credentials"}),
              ToolResult(tool="get_resource", ok=True, output=SECRET_YAML)),
         step(ToolCall(tool="describe", args={"kind": "deployment", "name": "cart"}),
              ToolResult(tool="describe", ok=True, output=ENV)),
         step(ToolCall(tool="set_env", args={"deployment": "cart", "container": "cart", "name": "DB_PASSWORD",
                                             "value": "N3w-opaque-Pw"}),
              ToolResult(tool="set_env", ok=True, output="deployment.apps/cart env updated"))],
        alert=Alert(labels={"alertname": "CartDown", "namespace": "shop"}), termination="escalated", outcome=None)
    t.diagnosis, t.summary = restated, f"set it to N3w-opaque-Pw; {restated}"
    notice = escalation_notice(t, AT)
    assert notice_leaks(notice.model_dump_json()) == []
    assert notice.diagnosis == "cart logs in with <redacted:secret> (key <redacted:aws_key>), owner <redacted:email>"
    assert notice.workflow_id == t.workflow_id and notice.namespace == "shop"

    assert notify_escalation(url, notice) == 204
    assert notice_leaks(bodies[0].decode()) == []
    assert json.loads(bodies[0])["diagnosis"] == notice.diagnosis


def notice_leaks(text: str) -> list[str]:
    return [s for s in ("Zq8-opaque-Pw", "N3w-opaque-Pw", "AKIAIOSFODNN7EXAMPLE", "ops@acme.io", "cart_service")
            if s in text]


def test_rollback_notices_and_log_line_are_redacted(received: tuple[str, list[bytes]],
                                                    caplog: pytest.LogCaptureFixture) -> None:
    url, bodies = received
    event = RollbackEvent(rollout_id="rollout-v7", candidate="v7", baseline="v6", trigger="analysis",
                          reason="v7 escalated: agent said token=ghp_16C7e42F292c6912E7710c838347Ae178B4a is stale",
                          at=AT, notify_url=url)
    assert events.post_webhook(url, event) == 204
    line = events.record_rollback(event)
    for text in (bodies[0].decode(), line, caplog.text):
        assert "ghp_16C7" not in text
    assert json.loads(bodies[0])["reason"] == "v7 escalated: agent said token=<redacted:token> is stale"
    assert json.loads(bodies[0])["rollout_id"] == "rollout-v7"
