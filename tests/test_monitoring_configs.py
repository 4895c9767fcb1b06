"""The shipped monitoring configs (infra/prometheus, infra/alertmanager, infra/grafana) are valid for the tools that
load them, their alert rules behave as their unit tests say (Prometheus' own rule engine, `promtool test rules`),
and every metric they name is one agent-sre exports. tests/test_rollback_chain.py (slow) runs them live.

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
RULE_TESTS = INFRA / "prometheus" / "rollout-alerts.test.yml"
ALERTMANAGER_CONFIG = INFRA / "alertmanager" / "alertmanager.yml"
DASHBOARD = INFRA / "grafana" / "agent-sre-rollout.json"
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


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    exprs += [a["expr"] for a in dashboard["annotations"]["list"]]
    for variable, value in GRAFANA_VARIABLES.items():
        exprs = [e.replace(variable, value) for e in exprs]
    return exprs


def test_prometheus_config_and_its_rules_are_valid() -> None:
    out = run(tool("promtool"), "check", "config", str(PROMETHEUS_CONFIG))
    assert "1 rule files found" in out


def test_rollout_alert_rules_pass_their_unit_tests() -> None:
    run(tool("promtool"), "test", "rules", str(RULE_TESTS))


def test_alertmanager_config_is_valid_and_routes_rollout_alerts_to_the_rollout_receiver() -> None:
    amtool = tool("amtool")
    run(amtool, "check-config", str(ALERTMANAGER_CONFIG))

    def receiver(*labels: str) -> str:
        return run(amtool, "config", "routes", "test", f"--config.file={ALERTMANAGER_CONFIG}", *labels).strip()

    assert receiver("alertname=AgentSreModelSuccessRateDropped", "agent_sre_rollout=smol-grpo-7") == \
        "agent-sre-rollout"
    assert receiver("alertname=AgentSreModelRolledBack", "agent_sre_rollout=smol-grpo-7") == "agent-sre-rollout"
    assert receiver("alertname=KubePodCrashLooping", "namespace=shop") == "agent-sre-incidents"


def test_the_dashboard_queries_are_valid_promql(tmp_path: Path) -> None:
    """promtool has no query checker without a server; as recording rules, the queries get its parser."""
    rules = {"groups": [{"name": "dashboard", "rules": [{"record": f"dashboard:query_{i}", "expr": expr}
                                                       for i, expr in enumerate(dashboard_queries())]}]}
    (tmp_path / "dashboard-queries.yml").write_text(yaml.safe_dump(rules))
    run(tool("promtool"), "check", "rules", str(tmp_path / "dashboard-queries.yml"))


def exported_metric_names() -> set[str]:
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}
    metrics = [v for module in METRIC_MODULES for v in vars(module).values() if isinstance(v, MetricWrapperBase)]
    return {family.name + suffix for metric in metrics for family in metric.collect()
            for suffix in suffixes.get(family.type, ("",))}


def metric_names(expr: str) -> set[str]:
    """agent-sre metric names in a PromQL expression (recording rules' level:metric:op names are not)."""
    return {token for token in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr) if token.startswith("agent_sre_")}


def test_rules_and_dashboard_name_only_metrics_agent_sre_exports() -> None:
    rules: list[dict[str, Any]] = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    named = set().union(*(metric_names(r["expr"]) for r in rules), *map(metric_names, dashboard_queries()))
    assert named >= {"agent_sre_incidents_finished_total", "agent_sre_incidents_started_total",
                     "agent_sre_model_rollbacks_total", "agent_sre_time_to_mitigate_seconds_bucket"}
    assert named <= exported_metric_names(), named - exported_metric_names()
    recorded = {r["record"] for r in rules if "record" in r}
    used = {token for expr in [r["expr"] for r in rules] for token in re.findall(r"[a-z_]+:[a-z_0-9:]+", expr)}
    assert used <= recorded, used - recorded
    alerts = {r["alert"]: r for r in rules if "alert" in r}
    assert set(alerts) == {"AgentSreModelSuccessRateDropped", "AgentSreModelRolledBack"}
    assert all(rule["labels"].get("agent_sre_rollout") for rule in alerts.values())


def test_configs_point_at_the_default_ports_and_authenticate() -> None:
    defaults = {name: field.default for name, field in Settings.model_fields.items()}
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    ports = {job["job_name"]: int(job["static_configs"][0]["targets"][0].rsplit(":", 1)[1])
             for job in config["scrape_configs"]}
    assert ports == {"agent-sre-worker": defaults["metrics_port"], "agent-sre-alerts": defaults["alerts_port"],
                     "agent-sre-simulator": defaults["sim_port"]}
    receivers = yaml.safe_load(ALERTMANAGER_CONFIG.read_text())["receivers"]
    hooks = [hook for r in receivers for hook in r["webhook_configs"]]
    assert {hook["url"] for hook in hooks} == {f"http://127.0.0.1:{defaults['alerts_port']}/alerts"}
    assert all(hook["http_config"]["authorization"]["type"] == "Bearer" for hook in hooks)
