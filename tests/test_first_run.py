"""What a new user meets in the first half hour (issue #41): one-line errors when the stack is down, `dev clean`,
labelled units of time to mitigate, and no library noise on the terminal."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from agent_sre import config
from agent_sre.cli import app
from agent_sre.config import Settings
from agent_sre.stack.ports import pick_free_ports


def test_alerts_serve_with_temporal_down_is_one_line(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    [nobody] = pick_free_ports(1, "127.0.0.1")
    monkeypatch.setattr(config, "get_settings", lambda: settings.model_copy(
        update={"temporal_address": f"127.0.0.1:{nobody}", "alerts_token": "t"}))
    result = CliRunner().invoke(app, ["alerts", "serve", "--port", str(nobody)])
    out = re.sub(r"\s+", " ", result.output)
    assert result.exit_code == 1, result.output
    assert f"cannot reach Temporal at 127.0.0.1:{nobody}" in out and "is `agent-sre dev up` running?" in out
    assert "Traceback" not in result.output and "alert receiver on" not in out
