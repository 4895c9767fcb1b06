"""Scenario files and the `agent-sre scenarios` commands (inject/clear over HTTP with a written kubeconfig)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent_sre.cli import app as cli
from agent_sre.faults import FAULTS
from agent_sre.faults.oracle import snapshot
from agent_sre.scenarios import HELDOUT_DIR, ScenarioError, default_catalog, load_scenarios
from agent_sre.simulator.server import SimulatorServer, write_kubeconfig
from agent_sre.simulator.simulator import Simulator
from agent_sre.tools.client import api_client


def _write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_catalog_expands_families_and_covers_every_fault() -> None:
    catalog = load_scenarios()
    assert default_catalog().is_dir()
    assert {f.fault for s in catalog for f in s.faults} == set(FAULTS)  # a scenario may hold several
    assert len({s.name for s in catalog}) == len(catalog)
    oom = [s for s in catalog if s.name.startswith("oom-") and not s.name.startswith("oom-alert-on-caller")]
    assert len(oom) == 3 * 2 * 2  # targets x memory limits x seeds
    assert {s.target for s in oom} == {"cart", "checkout", "catalog"}
    first = next(s for s in oom if s.name == "oom-cart-32mi-s1")
    assert first.params == {"memory_limit": "32Mi"} and first.seed == 1 and first.namespace == "shop"
    assert first.alert.labels["alertname"] == "KubePodCrashLooping" and first.symptom
    assert first.ground_truth.fix[0].tool == "set_resources"


def test_the_heldout_suite_is_fixed_and_unseen() -> None:
    catalog, heldout = load_scenarios(), load_scenarios(HELDOUT_DIR)
    assert {f.fault for s in heldout for f in s.faults} == set(FAULTS)
    assert all(s.seed >= 100 for s in heldout)
    assert sum(s.fault == "none" for s in heldout) >= 5

    def key(s: object) -> tuple[str, str, str, str]:
        return s.app, s.fault, s.target, json.dumps(s.params, sort_keys=True)  # type: ignore[attr-defined]

    assert not {key(s) for s in heldout} & {key(s) for s in catalog}
    assert not {s.name for s in heldout} & {s.name for s in catalog}


def test_a_single_scenario_keeps_what_it_states(tmp_path: Path) -> None:
    path = _write(tmp_path, """
name: custom-alert
app: bank
fault: bad_env
target: accounts
seed: 4
symptom: "Nobody can see their balance."
alert:
  labels: {alertname: AccountsDown, severity: page, namespace: bank, service: accounts}
ground_truth:
  fault_class: config/env
  root_cause: deployment/accounts
  fix: [{tool: rollout_undo, args: {deployment: accounts}}]
