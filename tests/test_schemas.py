"""The committed JSON Schema files under docs/schemas/ match the models, and every registered message is versioned."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import BaseModel

from agent_sre import schemas


def test_committed_schema_files_are_current() -> None:
    stale = schemas.stale_files()
    assert not stale, f"regenerate with `python -m agent_sre.schemas`: {[str(p) for p in stale]}"


def test_every_registered_message_carries_its_version() -> None:
    assert {"trajectory.v1", "reward.v1"} <= set(schemas.SCHEMAS)
    for name, model in schemas.SCHEMAS.items():
        assert schemas.schema_version_of(model) == name
        schema = json.loads(schemas.render(name))
        assert schema["$id"] == name and schema["properties"]["schema_version"]["const"] == name


def test_stale_and_missing_files_are_reported_and_rewritten(tmp_path: Path) -> None:
    assert len(schemas.stale_files(tmp_path)) == len(schemas.SCHEMAS)  # missing
    schemas.write_schemas(tmp_path)
    assert schemas.stale_files(tmp_path) == []
    (tmp_path / "reward.v1.json").write_text("{}")
    assert schemas.stale_files(tmp_path) == [tmp_path / "reward.v1.json"]


def test_a_model_without_schema_version_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    class Unversioned(BaseModel):
        x: int

    monkeypatch.setitem(schemas.SCHEMAS, "unversioned.v1", Unversioned)
    with pytest.raises(ValueError, match="Unversioned has no schema_version"):
        schemas.render("unversioned.v1")
    with pytest.raises(ValueError, match="unknown schema 'nope.v1'"):
        schemas.render("nope.v1")
