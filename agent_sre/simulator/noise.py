"""Benign noise in a freshly installed app, so a diagnosis takes investigation rather than a lookup.

A healthy cluster is never spotless: a batch job pod that failed once before it succeeded, a service that was
OOM-killed once a day ago and has been fine since, a readiness probe that timed out during a blip, a node
warning about image garbage collection. None of it is the incident; all of it shows up in `kubectl` output.
"""

from __future__ import annotations

import hashlib

from agent_sre.apps.catalog import PART_OF, AppSpec
from agent_sre.kube.times import rfc3339
from agent_sre.simulator.cluster import SIM_EPOCH, Cluster, Obj
from agent_sre.simulator.controllers.state import WorkloadState, stable_suffix, stable_uid

# per app: the service with a day-old OOMKill, the one with a flaky probe blip, and the database backup job
NOISE = {
    "shop": {"oom": "recommendation", "blip": "frontend", "database": "postgres"},
    "bank": {"oom": "ledger", "blip": "web", "database": "db"},
}


def add(cluster: Cluster, app: AppSpec, namespace: str, seed: int, epoch: float = SIM_EPOCH) -> None:
    """Add the noise to a template cluster an hour before it is captured (older events are gone by then), at times
    relative to the `epoch` its environments' clocks start from."""
    for event in cluster.list("events"):
        cluster.delete("events", event["metadata"].get("namespace", ""), event["metadata"]["name"])
    config = NOISE.get(app.name, {})
    state: WorkloadState = cluster.model["workload"]
    pods = {p["metadata"]["name"]: p for p in cluster.list("pods", namespace)}
    if "oom" in config:
        _old_oom_kill(cluster, state, namespace, config["oom"], pods, epoch)
    if "blip" in config:
        _probe_blip(cluster, state, namespace, config["blip"], pods, epoch)
    if "database" in config:
        _backup_job(cluster, app, namespace, config["database"], seed, epoch)
    node = cluster.get("nodes", "", "worker-2")
    if node is not None:
        event = cluster.record_event(node, "FreeDiskSpaceFailed", "Failed to garbage collect required amount of "
                                     "images. Attempted to free 1263429632 bytes, but only found 0 bytes eligible to "
                                     "free.", "Warning", at=epoch - 1500, component="kubelet")
        event["count"] = 2


def _first_pod(pods: dict[str, Obj], service: str) -> Obj | None:
    return next((p for name, p in sorted(pods.items()) if (p["metadata"].get("labels") or {}).get("app") == service),
                None)


def _old_oom_kill(cluster: Cluster, state: WorkloadState, namespace: str, service: str, pods: dict[str, Obj],
                  epoch: float) -> None:
    """The service's pod was OOM-killed once, 26 hours ago, during a traffic spike; it has been fine since."""
    pod = _first_pod(pods, service)
    if pod is None:
        return
    ps = state.pods[(namespace, pod["metadata"]["name"])]
    run = ps.runs.get(f"main/{pod['spec']['containers'][0]['name']}")
    if run is None:
        return
    killed_at = epoch - 26 * 3600
    container_id = "containerd://" + hashlib.blake2b(f"{pod['metadata']['uid']}/old".encode(),
                                                     digest_size=32).hexdigest()
    run.last_term = {"exitCode": 137, "reason": "OOMKilled", "startedAt": rfc3339(run.since),
                     "finishedAt": rfc3339(killed_at), "containerID": container_id}
    run.restarts_before = 1
    run.since = killed_at + 1.0
    ps.quiet_rv = None  # the kubelet must write the status again
    ps.ready_since = run.since + run.outcome.startup_s
    for kind in ("Ready", "ContainersReady"):
        ps.conditions[kind] = (True, ps.ready_since)


def _probe_blip(cluster: Cluster, state: WorkloadState, namespace: str, service: str, pods: dict[str, Obj],
                epoch: float) -> None:
    """Forty minutes ago a readiness probe timed out three times in a row, then recovered on its own."""
    pod = _first_pod(pods, service)
    if pod is None:
        return
    ps = state.pods[(namespace, pod["metadata"]["name"])]
    container = pod["spec"]["containers"][0]
    probe = (container.get("readinessProbe") or {}).get("httpGet") or {}
    url = f"http://{ps.ip}:{probe.get('port', 8080)}{probe.get('path', '/ready')}"
    event = cluster.record_event(pod, "Unhealthy", f'Readiness probe failed: Get "{url}": context deadline exceeded '
                                 "(Client.Timeout exceeded while awaiting headers)", "Warning",
                                 at=epoch - 2400, key="unhealthy-blip", component="kubelet")
    event["count"] = 3
    event["involvedObject"]["fieldPath"] = f"spec.containers{{{container['name']}}}"


