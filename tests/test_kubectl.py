"""kubectl 1.32 against the simulator over HTTP, with a kubeconfig as for a real cluster."""

from __future__ import annotations

import itertools
import json
import os
import queue
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
from sim_fixtures import NS, Served, call, seed, workload_available

from agent_sre.apps.catalog import get_app
from agent_sre.faults import FAULTS, inject
from agent_sre.models.tools import ToolCall
from agent_sre.simulator.transport import in_process_api_client
from agent_sre.tools import ToolContext, execute
from agent_sre.tools.client import api_client
from agent_sre.tools.status import rollout_progress

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
_env_ids = itertools.count(1)


@pytest.fixture
def fresh(served: Served) -> Iterator[Path]:
    """A kubeconfig for a freshly seeded environment, for tests that write."""
    name = f"kubectl-{next(_env_ids)}"
    seed(served.simulator, name)
    yield served.kubeconfig_for(name)
    served.simulator.delete_env(name)


def _lines(text: str) -> list[list[str]]:
    return [line.split() for line in text.strip().splitlines()]


def test_get_pods_all_namespaces(served: Served) -> None:
    rows = _lines(served.kubectl("get", "pods", "-A").stdout)
    assert rows[0] == ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    by_name = {r[1]: r for r in rows[1:]}
    assert by_name["cart-7c9b4-aaaaa"][:5] == [NS, "cart-7c9b4-aaaaa", "2/2", "Running", "0"]
    assert by_name["cart-7c9b4-bbbbb"][2:5] == ["1/2", "CrashLoopBackOff", "4"]
    wide = served.kubectl("get", "pods", "-n", NS, "-o", "wide").stdout
    assert wide.splitlines()[0].split()[5:] == ["IP", "NODE", "NOMINATED", "NODE", "READINESS", "GATES"]
    assert "10.244.2.7   node-2   <none>           <none>" in wide


def test_get_pods_ages_are_the_simulators_own(served: Served) -> None:
    """`kubectl get` prints the apiserver's Table, whose ages the simulator computes on its own clock (it starts at
    2026-01-01, for reproducible runs); only ages kubectl computes itself (describe's events) use the wall clock."""
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"

    def ages() -> dict[str, str]:
        _, table = call(served.simulator, "GET", f"/envs/seeded/api/v1/namespaces/{NS}/pods",
                        headers={"Accept": accept})
        age = [c["name"] for c in table["columnDefinitions"]].index("Age")
        return {row["cells"][0]: row["cells"][age] for row in table["rows"]}

    before = ages()  # the clock runs on: kubectl's ages are those of a moment between the two reads
    printed = {r[0]: r[-1] for r in _lines(served.kubectl("get", "pods", "-n", NS).stdout)[1:]}
    after = ages()
    assert printed.keys() == before.keys()
    assert all(printed[pod] in (before[pod], after[pod]) for pod in printed), (before, printed, after)


def test_get_several_kinds(served: Served) -> None:
    out = served.kubectl("get", "deploy,svc", "-n", NS).stdout
    assert "deployment.apps/cart   1/2     2            1" in out
    assert "service/cart   ClusterIP   10.96.0.10   <none>        80/TCP" in out
    out = served.kubectl("get", "all", "-n", NS).stdout
    assert "replicaset.apps/cart-7c9b4" in out and "pod/cart-7c9b4-aaaaa" in out
    out = served.kubectl("get", "cm,secret,quota,netpol,ep", "-n", NS).stdout
    assert "configmap/cart-config" in out and "secret/db-credentials   Opaque" in out
    assert "pods: 2/20, requests.cpu: 500m/4" in out and "limits.memory: 1Gi/8Gi" in out
    assert "networkpolicy.networking.k8s.io/allow-frontend   app=cart" in out
    assert "endpoints/cart   10.244.1.5:8080" in out


def test_get_nodes_and_namespaces(served: Served) -> None:
    rows = _lines(served.kubectl("get", "nodes").stdout)
    assert rows[0] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert [r[:3] for r in rows[1:]] == [["node-1", "Ready", "control-plane"], ["node-2", "Ready", "worker"]]
    assert {r[0] for r in _lines(served.kubectl("get", "ns").stdout)[1:]} == {"default", NS}


