"""The routing table: which model version serves each new incident.

One object in the store (`routing/table.json`), written only by the rollout workflow (an activity) and read by the
remediation workflow's routing activity for every new incident, with no cache: a change applies to the very next
incident. Assignment is sticky: a hash of the incident's key and the candidate's version puts each incident at a
fixed point in [0, 100); it goes to the candidate when that point is below the weight. The same incident thus
never flips while the weight stands, and raising the weight only moves incidents from baseline to candidate.
Without a table or without a candidate, the registry's production version serves.
"""

from __future__ import annotations

import hashlib

from minio import Minio

from agent_sre import cas
from agent_sre.models.incident import Incident
from agent_sre.models.remediation import PolicyRef
from agent_sre.models.rollout import RoutingTable
from agent_sre.registry import Registry

TABLE_KEY = "routing/table.json"
BUCKETS = 10_000  # weights resolve to 0.01 %


def bucket_of(incident: Incident, salt: str) -> float:
    """The incident's fixed point in [0, 100). Salted by the candidate, so each rollout samples different
    incidents rather than always the same ones."""
    digest = hashlib.sha256(f"{salt}\n{incident.workflow_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % BUCKETS * 100 / BUCKETS


def assign(incident: Incident, table: RoutingTable) -> PolicyRef | None:
    """The version the table sends this incident to, or None when the table splits nothing (production serves)."""
    if table.candidate is None or table.weight == 0:
        return None
    return table.candidate if bucket_of(incident, table.candidate.version) < table.weight else table.baseline


def read_table(client: Minio, bucket: str) -> RoutingTable | None:
    try:
        found = cas.read_model(client, bucket, TABLE_KEY, RoutingTable)
    except cas.CorruptDocument as exc:
        raise ValueError(f"the routing table is damaged (the rollout workflow rewrites it on its next step): "
                         f"{exc}") from exc
    return found[0] if found else None


def write_table(client: Minio, bucket: str, table: RoutingTable) -> RoutingTable:
    """Store `table` unless the stored one is newer from the same rollout (a late retry of an earlier write must
    not undo a later one, e.g. a rollback). Returns the table in force afterwards."""
    def change(current: RoutingTable | None) -> RoutingTable | None:
        if (current is not None and current.rollout_id == table.rollout_id
                and current.updated_at > table.updated_at):
            return None
        return table

    stored = cas.update_model(client, bucket, TABLE_KEY, RoutingTable, change)
    assert stored is not None
    return stored


def route(client: Minio, bucket: str, registry: Registry, incident: Incident) -> PolicyRef:
    table = read_table(client, bucket)
    chosen = assign(incident, table) if table is not None else None
    return chosen if chosen is not None else registry.production()
