"""Redaction of secrets and personal data: realistic leaks in tool outputs, tool calls and free text."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator

import pytest
from sim_fixtures import NS, seed
from trajectory_factory import make_trajectory, step

from agent_sre.models.alert import Alert
from agent_sre.models.policy import ChatMessage
from agent_sre.models.reward import HumanFeedback
from agent_sre.models.tools import ToolCall, ToolResult
from agent_sre.models.trajectory import Trajectory
from agent_sre.redaction import (
    _RULES,
    _may_match,
    incident_secrets,
    install_log_redaction,
    is_secret_key,
    redact,
    redact_data,
    redact_trajectory,
)
from agent_sre.simulator.simulator import Simulator
from agent_sre.simulator.transport import in_process_api_client
from agent_sre.tools import ToolContext, execute

# What get_resource prints for a secret (see agent_sre/tools/read.py): YAML with the values decoded.
SECRET_YAML = """\
# secret data shown base64-decoded
apiVersion: v1
kind: Secret
metadata:
  name: db-credentials
  namespace: shop
  annotations:
    owner: alice.smith@example.com
type: Opaque
data:
  username: cart_service
  password: Tr0ub4dor&3
  connection: host=db port=5432
  tls.key: |-
    MIIEvQIBADANBgkqhkiG9w0BAQEFAASC
    BKcwggSjAgEAAoIBAQC7