def test_get_with_selectors_and_output_formats(served: Served) -> None:
    out = served.kubectl("get", "pods", "-n", NS, "-l", "app=cart,pod-template-hash in (7c9b4)",
                         "--field-selector", "spec.nodeName=node-1", "-o", "name").stdout
    assert out.split() == ["pod/cart-7c9b4-aaaaa"]
    pod = json.loads(served.kubectl("get", "pod", "cart-7c9b4-bbbbb", "-n", NS, "-o", "json").stdout)
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 4
    out = served.kubectl("get", "events", "-n", NS, "--field-selector", "type=Warning").stdout
    assert "BackOff" in out and "pod/cart-7c9b4-bbbbb" in out and "Scheduled" not in out
    result = served.kubectl("get", "pods", "-l", "app in cart", check=False)
    assert result.returncode != 0 and "unable to parse requirement" in result.stderr


def test_describe_pod(served: Served) -> None:
    out = served.kubectl("describe", "pod", "cart-7c9b4-bbbbb", "-n", NS).stdout
    assert "Node:         node-2/10.0.0.11" in out
    assert "CrashLoopBackOff" in out and "Restart Count:  4" in out
    assert "Back-off restarting failed container cart" in out  # events found by involvedObject field selectors
    assert "Controlled By:  ReplicaSet/cart-7c9b4" in out


def test_describe_deployment_node_and_service(served: Served) -> None:
    out = served.kubectl("describe", "deployment", "cart", "-n", NS).stdout
    assert "Replicas:               2 desired | 2 updated | 2 total | 1 available | 1 unavailable" in out
    assert "NewReplicaSet:   cart-7c9b4 (2/2 replicas created)" in out
    assert "REDIS_ADDR:  cache:6379" in out
    out = served.kubectl("describe", "node", "node-2").stdout
    assert "cart-7c9b4-bbbbb" in out and "Unschedulable:      false" in out
    out = served.kubectl("describe", "svc", "cart", "-n", NS).stdout
    assert "Endpoints:         10.244.1.5:8080" in out and "TargetPort:        8080/TCP" in out


def test_logs(served: Served) -> None:
    out = served.kubectl("logs", "cart-7c9b4-aaaaa", "-n", NS, "--tail", "3").stdout
    assert out.splitlines() == ["cart: served request 98", "cart: served request 99", "cart: served request 100"]
    out = served.kubectl("logs", "cart-7c9b4-bbbbb", "-n", NS, "-c", "cart", "--previous").stdout
    assert out.splitlines()[-1] == "FATAL: dial tcp cache:6379: connection refused"
    assert served.kubectl("logs", "cart-7c9b4-aaaaa", "-n", NS, "-c", "proxy").stdout == "envoy: ready\n"
    result = served.kubectl("logs", "cart-7c9b4-aaaaa", "-n", NS, "-c", "proxy", "--previous", check=False)
    assert result.returncode != 0 and 'previous terminated container "proxy"' in result.stderr
    assert served.kubectl("logs", "deploy/cart", "-n", NS, "--tail=1").stdout.strip()


def _follow(served: Served, *args: str, kubeconfig: Path | None = None) -> tuple[subprocess.Popen[str],
                                                                                 queue.Queue[str | None]]:
    """`kubectl logs -f ...` in the background; its lines arrive on the queue (None when it exits)."""
    proc = subprocess.Popen(["kubectl", "--kubeconfig", str(kubeconfig or served.kubeconfig), "logs", "-f", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "HOME": str(served.home)})
    lines: queue.Queue[str | None] = queue.Queue()

    def pump(out: IO[str]) -> None:
        for line in out:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    assert proc.stdout is not None
    threading.Thread(target=pump, args=(proc.stdout,), daemon=True).start()
    return proc, lines


