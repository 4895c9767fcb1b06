"""The routing table and the routing activity: sticky, evenly spread assignment, read fresh for every incident."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from store_fixtures import settings_with_own_bucket
from temporalio.testing import ActivityEnvironment

from agent_sre.activities.routing import RoutingActivities
from agent_sre.config import Settings
from agent_sre.models.incident import Incident
from agent_sre.models.remediation import PolicyRef
from agent_sre.models.rollout import RoutingTable
from agent_sre.registry import Registry
from agent_sre.rollout.routing import assign, bucket_of, read_table, write_table

BASELINE = PolicyRef(name="runbook", version="runbook-v1")
CANDIDATE = PolicyRef(name="llm", version="smol-grpo-7")
NOW = datetime(2026, 3, 14, 9, 0, tzinfo=UTC)


def incident(i: int) -> Incident:
    return Incident(id=f"alert-{i:05d}", namespace="shop", report="checkout fails")


def table(weight: float, candidate: PolicyRef | None = CANDIDATE, at: datetime = NOW,
          rollout_id: str | None = "model-rollout/run-1") -> RoutingTable:
    return RoutingTable(baseline=BASELINE, candidate=candidate if weight else None, weight=weight,
                        rollout_id=rollout_id, reason="test", updated_at=at)


@pytest.fixture
def own_bucket(s3_store: Settings) -> Iterator[Settings]:
    with settings_with_own_bucket(s3_store, "routing") as settings:
        yield settings


def test_the_same_incident_always_gets_the_same_version() -> None:
    for i in range(200):
        first = assign(incident(i), table(30))
        assert all(assign(incident(i), table(30)) == first for _ in range(3))
        # A copy built from scratch (another worker, a repeated alert) lands in the same place.
        assert assign(Incident(id=f"alert-{i:05d}", namespace="shop", report="other words"), table(30)) == first


@pytest.mark.parametrize("weight", [1, 10, 25, 50, 90])
def test_the_share_of_candidate_incidents_follows_the_weight(weight: float) -> None:
    n = 20_000
    share = sum(assign(incident(i), table(weight)) == CANDIDATE for i in range(n)) / n
    # Binomial standard deviation at n = 20 000 is at most 0.35 points: 1.5 points is over four of them.
    assert abs(share - weight / 100) < 0.015, share


def test_raising_the_weight_only_moves_incidents_to_the_candidate() -> None:
    on = {w: {i for i in range(5000) if assign(incident(i), table(w)) == CANDIDATE} for w in (10, 25, 50, 100)}
    assert on[10] <= on[25] <= on[50] <= on[100] and len(on[100]) == 5000


def test_each_candidate_samples_different_incidents() -> None:
    other = PolicyRef(name="llm", version="smol-grpo-8")
    first = {i for i in range(5000) if assign(incident(i), table(20)) == CANDIDATE}
    second = {i for i in range(5000) if assign(incident(i), table(20, candidate=other)) == other}
    overlap = len(first & second) / len(first)
    assert 0.1 < overlap < 0.3  # independent draws overlap by about the weight, not fully


def test_bucket_points_cover_the_range() -> None:
    points = [bucket_of(incident(i), "salt") for i in range(10_000)]
    assert 0 <= min(points) < 0.1 and 99.9 < max(points) < 100


def test_no_split_means_production_serves() -> None:
    assert assign(incident(1), table(0)) is None


def test_stored_table_round_trip_and_stale_writes(own_bucket: Settings) -> None:
    client = Registry.from_settings(own_bucket).client
    bucket = own_bucket.s3_bucket
    assert read_table(client, bucket) is None
    assert write_table(client, bucket, table(10)) == table(10)
    assert read_table(client, bucket) == table(10)

    rolled_back = table(0, at=NOW + timedelta(hours=2))
    write_table(client, bucket, rolled_back)
    late_retry = table(50, at=NOW + timedelta(hours=1))  # an earlier write of the same rollout, landing late
    assert write_table(client, bucket, late_retry) == rolled_back
    assert read_table(client, bucket) == rolled_back

    next_rollout = table(10, at=NOW, rollout_id="model-rollout/run-2")  # another rollout: its own clock
    assert write_table(client, bucket, next_rollout) == next_rollout


def test_the_routing_activity_reads_the_table_for_every_incident(own_bucket: Settings) -> None:
    activity = ActivityEnvironment()
    registry = Registry.from_settings(own_bucket)
    route_model = RoutingActivities(registry).route_model
    # No table yet: the registry's production version, which is the built-in runbook policy on a fresh store.
    assert activity.run(route_model, incident(1)) == PolicyRef(name="runbook", version="runbook-v1")

    write_table(registry.client, own_bucket.s3_bucket, table(50))
    routed = [activity.run(route_model, incident(i)) for i in range(40)]
    assert {r.version for r in routed} == {"runbook-v1", "smol-grpo-7"}
    assert routed == [assign(incident(i), table(50)) for i in range(40)]

    # A rollback takes effect for the very next incident: nothing is cached.
    write_table(registry.client, own_bucket.s3_bucket, table(0, at=NOW + timedelta(seconds=1)))
    assert {activity.run(route_model, incident(i)).version for i in range(40)} == {"runbook-v1"}

    # Without a split, a manual promotion in the registry decides.
    registry.register("runbook-v2", policy="runbook", by="sre")
    registry.promote("runbook-v2", by="sre", reason="new rules")
    assert activity.run(route_model, incident(1)) == PolicyRef(name="runbook", version="runbook-v2")