status: {}
"""


def test_secret_manifest_values_are_redacted_and_the_rest_is_kept() -> None:
    out = redact(SECRET_YAML)
    for leaked in ("cart_service", "Tr0ub4dor&3", "host=db port=5432", "MIIEvQIBADAN", "BKcwggSjAgEA",
                   "alice.smith@example.com"):
        assert leaked not in out
    assert "  password: <redacted:secret>" in out
    assert "  username: <redacted:secret>" in out
    assert "  tls.key: |-\n    <redacted:secret>\n    <redacted:secret>\n" in out
    assert "owner: <redacted:email>" in out
    # structure and non-secret fields survive, so the model still learns which secret and key it looked at
    assert "  name: db-credentials" in out and "type: Opaque" in out and out.endswith("status: {}\n")


def test_real_tool_outputs_from_the_simulator() -> None:
    """What the agent actually reads: get_resource decodes the seeded secret, endpoints list pod IPs."""
    simulator = Simulator()
    seed(simulator, "redaction")
    ctx = ToolContext(api=in_process_api_client(simulator, "redaction"), namespace=NS, idempotency_key="r-1",
                      attempt=1, max_chars=4000)

    def output(tool: str, **args: str) -> str:
        result = execute(ToolCall(tool=tool, args=args), ctx)
        assert result.ok, result.output
        return result.output

    secret = output("get_resource", kind="secret", name="db-credentials")
    assert "s3cret" in secret
    assert "s3cret" not in redact(secret) and "password: <redacted:secret>" in redact(secret)
    endpoints = output("get_endpoints", service="cart")
    assert "10.244.1.5" in endpoints
    assert "10.244." not in redact(endpoints) and "<redacted:ip>" in redact(endpoints)
    configmap = output("get_resource", kind="configmap", name="cart-config")
    assert redact(configmap) == configmap


def test_configmap_data_is_not_treated_as_a_secret() -> None:
    configmap = "apiVersion: v1\nkind: ConfigMap\ndata:\n  LOG_LEVEL: debug\n  CART_URL: http://cart:8080\n"
    assert redact(configmap) == configmap


def test_base64_data_of_a_secret_in_json() -> None:
    text = json.dumps({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "api"},
                       "data": {"token": "c2stbGl2ZS0xMjM0NTY3ODkw", "user": "YWRtaW4="}})
    out = redact(text)
    assert json.loads(out)["data"] == {"token": "<redacted:secret>", "user": "<redacted:secret>"}
    assert json.loads(out)["metadata"] == {"name": "api"}


LEAKS = [
    ("DB_PASSWORD=hunter2 ./start.sh", "hunter2", "DB_PASSWORD=<redacted:secret> ./start.sh"),
    ("connecting with password=s3cr3t!", "s3cr3t!", "connecting with password=<redacted:secret>"),
    ("    POSTGRES_PASSWORD:  correct-horse-battery", "correct-horse", "    POSTGRES_PASSWORD:  <redacted:secret>"),
    ('{"api_key": "9f8e7d6c5b4a"}', "9f8e7d6c5b4a", '{"api_key": "<redacted:secret>"}'),
    ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI",
     "aws_secret_access_key = <redacted:secret>"),
    ("key AKIAIOSFODNN7EXAMPLE in env", "AKIAIOSFODNN7EXAMPLE", "key <redacted:aws_key> in env"),
    ("Authorization: Bearer abc123.def456-ghi789", "abc123", "Authorization: Bearer <redacted:token>"),
    ("OPENAI_KEY sk-proj-AbCdEfGhIjKlMnOpQrStUvWx used", "sk-proj-AbCd", "OPENAI_KEY <redacted:api_key> used"),
    ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c end",
     "eyJhbGciOiJIUzI1NiJ9", "jwt <redacted:jwt> end"),
    ("dsn postgres://cart:pa55word@db.shop.svc:5432/cart", "pa55word",
     "dsn postgres://cart:<redacted:secret>@db.shop.svc:5432/cart"),
    ("paged oncall-sre@acme.io about it", "oncall-sre@acme.io", "paged <redacted:email> about it"),
    ("dial tcp 10.244.1.17:8080: connect: connection refused", "10.244.1.17",
     "dial tcp <redacted:ip>:8080: connect: connection refused"),
    ("client 2001:db8::8a2e:370:7334 and ::1 rejected", "2001:db8", "client <redacted:ip> and <redacted:ip> rejected"),
    ("token: ghp_16C7e42F292c6912E7710c838347Ae178B4a", "ghp_16C7", "token: <redacted:token>"),
    ("- name: DB_PASSWORD\n  value: letmein", "letmein", "- name: DB_PASSWORD\n  value: <redacted:secret>"),
    ('{"name": "STRIPE_SECRET", "value": "whsec_abc"}', "whsec_abc",
     '{"name": "STRIPE_SECRET", "value": "<redacted:secret>"}'),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----", "MIIEpAIBAAKCAQEA",
     "<redacted:private_key>"),
    # issue #37: what the first rules missed
    ("DB_PASS=hunter22 ./start.sh", "hunter22", "DB_PASS=<redacted:secret> ./start.sh"),
    ('SMTP_PWD: "m41l-s3cret"', "m41l-s3cret", 'SMTP_PWD: "<redacted:secret>"'),
    ("charge failed with key sk_live_4eC39HqLyjWDarjtT1zdp7dc", "4eC39Hq", "charge failed with key <redacted:api_key>"),
    ("maps AIzaSyA-1234567890abcdefghijklmnopqrstu x", "AIzaSyA", "maps <redacted:api_key> x"),
    ("post https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX ok", "XXXXXXXX",
     "post https://hooks.slack.com/services/<redacted:webhook> ok"),
    ("paid with 4111 1111 1111 1111 for order 4111111111111112; amex 378282246310005", "1111 1111",
     "paid with <redacted:card> for order 4111111111111112; amex <redacted:card>"),
    ("env blob cGFzc3dvcmQ9VHIwdWI0ZG9yJjM= found", "cGFzc3dvcmQ9", "env blob <redacted:secret> found"),
    ("LEGACY_B64=cGFzc3dvcmQ9VHIwdWI0ZG9yJjM=", "cGFzc3dvcmQ9", "LEGACY_B64=<redacted:secret>"),
    ("SG.abcdefghijklmnopqrstuv.abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG", "SG.abcdef", "<redacted:api_key>"),
    ("sid ACa1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6 x", "a1b2c3d4e5f6", "sid <redacted:token> x"),
    ("AKIAIOSFODNN7EXAMPLE,wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI",
     "<redacted:aws_key>,<redacted:secret>"),
    ("redis://:hunter2pass@redis:6379/0", "hunter2pass", "redis://:<redacted:secret>@redis:6379/0"),
    ("-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQOYBF\n-----END PGP PRIVATE KEY BLOCK-----", "lQOYBF",
     "<redacted:private_key>"),
    ("slack xoxb-123456789012-abcdefghij", "xoxb-1234", "slack <redacted:token>"),
    ("github_pat_11ABCDEFG0123456789_abcdefghij", "11ABCDEFG", "<redacted:token>"),
    ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpw", "Authorization: Basic <redacted:token>"),
    ("Server=db;User Id=sa;Password=Passw0rd!;", "Passw0rd!", "Server=db;User Id=sa;Password=<redacted:secret>;"),
    ("jdbc:postgresql://db:5432/shop?user=cart&password=s3cr3tpw", "s3cr3tpw",
     "jdbc:postgresql://db:5432/shop?user=cart&password=<redacted:secret>"),
    ('{"type": "service_account", "private_key_id": "a1b2c3d4", "private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQ'
     '\\n-----END PRIVATE KEY-----\\n"}', "MIIEvQ",
     '{"type": "service_account", "private_key_id": "<redacted:secret>", "private_key": "<redacted:private_key>\\n"}'),
]


@pytest.mark.parametrize(("text", "leaked", "expected"), LEAKS)
def test_leaks_in_free_text(text: str, leaked: str, expected: str) -> None:
    out = redact(text)
    assert leaked not in out
    assert out == expected


@pytest.mark.parametrize("text", [
    "Back-off restarting failed container cart in pod cart-7c9b4-bbbbb_shop",
    "image: ghcr.io/acme/cart:1.4.2 pulled at 12:30:45, digest sha256:0a1b2c3d",
    "secretName: db-credentials\n      secretKeyRef:\n        name: db-credentials\n        key: password",
    "FATAL: password authentication failed for user \"cart\"",
    "Last State: Terminated (OOMKilled), Restart Count: 7, max_tokens=512",
    "MAC 02:42:ac:11:00:02 on eth0; std::vector; version 1.2.3",
    # an order id that fails the Luhn check, a timestamp in ms, a trace id, a base64 word that holds no secret
    "order 4111111111111112 shipped at 1700000000123, trace 4bf92f3577b34da6a3ce929d0e0e4736",
    "bypass=true compass: north DB_PASSWORD_FILE: /run/secrets/db aGVsbG8gd29ybGQgaGVsbG8=",
    "CrashLoopBackOff ImagePullBackOff",
    # the names of a pod's pull secrets (kubectl describe), and a service account's: names, not values
    "Image Pull Secrets: acme-registry-v2\nMountable secrets: default-token-x7k2p\nimagePullSecrets: acme-registry",
])
def test_ordinary_cluster_text_is_untouched(text: str) -> None:
    assert redact(text) == text


def test_a_rule_is_skipped_only_where_it_cannot_match() -> None:
    """Each rule runs only on text holding its trigger: every match of every rule, in each leak above in any case,
    must hold it."""
    matched = set()
    for text in [text for text, _, _ in LEAKS] + [SECRET_YAML]:
        for variant in (text, text.upper(), text.lower(), text.swapcase()):
            for index, rule in enumerate(_RULES):
                for match in rule.pattern.finditer(variant):
                    matched.add(index)
                    assert _may_match(rule.trigger, match.group(0), match.group(0).lower()), (rule.pattern, match)
    assert matched == set(range(len(_RULES)))  # every rule was exercised


def test_redaction_is_idempotent() -> None:
    samples = [SECRET_YAML, "password=x token=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abc Bearer abcdefghij",
               "mail a@b.co from 10.0.0.1 or fe80::1 via https://u:p@h.example.com"]
    for text in samples:
        once = redact(text)
        assert redact(once) == once


def test_secret_key_names() -> None:
    assert is_secret_key("DB_PASSWORD") and is_secret_key("api-key") and is_secret_key("client_secret")
    assert not is_secret_key("secretName") and not is_secret_key("secretKeyRef") and not is_secret_key("author")


def test_every_text_field_of_a_trajectory_is_redacted() -> None:
    leak = "password=hunter2 from 10.1.2.3 by ops@acme.io"
    t = make_trajectory(
        [step(ToolCall(tool="get_resource", args={"kind": "secret", "name": "db-credentials"}),
              ToolResult(tool="get_resource", ok=True, output=SECRET_YAML), completion=f"reading ({leak})"),
         step(ToolCall(tool="set_env", args={"deployment": "cart", "container": "cart", "name": "DB_PASSWORD",
                                             "value": "Tr0ub4dor&3"}),
              ToolResult(tool="set_env", ok=True, output="deployment.apps/cart env updated")),
         step(ToolCall(tool="set_config_key", args={"kind": "secret", "name": "db-credentials", "key": "pw",
                                                    "value": "n3w-s3cret"}),
              ToolResult(tool="set_config_key", ok=True, output="secret/db-credentials configured")),
         step(ToolCall(tool="finish", args={"diagnosis": f"bad secret ({leak})", "summary": leak}), None)],
        alert=Alert(labels={"alertname": "CartDown", "namespace": "shop", "instance": "10.1.2.3:9090"},
                    annotations={"description": leak}),
        report=f"checkout fails, call me at ops@acme.io ({leak})",
    )
    t.conversation = [ChatMessage(role="user", content=leak), ChatMessage(role="tool", content=SECRET_YAML)]
    t.diagnosis, t.summary = f"diag {leak}", f"summary {leak}"
    t.feedback = [HumanFeedback(rating=1, comment=leak, author="ops@acme.io")]

    red = redact_trajectory(t)
    dumped = red.model_dump_json()
    for leaked in ("hunter2", "10.1.2.3", "ops@acme.io", "Tr0ub4dor&3", "n3w-s3cret", "cart_service"):
        assert leaked not in dumped, leaked
    # structured arguments keep their shape; the key-aware rules caught what free text could not
    assert red.steps[1].action is not None and red.steps[1].action.args["value"] == "<redacted:secret>"
    assert red.steps[1].action.args["name"] == "DB_PASSWORD"
    assert red.steps[2].action is not None and red.steps[2].action.args["value"] == "<redacted:secret>"
    # identity fields are untouched, and the original is not modified
    assert (red.workflow_id, red.run_id, red.model_version, red.incident.id) == \
           (t.workflow_id, t.run_id, t.model_version, t.incident.id)
    assert "hunter2" in t.model_dump_json()
    assert redact_trajectory(red) == red


def _read_secret_then_restate(password: str, token: str) -> tuple[Trajectory, str]:
    """An incident whose agent read a Secret and an env listing, then restated both values in prose."""
    env = f"CART_URL=http://cart:8080\nDB_PASSWORD={password}\nSTRIPE_SECRET_KEY={token}"
    prose = f"the DB rejects {password}; rotate {token[:5]}... no: {token} is fine"
    t = make_trajectory(
        [step(ToolCall(tool="get_resource", args={"kind": "secret", "name": "db-credentials"}),
              ToolResult(tool="get_resource", ok=True, output=SECRET_YAML.replace("Tr0ub4dor&3", password))),
         step(ToolCall(tool="get_env", args={"deployment": "cart"}), ToolResult(tool="get_env", ok=True, output=env)),
         step(ToolCall(tool="escalate", args={"diagnosis": prose, "summary": prose}), None)])
    t.diagnosis, t.summary = f"the app sends {password} as its password", f"token {token}"
    return t, prose


def test_a_secret_read_once_is_removed_where_prose_restates_it() -> None:
    """Nothing in `the DB rejects hunter2-xyz` names a secret: only having seen it in the Secret gives it away."""
    t, prose = _read_secret_then_restate("pl41n-w0rds", "sk_test_opaque_Zz9")
    assert "pl41n-w0rds" in redact(prose)  # the text rules alone cannot know
    known = incident_secrets(t)
    assert {"pl41n-w0rds", "sk_test_opaque_Zz9", "cart_service"} <= known
    assert "5432" not in known  # too short to hunt for: it would eat every port number
    assert redact(prose, known) == "the DB rejects <redacted:secret>; rotate sk_te... no: <redacted:secret> is fine"
    red = redact_trajectory(t)
    dumped = red.model_dump_json()
    assert "pl41n-w0rds" not in dumped and "sk_test_opaque_Zz9" not in dumped
    assert red.diagnosis == "the app sends <redacted:secret> as its password"
    assert redact_trajectory(red) == red


def test_a_known_value_inside_an_identifier_leaves_the_identifier_as_the_rules_did() -> None:
    """A scenario named after something a rule took for a value (`cart-<value>` is no `^[a-z0-9-]+$` name any more):
    the trajectory stays valid, the identifier as the rules left it, the value gone from everything else. Without
    this, storing the trajectory failed validation on every retry and the incident never ended."""
    t, _ = _read_secret_then_restate("pl41n-w0rds", "sk_test_opaque_Zz9")
    t.incident.scenario = t.incident.scenario.model_copy(update={"name": "cart-pl41n-w0rds"})
    red = redact_trajectory(t)
    assert red.incident.scenario is not None and red.incident.scenario.name == "cart-pl41n-w0rds"
    assert "pl41n-w0rds" not in red.model_copy(update={"incident": None}).model_dump_json()


def test_known_values_leave_placeholders_whole_and_catch_base64() -> None:
    known = incident_secrets(_read_secret_then_restate("secret", "tok_abcdefgh")[0])
    assert redact("<redacted:secret> and secret", known) == "<redacted:secret> and <redacted:secret>"
    encoded = base64.b64encode(b"tok_abcdefgh").decode()
    assert redact(f"blob {encoded}", known) == "blob <redacted:secret>"


def test_webhook_bodies_are_redacted_as_data() -> None:
    body = {"event": "incident_escalated", "workflow_id": "incident-shop-cart-1", "text": "pw=hunter22 for ops@acme.io",
            "actions": ["kubectl set env deployment/cart DB_PASSWORD=n3w-s3cret"],
            "env": {"name": "API_TOKEN", "value": "plain-opaque"}, "count": 3}
    out = redact_data(body, frozenset({"very-own-secret"}))
    assert out == {"event": "incident_escalated", "workflow_id": "incident-shop-cart-1",
                   "text": "pw=<redacted:secret> for <redacted:email>",
                   "actions": ["kubectl set env deployment/cart DB_PASSWORD=<redacted:secret>"],
                   "env": {"name": "API_TOKEN", "value": "<redacted:secret>"}, "count": 3}
    assert redact_data({"diagnosis": "saw very-own-secret"}, frozenset({"very-own-secret"})) == \
        {"diagnosis": "saw <redacted:secret>"}


@pytest.fixture
def log_redaction() -> Iterator[None]:
    """The worker's log redaction, for one test: it is process-wide."""
    factory = logging.getLogRecordFactory()
    install_log_redaction()
    install_log_redaction()  # twice is once
    yield
    logging.setLogRecordFactory(factory)


@pytest.mark.usefixtures("log_redaction")
def test_log_records_are_redacted_whatever_logger_or_handler(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        logging.getLogger("some.library").info("connecting to %s", "postgres://cart:pa55word@db:5432/cart")
        try:
            raise RuntimeError("token=ghp_16C7e42F292c6912E7710c838347Ae178B4a rejected")
        except RuntimeError:
            logging.getLogger("agent_sre.x").exception("failed for ops@acme.io")
    text = caplog.text
    assert "pa55word" not in text and "ghp_16C7" not in text and "ops@acme.io" not in text
    assert "postgres://cart:<redacted:secret>@db:5432/cart" in text and "token=<redacted:token>" in text