def test_logs_follow_streams_new_lines_until_the_container_ends(served: Served, fresh: Path) -> None:
    """`kubectl logs -f` prints the log so far, then each line the container writes, and exits when the container
    terminates (the kubelet stops following a container that is not running)."""
    env = served.simulator.envs[fresh.stem]
    proc, lines = _follow(served, "cart-7c9b4-aaaaa", "-n", NS, "-c", "cart", "--tail", "1", kubeconfig=fresh)
    try:
        assert lines.get(timeout=20) == "cart: served request 100"
        with served.simulator.lock:
            env.logs[(NS, "cart-7c9b4-aaaaa", "cart")]["current"].append("cart: served request 101")
        assert lines.get(timeout=20) == "cart: served request 101"
        assert proc.poll() is None  # still following
        pod = call(served.simulator, "GET", f"/envs/{fresh.stem}/api/v1/namespaces/{NS}/pods/cart-7c9b4-aaaaa")[1]
        cart = next(cs for cs in pod["status"]["containerStatuses"] if cs["name"] == "cart")
        cart["state"] = {"terminated": {"exitCode": 0, "reason": "Completed",
                                        "startedAt": cart["state"]["running"]["startedAt"]}}
        status, _ = call(served.simulator, "PUT",
                         f"/envs/{fresh.stem}/api/v1/namespaces/{NS}/pods/cart-7c9b4-aaaaa/status", pod)
        assert status == 200
        assert lines.get(timeout=20) is None
        assert proc.wait(timeout=20) == 0
        # A container that is not running is not followed: its log so far, and the stream ends.
        done = served.kubectl("logs", "-f", "cart-7c9b4-aaaaa", "-n", NS, "-c", "cart", "--tail", "1",
                              kubeconfig=fresh)
        assert done.stdout == "cart: served request 101\n"
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.mark.skipif(not workload_available(), reason="needs the workload model (simulator/workload.py, apps.py)")
def test_logs_timestamps_since_and_follow_on_the_simulated_clock(served: Served) -> None:
    """`--timestamps` prefixes each line with when the container wrote it (RFC3339Nano, on the simulator's clock,
    so the same moment the program stamped in the line), `--since` keeps the recent lines, and `-f` streams the
    lines the workload goes on writing."""
    cluster = served.simulator.create_env("kubectl-logs", apps=("shop",), seed=3, speed=60)
    try:
        kubeconfig = served.kubeconfig_for(cluster.name)
        pods = served.kubectl("get", "pods", "-n", "shop", "-l", "app=cart", "-o", "name",
                              kubeconfig=kubeconfig).stdout.split()
        stamped = served.kubectl("logs", pods[0], "-n", "shop", "--timestamps", "--tail", "5",
                                 kubeconfig=kubeconfig).stdout.splitlines()
        assert len(stamped) == 5
        for line in stamped:
            prefix, _, text = line.partition(" ")
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z", prefix), line
            if text.startswith("time="):  # the program's own stamp (to the millisecond) is the same moment
                assert text.split()[0] == f"time={prefix[:23]}Z", line
        recent = served.kubectl("logs", pods[0], "-n", "shop", "--since", "30s", kubeconfig=kubeconfig).stdout
        everything = served.kubectl("logs", pods[0], "-n", "shop", kubeconfig=kubeconfig).stdout
        assert 0 < len(recent.splitlines()) < len(everything.splitlines())
        status, doc = call(served.simulator, "GET",
                           f"/envs/{cluster.name}/api/v1/namespaces/shop/pods/{pods[0].split('/')[1]}/log",
                           query={"sinceSeconds": ["5"], "sinceTime": ["2026-01-01T00:00:00Z"]})
        assert status == 422 and "at most one of `sinceTime` or `sinceSeconds`" in doc["message"]
        proc, lines = _follow(served, pods[0], "-n", "shop", "--timestamps", "--tail", "1", kubeconfig=kubeconfig)
        try:
            times = []
            for _ in range(4):  # one request line per 7 simulated seconds: about 0.12 s at 60x
                line = lines.get(timeout=20)
                assert line is not None
                times.append(line.split()[0])
            assert times == sorted(times) and len(set(times)) > 1
        finally:
            proc.kill()
            proc.wait(timeout=10)
    finally:
        served.simulator.delete_env(cluster.name)


