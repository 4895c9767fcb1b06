"""Issue #38, without a server: an alert's firing episode names its incident, a delivery's alerts in one namespace
are one incident that lists them all, and the runbook reads again when a write of its finds the namespace changed.
The workflows these feed are tested on the dev server in test_alerts_receiver.py and test_one_writer.py."""

from __future__ import annotations

from typing import Any

from trajectory_factory import make_trajectory, read, step

from agent_sre.alerts.receiver import plan_delivery
from agent_sre.models.alert import Alert, AlertmanagerWebhook
from agent_sre.models.incident import Incident
from agent_sre.models.remediation import PolicyRef
from agent_sre.models.tools import ToolCall, ToolResult
from agent_sre.policy.conversation import incident_message
from agent_sre.policy.runbook import RunbookPolicy


def _alert(name: str = "HighErrorRate", at: str = "2025-03-01T10:00:00Z", status: str = "firing",
           **labels: str) -> Alert:
    return Alert.model_validate({"status": status, "labels": {"alertname": name, "namespace": "shop", **labels},
                                 "annotations": {"summary": f"{name} on {labels.get('service', 'cart')}"},
                                 "startsAt": at})


def test_a_firing_episode_is_its_fingerprint_and_start() -> None:
    first = _alert()
    assert first.episode_id() == f"{first.stable_fingerprint()}-20250301T100000Z"
    assert _alert(status="resolved").episode_id() == first.episode_id()  # its resolution names the same incident
    assert _alert(at="2025-03-01T10:00:00.25+01:00").episode_id().endswith("-20250301T090000Z")
    refired = Incident.from_alert(_alert(at="2025-03-01T14:00:00Z"))
    assert refired.workflow_id != Incident.from_alert(first).workflow_id
    assert Alert(labels={"alertname": "x"}).episode_id() == Alert(labels={"alertname": "x"}).stable_fingerprint()


def test_a_group_is_led_and_named_by_its_first_alert_and_lists_every_alert() -> None:
    db = _alert("PostgresDown", at="2025-03-01T09:58:00Z", service="postgres")
    errors = [_alert(at="2025-03-01T10:00:00Z", service=s) for s in ("cart", "checkout")]
    incident = Incident.from_alerts([*errors, db])
    assert incident.alert == db and incident.id == db.episode_id() and incident.service == "postgres"
    assert incident.alerts == [db, *sorted(errors, key=Alert.first_key)]
    message = incident_message(incident)
    assert message.startswith("Namespace: shop\n3 alerts of one group")
    assert "[1] Alert: PostgresDown (firing)" in message and message.count("Alert: HighErrorRate (firing)") == 2
    assert "[3] Summary: HighErrorRate on" in message
    # One alert reads as it always has: the prompt the models were trained on.
    assert incident_message(Incident.from_alerts([db])) == "\n".join([
        "Namespace: shop", "Alert: PostgresDown (firing)", "Labels: namespace=shop, service=postgres",
        "Summary: PostgresDown on postgres"])


def test_a_later_delivery_adds_its_new_alert_and_updates_the_known_ones() -> None:
    lead, other = _alert(service="cart"), _alert(service="checkout", at="2025-03-01T10:05:00Z")
    incident = Incident.from_alert(lead).with_alerts([_alert(service="cart", status="resolved"), other])
    assert [a.labels["service"] for a in incident.alerts] == ["cart", "checkout"]
    assert incident.alert is not None and incident.alert.status == "resolved"
    assert incident.id == lead.episode_id()


def _webhook(*alerts: Alert) -> AlertmanagerWebhook:
    body: dict[str, Any] = {"version": "4", "groupKey": '{}:{alertname="HighErrorRate"}', "status": "firing",
                            "receiver": "agent-sre", "alerts": [a.model_dump(mode="json") for a in alerts]}
    return AlertmanagerWebhook.model_validate(body)


def test_a_delivery_is_one_incident_per_namespace_and_rollout_alerts_stay_alone() -> None:
    shop = [_alert(service=s) for s in ("cart", "checkout", "db")]
    other = _alert(namespace="billing")
    rollout = Alert(labels={"alertname": "AgentSreModelSuccessRateDropped", "agent_sre_rollout": "current"})
    units = plan_delivery(_webhook(shop[0], other, rollout, shop[1], shop[2]))
    assert [u.positions for u in units] == [[0, 3, 4], [1], [2]]
    first, billing, alone = units
    assert first.incident is not None and len(first.incident.alerts) == 3 and first.incident.namespace == "shop"
    assert billing.incident is not None and billing.incident.alerts == [] and billing.incident.alert == other
    assert alone.incident is None


def test_the_runbook_reads_again_after_a_write_found_the_namespace_changed() -> None:
    """Not a hand-over to a human (its answer to a failed write): the fix it meant may be made already."""
    undo = ToolCall(tool="rollout_undo", args={"deployment": "cart"})
    stale = step(undo, ToolResult(tool="rollout_undo", ok=False, stale=True, output="not run: another remediation"))
    reads = [read("list_pods", "NAME READY STATUS\ncart-1 0/1 ImagePullBackOff"), read("get_events", ""),
             read("list_chaos_experiments", "")]
    policy, ref = RunbookPolicy(), PolicyRef(name="runbook")
    assert policy.choose(ref, make_trajectory([*reads, stale], outcome=None)) == ToolCall(tool="list_pods")
    healthy = read("list_pods", "NAME READY STATUS\ncart-1 1/1 Running")
    assert policy.choose(ref, make_trajectory([*reads, stale, healthy], outcome=None)) == ToolCall(tool="get_events")
