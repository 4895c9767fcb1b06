"""`agent-sre worker`: runs workflows and activities on their task queues.

One process may serve every queue (dev, demo, tests) or just one (production: tools near the cluster, policy on
inference machines, training on GPUs). Activities are sync, run on a thread pool, except the training job's
(`train_policy`), which is async: it follows a child process. Those that use clients or settings are methods of
classes that `build_activities` builds once per process, with the settings it was given and the clients made from
them; no activity reads the environment itself.
"""

from __future__ import annotations

import asyncio
import gc
import signal
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from agent_sre.activities import escalation, locks, rewards
from agent_sre.activities.learning import LearningActivities
from agent_sre.activities.observer import ObserverActivities
from agent_sre.activities.policy import PolicyActivities, served_policies
from agent_sre.activities.rollout import RolloutActivities
from agent_sre.activities.routing import RoutingActivities
from agent_sre.activities.simulation import SimulationActivities
from agent_sre.activities.tools import ToolActivities
from agent_sre.activities.training import TrainingActivities
from agent_sre.activities.trajectories import TrajectoryActivities
from agent_sre.config import Settings
from agent_sre.redaction import install_log_redaction
from agent_sre.registry import Registry
from agent_sre.storage import object_store
from agent_sre.workers.signals import SignalArgumentsInterceptor
from agent_sre.workflows.incident import IncidentRemediationWorkflow
from agent_sre.workflows.learning import ContinuousLearningWorkflow
from agent_sre.workflows.lock import NamespaceLockWorkflow
from agent_sre.workflows.rollout import ModelRolloutWorkflow
from agent_sre.workflows.simulated import SimulatedIncidentWorkflow
from agent_sre.workflows.training import TrainingCycleWorkflow

HEARTBEAT_THROTTLE = timedelta(seconds=2)
# How long running activities may go on once a worker is told to stop; Kubernetes gives a pod 30 s by default.
GRACEFUL_SHUTDOWN = timedelta(seconds=20)
GC_THRESHOLDS = (10_000, 20, 20)  # the interpreter's: (700, 10, 10)
STORE_TIMEOUT_S = 10.0  # fail fast: Temporal's retry policies own the retries, and keep the attempts visible


@dataclass(frozen=True)
class Activities:
    """The activity classes, each built once per worker process with what it uses."""

    simulation: SimulationActivities
    observer: ObserverActivities
    tools: ToolActivities
    policy: PolicyActivities
    trajectories: TrajectoryActivities
    routing: RoutingActivities
    rollout: RolloutActivities
    training: TrainingActivities
    learning: LearningActivities


def build_activities(settings: Settings) -> Activities:
    """Every activity's dependencies, built from `settings` once: clients are reused by every call (guardrails run
    every hour for weeks, routing once per incident), and a test or a second worker in the process passes
    settings of its own instead of changing the environment. Two store clients: one with short timeouts for
    small objects (trajectories, registry cards, the routing table), one without for model weights."""
    store = object_store(settings, timeout_s=STORE_TIMEOUT_S)
    registry = Registry(store, settings.s3_bucket, settings.data_dir / "models")
    weights = Registry.from_settings(settings)
    return Activities(
        simulation=SimulationActivities.of(settings.sim_url),
        observer=ObserverActivities(settings),
        tools=ToolActivities(settings),
        policy=PolicyActivities(served_policies(settings, weights)),
        trajectories=TrajectoryActivities(store, settings.s3_bucket),
        routing=RoutingActivities(registry),
        rollout=RolloutActivities(registry),
        training=TrainingActivities(settings, registry, weights),
        learning=LearningActivities(registry, settings.data_dir))


def queue_contents(settings: Settings, activities: Activities | None = None,
                   ) -> dict[str, tuple[list[type], list[Callable[..., Any]]]]:
    """Which workflows and activities each task queue serves (`activities`: built from `settings` if not given).
    Queues configured with one name are one queue, with the contents of each (tools on the workflows' queue then
    get eager dispatch)."""
    a = activities or build_activities(settings)
    # On the workflows' queue too: they run there as local activities (and writes as eager ones) when a request's
    # tool_execution is `local`.
    cluster: list[Callable[..., Any]] = [a.tools.run_tool, a.observer.snapshot_cluster, a.observer.observe,
                                         a.simulation.create_and_inject, a.simulation.delete_environment]
    return _merged([
        (settings.queue_agent, [IncidentRemediationWorkflow, SimulatedIncidentWorkflow, ModelRolloutWorkflow,
                                NamespaceLockWorkflow],
                               [a.routing.route_model, rewards.compute_reward, a.trajectories.store_trajectory,
                                escalation.notify_escalation, locks.request_lease,
                                a.policy.decide_next_action, *cluster,
                                a.rollout.update_stages, a.rollout.set_routing, a.rollout.analyze_rollout,
                                a.rollout.check_guardrails, a.rollout.record_rollback, a.rollout.notify_rollback]),
        (settings.queue_tools, [], cluster),
        (settings.queue_policy, [], [a.policy.decide_next_action]),
        (settings.queue_training, [TrainingCycleWorkflow, ContinuousLearningWorkflow],
                                  [a.training.collect_training_data, a.training.train_policy,
                                   a.training.evaluate_version, a.training.register_if_better,
                                   a.training.archive_version, a.learning.begin_cycle, a.learning.gather_cycle_data,
                                   a.learning.prepare_rollout, a.learning.finish_cycle]),
    ])