def test_patch_strategic_merge_and_json(served: Served, fresh: Path) -> None:
    def deploy() -> dict:
        return json.loads(served.kubectl("get", "deploy", "cart", "-n", NS, "-o", "json", kubeconfig=fresh).stdout)

    served.kubectl("patch", "deploy", "cart", "-n", NS, "-p",
                   '{"spec":{"template":{"spec":{"containers":[{"name":"cart","env":[{"name":"REDIS_ADDR",'
                   '"value":"redis:6379"}]}]}}}}', kubeconfig=fresh)
    containers = deploy()["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["cart", "proxy"]
    assert containers[0]["env"] == [{"name": "REDIS_ADDR", "value": "redis:6379"}]
    assert containers[0]["image"] == "shop/cart:1.4.2"
    served.kubectl("patch", "deploy", "cart", "-n", NS, "--type", "merge", "-p",
                   '{"metadata":{"labels":{"team":"payments"}}}', kubeconfig=fresh)
    assert deploy()["metadata"]["labels"] == {"app": "cart", "team": "payments"}
    served.kubectl("patch", "deploy", "cart", "-n", NS, "--type", "json", "-p",
                   '[{"op":"replace","path":"/spec/template/spec/containers/1/image","value":"envoy:1.31"}]',
                   kubeconfig=fresh)
    assert deploy()["spec"]["template"]["spec"]["containers"][1]["image"] == "envoy:1.31"
    served.kubectl("set", "image", "deploy/cart", "cart=shop/cart:1.5.0", "-n", NS, kubeconfig=fresh)
    served.kubectl("rollout", "restart", "deploy/cart", "-n", NS, kubeconfig=fresh)
    template = deploy()["spec"]["template"]
    assert template["spec"]["containers"][0]["image"] == "shop/cart:1.5.0"
    assert "kubectl.kubernetes.io/restartedAt" in template["metadata"]["annotations"]
    result = served.kubectl("patch", "deploy", "cart", "-n", NS, "--type", "merge", "-p",
                            '{"spec":{"replicas":-3}}', kubeconfig=fresh, check=False)
    assert result.returncode != 0 and "spec.replicas: Invalid value: -3" in result.stderr
    result = served.kubectl("patch", "svc", "cart", "-n", NS, "--type", "json", "-p",
                            '[{"op":"test","path":"/spec/type","value":"NodePort"}]', kubeconfig=fresh, check=False)
    assert result.returncode != 0 and "is invalid" in result.stderr


def test_scale(served: Served, fresh: Path) -> None:
    served.kubectl("scale", "deploy/cart", "--replicas=0", "-n", NS, kubeconfig=fresh)
    out = served.kubectl("get", "deploy", "cart", "-n", NS, "-o", "jsonpath={.spec.replicas}", kubeconfig=fresh)
    assert out.stdout == "0"
    result = served.kubectl("scale", "deploy/cart", "--replicas=3", "--current-replicas=2", "-n", NS,
                            kubeconfig=fresh, check=False)
    assert result.returncode != 0 and "Expected replicas to be 2, was 0" in result.stderr


def test_rollout_history_and_undo(served: Served, fresh: Path) -> None:
    out = served.kubectl("rollout", "history", "deploy/cart", "-n", NS, kubeconfig=fresh).stdout
    assert [r[0] for r in _lines(out)[2:]] == ["1", "2"]
    served.kubectl("rollout", "undo", "deploy/cart", "-n", NS, kubeconfig=fresh)
    image = served.kubectl("get", "deploy", "cart", "-n", NS, "-o",
                           "jsonpath={.spec.template.spec.containers[0].image}", kubeconfig=fresh).stdout
    assert image == "shop/cart:1.4.1"  # revision 1's template, restored by kubectl's JSON patch


def test_rollout_status_is_what_our_tool_prints(served: Served) -> None:
    """kubectl's watch of a rollout that cannot finish (a crash-looping replica), and our tool over the same env."""
    kubectl = served.kubectl("rollout", "status", "deploy/cart", "-n", NS, "--timeout=2s", check=False)
    ours = execute(ToolCall(tool="rollout_status", args={"deployment": "cart", "timeout_s": 2}),
                   ToolContext(api=api_client(str(served.kubeconfig)), namespace=NS))
    assert kubectl.returncode == 1 and ours.ok
    assert ours.output == kubectl.stdout + kubectl.stderr.rstrip("\n")
    once = served.kubectl("rollout", "status", "deploy/cart", "-n", NS, "--watch=false").stdout
    assert once == ours.output.splitlines()[0] + "\n"


def test_rollout_status_lines_are_kubectls_through_faults_and_their_fixes(served: Served) -> None:
    """On a stopped simulated clock kubectl and our tool read the same state, so every line must be the same:
    while a fault develops, after the fix, and once the progress deadline has passed."""
    seen = []
    for fault, deadline_s in (("bad_image", None), ("oom_limit", None), ("scaled_to_zero", None), ("bad_image", 60)):
        cluster = served.simulator.create_env(apps=["shop"], seed=1, speed=0)
        api = in_process_api_client(served.simulator, cluster.name)
        spec = FAULTS[fault]
        scenario = spec.scenario(f"k-{fault}".replace("_", "-"), "shop", "shop", spec.targets(get_app("shop"))[0], {})
        inject(api, scenario)
        ctx = ToolContext(api=api, namespace="shop", idempotency_key=f"kubectl-{cluster.name}")
        if deadline_s is not None:
            fix = [ToolCall(tool="patch", args={"kind": "deployment", "name": scenario.target,
                                               "patch": {"spec": {"progressDeadlineSeconds": deadline_s}}})]
        else:
            fix = scenario.ground_truth.fix
        for advance in (0, 30, "fix", 1, 10, 60):
            if advance == "fix":
                assert all(execute(call, ctx).ok for call in fix)
                continue
            served.simulator.advance(cluster.name, float(advance))
            kubectl = served.kubectl("rollout", "status", f"deploy/{scenario.target}", "-n", "shop", "--watch=false",
                                     kubeconfig=served.kubeconfig_for(cluster.name), check=False)
            ours, _ = rollout_progress(ctx.kube.get("deployment", scenario.target))
            assert (kubectl.stdout + kubectl.stderr).strip() == ours, (fault, advance)
            seen.append(ours)
        served.simulator.delete_env(cluster.name)
    for state in ("new replicas have been updated", "old replicas are pending termination",
                  "updated replicas are available", "successfully rolled out", "exceeded its progress deadline"):
        assert any(state in line for line in seen), state


def test_claims_and_pull_secrets_read_as_on_a_cluster(served: Served) -> None:
    """`get pvc` has kubectl's columns, `describe pod` the scheduler's word on a missing claim, `get secret` a pull
    secret's type."""
    cluster = served.simulator.create_env(apps=["shop"], seed=1, speed=0)
    kubeconfig = served.kubeconfig_for(cluster.name)
    rows = _lines(served.kubectl("get", "pvc", "-n", "shop", kubeconfig=kubeconfig).stdout)
    assert rows[0] == ["NAME", "STATUS", "VOLUME", "CAPACITY", "ACCESS", "MODES", "STORAGECLASS",
                       "VOLUMEATTRIBUTESCLASS", "AGE"]
    assert [(r[0], r[1], r[2][:4], r[3:6]) for r in rows[1:]] == [
        ("postgres-data", "Bound", "pvc-", ["10Gi", "RWO", "standard"]),
        ("redis-data", "Bound", "pvc-", ["10Gi", "RWO", "standard"])]
    out = served.kubectl("describe", "pvc", "postgres-data", "-n", "shop", kubeconfig=kubeconfig).stdout
    assert re.search(r"^Status:\s+Bound$", out, re.MULTILINE) and re.search(r"^Used By:\s+postgres-", out, re.MULTILINE)
    out = served.kubectl("get", "secret", "acme-registry", "-n", "shop", kubeconfig=kubeconfig).stdout
    assert _lines(out)[1][:3] == ["acme-registry", "kubernetes.io/dockerconfigjson", "1"]
    spec = FAULTS["pvc_missing"]
    inject(in_process_api_client(served.simulator, cluster.name),
           spec.scenario("k-pvc", "shop", "shop", "postgres", {"claim": "postgres-data-v2"}))
    served.simulator.advance(cluster.name, 60.0)
    pending = next(r[0] for r in _lines(served.kubectl("get", "pods", "-n", "shop", kubeconfig=kubeconfig).stdout)
                   if r[0].startswith("postgres-") and r[2] == "Pending")
    out = served.kubectl("describe", "pod", pending, "-n", "shop", kubeconfig=kubeconfig).stdout
    assert re.search(r"ClaimName:\s+postgres-data-v2", out), out
    assert 'persistentvolumeclaim "postgres-data-v2" not found' in out
    served.simulator.delete_env(cluster.name)


def test_delete_pod(served: Served, fresh: Path) -> None:
    out = served.kubectl("delete", "pod", "cart-7c9b4-aaaaa", "-n", NS, kubeconfig=fresh).stdout
    assert out.strip() == 'pod "cart-7c9b4-aaaaa" deleted'
    names = served.kubectl("get", "pods", "-n", NS, "-o", "name", kubeconfig=fresh).stdout.split()
    assert names == ["pod/cart-7c9b4-bbbbb"]
    result = served.kubectl("delete", "pod", "cart-7c9b4-aaaaa", "-n", NS, kubeconfig=fresh, check=False)
    assert result.returncode != 0 and 'pods "cart-7c9b4-aaaaa" not found' in result.stderr


def test_cordon_and_uncordon(served: Served, fresh: Path) -> None:
    served.kubectl("cordon", "node-2", kubeconfig=fresh)
    rows = _lines(served.kubectl("get", "node", "node-2", kubeconfig=fresh).stdout)
    assert rows[1][1] == "Ready,SchedulingDisabled"
    served.kubectl("uncordon", "node-2", kubeconfig=fresh)
    assert _lines(served.kubectl("get", "node", "node-2", kubeconfig=fresh).stdout)[1][1] == "Ready"


def test_create_namespace_and_drain_whose_bodies_are_protobuf(served: Served, fresh: Path) -> None:
    """kubectl's typed clients send these bodies as protobuf (the Namespace; the DeleteOptions of each pod drain
    deletes, evictions not being offered) and, unlike the generic ones, do not fall back to JSON on a 415."""
    assert served.kubectl("create", "namespace", "team-a", kubeconfig=fresh).stdout == "namespace/team-a created\n"
    assert _lines(served.kubectl("get", "ns", "team-a", kubeconfig=fresh).stdout)[1][:2] == ["team-a", "Active"]
    result = served.kubectl("create", "namespace", "team-a", kubeconfig=fresh, check=False)
    assert result.returncode != 0 and 'namespaces "team-a" already exists' in result.stderr
    out = served.kubectl("drain", "node-2", "--ignore-daemonsets", "--timeout=30s", kubeconfig=fresh).stdout
    assert out.splitlines()[0] == "node/node-2 cordoned" and out.splitlines()[-1] == "node/node-2 drained"
    assert "pod/cart-7c9b4-bbbbb deleted" in out
    assert _lines(served.kubectl("get", "node", "node-2", kubeconfig=fresh).stdout)[1][1] == "Ready,SchedulingDisabled"
    assert not served.kubectl("get", "pods", "-A", "--field-selector", "spec.nodeName=node-2", "-o", "name",
                              kubeconfig=fresh).stdout


def test_auth_can_i_is_yes_as_with_always_allow(served: Served) -> None:
    """A SelfSubjectAccessReview (protobuf, from kubectl's typed client) is allowed: the simulator has no authz."""
    assert served.kubectl("auth", "can-i", "delete", "pods", "-n", NS).stdout == "yes\n"
    assert served.kubectl("auth", "can-i", "get", "/healthz").stdout == "yes\n"


def test_top(served: Served) -> None:
    rows = _lines(served.kubectl("top", "pods", "-n", NS).stdout)
    assert rows[0] == ["NAME", "CPU(cores)", "MEMORY(bytes)"]
    assert {r[0]: r[1:] for r in rows[1:]}["cart-7c9b4-aaaaa"] == ["125m", "116Mi"]
    rows = _lines(served.kubectl("top", "pods", "-n", NS, "--containers").stdout)
    assert ["cart-7c9b4-aaaaa", "cart", "120m", "96Mi"] in rows
    rows = _lines(served.kubectl("top", "nodes").stdout)
    assert rows[1][:3] == ["node-1", "900m", "22%"]


def test_chaos_custom_resources(served: Served, fresh: Path, tmp_path: Path) -> None:
    manifest = tmp_path / "chaos.yaml"
    manifest.write_text(
        "apiVersion: chaos-mesh.org/v1alpha1\nkind: PodChaos\nmetadata: {name: kill-cart, namespace: shop}\n"
        "spec: {action: pod-kill, mode: one, selector: {labelSelectors: {app: cart}}}\n")
    served.kubectl("apply", "-f", str(manifest), kubeconfig=fresh)
    rows = _lines(served.kubectl("get", "podchaos", "-n", NS, kubeconfig=fresh).stdout)
    assert rows[0] == ["NAME", "AGE"] and rows[1][0] == "kill-cart"
    served.kubectl("apply", "-f", str(manifest), kubeconfig=fresh)  # unchanged: a no-op patch
    served.kubectl("delete", "podchaos", "kill-cart", "-n", NS, kubeconfig=fresh)
    assert "No resources found" in served.kubectl("get", "podchaos", "-n", NS, kubeconfig=fresh).stderr


def test_create_and_apply_from_files(served: Served, fresh: Path, tmp_path: Path) -> None:
    manifest = tmp_path / "web.yaml"
    manifest.write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: shop}\n"
        "spec:\n  replicas: 1\n  selector: {matchLabels: {app: web}}\n"
        "  template:\n    metadata: {labels: {app: web}}\n"
        "    spec: {containers: [{name: web, image: 'nginx:1.27'}]}\n")
    assert "deployment.apps/web created" in served.kubectl("create", "-f", str(manifest), kubeconfig=fresh).stdout
    manifest.write_text(manifest.read_text().replace("replicas: 1", "replicas: 2"))
    served.kubectl("apply", "-f", str(manifest), kubeconfig=fresh)
    out = served.kubectl("get", "deploy", "web", "-n", NS, "-o", "jsonpath={.spec.replicas}", kubeconfig=fresh)
    assert out.stdout == "2"


