"""The CLI as scripts and SREs use it: `--version`, `-o json|yaml` with the models' field names, whole lines in a
pipe, and an `agent_sre.cli` import that leaves the heavy dependencies for the commands that need them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from agent_sre import stack
from agent_sre.cli import app, common, dev
from agent_sre.config import Settings
from agent_sre.models.scenario import Scenario
from agent_sre.scenarios import default_catalog, load_scenarios
from tests.store_fixtures import settings_with_own_bucket

HEAVY = ("torch", "transformers", "temporalio", "kubernetes")
LONG_FAMILY = "a-family-whose-name-is-longer-than-any-terminal-is-wide-" * 3 + "end"


def _ok(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_version_is_the_installed_package_version() -> None:
    assert _ok("--version").strip() == f"agent-sre {version('agent-sre')}"


def test_importing_the_cli_leaves_heavy_dependencies_to_the_commands() -> None:
    # A fresh interpreter: this one has imported everything already. `--help` of any command pays only for this.
    code = f"import sys, agent_sre.cli; print([m for m in {HEAVY!r} if m in sys.modules])"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


def test_dev_names_the_stack_components_it_documents() -> None:
    assert dev.COMPONENTS == tuple(stack.COMPONENTS)  # written out in dev.py so --help need not import the stack


def test_scenarios_list_as_json_and_yaml_are_the_scenario_models() -> None:
    catalog = load_scenarios(default_catalog())
    as_json = json.loads(_ok("scenarios", "list", "-o", "json"))
    assert [Scenario.model_validate(s) for s in as_json] == catalog
    assert yaml.safe_load(_ok("scenarios", "list", "--fault", catalog[0].fault, "-o", "yaml")) == [
        s.model_dump(mode="json") for s in catalog if s.fault == catalog[0].fault]


def test_fault_types_and_the_stack_status_as_json() -> None:
    from agent_sre.faults import FAULTS

    faults = json.loads(_ok("scenarios", "faults", "-o", "json"))
    assert [f["name"] for f in faults] == list(FAULTS) and all(f["modelled_on"] for f in faults)
    # This session's stack may or may not be up (other tests start it): either way every component is listed, and
    # the exit code says whether all answer, as the table's does.
    status = CliRunner().invoke(app, ["dev", "status", "-o", "json"])
    components = json.loads(status.stdout)
    assert [c["component"] for c in components] == list(stack.COMPONENTS)
    assert status.exit_code == (0 if all(c["answers"] for c in components) else 1), status.output


def test_a_piped_table_keeps_whole_lines(tmp_path: Path) -> None:
    family = tmp_path / "long.yaml"
    family.write_text(f"family: {LONG_FAMILY}\napp: shop\nfault: bad_command\nmatrix:\n  target: [cart]\n"
                      "seeds: [0]\n")
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    script = Path(sys.executable).parent / "agent-sre"
    piped = subprocess.run([str(script), "scenarios", "list", "--dir", str(family)], stdout=subprocess.PIPE,
                           stdin=subprocess.DEVNULL, text=True, check=True, env=env).stdout
    [row] = [line for line in piped.splitlines() if LONG_FAMILY in line]
    assert "shop" in row and "bad_command" in row and "cart" in row, piped


def test_models_list_and_show_as_json_and_yaml(s3_store: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    with settings_with_own_bucket(s3_store, "cli-output") as settings:
        monkeypatch.setattr(common, "get_settings", lambda: settings)
        index = json.loads(_ok("models", "list", "-o", "json"))
        assert index["schema_version"] == "registry.index.v1"
        assert index["versions"]["runbook-v1"]["stage"] == "production"
        assert yaml.safe_load(_ok("models", "list", "-o", "yaml")) == index
        shown = json.loads(_ok("models", "show", "runbook-v1", "-o", "json"))
        assert shown["card"]["version"] == "runbook-v1" and shown["stage"] == "production"
        assert set(shown) == {"card", "stage", "history", "evaluation"}
