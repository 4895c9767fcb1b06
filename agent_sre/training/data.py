"""Training data validation: which stored episodes a training run may learn from, and why the others may not.

Every rejection has a reason a person can act on: a line that is not a trajectory.v1 (schema), an episode seen
before (duplicate: same incident id and run, e.g. stored twice or under two model partitions; a re-fired alert
is the same incident id in a new run and is NOT a duplicate), or an episode that never ended properly
(incomplete: no verdict, cancelled, no conversation). The selection is a pure function of the objects' bytes
(and of the episodes and scenarios it must leave out), so the training job re-applies it to the hash-checked
objects of the manifest and gets the same episodes.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from pydantic import ValidationError

from agent_sre.models.endings import Termination
from agent_sre.models.registry import DataItem
from agent_sre.models.training import DataManifest, RejectedEpisode, TrajectoryFilter
from agent_sre.models.trajectory import Trajectory
from agent_sre.rewards.base import EpisodeFacts

MAX_LISTED_REJECTIONS = 100


def episode_id(t: Trajectory) -> str:
    return f"{t.incident.id}/{t.run_id}"


def incident_class(t: Trajectory) -> str:
    """What makes two incidents comparable: the fault class where one is known (simulated incidents, drills),
    otherwise the alert's name (a production incident has no ground truth)."""
    if t.incident.scenario is not None:
        return t.incident.fault_class
    if t.incident.alert is not None:
        return f"alert:{t.incident.alert.labels.get('alertname', 'unnamed')}"
    return "user report"


def _ended_cleanly(t: Trajectory, termination: Termination) -> bool:
    """Judged, ended on its own by `termination`, with no invalid action."""
    if t.verdict is None or t.termination != termination or not t.conversation:
        return False
    return t.conversation[-1].role == "assistant" and all(s.action is not None for s in t.steps)


def resolved_cleanly(t: Trajectory) -> bool:
    """An episode worth imitating: it ended on its own as its incident asks (`finish`, or the handover a simulated
    incident expects: a deleted Secret, a node owner's taint), with no invalid action, and the observer judged it
    resolved without a false positive."""
    scenario = t.incident.scenario
    if not _ended_cleanly(t, scenario.ground_truth.expected_ending if scenario is not None else "finished"):
        return False
    facts = EpisodeFacts.of(t)
    return facts.resolved and not facts.false_positive


def escalated_honestly(t: Trajectory) -> bool:
    """An ending worth imitating: with no invalid action, the agent handed a real fault it had not fixed to a
    human (it checked its fix, saw it fail and said so, rather than claiming it)."""
    return _ended_cleanly(t, "escalated") and EpisodeFacts.of(t).honest_escalation


def incomplete_reasons(t: Trajectory) -> list[str]:
    """Why an episode cannot be learnt from as it is (empty: it can)."""
    reasons = []
    if t.termination is None:
        reasons.append("incomplete: the episode never ended")
    elif t.termination == "cancelled":
        reasons.append("incomplete: the episode was cancelled")
    elif t.termination == "cluster_lost":
        reasons.append("incomplete: the episode lost its cluster before it was judged")
    if t.verdict is None:
        reasons.append("incomplete: no verdict (the outcome was never judged)")
    if not t.conversation:
        reasons.append("incomplete: no conversation")
    return reasons


@dataclass
class Selection:
    episodes: list[Trajectory] = field(default_factory=list)
    manifest: DataManifest = field(default_factory=DataManifest)


def _schema_error(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "document"
    return f"schema: not a trajectory.v1 ({exc.error_count()} error(s); first at {where}: {first['msg']})"


def select_episodes(objects: Iterable[tuple[str, bytes]], selection: TrajectoryFilter, bucket: str, *,
                    exclude: Selection | None = None, held_out: Collection[str] = ()) -> Selection:
    """Validate the episodes in `objects` (key, JSON-lines body), in order, keeping those `selection` allows, up to
    its limits. Episodes of `exclude` (an earlier selection) count as duplicates; episodes of a `held_out`
    scenario, or of one the selection excludes, are filtered out. Objects holding at least one accepted episode
    become manifest items."""
    out = Selection()
    counts: Counter[str] = Counter()
    seen = {episode_id(t): "the training episodes" for t in (exclude.episodes if exclude else [])}
    per_class: Counter[str] = Counter()
    held_out = {*held_out, *selection.exclude_scenarios}
    for key, body in objects:
        if selection.limit is not None and len(out.episodes) >= selection.limit:
            break  # the rest would not be read: `objects` may be reading them from the store as it goes
        accepted_here = 0
        for number, line in enumerate(body.decode("utf-8", errors="replace").splitlines(), start=1):
            if not line.strip():
                continue
            if selection.limit is not None and len(out.episodes) >= selection.limit:
                break
            counts["read"] += 1
            try:
                t = Trajectory.model_validate_json(line)
            except ValidationError as exc:
                _reject(out.manifest, counts, key, number, None, [_schema_error(exc)])
                continue
            if selection.policies and t.policy not in selection.policies:
                counts["filtered: policy"] += 1
                continue
            if t.incident.scenario is not None and t.incident.scenario.name in held_out:
                counts["filtered: evaluation scenario"] += 1
                continue
            ident = episode_id(t)
            reasons = incomplete_reasons(t)
            if ident in seen:
                reasons.insert(0, f"duplicate: incident {t.incident.id} run {t.run_id} already read from "
                                  f"{seen[ident]}")
            else:
                seen[ident] = f"{key} line {number}"
            if reasons:
                _reject(out.manifest, counts, key, number, ident, reasons)
                continue
            if selection.resolved_only and not resolved_cleanly(t):
                counts["filtered: not resolved cleanly"] += 1
                continue
            if selection.per_fault_class is not None:
                if per_class[incident_class(t)] >= selection.per_fault_class:
                    counts["filtered: fault class full"] += 1
                    continue
                per_class[incident_class(t)] += 1
            out.episodes.append(t)
            accepted_here += 1
        if accepted_here:
            out.manifest.items.append(DataItem(uri=f"s3://{bucket}/{key}", sha256=hashlib.sha256(body).hexdigest(),
                                               bytes=len(body), rows=accepted_here))
    counts["accepted"] = len(out.episodes)
    out.manifest.episodes = len(out.episodes)
    out.manifest.counts = dict(counts)
    return out


def _reject(manifest: DataManifest, counts: Counter[str], key: str, line: int, episode: str | None,
            reasons: list[str]) -> None:
    counts["rejected"] += 1
    for category in {r.split(":", 1)[0] for r in reasons}:
        counts[f"rejected: {category}"] += 1
    if len(manifest.rejected) < MAX_LISTED_REJECTIONS:
        manifest.rejected.append(RejectedEpisode(key=key, line=line, episode=episode, reasons=reasons))


def object_key(item: DataItem, bucket: str) -> str:
    """The object key of a manifest item in `bucket` (items are s3:// URIs)."""
    prefix = f"s3://{bucket}/"
    if not item.uri.startswith(prefix):
        raise ValueError(f"{item.uri} is not in the bucket s3://{bucket}")
    return item.uri[len(prefix):]