def test_diff_shows_what_apply_would_change(served: Served, fresh: Path, tmp_path: Path) -> None:
    """`kubectl diff -f` (server-side dry runs: a PATCH for an object that exists, a POST for a new one): exit 1
    and a diff when the file differs from the cluster, 0 and nothing when it matches; nothing is written."""
    manifest = tmp_path / "config.yaml"
    config = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cart-config, namespace: shop}\ndata: {%s}\n"
    manifest.write_text(config % "LOG_LEVEL: info, CACHE_TTL: '30'")
    same = served.kubectl("diff", "-f", str(manifest), kubeconfig=fresh)
    assert same.stdout == ""
    manifest.write_text(config % "LOG_LEVEL: debug, CACHE_TTL: '30'")
    changed = served.kubectl("diff", "-f", str(manifest), kubeconfig=fresh, check=False)
    assert changed.returncode == 1, changed.stderr
    assert "-  LOG_LEVEL: info\n+  LOG_LEVEL: debug\n" in changed.stdout and "annotations" not in changed.stdout
    manifest.write_text(config.replace("cart-config", "new-config") % "LOG_LEVEL: debug")
    new = served.kubectl("diff", "-f", str(manifest), kubeconfig=fresh, check=False)
    assert new.returncode == 1 and "+  name: new-config\n" in new.stdout, new.stderr
    level = served.kubectl("get", "cm", "cart-config", "-n", NS, "-o", "jsonpath={.data.LOG_LEVEL}", kubeconfig=fresh)
    assert level.stdout == "info"
    assert served.kubectl("get", "cm", "new-config", "-n", NS, check=False, kubeconfig=fresh).returncode == 1


