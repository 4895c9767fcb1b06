"""`agent-sre eval` without a stack: a model directory on a suite from anywhere, a registered rule-based version
on a registry stand-in, per-scenario rows, the Wilson interval, and evaluation.v1 as JSON."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from agent_sre.cli import app
from agent_sre.cli import train as train_cli
from agent_sre.models.evaluation import EvaluationComparison
from agent_sre.models.registry import ModelCard
from agent_sre.models.training import EvaluationConfig
from agent_sre.scenarios import heldout_suite, variants_suite
from agent_sre.training.gate import load_suite, suite_source

SUITE = """
name: mine-bad-image
app: shop
fault: bad_image
target: cart
seed: 7
---
name: mine-false-alarm
app: bank
fault: none
target: auth
seed: 7
"""


@pytest.fixture
def suite_dir(tmp_path: Path) -> Path:
    """A suite of two scenarios in a directory of its own, outside the package."""
    path = tmp_path / "my-suite"
    path.mkdir()
    (path / "mine.yaml").write_text(SUITE)
    return path


@pytest.fixture(autouse=True)
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(train_cli, "console", Console(width=250))


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, ["eval", *args])


def one_line(text: str) -> str:
    """An error as one line: the error console wraps at its width."""
    return " ".join(text.split())


def test_a_suite_is_a_path_anywhere_or_the_name_of_an_evaluation_suite(suite_dir: Path) -> None:
    assert suite_source(None) == suite_source("") == heldout_suite()
    assert suite_source("variants") == variants_suite() and suite_source("heldout") == heldout_suite()
    assert suite_source(str(suite_dir)) == suite_dir
    name, scenarios = load_suite(EvaluationConfig(suite=str(suite_dir)))
    assert name.startswith("my-suite-2-") and [s.name for s in scenarios] == ["mine-bad-image", "mine-false-alarm"]
    name, scenarios = load_suite(EvaluationConfig(suite="variants", limit=25))
    assert name.startswith("variants-25-") and len({s.fault for s in scenarios}) == 25  # one of each fault type


def test_a_model_directory_on_a_suite_of_its_own(tiny_model_dir: Path, suite_dir: Path) -> None:
    result = invoke("--model", str(tiny_model_dir), "--suite", str(suite_dir), "--max-turns", "1", "--per-scenario")
    assert result.exit_code == 0, result.output
    assert f"{tiny_model_dir.name} on my-suite-2-" in result.output
    assert "not stored (a model directory)" in result.output
    assert "success 0/2 = 0 % (95 % CI 0–66 %)" in result.output  # one turn fixes nothing, nor finishes
    rows = [line for line in result.output.splitlines() if "mine-" in line]
    assert len(rows) == 2 and all("step_limit" in row for row in rows)

    as_json = invoke("--model", str(tiny_model_dir), "--suite", str(suite_dir / "mine.yaml"), "--max-turns", "1",
                     "-o", "json")
    assert as_json.exit_code == 0, as_json.output
    comparison = EvaluationComparison.model_validate_json(as_json.stdout)
    [row] = comparison.results
    assert (row.policy, row.episodes, row.resolved) == (tiny_model_dir.name, 2, 0)
    assert [o.scenario for o in row.scenarios] == ["mine-bad-image", "mine-false-alarm"]
    assert row.tokens_per_episode is not None and row.tokens_per_episode > 0


def test_a_rule_based_policy_on_a_suite_of_its_own(suite_dir: Path) -> None:
    """The baseline and the teacher, played here on any directory of scenarios (an incident set kept outside the
    repository), with nothing stored."""
    result = invoke("--policy", "expert", "--suite", str(suite_dir), "--per-scenario")
    assert result.exit_code == 0, result.output
    assert "expert on my-suite-2-" in result.output and "· 2 scenarios · not stored (a rule-based policy)" in \
        result.output
    assert "success 2/2 = 100 %" in result.output
    assert "mine-bad-image" in result.output and "mine-false-alarm" in result.output
    document = EvaluationComparison.model_validate_json(invoke("--policy", "runbook", "--suite", str(suite_dir),
                                                               "-o", "json").output)
    [runbook] = document.results
    assert runbook.policy == "runbook" and [s.scenario for s in runbook.scenarios] == ["mine-bad-image",
                                                                                      "mine-false-alarm"]


def test_bad_invocations_say_what_is_wrong(tmp_path: Path, suite_dir: Path) -> None:
    for args, message in ((("--suite", str(suite_dir)), "give one of --version"),
                          (("--version", "base", "--model", str(tmp_path)), "give one of --version"),
                          (("--policy", "expert", "--model", str(tmp_path)), "give one of --version"),
                          (("--policy", "scripted"), "unknown policy 'scripted'; rule-based policies: runbook, expert"),
                          (("--model", str(tmp_path)), "not a Hugging Face model directory")):
        result = invoke(*args)
        assert result.exit_code == 1 and message in one_line(result.output), (args, result.output)
    unknown = invoke("--model", str(tmp_path), "-o", "xml")  # a usage error, before anything is evaluated
    assert unknown.exit_code == 2 and "'xml' is not one of" in one_line(unknown.output), unknown.output
    (tmp_path / "config.json").write_text("{}")
    result = invoke("--model", str(tmp_path), "--suite", str(tmp_path / "missing"))
    assert result.exit_code == 1 and "no such file or directory" in one_line(result.output)


class Versions:
    """The registry calls `evaluate_with_episodes` makes, for one registered rule-based version."""

    def __init__(self) -> None:
        self.model_card = ModelCard(version="runbook-v1", policy="runbook", created_at=datetime.now(UTC),
                                    created_by="test")
        self.stored: dict[str, Any] = {}

    def index(self) -> SimpleNamespace:
        return SimpleNamespace(versions={"runbook-v1": object()})

    def card(self, version: str) -> ModelCard:
        return self.model_card

    def eval_results(self, version: str) -> dict[str, Any]:
        return dict(self.stored)

    def record_eval(self, version: str, suite: str, rows: Any) -> None:
        self.stored[suite] = rows


def test_a_registered_version_on_a_suite_and_each_scenario_of_it(monkeypatch: pytest.MonkeyPatch,
                                                                 suite_dir: Path) -> None:
    versions = Versions()
    monkeypatch.setattr(train_cli, "registry_call", lambda action: action(versions))
    first = invoke("--version", "runbook-v1", "--suite", str(suite_dir))
    assert first.exit_code == 0, first.output
    # the runbook fixes the bad image and finishes the false alarm without a write
    assert "stored with the version" in first.output and "success 2/2 = 100 % (95 % CI 34–100 %)" in first.output
    assert list(versions.stored) == [next(iter(versions.stored))] and "mine-bad-image" not in first.output
    again = invoke("--version", "runbook-v1", "--suite", str(suite_dir))
    assert "reused stored results" in again.output and "success 2/2 = 100 %" in again.output  # from the stored row
    # the registry keeps only the rows: each scenario's outcome means playing the suite again
    detailed = invoke("--version", "runbook-v1", "--suite", str(suite_dir), "--per-scenario")
    assert detailed.exit_code == 0 and "reused" not in detailed.output, detailed.output
    [bad_image] = [line for line in detailed.output.splitlines() if "mine-bad-image" in line]
    assert "resolved" in bad_image and "finished" in bad_image
    as_json = json.loads(invoke("--version", "runbook-v1", "--suite", "variants", "--limit", "3", "--no-store",
                                "-o", "json").stdout)
    assert as_json["schema_version"] == "evaluation.v1"
    assert as_json["results"][0]["policy"] == "runbook-v1" and as_json["results"][0]["episodes"] == 3
    assert as_json["results"][0]["suite"].startswith("variants-3-") and len(versions.stored) == 1
