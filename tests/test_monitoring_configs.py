"""The shipped monitoring configs (infra/prometheus, infra/alertmanager, infra/grafana) are valid for the tools that
load them, their alert rules behave as their unit tests say (Prometheus' own rule engine, `promtool test rules`),
and every metric they name is one agent-sre exports. Incident-operations alerts go to the people running agent-sre,
never to the agent. tests/test_rollback_chain.py (slow) runs them live.

promtool and amtool come with Debian's `prometheus` and `prometheus-alertmanager`; tests that need them skip
with that reason where they are missing.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from agent_sre import telemetry
from agent_sre.alerts import receiver
from agent_sre.config import Settings
from agent_sre.rollout import events

METRIC_MODULES = (telemetry, events, receiver)  # where agent-sre's Prometheus metrics are defined

INFRA = Path(__file__).resolve().parent.parent / "infra"
PROMETHEUS_CONFIG = INFRA / "prometheus" / "prometheus.yml"
RULES = INFRA / "prometheus" / "rollout-alerts.yml"
INCIDENT_RULES = INFRA / "prometheus" / "incident-alerts.yml"
ALERTMANAGER_CONFIG = INFRA / "alertmanager" / "alertmanager.yml"
DASHBOARDS = (INFRA / "grafana" / "agent-sre-rollout.json", INFRA / "grafana" / "agent-sre-incidents.json")
# What Grafana substitutes in the dashboard's queries, with values of the right kind for checking them.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__range": "1h", "$window": "30m"}


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        package = "prometheus" if name == "promtool" else "prometheus-alertmanager"
        pytest.skip(f"{name} is not installed: apt-get install -y {package}")
    return path


def run(*args: str) -> str:
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{' '.join(args)}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def dashboard_queries(path: Path) -> list[str]:
    dashboard = json.loads(path.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    exprs += [a["expr"] for a in dashboard["annotations"]["list"]]
    for variable, value in GRAFANA_VARIABLES.items():
        exprs = [e.replace(variable, value) for e in exprs]
    return exprs


def test_prometheus_config_and_its_rules_are_valid() -> None:
    out = run(tool("promtool"), "check", "config", str(PROMETHEUS_CONFIG))
    assert "2 rule files found" in out


@pytest.mark.parametrize("rules", [RULES, INCIDENT_RULES], ids=lambda path: path.stem)
def test_alert_rules_pass_their_unit_tests(rules: Path) -> None:
    run(tool("promtool"), "test", "rules", str(rules.with_suffix(".test.yml")))


def test_alertmanager_config_is_valid_and_routes_rollout_alerts_to_the_rollout_receiver() -> None:
    amtool = tool("amtool")
    run(amtool, "check-config", str(ALERTMANAGER_CONFIG))

    def receiver(*labels: str) -> str:
        return run(amtool, "config", "routes", "test", f"--config.file={ALERTMANAGER_CONFIG}", *labels).strip()

    assert receiver("alertname=AgentSreModelSuccessRateDropped", "agent_sre_rollout=smol-grpo-7") == \
        "agent-sre-rollout"
    assert receiver("alertname=AgentSreModelRolledBack", "agent_sre_rollout=smol-grpo-7") == "agent-sre-rollout"
    assert receiver("alertname=KubePodCrashLooping", "namespace=shop") == "agent-sre-incidents"
    assert receiver("alertname=AgentSreIncidentsFailing", "agent_sre_ops=true") == "agent-sre-operators"


@pytest.mark.parametrize("dashboard", DASHBOARDS, ids=lambda path: path.stem)
def test_the_dashboard_queries_are_valid_promql(tmp_path: Path, dashboard: Path) -> None:
    """promtool has no query checker without a server; as recording rules, the queries get its parser."""
    rules = {"groups": [{"name": "dashboard", "rules": [{"record": f"dashboard:query_{i}", "expr": expr}
                                                       for i, expr in enumerate(dashboard_queries(dashboard))]}]}
    (tmp_path / "dashboard-queries.yml").write_text(yaml.safe_dump(rules))
    run(tool("promtool"), "check", "rules", str(tmp_path / "dashboard-queries.yml"))


def exported_metric_names() -> set[str]:
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}
    metrics = [v for module in METRIC_MODULES for v in vars(module).values() if isinstance(v, MetricWrapperBase)]
    return {family.name + suffix for metric in metrics for family in metric.collect()
            for suffix in suffixes.get(family.type, ("",))}


def metric_names(expr: str) -> set[str]:
    """agent-sre metric names in a PromQL expression (recording rules' level:metric:op names are not, nor label
    names such as `agent_sre_ops` in a matcher)."""
    return {token for token in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*\b(?!\s*[=!~])", expr)
            if token.startswith("agent_sre_")}


def rules_of(path: Path) -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"]]


def test_rules_and_dashboards_name_only_metrics_agent_sre_exports() -> None:
    rules = rules_of(RULES) + rules_of(INCIDENT_RULES)
    queries = [query for dashboard in DASHBOARDS for query in dashboard_queries(dashboard)]
    named = set().union(*(metric_names(r["expr"]) for r in rules), *map(metric_names, queries))
    assert named >= {"agent_sre_incidents_finished_total", "agent_sre_incidents_started_total",
                     "agent_sre_model_rollbacks_total", "agent_sre_time_to_mitigate_seconds_bucket",
                     "agent_sre_escalations_total", "agent_sre_alert_deliveries_rejected_total"}
    assert named <= exported_metric_names(), named - exported_metric_names()
    recorded = {r["record"] for r in rules if "record" in r}
    used = {token for expr in [r["expr"] for r in rules] for token in re.findall(r"[a-z_]+:[a-z_0-9:]+", expr)}
    assert used <= recorded, used - recorded
    rollout = {r["alert"]: r for r in rules_of(RULES) if "alert" in r}
    assert set(rollout) == {"AgentSreModelSuccessRateDropped", "AgentSreModelRolledBack"}
    assert all(rule["labels"].get("agent_sre_rollout") for rule in rollout.values())


def test_incident_alerts_go_to_operators_never_to_the_agent() -> None:
    """The agent's receiver remediates what it is sent: its own failures must not reach it (no `namespace`,
    no rollout label), and each alert's unit tests cover it."""
    alerts = {r["alert"]: r for r in rules_of(INCIDENT_RULES) if "alert" in r}
    assert set(alerts) == {"AgentSreIncidentsFailing", "AgentSreIncidentMadeWorse", "AgentSreEscalationRateHigh",
                           "AgentSreRemediationSlow", "AgentSreIncidentsUnfinished",
                           "AgentSreAlertDeliveriesRejected"}
    for rule in alerts.values():
        assert rule["labels"]["agent_sre_ops"] == "true"
        assert not {"namespace", "agent_sre_rollout"} & set(rule["labels"]) and "namespace" not in rule["expr"]
    tested = {t["alertname"] for case in yaml.safe_load(INCIDENT_RULES.with_suffix(".test.yml").read_text())["tests"]
              for t in case.get("alert_rule_test", [])}
    assert tested == set(alerts)


def test_configs_point_at_the_default_ports_and_authenticate() -> None:
    defaults = {name: field.default for name, field in Settings.model_fields.items()}
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    ports = {job["job_name"]: int(job["static_configs"][0]["targets"][0].rsplit(":", 1)[1])
             for job in config["scrape_configs"]}
    assert ports == {"agent-sre-worker": defaults["metrics_port"], "agent-sre-alerts": defaults["alerts_port"],
                     "agent-sre-simulator": defaults["sim_port"]}
    receivers = yaml.safe_load(ALERTMANAGER_CONFIG.read_text())["receivers"]
    hooks = [hook for r in receivers for hook in r.get("webhook_configs", [])]
    assert {hook["url"] for hook in hooks} == {f"http://127.0.0.1:{defaults['alerts_port']}/alerts"}
    assert all(hook["http_config"]["authorization"]["type"] == "Bearer" for hook in hooks)