def test_explain_from_the_apis_own_schemas(served: Served) -> None:
    """`kubectl explain` reads /openapi/v3: the built-in kinds' schemas (descriptions, types, required fields, as the
    API's document has them) and, for Chaos Mesh's kinds, a schema that says the simulator has none."""
    pods = served.kubectl("explain", "pods").stdout
    assert "Pod is a collection of containers that can run on a host." in pods and "spec\t<PodSpec>" in pods
    image = served.kubectl("explain", "deploy.spec.template.spec.containers.image").stdout
    assert "FIELD: image <string>" in image and "Container image name." in image
    port = served.kubectl("explain", "pods.spec.containers.ports").stdout
    assert "containerPort\t<integer> -required-" in port
    chaos = served.kubectl("explain", "podchaos").stdout
    assert "KIND:       PodChaos" in chaos and "no schema" in chaos
    missing = served.kubectl("explain", "pods.spec.nonsense", check=False)
    assert missing.returncode != 0 and 'field "nonsense" does not exist' in missing.stderr


def test_errors(served: Served) -> None:
    result = served.kubectl("get", "pod", "ghost", "-n", NS, check=False)
    assert result.returncode != 0 and 'Error from server (NotFound): pods "ghost" not found' in result.stderr
    result = served.kubectl("get", "widgets", check=False)
    assert result.returncode != 0 and 'the server doesn\'t have a resource type "widgets"' in result.stderr