""")
    [scenario] = load_scenarios(path)
    assert scenario.alert.labels["alertname"] == "AccountsDown"
    assert scenario.symptom == "Nobody can see their balance."
    assert scenario.ground_truth.fix[0].tool == "rollout_undo"
    assert scenario.params["env"] == "LEDGER_URL"  # derived from the fault type


@pytest.mark.parametrize(("text", "message"), [
    ("name: x\n  app: [", "not valid YAML"),
    ("- just a list", "expected a mapping"),
    ("name: x\napp: shop\nfault: disk_full\n", "unknown fault 'disk_full'"),
    ("name: x\napp: shop\nfault: oom_limit\ntarget: kart\n", "cannot target 'kart'"),
    ("name: x\napp: bookstore\nfault: oom_limit\n", "unknown app 'bookstore'"),
    ("name: x\napp: shop\nfault: oom_limit\ntarget: cart\nparams: {memory_limit: 2Gi}\n", "would not OOM-kill"),
    ("name: x\napp: shop\nfault: oom_limit\ntarget: cart\nparams: {memroy_limit: 2Mi}\n", "memroy_limit"),
    ("name: x\napp: shop\nfault: oom_limit\nowner: me\n", "unknown keys ['owner']"),
    ("app: shop\nfault: oom_limit\nname: Bad_Name\ntarget: cart\n", "name"),
    ("family: f\napp: shop\nfault: oom_limit\nmatrix: {target: [cart], memory_limit: []}\n", "non-empty list"),
    ("family: f\napp: shop\nfault: bad_image\nmatrix: {target: [cart], tag: ['2.4.0']}\n", "exists for"),
    ("name: x\napp: shop\nfault: none\n---\nname: x\napp: shop\nfault: none\n", "already used"),
    ("name: x\napp: shop\nfault: oom_limit\ntarget: cart\nground_truth:\n  fault_class: resource\n"
     "  root_cause: deployment/cart\n  wrong_fixes: [{tool: scale, args: {deployment: cart, replicas: 3}}]\n",
     "wrong_fixes"),
])
def test_bad_files_get_clear_errors(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ScenarioError, match="s.yaml") as info:
        load_scenarios(path)
    assert message in str(info.value)


def test_missing_paths_are_reported(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="no such file"):
        load_scenarios(tmp_path / "nope.yaml")
    with pytest.raises(ScenarioError, match="no scenario files"):
        load_scenarios(tmp_path)


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n---\n"])
def test_yaml_that_holds_no_scenario_is_refused(tmp_path: Path, text: str) -> None:
    path = _write(tmp_path, text)
    for where in (path, tmp_path):
        with pytest.raises(ScenarioError, match="holds no scenarios"):
            load_scenarios(where)
    result = CliRunner().invoke(cli, ["episodes", "run", "--scenarios", str(path), "--n", "1"])
    assert result.exit_code == 1 and "holds no scenarios" in result.output and "Traceback" not in result.output


# --- the command line, against the simulator over HTTP -----------------------------------------------------------

@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Simulator, Path]]:
    simulator = Simulator(speed=1.0)
    simulator.create_env("cli", apps=["shop"], seed=2)
    with SimulatorServer(simulator) as server:
        path = write_kubeconfig(tmp_path_factory.mktemp("kube") / "config", f"{server.url}/envs/cli", "sim")
        yield simulator, path


def test_list_prints_the_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    result = CliRunner().invoke(cli, ["scenarios", "list", "--fault", "oom_limit"])
    assert result.exit_code == 0, result.output
    assert "oom-cart-32mi-s0" in result.output and "KubePodCrashLooping" in result.output
    faults = CliRunner().invoke(cli, ["scenarios", "faults"])
    assert faults.exit_code == 0 and "chaos_pod_kill" in faults.output


def test_inject_and_clear_over_http(served: tuple[Simulator, Path], tmp_path: Path) -> None:
    simulator, kubeconfig = served
    path = _write(tmp_path, "name: cli-policy\napp: shop\nfault: network_policy_deny\ntarget: payment\n")
    runner = CliRunner()
    result = runner.invoke(cli, ["scenarios", "inject", str(path), "--kubeconfig", str(kubeconfig)])
    assert result.exit_code == 0, result.output
    assert "injected cli-policy" in result.output and "HighErrorRate" in result.output
    assert simulator.env("cli").get("networkpolicies.networking.k8s.io", "shop", "payment-allow-monitoring-only")
    assert "payment" in snapshot(api_client(kubeconfig), "shop").unhealthy
    result = runner.invoke(cli, ["scenarios", "clear", str(path), "--kubeconfig", str(kubeconfig)])
    assert result.exit_code == 0, result.output
    assert not snapshot(api_client(kubeconfig), "shop").unhealthy


def test_inject_explains_what_is_wrong(served: tuple[Simulator, Path], tmp_path: Path) -> None:
    _, kubeconfig = served
    runner = CliRunner()
    several = _write(tmp_path, "name: a\napp: shop\nfault: none\n---\nname: b\napp: shop\nfault: none\n")
    result = runner.invoke(cli, ["scenarios", "inject", str(several), "--kubeconfig", str(kubeconfig)])
    assert result.exit_code == 1 and "pick one with --name (a, b)" in result.output
    result = runner.invoke(cli, ["scenarios", "inject", str(several), "--name", "b", "--kubeconfig",
                                 str(tmp_path / "missing")])
    assert result.exit_code == 1 and "does not exist" in result.output
