"""Declarative fault scenarios: what to break, the alert that fires, and the ground truth for judging a fix."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agent_sre.models.alert import Alert
from agent_sre.models.tools import ToolCall


class GroundTruth(BaseModel):
    """What an expert would conclude and do. `fix` is a list of tool calls that resolves the incident."""

    fault_class: str
    root_cause: str  # e.g. "deployment/cart"
    fix: list[ToolCall] = Field(default_factory=list)
    wrong_fix: list[ToolCall] = Field(default_factory=list, description="plausible but wrong; must not resolve")
    destructive: list[ToolCall] = Field(default_factory=list, description="raw action that makes things worse")


class Scenario(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    app: str
    namespace: str
    fault: str  # a fault type name from the catalog, or "none" for a false alarm
    target: str = ""  # usually a service / deployment name
    params: dict[str, Any] = Field(default_factory=dict)
    seed: int = 0
    alert: Alert
    symptom: str = Field(default="", description="how a user would phrase the problem in words")
    ground_truth: GroundTruth
    tags: list[str] = Field(default_factory=list)


class ScenarioFamily(BaseModel):
    """A parameterised family: every combination of `matrix` values yields one scenario (no code needed)."""

    model_config = ConfigDict(extra="forbid")

    family: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    app: str
    fault: str
    matrix: dict[str, list[Any]] = Field(default_factory=dict, description="keys: target and fault params")
    seeds: list[int] = Field(default_factory=lambda: [0])
    tags: list[str] = Field(default_factory=list)