@pytest.mark.skipif(not workload_available(), reason="needs the workload model (simulator/workload.py, apps.py)")
def test_with_the_workload_model(served: Served) -> None:
    """The shop app under the real controllers: pods come up, a bad image is rolled back, usage is reported."""
    cluster = served.simulator.create_env("kubectl-shop", apps=("shop",), seed=3)
    try:
        kubeconfig = served.kubeconfig_for(cluster.name)
        rows = _lines(served.kubectl("get", "pods", "-A", kubeconfig=kubeconfig).stdout)
        assert len(rows) > 5 and any(r[3] == "Running" for r in rows[1:])
        namespace, pod = rows[1][0], rows[1][1]
        served.kubectl("describe", "pod", pod, "-n", namespace, kubeconfig=kubeconfig)
        deploy = served.kubectl("get", "deploy", "-n", namespace, "-o", "name", kubeconfig=kubeconfig).stdout.split()[0]
        container = served.kubectl("get", deploy, "-n", namespace, "-o",
                                   "jsonpath={.spec.template.spec.containers[0].name}", kubeconfig=kubeconfig).stdout
        original = served.kubectl("get", deploy, "-n", namespace, "-o",
                                  "jsonpath={.spec.template.spec.containers[0].image}", kubeconfig=kubeconfig).stdout
        served.kubectl("set", "image", deploy, f"{container}=registry.invalid/nope:0", "-n", namespace,
                       kubeconfig=kubeconfig)
        served.simulator.advance(cluster.name, 120)
        served.kubectl("rollout", "undo", deploy, "-n", namespace, kubeconfig=kubeconfig)
        restored = served.kubectl("get", deploy, "-n", namespace, "-o",
                                  "jsonpath={.spec.template.spec.containers[0].image}", kubeconfig=kubeconfig).stdout
        assert restored == original
        served.simulator.advance(cluster.name, 120)
        assert _lines(served.kubectl("top", "pods", "-n", namespace, kubeconfig=kubeconfig).stdout)[1:]
    finally:
        served.simulator.delete_env(cluster.name)


