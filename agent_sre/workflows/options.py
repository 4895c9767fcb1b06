"""Activity timeouts, retry policies and option sets of every workflow, one name per meaning.

The suffix says the type: `_TIMEOUT` a `timedelta`, `_RETRY` a `RetryPolicy`, `_OPTIONS` the `ActivityOptions`
keywords of one kind of call. Changing a value here changes no recorded history's replay (the commands a workflow
issues stay the same); renaming an activity or reordering calls would.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TypedDict

from temporalio.common import RetryPolicy


class ActivityOptions(TypedDict, total=False):
    """`workflow.execute_activity` keywords shared by the calls of one kind."""

    start_to_close_timeout: timedelta
    heartbeat_timeout: timedelta
    retry_policy: RetryPolicy


# --- incidents and rollouts: short calls, most retried by the SDK's default policy ------------------------------
QUICK_TIMEOUT = timedelta(seconds=30)  # a read, a write of one object, a tool call, a pure computation
MODEL_DECISION_TIMEOUT = timedelta(minutes=5)  # a served model's next action
ENVIRONMENT_SETUP_TIMEOUT = timedelta(minutes=2)  # create a simulator environment and inject the scenario
ANALYSIS_TIMEOUT = timedelta(minutes=5)  # a rollout step's statistical analysis
GUARDRAIL_TIMEOUT = timedelta(minutes=2)  # a rollout's guardrail check
CLUSTER_READ_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), backoff_coefficient=2.0,
                                 maximum_interval=timedelta(seconds=30), maximum_attempts=10)
STORE_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), backoff_coefficient=2.0,
                          maximum_interval=timedelta(minutes=2))  # unlimited attempts: the trajectory must land
ROUTING_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1),
                            maximum_interval=timedelta(seconds=30))  # unlimited attempts: traffic must move
NOTIFY_RETRY = RetryPolicy(initial_interval=timedelta(seconds=2), maximum_attempts=3)  # then the workflow goes on

# --- training and learning cycles ----------------------------------------------------------------------------------
REGISTRY_OPTIONS = ActivityOptions(  # a registry call: gate, archive, claim, prepare a rollout
    start_to_close_timeout=timedelta(minutes=1),
    retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=5))
RECORD_CYCLE_OPTIONS = ActivityOptions(  # unlimited attempts: a cycle's record (and its commit) must land
    start_to_close_timeout=timedelta(minutes=1), retry_policy=RetryPolicy(maximum_interval=timedelta(minutes=1)))
COLLECT_OPTIONS = ActivityOptions(start_to_close_timeout=timedelta(minutes=30), heartbeat_timeout=timedelta(minutes=5),
                                  retry_policy=RetryPolicy(initial_interval=timedelta(seconds=5), maximum_attempts=3))
EVALUATE_OPTIONS = ActivityOptions(
    start_to_close_timeout=timedelta(hours=12), heartbeat_timeout=timedelta(minutes=30),
    retry_policy=RetryPolicy(initial_interval=timedelta(seconds=10), maximum_attempts=3))
TRAIN_HEARTBEAT_TIMEOUT = timedelta(minutes=5)  # the activity heartbeats every second; big checkpoint uploads pause it
TRAIN_RETRY = RetryPolicy(initial_interval=timedelta(seconds=10), maximum_attempts=3)
