"""JSON Schema files for the versioned messages that cross a boundary (storage, other teams, training jobs).

`python -m agent_sre.schemas` writes docs/schemas/<name>.json for every registered message; `--check` only
reports files that differ (CI, and tests/test_schemas.py). A new message version is one line in `SCHEMAS`: its
model must carry a `schema_version` literal equal to the name, so a stored object always says what it is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from pydantic import BaseModel

from agent_sre.models.evaluation import EvaluationComparison
from agent_sre.models.learning import CycleRecord, LearningCycleInput, LearningState
from agent_sre.models.reward import LateFeedback, RewardRecord
from agent_sre.models.training import TrainingRequest, TrainingStatus
from agent_sre.models.trajectory import Trajectory

SCHEMAS: dict[str, type[BaseModel]] = {
    "trajectory.v1": Trajectory,
    "reward.v1": RewardRecord,
    "feedback.v1": LateFeedback,
    "training.request.v1": TrainingRequest,
    "training.status.v1": TrainingStatus,
    "learning.input.v1": LearningCycleInput,
    "learning.state.v1": LearningState,
    "learning.cycle.v1": CycleRecord,
    "evaluation.v1": EvaluationComparison,
}

DEFAULT_DIR = Path(__file__).resolve().parents[1] / "docs" / "schemas"


def schema_version_of(model: type[BaseModel]) -> str:
    """The `schema_version` a model writes into every message it serialises."""
    field = model.model_fields.get("schema_version")
    if field is None or not isinstance(field.default, str):
        raise ValueError(f"{model.__name__} has no schema_version default; versioned messages must carry one")
    return field.default


def render(name: str) -> str:
    """The JSON Schema file for a registered message, byte-stable (sorted keys, trailing newline)."""
    try:
        model = SCHEMAS[name]
    except KeyError:
        raise ValueError(f"unknown schema {name!r}; registered: {sorted(SCHEMAS)}") from None
    if schema_version_of(model) != name:
        raise ValueError(f"{model.__name__}.schema_version is {schema_version_of(model)!r}, registered as {name!r}")
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": name,
              **model.model_json_schema(mode="serialization")}
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def stale_files(directory: Path = DEFAULT_DIR) -> list[Path]:
    """Schema files that are missing or differ from what the models produce now."""
    return [path for name in SCHEMAS
            if not (path := directory / f"{name}.json").is_file() or path.read_text() != render(name)]


def write_schemas(directory: Path = DEFAULT_DIR) -> list[Path]:
    """Write every registered schema; returns the files written."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in SCHEMAS:
        path = directory / f"{name}.json"
        path.write_text(render(name))
        paths.append(path)
    return paths


def main(out: Annotated[Path, typer.Option(help="directory for <name>.json files")] = DEFAULT_DIR,
         check: Annotated[bool, typer.Option(help="only report stale files; exit 1 if any")] = False) -> None:
    if check:
        stale = stale_files(out)
        for path in stale:
            typer.echo(f"stale: {path} (run python -m agent_sre.schemas)")
        raise typer.Exit(1 if stale else 0)
    for path in write_schemas(out):
        typer.echo(f"wrote {path}")


if __name__ == "__main__":
    typer.run(main)
