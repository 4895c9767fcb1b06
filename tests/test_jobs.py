"""batch/v1 Jobs and CronJobs: served like every resource (kubectl get/describe, watch), the apiserver's defaults,
and the job controller's completions and backoffLimit as upstream counts them."""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest
from sim_fixtures import Served, call

from agent_sre.simulator.simulator import Simulator

JOBS = "/envs/{env}/apis/batch/v1/namespaces/shop/jobs"


def _job(name: str, script: str, policy: str = "Never", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "spec": {**spec, "template": {"spec": {"restartPolicy": policy, "containers": [
                {"name": "task", "image": "busybox:1.36", "command": ["sh", "-c", script]}]}}}}


@pytest.fixture
def sim() -> Simulator:
    simulator = Simulator(speed=0)
    simulator.create_env("jobs", apps=["shop"])
    return simulator


def test_the_apiserver_defaults_a_job_and_refuses_a_restarting_one(sim: Simulator) -> None:
    status, job = call(sim, "POST", JOBS.format(env="jobs"), _job("once", "echo done"))
    assert status == 201
    spec, uid = job["spec"], job["metadata"]["uid"]
    assert (spec["completions"], spec["parallelism"], spec["backoffLimit"]) == (1, 1, 6)
    assert spec["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    assert spec["template"]["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "once"
    status, body = call(sim, "POST", JOBS.format(env="jobs"), _job("forever", "echo", policy="Always"))
    assert status == 422 and 'Unsupported value: "Always": supported values: "OnFailure", "Never"' in body["message"]


def test_a_job_runs_its_completions_one_pod_at_a_time(sim: Simulator) -> None:
    call(sim, "POST", JOBS.format(env="jobs"), _job("twice", "echo done", completions=2))
    sim.advance("jobs", 60)
    cluster = sim.env("jobs")
    job = cluster.get("jobs.batch", "shop", "twice")
    assert job["status"]["succeeded"] == 2 and "active" not in job["status"]
    assert [c["type"] for c in job["status"]["conditions"]] == ["SuccessCriteriaMet", "Complete"]
    assert job["status"]["completionTime"] >= job["status"]["startTime"]
    pods = [p for p in cluster.list("pods", "shop") if p["metadata"]["name"].startswith("twice-")]
    assert [p["status"]["phase"] for p in pods] == ["Succeeded", "Succeeded"]
    assert all(p["metadata"]["ownerReferences"][0] == {
        "apiVersion": "batch/v1", "kind": "Job", "name": "twice", "uid": job["metadata"]["uid"], "controller": True,
        "blockOwnerDeletion": True} for p in pods)
    ready = next(c for c in pods[0]["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False" and ready["reason"] == "PodCompleted"


def test_a_job_fails_past_its_backoff_limit(sim: Simulator) -> None:
    call(sim, "POST", JOBS.format(env="jobs"), _job("broken", "exit 3", backoffLimit=2))
    sim.advance("jobs", 120)
    cluster = sim.env("jobs")
    job = cluster.get("jobs.batch", "shop", "broken")
    assert job["status"]["failed"] == 3  # the limit is on retries: the third failure ends it
    failed = next(c for c in job["status"]["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "BackoffLimitExceeded" and failed["message"] == "Job has reached the specified " \
                                                                               "backoff limit"
    pod = next(p for p in cluster.list("pods", "shop") if p["metadata"]["name"].startswith("broken-"))
    assert pod["status"]["phase"] == "Failed"
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
    events = {e["reason"] for e in cluster.list("events", "shop") if e["involvedObject"]["name"] == "broken"}
    assert {"SuccessfulCreate", "BackoffLimitExceeded"} <= events
    # deleting the job deletes its pods (their owner references)
    assert call(sim, "DELETE", JOBS.format(env="jobs") + "/broken")[0] == 200
    assert not [p for p in cluster.list("pods", "shop") if p["metadata"]["name"].startswith("broken-")]


def test_the_nightly_backup_has_its_job_and_cron_job(sim: Simulator) -> None:
    cluster = sim.env("jobs")
    pod = next(p for p in cluster.list("pods", "shop") if p["metadata"]["labels"].get("app") == "db-backup")
    owner = pod["metadata"]["ownerReferences"][0]
    job = cluster.get("jobs.batch", "shop", owner["name"])
    assert job["metadata"]["uid"] == owner["uid"] and job["status"]["succeeded"] == 1
    cron = job["metadata"]["ownerReferences"][0]
    assert cron["kind"] == "CronJob" and cluster.get("cronjobs.batch", "shop", cron["name"])["spec"]["schedule"]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_gets_jobs_and_cron_jobs(served: Served) -> None:
    sim = served.simulator
    sim.create_env("jobs-kubectl", apps=["shop"], speed=0)
    kubeconfig = served.kubeconfig_for("jobs-kubectl")
    try:
        manifest = served.home / "hello-job.json"
        manifest.write_text(json.dumps({"apiVersion": "batch/v1", "kind": "Job", **_job("hello", "echo hi")}))
        served.kubectl("create", "-n", "shop", "-f", str(manifest), kubeconfig=kubeconfig)
        sim.advance("jobs-kubectl", 30)
        rows = [line.split() for line in served.kubectl("get", "jobs", "-n", "shop",
                                                        kubeconfig=kubeconfig).stdout.splitlines()]
        assert rows[0] == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
        assert ["hello", "Complete", "1/1"] in [r[:3] for r in rows[1:]]
        assert any(r[:3] == ["Complete", "1/1", "97s"] for r in (row[1:4] for row in rows[1:]))  # the backup
        cron = served.kubectl("get", "cronjobs", "-n", "shop", kubeconfig=kubeconfig).stdout.splitlines()
        assert cron[0].split()[:4] == ["NAME", "SCHEDULE", "TIMEZONE", "SUSPEND"]
        assert cron[1].split()[:5] == ["db-backup", "0", "2", "*", "*"]
        pods = served.kubectl("get", "pods", "-n", "shop", "-l", "job-name=hello", kubeconfig=kubeconfig).stdout
        assert "Completed" in pods
        described = served.kubectl("describe", "job", "hello", "-n", "shop", kubeconfig=kubeconfig).stdout
        assert "1 Succeeded / 0 Failed" in described and "Job completed" in described
    finally:
        sim.delete_env("jobs-kubectl")
