"""What a learning cycle learnt from: its stored episodes grouped by fault class, policy, outcome and the sequence
of tools called, counted. Writes the table into docs/benchmarks.md ("Cycle data by action sequence").

    .venv/bin/python bench/cycle_actions.py learning/NAME/cycles/CUTOFF-ID/episodes.jsonl

The object is a cycle's `episodes.jsonl` in the store (`agent-sre learn status` and a version's data manifest
name it); the dev stack must be up.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from agent_sre.config import get_settings
from agent_sre.models.trajectory import Trajectory
from agent_sre.storage import object_store
from agent_sre.training.data import incident_class
from agent_sre.trajectory_store import read_trajectories

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchdocs import provenance, write_section

HEADING = "## Cycle data by action sequence (bench/cycle_actions.py)"


def actions(t: Trajectory) -> str:
    """The tools the episode called, in order (`invalid` for an answer that was no valid action)."""
    return ", ".join(s.action.tool if s.action else "invalid" for s in t.steps)


def main(key: str) -> None:
    settings = get_settings()
    episodes = read_trajectories(object_store(settings), settings.s3_bucket, key)
    counts = Counter((incident_class(t), t.policy, t.verdict.outcome if t.verdict else "not judged", actions(t))
                     for t in episodes)
    lines = [f"`{key}`: {len(episodes)} episodes.", "", "| episodes | class | policy | outcome | tools called |",
             "|---:|---|---|---|---|"]
    lines += [f"| {n} | {c} | {p} | {o} | {a} |" for (c, p, o, a), n in sorted(counts.items())]
    table = "\n".join(lines)
    print(table)
    write_section(HEADING, provenance() + "\n" + table + "\n")
    print(f"wrote {HEADING!r} in docs/benchmarks.md")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
