"""What a new user meets in the first half hour (issue #41): one-line errors when the stack is down, `dev clean`,
labelled units of time to mitigate, and no library noise on the terminal."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rich.table import Table
from typer.testing import CliRunner

from agent_sre import config
from agent_sre.activities.training import Follower, stage_ends
from agent_sre.cli import app, learn
from agent_sre.cli.common import SafeConsole
from agent_sre.cli.episodes import OPTIONAL_FIGURES, outcome_table, print_outcomes
from agent_sre.cli.output import fit
from agent_sre.cli.train import progress_line
from agent_sre.config import Settings
from agent_sre.learning import drill
from agent_sre.models.episode import OutcomeStats
from agent_sre.models.learning import LearningState
from agent_sre.models.training import TrainHeartbeat, TrainingMetrics, TrainingRequest, TrainingStatus, TrainJob
from agent_sre.stack.ports import pick_free_ports
from agent_sre.stack.process import PidFile


def test_alerts_serve_with_temporal_down_is_one_line(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    [nobody] = pick_free_ports(1, "127.0.0.1")
    monkeypatch.setattr(config, "get_settings", lambda: settings.model_copy(
        update={"temporal_address": f"127.0.0.1:{nobody}", "alerts_token": "t"}))
    result = CliRunner().invoke(app, ["alerts", "serve", "--port", str(nobody)])
    out = re.sub(r"\s+", " ", result.output)
    assert result.exit_code == 1, result.output
    assert f"cannot reach Temporal at 127.0.0.1:{nobody}" in out and "is `agent-sre dev up` running?" in out
    assert "Traceback" not in result.output and "alert receiver on" not in out


def _stack_env(monkeypatch: pytest.MonkeyPatch, data_dir: Path) -> None:
    monkeypatch.setenv("AGENT_SRE_DATA_DIR", str(data_dir))
    monkeypatch.delenv("AGENT_SRE_LLM_MODELS_DIR", raising=False)


def _demo_leftovers(data_dir: Path) -> None:
    """What a demo leaves, in small: S3 data, model copies, logs, scratch; and what must stay."""
    for bulk in ("seaweedfs/volumes/1.dat", "models/base-smollm2-135m/model.safetensors", "logs/demo.log",
                 "training/v1/train.log", "traces.jsonl"):
        (data_dir / bulk).parent.mkdir(parents=True, exist_ok=True)
        (data_dir / bulk).write_bytes(b"x" * 4096)
    for kept in ("temporal/temporal.db", "kubeconfig", "drill/d1/report.json"):
        (data_dir / kept).parent.mkdir(parents=True, exist_ok=True)
        (data_dir / kept).write_text("kept")


def test_dev_clean_refuses_while_the_stack_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _stack_env(monkeypatch, tmp_path)
    _demo_leftovers(tmp_path)
    me = Path(f"/proc/{os.getpid()}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    PidFile(tmp_path / "run" / "sim.pid").write(os.getpid(), [a.decode() for a in me])  # "sim" is alive: this test
    result = CliRunner().invoke(app, ["dev", "clean", "--yes"])
    assert result.exit_code == 1 and "the stack is running (sim)" in result.output
    assert "agent-sre dev down" in result.output
    assert (tmp_path / "seaweedfs/volumes/1.dat").exists() and (tmp_path / "models").exists()


def test_dev_clean_removes_the_bulk_and_keeps_the_rest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _stack_env(monkeypatch, tmp_path)
    _demo_leftovers(tmp_path)
    asked = CliRunner().invoke(app, ["dev", "clean"], input="n\n")
    assert asked.exit_code == 1 and "remove these" in asked.output and (tmp_path / "seaweedfs").exists()

    result = CliRunner().invoke(app, ["dev", "clean", "--yes"])
    assert result.exit_code == 0, result.output
    assert "removed" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["drill", "kubeconfig", "temporal"]
    assert (tmp_path / "temporal/temporal.db").read_text() == "kept"
    again = CliRunner().invoke(app, ["dev", "clean", "--yes"])
    assert again.exit_code == 0 and "nothing to remove" in again.output


def _stats(group: str, episodes: int) -> OutcomeStats:
    return OutcomeStats(group=group, episodes=episodes, success_rate=0.5, mean_time_to_mitigate_s=38.25,
                        mean_steps=7.5, false_positive_rate=0.0, escalation_rate=0.1, write_rate=1.0,
                        harmful_rate=0.0, invalid_action_rate=0.0, mean_reward=17.25)


def _printed(table: Table, width: int) -> str:
    out = io.StringIO()
    print_outcomes(SafeConsole(file=out, width=width), table)
    return out.getvalue()


def test_time_to_mitigate_says_which_clock() -> None:
    rows = [_stats("bad_image", 3)]
    wall, simulated = (re.sub(r"\s+", " ", _printed(outcome_table(rows, "t", clock), 200))
                       for clock in ("wall", "simulated"))
    assert "TTM wall s" in wall and "wall-clock seconds" in wall and "TTM sim s" not in wall
    assert "TTM sim s" in simulated and "simulated seconds" in simulated and "not comparable" in simulated
    assert "TTM wall s" in drill.COLUMNS


def test_an_outcome_table_fits_80_columns_without_a_value_cut_or_a_column_dropped_silently() -> None:
    text = _printed(outcome_table([_stats("dependency_down_cache", 12), _stats("all", 50)], "t", "wall"), 80)
    assert max(map(len, text.splitlines())) <= 80, text
    assert "dependency_down_cache" in text and "+17.25" in text and "50%" in text and "…" not in text
    flat = re.sub(r"\s+", " ", text)
    left_out = re.search(r"((?:\w+, )*\w+) left out to fit 80 columns: a wider terminal shows them", flat)
    assert left_out is not None, text
    for header in left_out[1].split(", "):
        assert header in OPTIONAL_FIGURES and f" {header} " not in flat.split("TTM wall s:")[0]
    wide = _printed(outcome_table([_stats("all", 50)], "t", "wall"), 200)
    assert "left out" not in wide and all(h in wide for h in OPTIONAL_FIGURES)


def test_following_says_what_an_evaluation_is_doing() -> None:
    metrics = TrainingMetrics(stage="grpo", step=1, max_steps=1, loss=0.5, at=datetime.now(UTC))
    st = TrainingStatus(workflow_id="w", phase="evaluating", algorithm="sft+grpo", base="base", candidate="v1",
                        metrics=metrics)
    assert progress_line(st, (2, 4)) == "evaluating v1 · 2/4 scenarios played"  # not the last training step
    assert progress_line(st.model_copy(update={"phase": "training"})) == "training · grpo step 1/1 · loss 0.5"


def _stderr_of(code: str, tmp_path: Path) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TQDM_", "TRANSFORMERS_", "HF_HUB_DISABLE"))}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


@pytest.mark.integration  # starts processes of its own
def test_converting_and_loading_the_model_prints_no_progress_bar_or_warning(tmp_path: Path) -> None:
    stderr = _stderr_of(textwrap.dedent("""
        import agent_sre
        from pathlib import Path
        from agent_sre.policy.llm.checkpoint import convert_gguf, load_policy_model, smollm2_gguf
        load_policy_model(convert_gguf(smollm2_gguf(), Path("model")), device="cpu")
        """), tmp_path)
    assert "it/s" not in stderr and "%|" not in stderr and "Warning" not in stderr, stderr[-2000:]


def test_the_demo_s_log_file_takes_warnings_and_log_lines_off_the_terminal(tmp_path: Path) -> None:
    stderr = _stderr_of(textwrap.dedent("""
        import logging, warnings
        from pathlib import Path
        from agent_sre.cli.common import log_to_file
        from agent_sre.config import Settings
        log = log_to_file(Settings(data_dir=Path("data")), "demo")
        warnings.warn("`foo` is deprecated", FutureWarning)
        logging.getLogger("agent_sre.rollout").warning('{"event": "model_rollback"}')
        """), tmp_path)
    assert stderr == ""
    logged = (tmp_path / "data/logs/demo.log").read_text()
    assert "FutureWarning: `foo` is deprecated" in logged and '{"event": "model_rollback"}' in logged


def test_learn_status_says_why_no_cycle_committed(capsys: pytest.CaptureFixture[str]) -> None:
    learn.print_state(LearningState(name="demo-drill-1"))
    assert "no cycle committed yet (a cycle commits only when its candidate passes its gates" in \
        re.sub(r"\s+", " ", capsys.readouterr().out)


def test_a_checkpoint_of_a_stage_s_last_step_is_not_uploaded() -> None:
    """The trainer saves one at the end too: its stage's model follows at once, at a third of its size."""
    def at(step: int, of: int | None) -> TrainingMetrics:
        return TrainingMetrics(stage="sft", step=step, max_steps=of, at=datetime.now(UTC))

    assert stage_ends(at(4, 4)) and not stage_ends(at(3, 4)) and not stage_ends(at(4, None))


def test_when_a_stage_ends_progress_shows_the_next_one_at_step_0() -> None:
    request = TrainingRequest.model_validate({"algorithm": "sft+grpo", "base": "base", "grpo": {"max_steps": 1}})
    job = TrainJob.model_construct(request=request, version="v1")
    follower = Follower(job, TrainHeartbeat(), None, "b")  # type: ignore[arg-type]  # no store: nothing uploads
    after_sft = follower._next_stage("sft")
    assert after_sft is not None and (after_sft.stage, after_sft.step, after_sft.max_steps) == ("grpo", 0, 1)
    assert follower._next_stage("grpo") is None


def test_a_long_name_in_a_wrapping_column_folds_rather_than_ends_in_an_ellipsis() -> None:
    table = Table(title="drill")
    table.add_column("", no_wrap=True)
    table.add_column("cycle 1")
    table.add_row("decision", "rejected: demo-drill-20261127-054700-20261127-054800 is worse than production")
    out = io.StringIO()
    fit(SafeConsole(file=out, width=50), table)
    assert "…" not in out.getvalue() and "054800" in out.getvalue(), out.getvalue()