def _merged(served: list[tuple[str, list[type], list[Callable[..., Any]]]],
            ) -> dict[str, tuple[list[type], list[Callable[..., Any]]]]:
    contents: dict[str, tuple[list[type], list[Callable[..., Any]]]] = {}
    for queue, workflows, activities in served:
        known_workflows, known_activities = contents.setdefault(queue, ([], []))
        known_workflows += [w for w in workflows if w not in known_workflows]
        known_activities += [a for a in activities if a not in known_activities]
    return contents


def build_workers(client: Client, settings: Settings, queues: Sequence[str] | None = None,
                  max_concurrent_activities: int = 64, graceful_shutdown: timedelta = timedelta(0),
                  activities: Activities | None = None) -> list[Worker]:
    """The workers of `queues` (all by default), sharing one set of `activities` (built from `settings` if not
    given). `graceful_shutdown`: how long running activities may go on once shutdown begins; 0 cancels them at
    once, as in-process workers (demo, bench, tests) want."""
    contents = queue_contents(settings, activities)
    unknown = set(queues or ()) - set(contents)
    if unknown:
        raise ValueError(f"unknown task queue(s) {sorted(unknown)}; this worker serves {sorted(contents)}")
    executor = ThreadPoolExecutor(max_workers=max_concurrent_activities, thread_name_prefix="activity")
    # A cancellation reaches an activity only in the reply to a heartbeat, and the SDK sends heartbeats at most
    # once per throttle interval: a short one makes `stop` end a training job within seconds.
    return [Worker(client, task_queue=queue, workflows=workflows, activities=activities,
                   activity_executor=executor, max_concurrent_activities=max_concurrent_activities,
                   max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE, graceful_shutdown_timeout=graceful_shutdown,
                   interceptors=[SignalArgumentsInterceptor()])
            for queue, (workflows, activities) in contents.items() if not queues or queue in queues]


def settle_heap() -> None:
    """Garbage collection for a long-running worker, once it is built. What start-up imported and built lives until
    the process exits: frozen, it is no longer walked by every full collection. And each task allocates many
    short-lived containers (the SDK's activations, the data converter, the clients), so young collections run
    every 10,000 allocations instead of 700 (bench/orchestration.py reports the bench process's GC time)."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # Ctrl-C; what Kubernetes and systemd send to stop a process


async def run_workers(client: Client, settings: Settings, queues: Sequence[str] | None = None,
                      ready: Callable[[], None] | None = None) -> None:
    """Serve until SIGINT or SIGTERM, then shut down gracefully: polling stops, running activities may finish
    within GRACEFUL_SHUTDOWN and are then cancelled (Temporal runs them again on another worker once the attempt
    fails or times out; a training job resumes from its checkpoint), and the process exits 0. A second signal ends
    the process at once. The handlers are set even where the signal was inherited as ignored (a worker started in
    the background by a shell); `ready` is called once they are. Every log record the process makes from then on
    is redacted: activities log what tools returned."""
    install_log_redaction()
    workers = build_workers(client, settings, queues, graceful_shutdown=GRACEFUL_SHUTDOWN)
    settle_heap()
    loop = asyncio.get_running_loop()
    shutdowns: list[asyncio.Task[None]] = []

    def stop(sig: signal.Signals) -> None:
        for s in STOP_SIGNALS:  # back to the defaults: a second signal is not graceful
            loop.remove_signal_handler(s)
        print(f"{sig.name}: stopping the workers (running activities get {GRACEFUL_SHUTDOWN.seconds} s to finish); "
              "signal again to end at once", file=sys.stderr, flush=True)
        shutdowns.extend(loop.create_task(w.shutdown()) for w in workers)

    for s in STOP_SIGNALS:
        loop.add_signal_handler(s, stop, s)
    if ready is not None:
        ready()
    await asyncio.gather(*(w.run() for w in workers))