def _cli_available() -> bool:
    """Whether every module the root command registers exists (checked on disk: importing one runs them all)."""
    import agent_sre

    cli_dir = Path(agent_sre.__file__).parent / "cli"
    return all((cli_dir / f"{m}.py").exists() for m in ("dev", "scenarios", "incident", "alerts", "worker"))


@pytest.mark.skipif(not (workload_available() and _cli_available()),
                    reason="needs the workload model and every CLI module the root `agent-sre` command registers")
def test_sim_serve_command(tmp_path: Path, served: Served) -> None:
    """`agent-sre sim serve` writes a kubeconfig that kubectl uses as is, and stops cleanly on SIGTERM. Its default
    environment's clock starts at the wall clock's present (`--clock wall`, the default), so the ages kubectl
    computes itself from the wall clock (describe's events) are right at speed 1, not a year off."""
    import signal
    import subprocess
    import sys

    kubeconfig = tmp_path / "kubeconfig"
    console_script = Path(sys.executable).parent / "agent-sre"
    proc = subprocess.Popen([sys.executable, str(console_script), "sim", "serve", "--port", "0",
                             "--kubeconfig-out", str(kubeconfig), "--speed", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("simulator: http://127.0.0.1:"), first + (proc.stderr.read() if proc.poll() else "")
        assert proc.stdout.readline().strip() == f"kubeconfig: {kubeconfig.resolve()}"
        rows = _lines(served.kubectl("get", "pods", "-A", kubeconfig=kubeconfig).stdout)
        assert rows[0][:2] == ["NAMESPACE", "NAME"] and len(rows) > 1
        described = served.kubectl("describe", "pods", "-n", "shop", "-l", "app=frontend", kubeconfig=kubeconfig)
        blip = next(line for line in described.stdout.splitlines() if "Readiness probe failed" in line)
        assert re.search(r"Unhealthy\s+4[01]m \(x3 over 4[01]m\)", blip), blip  # 40 minutes before the start
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
