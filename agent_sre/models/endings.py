"""How an incident can end and be judged, as plain types: the CLI's options take their choices from here when it
starts, without building the pydantic models that use them."""

from __future__ import annotations

from typing import Literal

Outcome = Literal["resolved", "unresolved", "worse"]
# `cluster_lost`: the cluster or namespace went away before the outcome could be observed; the episode is unjudged.
Termination = Literal["finished", "escalated", "step_limit", "deadline", "cancelled", "cluster_lost"]