def _backup_job(cluster: Cluster, app: AppSpec, namespace: str, database: str, seed: int, epoch: float) -> None:
    """Last night's database backup (the last 02:00 at least 2 hours before the epoch, 22 hours before
    SIM_EPOCH): the first attempt could not connect, the retry succeeded."""
    scheduled = int(((epoch - 4 * 3600) // 86400 * 86400 + 2 * 3600) // 60)
    job = f"db-backup-{scheduled}"
    name = f"{job}-{stable_suffix(seed, namespace, job)}"
    started = scheduled * 60.0 + 5
    db = app.service(database)
    user = db.literal_env().get("POSTGRES_USER", "postgres")
    image = db.image
    digest = hashlib.sha256(f"{image}/{name}".encode()).hexdigest()
    pod: Obj = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": stable_uid(namespace, name),
                     "creationTimestamp": rfc3339(started - 2),
                     "labels": {"app": "db-backup", "batch.kubernetes.io/job-name": job, "job-name": job,
                                "app.kubernetes.io/part-of": app.name},
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job,
                                          "uid": stable_uid(namespace, job), "controller": True,
                                          "blockOwnerDeletion": True}]},
        "spec": {"restartPolicy": "OnFailure", "nodeName": "worker-2", "serviceAccountName": "default",
                 "containers": [{"name": "pg-dump", "image": image,
                                 "command": ["sh", "-c", f"pg_dump -h {database} -U {user} --format=custom "
                                             f"{app.name} | gzip > /backup/{app.name}.dump.gz"],
                                 "env": [{"name": "PGPASSWORD", "valueFrom": {"secretKeyRef": {
                                     "name": app.databases[database][0], "key": app.databases[database][1]}}}],
                                 "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}}}]},
        "status": {
            "phase": "Succeeded", "qosClass": "Burstable", "startTime": rfc3339(started - 2),
            "hostIP": "10.0.1.12", "podIP": "10.244.2.250",
            "conditions": [{"type": "Initialized", "status": "True", "lastTransitionTime": rfc3339(started - 2),
                            "reason": "PodCompleted"},
                           {"type": "Ready", "status": "False", "lastTransitionTime": rfc3339(started + 95),
                            "reason": "PodCompleted"},
                           {"type": "ContainersReady", "status": "False", "lastTransitionTime": rfc3339(started + 95),
                            "reason": "PodCompleted"},
                           {"type": "PodScheduled", "status": "True", "lastTransitionTime": rfc3339(started - 2)}],
            "containerStatuses": [{
                "name": "pg-dump", "image": image, "imageID": f"{image.rsplit(':', 1)[0]}@sha256:{digest}",
                "containerID": f"containerd://{digest[:64]}", "ready": False, "started": False, "restartCount": 1,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": rfc3339(started + 14),
                                         "finishedAt": rfc3339(started + 95)}},
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": rfc3339(started),
                                             "finishedAt": rfc3339(started + 3)}}}],
        },
    }
    _backup_owners(cluster, app, namespace, job, pod, scheduled * 60.0, started)
    cluster.create("pods", pod)
    svc_ip = ((cluster.get("services", namespace, database) or {}).get("spec") or {}).get("clusterIP", "10.96.0.20")
    cluster.logs[(namespace, name, "pg-dump")] = {
        "current": [f"pg_dump: dumping contents of table public.{t}" for t in ("orders", "order_items", "products",
                                                                              "customers")]
        + [f"backup written: s3://acme-backups/{app.name}/{rfc3339(started)[:10]}.dump.gz (48.2 MiB)"],
        "previous": [f'pg_dump: error: connection to server at "{database}" ({svc_ip}), port 5432 failed: '
                     "Connection refused", "\tIs the server running on that host and accepting TCP/IP connections?"],
    }


def _backup_owners(cluster: Cluster, app: AppSpec, namespace: str, job: str, pod: Obj, scheduled: float,
                   started: float) -> None:
    """The Job that ran the backup pod, complete, and the CronJob that scheduled it nightly at 02:00."""
    cron_uid = stable_uid(namespace, "db-backup")
    template = {"metadata": {"labels": {"app": "db-backup", PART_OF: app.name}},
                "spec": {k: v for k, v in pod["spec"].items() if k != "nodeName"}}
    finished = rfc3339(started + 95)
    job_uid = stable_uid(namespace, job)
    cluster.create("cronjobs.batch", {
        "metadata": {"name": "db-backup", "namespace": namespace, "uid": cron_uid, "labels": {PART_OF: app.name},
                     "creationTimestamp": rfc3339(scheduled - 30 * 86400)},
        "spec": {"schedule": "0 2 * * *", "concurrencyPolicy": "Forbid", "suspend": False,
                 "successfulJobsHistoryLimit": 3, "failedJobsHistoryLimit": 1,
                 "jobTemplate": {"spec": {"backoffLimit": 2, "template": template}}},
        "status": {"lastScheduleTime": rfc3339(scheduled), "lastSuccessfulTime": finished}})
    done = {"type": "Complete", "status": "True", "lastProbeTime": finished, "lastTransitionTime": finished,
            "reason": "CompletionsReached", "message": "Reached expected number of succeeded pods"}
    cluster.create("jobs.batch", {
        "metadata": {"name": job, "namespace": namespace, "uid": job_uid, "creationTimestamp": rfc3339(scheduled),
                     "labels": {"batch.kubernetes.io/controller-uid": job_uid, "batch.kubernetes.io/job-name": job,
                                "controller-uid": job_uid, "job-name": job},
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": "db-backup",
                                          "uid": cron_uid, "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 2, "completionMode": "NonIndexed",
                 "suspend": False, "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": job_uid}},
                 "template": template},
        "status": {"startTime": rfc3339(started - 2), "completionTime": finished, "succeeded": 1, "terminating": 0,
                   "ready": 0, "uncountedTerminatedPods": {},
                   "conditions": [{**done, "type": "SuccessCriteriaMet"}, done]}})
