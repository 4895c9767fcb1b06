"""The simulator's Kubernetes API: selectors, patches, tables, the router, the official Python client over HTTP and
in-process, and the control API. kubectl itself is exercised in test_kubectl.py."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config, watch
from sim_fixtures import NS, Served, call, seed, workload_available

from agent_sre.kube.errors import ApiError
from agent_sre.kube.selectors import parse_label_selector, selector_matches, selector_to_string
from agent_sre.kube.times import human_duration
from agent_sre.simulator import api, discovery
from agent_sre.simulator.client import SimulatorClient, SimulatorError
from agent_sre.simulator.cluster import Cluster
from agent_sre.simulator.fields import parse_field_selector
from agent_sre.simulator.patching import apply_patch, merge_patch, strategic_merge_patch
from agent_sre.simulator.resources import RESOURCE_TYPES
from agent_sre.simulator.server import SimulatorServer
from agent_sre.simulator.simulator import Simulator
from agent_sre.simulator.tables import to_table
from agent_sre.simulator.transport import in_process_api_client

_env_ids = itertools.count(1)


@pytest.fixture
def env(served: Served) -> Iterator[str]:
    """A freshly seeded environment of the served simulator, for tests that write."""
    name = f"api-{next(_env_ids)}"
    seed(served.simulator, name)
    yield name
    served.simulator.delete_env(name)


@pytest.fixture(params=["http", "in-process"])
def kube(request: pytest.FixtureRequest, served: Served, env: str) -> client.ApiClient:
    """The official client for a fresh environment, over HTTP and through the in-process transport."""
    if request.param == "http":
        return config.new_client_from_config(config_file=str(served.kubeconfig_for(env)))
    return in_process_api_client(served.simulator, env)


# --- selectors --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "labels", "expected"), [
    ("app=cart", {"app": "cart"}, True),
    ("app==cart", {"app": "web"}, False),
    ("app!=cart", {"app": "web"}, True),
    ("app!=cart", {}, True),
    ("tier in (web, api),app", {"tier": "api", "app": "x"}, True),
    ("tier in (web,api)", {"tier": "db"}, False),
    ("tier notin (web)", {}, True),
    ("tier notin (web)", {"tier": "web"}, False),
    ("!canary", {"app": "cart"}, True),
    ("!canary", {"canary": "true"}, False),
    ("app.kubernetes.io/name=cart,env", {"app.kubernetes.io/name": "cart"}, False),
    ("", {"anything": "goes"}, True),
])
def test_label_selectors(text: str, labels: dict[str, str], expected: bool) -> None:
    assert parse_label_selector(text).matches(labels) is expected


@pytest.mark.parametrize("text", ["app in web", "app in (web", "a=b c", "=x", "app notin"])
def test_bad_label_selector_is_a_400(text: str) -> None:
    with pytest.raises(ApiError) as err:
        parse_label_selector(text)
    assert err.value.code == 400 and "unable to parse requirement" in err.value.message


def test_field_selectors() -> None:
    pod = {"metadata": {"name": "a", "namespace": "shop"}, "spec": {"nodeName": "node-1"},
           "status": {"phase": "Running"}}
    assert parse_field_selector("spec.nodeName=node-1,status.phase!=Failed", "pods").matches(pod)
    assert not parse_field_selector("status.phase=Pending", "pods").matches(pod)
    event = {"metadata": {"name": "e"}, "involvedObject": {"kind": "Pod", "name": "a", "uid": "u1"}}
    assert parse_field_selector("involvedObject.kind=Pod,involvedObject.uid=u1", "events").matches(event)
    with pytest.raises(ApiError) as err:
        parse_field_selector("spec.nodeName=x", "services")
    assert err.value.code == 400 and "not a known field selector" in err.value.message


# --- patches ----------------------------------------------------------------------------------------------------

DEPLOY = {"metadata": {"name": "cart", "finalizers": ["a"]},
          "spec": {"template": {"spec": {
              "containers": [{"name": "cart", "image": "cart:1", "env": [{"name": "A", "value": "1"},
                                                                          {"name": "B", "value": "2"}],
                              "ports": [{"containerPort": 8080, "name": "http"}]},
                             {"name": "proxy", "image": "envoy:1"}],
              "volumes": [{"name": "cfg", "configMap": {"name": "c"}}]}}}}


def test_strategic_merge_patch_merges_lists_by_key() -> None:
    patch = {"spec": {"template": {"spec": {
        "$setElementOrder/containers": [{"name": "cart"}, {"name": "proxy"}],
        "containers": [{"name": "cart", "image": "cart:2", "env": [{"name": "B", "value": "3"}, {"name": "C",
                                                                                                   "value": "4"}],
                        "ports": [{"containerPort": 9090}]}],
        "volumes": [{"name": "cfg", "$patch": "delete"}]}}},
        "metadata": {"finalizers": ["b"]}}
    out = strategic_merge_patch(DEPLOY, patch)
    cart, proxy = out["spec"]["template"]["spec"]["containers"]
    assert cart["image"] == "cart:2" and proxy == {"name": "proxy", "image": "envoy:1"}
    assert cart["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "3"}, {"name": "C", "value": "4"}]
    assert [p["containerPort"] for p in cart["ports"]] == [8080, 9090]
    assert out["spec"]["template"]["spec"]["volumes"] == []
    assert out["metadata"]["finalizers"] == ["a", "b"]
    assert DEPLOY["spec"]["template"]["spec"]["containers"][0]["image"] == "cart:1"  # input untouched


def test_strategic_merge_patch_directives() -> None:
    out = strategic_merge_patch({"spec": {"nodeSelector": {"disk": "ssd"}, "finalizers": ["a", "b"],
                                          "affinity": {"nodeAffinity": {"x": 1}}}},
                                {"spec": {"nodeSelector": None, "$deleteFromPrimitiveList/finalizers": ["a"],
                                          "affinity": {"$patch": "replace", "podAffinity": {"y": 2}}}})
    assert out == {"spec": {"finalizers": ["b"], "affinity": {"podAffinity": {"y": 2}}}}
    service = {"spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 443, "targetPort": 8443}]}}
    out = strategic_merge_patch(service, {"spec": {"ports": [{"port": 80, "targetPort": 9090}]}})
    assert out["spec"]["ports"] == [{"port": 80, "targetPort": 9090}, {"port": 443, "targetPort": 8443}]


def test_merge_patch_replaces_lists_and_deletes_nulls() -> None:
    out = merge_patch(DEPLOY, {"spec": {"template": {"spec": {"containers": [{"name": "only", "image": "x"}]}}},
                               "metadata": {"finalizers": None}})
    assert out["spec"]["template"]["spec"]["containers"] == [{"name": "only", "image": "x"}]
    assert "finalizers" not in out["metadata"]


def test_json_patch_and_patch_errors() -> None:
    ops = [{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "cart:3"},
           {"op": "remove", "path": "/spec/template/spec/containers/1"}]
    out = apply_patch(DEPLOY, "application/json-patch+json", json.dumps(ops).encode())
    assert [c["image"] for c in out["spec"]["template"]["spec"]["containers"]] == ["cart:3"]
    with pytest.raises(ApiError) as err:
        apply_patch(DEPLOY, "application/json-patch+json", b'[{"op":"test","path":"/metadata/name","value":"x"}]')
    assert err.value.code == 422
    with pytest.raises(ApiError) as err:
        apply_patch(DEPLOY, "application/apply-patch+yaml", b"{}")
    assert err.value.code == 415
    with pytest.raises(ApiError) as err:
        apply_patch(DEPLOY, "application/merge-patch+json", b"{not json")
    assert err.value.code == 400


# --- tables -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("seconds", "text"), [
    (-5, "<invalid>"), (-1, "0s"), (1, "1s"), (70, "70s"), (190, "3m10s"), (300, "5m"), (70 * 60, "70m"),
    (5 * 3600 + 60, "5h1m"), (47 * 3600, "47h"), (49 * 3600, "2d1h"), ((8 * 24 + 2) * 3600, "8d"),
    (367 * 24 * 3600, "367d"), ((365 * 2 * 24 + 25) * 3600, "2y1d"), ((365 * 8 * 24 + 2) * 3600, "8y"),
])
def test_human_duration_matches_kubernetes(seconds: int, text: str) -> None:
    assert human_duration(seconds) == text


def _pod(status: dict[str, Any], init: bool = False, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "creationTimestamp": "2026-01-01T00:00:00Z"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    spec: dict[str, Any] = {"containers": [{"name": "app"}]}
    if init:
        spec["initContainers"] = [{"name": "migrate"}]
    return {"metadata": meta, "spec": spec, "status": status}


@pytest.mark.parametrize(("pod", "ready", "status", "restarts"), [
    (_pod({"phase": "Pending"}), "0/1", "Pending", "0"),
    (_pod({"phase": "Running", "containerStatuses": [
        {"name": "app", "ready": True, "restartCount": 0, "state": {"running": {}}}]}), "1/1", "Running", "0"),
    (_pod({"phase": "Running", "containerStatuses": [
        {"name": "app", "ready": False, "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
         "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled",
                                      "finishedAt": "2026-01-01T00:08:00Z"}}}]}),
     "0/1", "CrashLoopBackOff", "3 (2m ago)"),
    (_pod({"phase": "Pending", "initContainerStatuses": [
        {"name": "migrate", "ready": False, "restartCount": 0, "state": {"running": {}}}]}, init=True),
     "0/1", "Init:0/1", "0"),
    (_pod({"phase": "Pending", "initContainerStatuses": [
        {"name": "migrate", "ready": False, "restartCount": 2, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
    ]}, init=True), "0/1", "Init:CrashLoopBackOff", "2"),
    (_pod({"phase": "Running", "containerStatuses": [
        {"name": "app", "ready": True, "restartCount": 0, "state": {"running": {}}}]}, deleting=True),
     "1/1", "Terminating", "0"),
    (_pod({"phase": "Running", "containerStatuses": [
        {"name": "app", "ready": False, "restartCount": 0, "state": {"terminated": {"exitCode": 2}}}]}),
     "0/1", "ExitCode:2", "0"),
])
def test_pod_rows_follow_kubectl(pod: dict[str, Any], ready: str, status: str, restarts: str) -> None:
    table = to_table("pods", [pod], now=1767225600.0 + 600, resource_version="1")
    assert table["rows"][0]["cells"][:4] == ["p", ready, status, restarts]
    assert table["rows"][0]["cells"][4] == "10m"


def test_table_include_object_policies() -> None:
    obj = {"metadata": {"name": "c", "namespace": "shop"}, "data": {"a": "1"}}
    assert to_table("configmaps", [obj], 0, "1")["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    assert to_table("configmaps", [obj], 0, "1", "Object")["rows"][0]["object"] is obj
    assert "object" not in to_table("configmaps", [obj], 0, "1", "None")["rows"][0]


# --- the router, in-process -------------------------------------------------------------------------------------

def test_discovery_lists_every_resource(served: Served) -> None:
    sim = served.simulator
    listed = {}
    for path in ["/api/v1", *[f"/apis/{g}/{v}" for g, v in discovery.group_versions().items()]]:
        status, doc = call(sim, "GET", f"/envs/seeded{path}")
        assert status == 200
        for r in doc["resources"]:
            listed[(doc["groupVersion"], r["name"])] = r
    for rt in RESOURCE_TYPES:
        entry = listed[(rt.group_version, rt.plural)]
        assert entry["kind"] == rt.kind and entry["namespaced"] == rt.namespaced
    assert listed[("apps/v1", "deployments/scale")]["group"] == "autoscaling"
    assert listed[("metrics.k8s.io/v1beta1", "pods")]["kind"] == "PodMetrics"
    status, groups = call(sim, "GET", "/envs/seeded/apis")
    assert {g["name"] for g in groups["groups"]} == {"apps", "networking.k8s.io", "chaos-mesh.org", "metrics.k8s.io",
                                                    "discovery.k8s.io", "autoscaling", "batch"}
    assert listed[("autoscaling/v2", "horizontalpodautoscalers")]["shortNames"] == ["hpa"]
    assert call(sim, "GET", "/envs/seeded/version")[1]["minor"] == "32"


@pytest.mark.parametrize(("method", "path", "body", "code", "reason"), [
    ("GET", "/api/v1/widgets", None, 404, "NotFound"),
    ("GET", "/apis/apps/v2/deployments", None, 404, "NotFound"),
    ("GET", "/api/v1/namespaces/shop/pods/nope", None, 404, "NotFound"),
    ("GET", "/api/v1/namespaces/shop/nodes", None, 404, "NotFound"),
    ("POST", "/api/v1/namespaces/shop/configmaps", {"metadata": {"name": "cart-config"}}, 409, "AlreadyExists"),
    ("POST", "/api/v1/namespaces/ghost/configmaps", {"metadata": {"name": "x"}}, 404, "NotFound"),
    ("POST", "/api/v1/namespaces/shop/configmaps", {"metadata": {"name": "Bad_Name"}}, 422, "Invalid"),
    ("POST", "/api/v1/namespaces/shop/configmaps", {"metadata": {"name": "x", "namespace": "other"}}, 400,
     "BadRequest"),
    ("POST", "/api/v1/namespaces/shop/configmaps", {"kind": "Secret", "metadata": {"name": "x"}}, 400,
     "BadRequest"),
    ("POST", "/api/v1/namespaces/shop/secrets", {"metadata": {"name": "x"}, "data": {"k": "not base64!"}}, 400,
     "BadRequest"),
    ("POST", "/apis/apps/v1/namespaces/shop/deployments",
     {"metadata": {"name": "d"}, "spec": {"selector": {"matchLabels": {"app": "d"}},
                                          "template": {"metadata": {"labels": {"app": "other"}},
                                                       "spec": {"containers": [{"name": "c", "image": "i"}]}}}},
     422, "Invalid"),
    ("POST", "/apis/apps/v1/namespaces/shop/deployments",
     {"metadata": {"name": "d"}, "spec": {"selector": {"matchLabels": {"app": "d"}},
                                          "template": {"metadata": {"labels": {"app": "d"}}, "spec": {}}}},
     422, "Invalid"),
    ("POST", "/api/v1/namespaces/shop/services",
     {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 70000}]}}, 422, "Invalid"),
    ("PUT", "/api/v1/namespaces/shop/configmaps/cart-config",
     {"metadata": {"name": "cart-config", "resourceVersion": "1"}, "data": {}}, 409, "Conflict"),
    ("PUT", "/api/v1/namespaces/shop/configmaps/cart-config", {"metadata": {"name": "other"}}, 400, "BadRequest"),
    ("DELETE", "/api/v1/namespaces/shop/pods/nope", None, 404, "NotFound"),
    ("GET", "/api/v1/namespaces/shop/pods/cart-7c9b4-aaaaa/exec", None, 404, "NotFound"),
])
def test_errors_are_status_objects(served: Served, env: str, method: str, path: str, body: Any, code: int,
                                   reason: str) -> None:
    status, doc = call(served.simulator, method, f"/envs/{env}{path}", body)
    assert status == code, doc
    assert doc["kind"] == "Status" and doc["status"] == "Failure"
    assert doc["code"] == code and doc["reason"] == reason and doc["message"]
    if reason == "Invalid":
        assert doc["details"]["causes"][0]["message"]


@pytest.mark.parametrize(("query", "code", "text"), [
    ({"labelSelector": ["app in cart"]}, 400, "unable to parse requirement"),
    ({"fieldSelector": ["spec.replicas=1"]}, 400, "not a known field selector"),
    ({"dryRun": ["All"]}, 400, "dryRun"),
])
def test_bad_query_parameters(served: Served, query: dict[str, list[str]], code: int, text: str) -> None:
    status, doc = call(served.simulator, "GET", f"/envs/seeded/api/v1/namespaces/{NS}/pods", query=query)
    assert status == code and text in doc["message"]


def test_bodies_must_be_json(served: Served, env: str) -> None:
    base = f"/envs/{env}/api/v1/namespaces/{NS}/configmaps"
    status, doc = call(served.simulator, "POST", base, b"{oops", content_type="application/json")
    assert status == 400 and "error decoding" in doc["message"]
    status, doc = call(served.simulator, "POST", base, b"k8s\x00", content_type="application/vnd.kubernetes.protobuf")
    assert status == 415 and "decodes protobuf only for DeleteOptions, Namespace" in doc["message"]
    status, doc = call(served.simulator, "POST", base, b"k8s\x00\x0a\x05",  # a field longer than the body
                       content_type="application/vnd.kubernetes.protobuf")
    assert status == 400 and "malformed protobuf" in doc["message"]


def test_unknown_environment_is_404(served: Served) -> None:
    status, doc = call(served.simulator, "GET", "/envs/nowhere/api/v1/pods")
    assert status == 404 and "nowhere" in doc["message"]


def test_selectors_filter_lists(served: Served) -> None:
    sim, base = served.simulator, "/envs/seeded/api/v1"
    _, pods = call(sim, "GET", f"{base}/pods", query={"fieldSelector": ["spec.nodeName=node-2"]})
    assert [p["metadata"]["name"] for p in pods["items"]] == ["cart-7c9b4-bbbbb"]
    _, pods = call(sim, "GET", f"{base}/namespaces/{NS}/pods",
                   query={"labelSelector": ["pod-template-hash in (7c9b4)"]})
    assert len(pods["items"]) == 2
    _, pods = call(sim, "GET", f"{base}/namespaces/{NS}/pods", query={"labelSelector": ["app!=cart"]})
    assert pods["items"] == []
    _, events = call(sim, "GET", f"{base}/namespaces/{NS}/events",
                     query={"fieldSelector": ["involvedObject.name=cart-7c9b4-bbbbb,involvedObject.kind=Pod,"
                                              "type=Warning"]})
    assert [e["reason"] for e in events["items"]] == ["BackOff"]


def test_table_responses(served: Served) -> None:
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    status, table = call(served.simulator, "GET", f"/envs/seeded/api/v1/namespaces/{NS}/pods",
                         headers={"Accept": accept}, query={"includeObject": ["Object"]})
    assert status == 200 and table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"] if c["priority"] == 0] == [
        "Name", "Ready", "Status", "Restarts", "Age"]
    rows = {r["cells"][0]: r for r in table["rows"]}
    assert rows["cart-7c9b4-bbbbb"]["cells"][1:3] == ["1/2", "CrashLoopBackOff"]
    assert rows["cart-7c9b4-bbbbb"]["object"]["kind"] == "Pod"
    _, table = call(served.simulator, "GET", "/envs/seeded/api/v1/nodes/node-1", headers={"Accept": accept})
    assert table["rows"][0]["cells"][:3] == ["node-1", "Ready", "control-plane"]
    status, doc = call(served.simulator, "GET", "/envs/seeded/api/v1/nodes", headers={"Accept": accept},
                       query={"includeObject": ["Everything"]})
    assert status == 400


def test_writes_keep_status_and_spec_apart(served: Served, env: str) -> None:
    sim, path = served.simulator, f"/envs/{env}/apis/apps/v1/namespaces/{NS}/deployments/cart"
    _, before = call(sim, "GET", path)
    status, after = call(sim, "PATCH", path, {"spec": {"replicas": 4}, "status": {"readyReplicas": 99}},
                         content_type="application/merge-patch+json")
    assert status == 200 and after["spec"]["replicas"] == 4
    assert after["status"] == before["status"]
    assert after["metadata"]["generation"] == before["metadata"]["generation"] + 1
    _, after_status = call(sim, "PATCH", f"{path}/status", {"spec": {"replicas": 1}, "status": {"readyReplicas": 2}},
                           content_type="application/merge-patch+json")
    assert after_status["spec"]["replicas"] == 4 and after_status["status"]["readyReplicas"] == 2
    assert after_status["metadata"]["generation"] == after["metadata"]["generation"]
    assert int(after_status["metadata"]["resourceVersion"]) > int(after["metadata"]["resourceVersion"])


def test_create_resets_status_and_defaults_fields(served: Served, env: str) -> None:
    sim = served.simulator
    status, pod = call(sim, "POST", f"/envs/{env}/api/v1/namespaces/{NS}/pods", {
        "metadata": {"generateName": "job-"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Running"}})
    assert status == 201 and pod["metadata"]["name"].startswith("job-") and pod["status"] == {"phase": "Pending"}
    assert pod["spec"]["restartPolicy"] == "Always" and pod["spec"]["containers"][0]["imagePullPolicy"] == "Always"
    _, svc = call(sim, "POST", f"/envs/{env}/api/v1/namespaces/{NS}/services",
                  {"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}})
    assert svc["spec"]["clusterIP"].startswith("10.96.") and svc["spec"]["ports"][0]["targetPort"] == 80
    _, existing = call(sim, "GET", f"/envs/{env}/api/v1/namespaces/{NS}/services/cart")
    assert svc["spec"]["clusterIP"] != existing["spec"]["clusterIP"]


def test_scale_subresource(served: Served, env: str) -> None:
    sim, path = served.simulator, f"/envs/{env}/apis/apps/v1/namespaces/{NS}/deployments/cart/scale"
    status, scale = call(sim, "GET", path)
    assert status == 200 and scale["kind"] == "Scale" and scale["apiVersion"] == "autoscaling/v1"
    assert scale["spec"]["replicas"] == 2 and scale["status"]["selector"] == "app=cart"
    _, scale = call(sim, "PATCH", path, {"spec": {"replicas": 0}}, content_type="application/merge-patch+json")
    assert scale["spec"]["replicas"] == 0
    scale["spec"]["replicas"] = 3
    _, scale = call(sim, "PUT", path, scale)
    assert scale["spec"]["replicas"] == 3
    assert call(sim, "GET", path.removesuffix("/scale"))[1]["spec"]["replicas"] == 3
    assert call(sim, "PATCH", path, {"spec": {"replicas": -1}}, content_type="application/merge-patch+json")[0] == 422
    stale = {**scale, "metadata": {**scale["metadata"], "resourceVersion": "1"}}
    assert call(sim, "PUT", path, stale)[0] == 409


def test_logs(served: Served) -> None:
    sim, base = served.simulator, f"/envs/seeded/api/v1/namespaces/{NS}/pods"
    status, text = call(sim, "GET", f"{base}/cart-7c9b4-aaaaa/log", query={"container": ["cart"], "tailLines": ["2"]})
    assert status == 200 and text == "cart: served request 99\ncart: served request 100\n"
    _, text = call(sim, "GET", f"{base}/cart-7c9b4-bbbbb/log", query={"container": ["cart"], "previous": ["true"]})
    assert text.splitlines()[-1] == "FATAL: dial tcp cache:6379: connection refused"
    status, doc = call(sim, "GET", f"{base}/cart-7c9b4-aaaaa/log")
    assert status == 400 and "choose one of: [cart proxy]" in doc["message"]
    status, doc = call(sim, "GET", f"{base}/cart-7c9b4-aaaaa/log", query={"container": ["proxy"], "previous": ["1"]})
    assert status == 400 and "previous terminated container" in doc["message"]
    status, doc = call(sim, "GET", f"{base}/cart-7c9b4-aaaaa/log", query={"container": ["nope"]})
    assert status == 400
    status, doc = call(sim, "GET", f"{base}/cart-7c9b4-aaaaa/log", query={"container": ["cart"], "tailLines": ["-3"]})
    assert status == 400 and "tailLines" in doc["message"]


def test_logs_of_a_container_that_never_started(served: Served, env: str) -> None:
    sim = served.simulator
    call(sim, "POST", f"/envs/{env}/api/v1/namespaces/{NS}/pods",
         {"metadata": {"name": "pulling"}, "spec": {"containers": [{"name": "app", "image": "shop/app:nope"}]}})
    status, doc = call(sim, "GET", f"/envs/{env}/api/v1/namespaces/{NS}/pods/pulling/log")
    assert status == 400 and "is waiting to start" in doc["message"]


def test_delete_cascades_like_the_garbage_collector(served: Served, env: str) -> None:
    sim, cluster = served.simulator, served.simulator.env(env)
    status, pod = call(sim, "DELETE", f"/envs/{env}/api/v1/namespaces/{NS}/pods/cart-7c9b4-aaaaa")
    assert status == 200 and pod["metadata"]["deletionTimestamp"]
    assert (NS, "cart-7c9b4-aaaaa", "cart") not in cluster.logs
    status, doc = call(sim, "DELETE", f"/envs/{env}/apis/apps/v1/namespaces/{NS}/replicasets/cart-5d8f7",
                       {"propagationPolicy": "Orphan"})
    assert status == 200 and doc["status"] == "Success"
    status, doc = call(sim, "DELETE", f"/envs/{env}/apis/apps/v1/namespaces/{NS}/deployments/cart")
    assert status == 200 and doc["details"]["name"] == "cart"
    assert cluster.list("replicasets.apps", NS) == [] and cluster.list("pods", NS) == []
    assert cluster.get("services", NS, "cart") is not None
    call(sim, "DELETE", f"/envs/{env}/api/v1/namespaces/{NS}")
    assert all(cluster.list(rt.key, NS) == [] for rt in RESOURCE_TYPES if rt.namespaced)


def test_delete_preconditions(served: Served, env: str) -> None:
    status, doc = call(served.simulator, "DELETE", f"/envs/{env}/api/v1/namespaces/{NS}/configmaps/cart-config",
                       {"preconditions": {"uid": "not-the-uid"}})
    assert status == 409 and "Precondition failed" in doc["message"]


def test_every_write_is_audited_with_its_idempotency_key(served: Served, env: str) -> None:
    sim, cluster = served.simulator, served.simulator.env(env)
    start = len(cluster.audit)
    base = f"/envs/{env}/api/v1/namespaces/{NS}/configmaps"
    call(sim, "GET", base)
    call(sim, "POST", base, {"metadata": {"name": "c1", "annotations": {"agent-sre.io/idempotency-key": "k-1"}}})
    call(sim, "PATCH", f"{base}/c1", {"data": {"a": "b"}}, content_type="application/merge-patch+json",
         headers={"X-Idempotency-Key": "k-2"})
    call(sim, "PUT", f"{base}/c1", {"metadata": {"name": "c1"}, "data": {}})
    call(sim, "DELETE", f"{base}/c1")
    records = cluster.audit[start:]
    assert [(r.verb, r.resource, r.namespace, r.name) for r in records] == [
        ("create", "configmaps", NS, "c1"), ("patch", "configmaps", NS, "c1"), ("update", "configmaps", NS, "c1"),
        ("delete", "configmaps", NS, "c1")]
    assert [r.idempotency_key for r in records] == ["k-1", "k-2", None, None]
    assert '"a": "b"' in records[1].detail


def test_a_dry_run_answers_the_write_and_stores_nothing(served: Served, env: str) -> None:
    """`dryRun=All`, as a real apiserver: the patched object comes back defaulted and validated, the store, its
    revision and the audit log stay as they were; an invalid result is refused as the real write would be."""
    sim, cluster = served.simulator, served.simulator.env(env)
    base = f"/envs/{env}/apis/apps/v1/namespaces/{NS}/deployments/cart"
    before, revision, audited = cluster.get("deployments.apps", NS, "cart"), cluster.revision, len(cluster.audit)
    patch = {"spec": {"replicas": 5, "template": {"spec": {"containers": [{"name": "cart", "image": "x/y:1"}]}}}}
    status, doc = call(sim, "PATCH", base, patch, content_type="application/strategic-merge-patch+json",
                       query={"dryRun": ["All"]})
    assert status == 200, doc
    assert doc["spec"]["replicas"] == 5 and doc["spec"]["template"]["spec"]["containers"][0]["image"] == "x/y:1"
    assert doc["metadata"]["generation"] == before["metadata"]["generation"] + 1
    assert doc["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert doc["status"] == before["status"]
    status, doc = call(sim, "PATCH", base, {"spec": {"replicas": -1}}, content_type="application/merge-patch+json",
                       query={"dryRun": ["All"]})
    assert status == 422 and doc["reason"] == "Invalid"
    pod = "cart-7c9b4-bbbbb"
    status, doc = call(sim, "DELETE", f"/envs/{env}/api/v1/namespaces/{NS}/pods/{pod}", query={"dryRun": ["All"]})
    assert status == 200 and doc["metadata"]["name"] == pod and doc["metadata"]["deletionTimestamp"]
    status, doc = call(sim, "DELETE", f"/envs/{env}/api/v1/namespaces/{NS}/pods/nope", query={"dryRun": ["All"]})
    assert status == 404
    assert cluster.get("deployments.apps", NS, "cart") is before and cluster.get("pods", NS, pod) is not None
    assert cluster.revision == revision and len(cluster.audit) == audited


def test_a_dry_run_create_is_answered_and_not_stored(served: Served, env: str) -> None:
    """`kubectl diff` of a new object, `kubectl create --dry-run=server`: the object comes back as it would be
    created (named, stamped, no resourceVersion since nothing was written); an existing name is still a 409."""
    sim, cluster = served.simulator, served.simulator.env(env)
    base = f"/envs/{env}/api/v1/namespaces/{NS}/configmaps"
    revision, audited = cluster.revision, len(cluster.audit)
    status, doc = call(sim, "POST", base, {"metadata": {"name": "fresh", "annotations": {}}, "data": {"a": "1"}},
                       query={"dryRun": ["All"]})
    assert status == 201, doc
    assert doc["metadata"]["uid"] and doc["metadata"]["creationTimestamp"] and "resourceVersion" not in doc["metadata"]
    assert "annotations" not in doc["metadata"]  # an empty map is omitted, as by the apiserver's typed ObjectMeta
    status, doc = call(sim, "POST", base, {"metadata": {"name": "cart-config"}}, query={"dryRun": ["All"]})
    assert status == 409
    assert cluster.get("configmaps", NS, "fresh") is None
    assert cluster.revision == revision and len(cluster.audit) == audited


@pytest.mark.parametrize(("method", "path", "value", "text"), [
    ("PATCH", "deployments/cart", "true", "invalid dryRun value"),
    ("DELETE", "deployments", "All", "only on POST, and on PUT, PATCH and DELETE of one object"),
])
def test_a_dry_run_it_cannot_honour_is_refused(served: Served, env: str, method: str, path: str, value: str,
                                               text: str) -> None:
    status, doc = call(served.simulator, method, f"/envs/{env}/apis/apps/v1/namespaces/{NS}/{path}",
                       {"spec": {"replicas": 2}}, content_type="application/merge-patch+json",
                       query={"dryRun": [value]})
    assert status == 400 and text in doc["message"]


def test_watch_reports_current_state_then_ends(served: Served) -> None:
    status, headers, body = api.handle(served.simulator, "GET", f"/envs/seeded/api/v1/namespaces/{NS}/pods",
                                       {"watch": ["true"], "fieldSelector": ["metadata.name=cart-7c9b4-bbbbb"]}, {},
                                       b"")
    events = [json.loads(line) for line in body.decode().splitlines()]
    assert status == 200 and [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "cart-7c9b4-bbbbb")]


def test_metrics_api(served: Served) -> None:
    sim, base = served.simulator, "/envs/seeded/apis/metrics.k8s.io/v1beta1"
    _, pods = call(sim, "GET", f"{base}/namespaces/{NS}/pods")
    usage = {p["metadata"]["name"]: {c["name"]: c["usage"] for c in p["containers"]} for p in pods["items"]}
    assert usage["cart-7c9b4-aaaaa"]["cart"] == {"cpu": "120m", "memory": "98304Ki"}
    _, one = call(sim, "GET", f"{base}/namespaces/{NS}/pods/cart-7c9b4-bbbbb")
    assert one["kind"] == "PodMetrics"
    _, none = call(sim, "GET", f"{base}/pods", query={"labelSelector": ["app=web"]})
    assert none["items"] == []
    _, nodes = call(sim, "GET", f"{base}/nodes")
    assert [(n["metadata"]["name"], n["usage"]["cpu"]) for n in nodes["items"]] == [("node-1", "900m"),
                                                                                   ("node-2", "350m")]
    assert call(sim, "GET", f"{base}/namespaces/{NS}/pods/ghost")[0] == 404
    assert call(sim, "POST", f"{base}/nodes", {})[0] == 405


def test_endpoint_slices_mirror_endpoints(served: Served) -> None:
    status, slices = call(served.simulator, "GET",
                          f"/envs/seeded/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices",
                          query={"labelSelector": ["kubernetes.io/service-name=cart"]})
    assert status == 200 and len(slices["items"]) == 1
    endpoints = slices["items"][0]["endpoints"]
    assert [(e["addresses"][0], e["conditions"]["ready"]) for e in endpoints] == [("10.244.1.5", True),
                                                                                 ("10.244.2.7", False)]
    assert slices["items"][0]["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]


def test_environments_are_isolated(served: Served, env: str) -> None:
    sim = served.simulator
    call(sim, "POST", f"/envs/{env}/api/v1/namespaces/{NS}/configmaps", {"metadata": {"name": "only-here"}})
    assert call(sim, "GET", f"/envs/{env}/api/v1/namespaces/{NS}/configmaps/only-here")[0] == 200
    assert call(sim, "GET", f"/envs/seeded/api/v1/namespaces/{NS}/configmaps/only-here")[0] == 404


# --- the official Python client, over HTTP and in-process ---------------------------------------------------------

def test_python_client_reads(kube: client.ApiClient) -> None:
    core, apps = client.CoreV1Api(kube), client.AppsV1Api(kube)
    pods = core.list_namespaced_pod(NS, label_selector="app=cart")
    assert sorted(p.metadata.name for p in pods.items) == ["cart-7c9b4-aaaaa", "cart-7c9b4-bbbbb"]
    crashing = core.read_namespaced_pod("cart-7c9b4-bbbbb", NS)
    assert crashing.status.container_statuses[0].state.waiting.reason == "CrashLoopBackOff"
    assert core.read_namespaced_pod_log("cart-7c9b4-bbbbb", NS, container="cart", previous=True,
                                        tail_lines=1) == "FATAL: dial tcp cache:6379: connection refused\n"
    assert [n.status.node_info.kubelet_version for n in core.list_node().items] == ["v1.32.0", "v1.32.0"]
    rs = apps.list_namespaced_replica_set(NS, label_selector="app=cart")
    assert sorted(r.metadata.annotations["deployment.kubernetes.io/revision"] for r in rs.items) == ["1", "2"]
    assert core.read_namespaced_endpoints("cart", NS).subsets[0].addresses[0].ip == "10.244.1.5"
    events = core.list_namespaced_event(NS, field_selector="involvedObject.name=cart-7c9b4-bbbbb")
    assert {e.reason for e in events.items} == {"Scheduled", "BackOff"}
    assert client.VersionApi(kube).get_code().git_version.startswith("v1.32")
    assert core.read_namespaced_resource_quota("compute", NS).status.used["pods"] == "2"
    assert client.NetworkingV1Api(kube).list_namespaced_network_policy(NS).items[0].metadata.name == "allow-frontend"


def test_python_client_writes(kube: client.ApiClient) -> None:
    core, apps = client.CoreV1Api(kube), client.AppsV1Api(kube)
    patched = apps.patch_namespaced_deployment("cart", NS, {"spec": {"template": {"spec": {"containers": [
        {"name": "cart", "image": "shop/cart:2.0.0"}]}}}})
    assert [(c.name, c.image) for c in patched.spec.template.spec.containers] == [
        ("cart", "shop/cart:2.0.0"), ("proxy", "envoy:1.30")]
    scale = apps.patch_namespaced_deployment_scale("cart", NS, {"spec": {"replicas": 5}})
    assert scale.spec.replicas == 5 and apps.read_namespaced_deployment_scale("cart", NS).spec.replicas == 5
    node = core.patch_node("node-2", {"spec": {"unschedulable": True}})
    assert node.spec.unschedulable is True
    cm = core.read_namespaced_config_map("cart-config", NS)
    cm.data["LOG_LEVEL"] = "debug"
    assert core.replace_namespaced_config_map("cart-config", NS, cm).data["LOG_LEVEL"] == "debug"
    with pytest.raises(client.exceptions.ConflictException):
        core.replace_namespaced_config_map("cart-config", NS, cm)  # cm still carries the old resourceVersion
    with pytest.raises(client.exceptions.NotFoundException):
        core.read_namespaced_pod("ghost", NS)
    with pytest.raises(client.exceptions.UnprocessableEntityException):
        apps.patch_namespaced_deployment("cart", NS, {"spec": {"replicas": -1}})
    core.delete_namespaced_pod("cart-7c9b4-aaaaa", NS)
    assert [p.metadata.name for p in core.list_namespaced_pod(NS).items] == ["cart-7c9b4-bbbbb"]


def test_python_client_chaos_custom_objects(kube: client.ApiClient) -> None:
    custom = client.CustomObjectsApi(kube)
    body = {"apiVersion": "chaos-mesh.org/v1alpha1", "kind": "NetworkChaos", "metadata": {"name": "slow-cart"},
            "spec": {"action": "delay", "mode": "all", "selector": {"labelSelectors": {"app": "cart"}},
                     "delay": {"latency": "300ms"}}}
    created = custom.create_namespaced_custom_object("chaos-mesh.org", "v1alpha1", NS, "networkchaos", body)
    assert created["metadata"]["uid"]
    listed = custom.list_namespaced_custom_object("chaos-mesh.org", "v1alpha1", NS, "networkchaos")
    assert [i["metadata"]["name"] for i in listed["items"]] == ["slow-cart"]
    patched = custom.patch_namespaced_custom_object("chaos-mesh.org", "v1alpha1", NS, "networkchaos", "slow-cart",
                                                    {"spec": {"delay": {"latency": "10ms"}}})
    assert patched["spec"]["delay"]["latency"] == "10ms"
    custom.delete_namespaced_custom_object("chaos-mesh.org", "v1alpha1", NS, "networkchaos", "slow-cart")
    with pytest.raises(client.exceptions.NotFoundException):
        custom.get_namespaced_custom_object("chaos-mesh.org", "v1alpha1", NS, "networkchaos", "slow-cart")


def test_python_client_watch(kube: client.ApiClient) -> None:
    stream = watch.Watch().stream(client.CoreV1Api(kube).list_namespaced_pod, NS, timeout_seconds=1)
    assert sorted(e["object"].metadata.name for e in stream) == ["cart-7c9b4-aaaaa", "cart-7c9b4-bbbbb"]


def test_in_process_client_rejects_unknown_environment(served: Served) -> None:
    with pytest.raises(KeyError, match="no simulated environment named 'ghost'"):
        in_process_api_client(served.simulator, "ghost")


# --- the Simulator and its control API --------------------------------------------------------------------------

def test_simulator_registry_errors() -> None:
    sim = Simulator()
    sim.add_env(Cluster("a"))
    with pytest.raises(ValueError, match="already exists"):
        sim.add_env(Cluster("a"))
    with pytest.raises(ValueError, match="invalid environment name"):
        sim.add_env(Cluster("Not Valid"))
    with pytest.raises(KeyError, match=r"no simulated environment named 'b' \(known: a\)"):
        sim.env("b")
    with pytest.raises(ValueError, match="backwards"):
        sim.advance("a", -1)


def test_an_environment_lost_with_a_restart_is_gone_not_missing(tmp_path: Path) -> None:
    """Environments live in memory; the ledger remembers their names, so after a restart a request for one is a
    410 Gone saying why (the observer and the agent stop at once), not an object's 404."""
    ledger = tmp_path / "sim" / "environments.json"
    before = Simulator(ledger=ledger)
    before.add_env(Cluster("env-1"))
    before.add_env(Cluster("kept"))
    after = Simulator(ledger=ledger)  # the restart
    status, doc = call(after, "GET", "/envs/env-1/api/v1/namespaces/shop/pods")
    assert (status, doc["reason"]) == (410, "Gone")
    assert "'env-1' is gone: the simulator restarted at" in doc["message"]
    assert call(after, "GET", "/envs/never/api/v1/pods")[0] == 404
    with pytest.raises(KeyError, match="is gone"):
        after.env("kept")
    assert after.create_env(apps=[]).name == "env-2", "a lost name is never handed to a new environment"
    after.add_env(Cluster("kept"))  # named again on purpose: it is a new environment, found again
    assert call(after, "GET", "/envs/kept/api/v1/namespaces")[0] == 200
    again = Simulator(ledger=ledger)  # a second restart still knows what the first one lost
    assert set(again.lost) == {"env-1", "env-2", "kept"}
    with SimulatorServer(again) as server, pytest.raises(SimulatorError) as err:
        SimulatorClient(server.url).advance("env-1", 5)
    assert err.value.status == 410 and "restarted" in str(err.value)


def test_control_api(served: Served) -> None:
    sim_client = SimulatorClient(served.server.url)
    assert sim_client.healthy()
    seed(served.simulator, "control")
    envs = {e["name"]: e for e in sim_client.list_envs()}
    assert envs["control"]["server"] == f"{served.server.url}/envs/control"
    before = served.simulator.env("control").clock.now()
    moved = sim_client.advance("control", 3600)
    assert moved["now_ts"] >= before + 3600
    records = sim_client.audit("control")
    assert records[0]["verb"] == "create" and records[0]["name"] == NS
    assert len(sim_client.audit("control", since=len(records) - 1)) == 1
    kubeconfig = yaml.safe_load(sim_client.kubeconfig("control"))
    assert kubeconfig["clusters"][0]["cluster"]["server"] == f"{served.server.url}/envs/control"
    sim_client.delete_env("control")
    assert "control" not in served.simulator.envs
    with pytest.raises(SimulatorError) as err:
        sim_client.delete_env("control")
    assert err.value.status == 404


@pytest.mark.parametrize(("method", "path", "body", "code", "text"), [
    ("POST", "/sim/v1/envs", {"apps": "shop"}, 400, "apps must be a list"),
    ("POST", "/sim/v1/envs", {"seed": "x"}, 400, "seed must be an integer"),
    ("POST", "/sim/v1/envs", {"colour": "red"}, 400, "unknown fields: colour"),
    ("POST", "/sim/v1/envs/seeded/advance", {"seconds": -5}, 400, "non-negative"),
    ("POST", "/sim/v1/envs/ghost/advance", {"seconds": 5}, 404, "ghost"),
    ("GET", "/sim/v1/envs/seeded/audit?since=x", None, 400, "since"),
])
def test_control_api_bad_input(served: Served, method: str, path: str, body: Any, code: int, text: str) -> None:
    with pytest.raises(SimulatorError) as err:
        SimulatorClient(served.server.url)._call(method, path, body)
    assert err.value.status == code and text in str(err.value)


@pytest.mark.skipif(not workload_available(), reason="needs the workload model (simulator/workload.py, apps.py)")
def test_control_api_creates_environments_with_the_workload_model(served: Served) -> None:
    sim_client = SimulatorClient(served.server.url)
    created = sim_client.create_env(name="wl-api", apps=["shop"], seed=7)
    try:
        assert created["server"].endswith("/envs/wl-api")
        with pytest.raises(SimulatorError) as err:
            sim_client.create_env(name="wl-api")
        assert err.value.status == 409
        kube = in_process_api_client(served.simulator, "wl-api")
        core, apps = client.CoreV1Api(kube), client.AppsV1Api(kube)
        # Every object the workload model writes must deserialize with the official (strict) client.
        assert core.list_pod_for_all_namespaces().items
        assert apps.list_deployment_for_all_namespaces().items
        apps.list_replica_set_for_all_namespaces()
        core.list_service_for_all_namespaces()
        core.list_endpoints_for_all_namespaces()
        core.list_event_for_all_namespaces()
        core.list_node()
    finally:
        sim_client.delete_env("wl-api")


def test_healthz(served: Served) -> None:
    import urllib.request

    with urllib.request.urlopen(f"{served.server.url}/healthz") as resp:
        assert resp.read() == b"ok"


@pytest.mark.parametrize(("path", "patch", "field"), [
    (f"/apis/apps/v1/namespaces/{NS}/deployments/cart", {"spec": {"selector": {"matchLabels": {"app": "x"}}}},
     "spec.selector"),
    (f"/api/v1/namespaces/{NS}/services/cart", {"spec": {"clusterIP": "10.96.9.9"}}, "spec.clusterIP"),
    (f"/api/v1/namespaces/{NS}/pods/cart-7c9b4-aaaaa", {"spec": {"nodeName": "node-2"}}, "spec"),
])
def test_immutable_fields(served: Served, env: str, path: str, patch: dict[str, Any], field: str) -> None:
    status, doc = call(served.simulator, "PATCH", f"/envs/{env}{path}", patch,
                       content_type="application/merge-patch+json")
    assert status == 422 and doc["details"]["causes"][0]["field"] == field


def test_pod_image_may_change_and_service_keeps_its_ip(served: Served, env: str) -> None:
    sim = served.simulator
    status, pod = call(sim, "PATCH", f"/envs/{env}/api/v1/namespaces/{NS}/pods/cart-7c9b4-aaaaa",
                       {"spec": {"containers": [{"name": "cart", "image": "shop/cart:1.4.3"}]}},
                       content_type="application/strategic-merge-patch+json")
    assert status == 200 and pod["spec"]["containers"][0]["image"] == "shop/cart:1.4.3"
    _, svc = call(sim, "GET", f"/envs/{env}/api/v1/namespaces/{NS}/services/cart")
    ip = svc["spec"].pop("clusterIP")
    svc["spec"].pop("clusterIPs")
    status, replaced = call(sim, "PUT", f"/envs/{env}/api/v1/namespaces/{NS}/services/cart", svc)
    assert status == 200 and replaced["spec"]["clusterIP"] == ip


@pytest.mark.skipif(not workload_available(), reason="needs the workload model's signals (simulator/signals.py)")
def test_prometheus_metrics(served: Served) -> None:
    import urllib.request

    served.simulator.create_env("wl-metrics", apps=("shop",), seed=1)
    try:
        with urllib.request.urlopen(f"{served.server.url}/envs/wl-metrics/metrics") as resp:
            assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            one = resp.read().decode()
        with urllib.request.urlopen(f"{served.server.url}/metrics") as resp:
            every = resp.read().decode()
        samples = [line for line in one.splitlines() if line and not line.startswith("#")]
        assert samples and all('env="wl-metrics"' in line for line in samples)
        series = {line.rsplit(" ", 1)[0] for line in samples}  # values move with the clock between the calls
        assert series <= {line.rsplit(" ", 1)[0] for line in every.splitlines()}
    finally:
        served.simulator.delete_env("wl-metrics")
    with pytest.raises(SimulatorError) as err:
        SimulatorClient(served.server.url)._call("GET", "/envs/wl-metrics/metrics")
    assert err.value.status == 404


def test_date_header_is_the_simulated_time(served: Served, env: str) -> None:
    from email.utils import parsedate_to_datetime

    served.simulator.advance(env, 5 * 86400)
    _, headers, _ = api.handle(served.simulator, "GET", f"/envs/{env}/api/v1/namespaces", {}, {}, b"")
    served_at = parsedate_to_datetime(headers["Date"]).timestamp()
    assert abs(served_at - served.simulator.env(env).clock.now()) < 2


@pytest.mark.parametrize(("selector", "labels", "expected"), [
    (None, {"a": "b"}, True),
    ({"matchLabels": {"app": "cart"}}, {"app": "cart", "x": "y"}, True),
    ({"matchLabels": {"app": "cart"}}, {}, False),
    ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["web", "api"]}]}, {"tier": "api"}, True),
    ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["web"]}]}, {}, True),
    ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, {}, False),
    ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, {}, True),
])
def test_selector_objects_agree_with_their_text_form(selector: Any, labels: dict[str, str], expected: bool) -> None:
    assert selector_matches(selector, labels) is expected
    assert parse_label_selector(selector_to_string(selector)).matches(labels) is expected


def test_http_watch_streams_changes(served: Served, env: str) -> None:
    import threading

    core = client.CoreV1Api(config.new_client_from_config(config_file=str(served.kubeconfig_for(env))))
    later = threading.Timer(0.5, lambda: call(served.simulator, "DELETE",
                                              f"/envs/{env}/api/v1/namespaces/{NS}/pods/cart-7c9b4-aaaaa"))
    later.start()
    events = [(e["type"], e["object"].metadata.name)
              for e in watch.Watch().stream(core.list_namespaced_pod, NS, timeout_seconds=2)]
    later.join()
    assert events == [("ADDED", "cart-7c9b4-aaaaa"), ("ADDED", "cart-7c9b4-bbbbb"), ("DELETED", "cart-7c9b4-aaaaa")]


def test_watch_events_diff_snapshots() -> None:
    def snapshot(*objs: dict[str, Any]) -> bytes:
        return b"".join(json.dumps({"type": "ADDED", "object": o}).encode() + b"\n" for o in objs)

    a1 = {"metadata": {"uid": "a", "resourceVersion": "1", "name": "a"}}
    a2 = {"metadata": {"uid": "a", "resourceVersion": "2", "name": "a"}}
    b1 = {"metadata": {"uid": "b", "resourceVersion": "1", "name": "b"}}
    lines, known = api.watch_events({}, snapshot(a1))
    assert [json.loads(x)["type"] for x in lines.splitlines()] == ["ADDED"]
    lines, known = api.watch_events(known, snapshot(a1))
    assert lines == b""
    lines, known = api.watch_events(known, snapshot(a2, b1))
    assert [json.loads(x)["type"] for x in lines.splitlines()] == ["MODIFIED", "ADDED"]
    lines, _ = api.watch_events(known, snapshot(b1))
    assert [(json.loads(x)["type"], json.loads(x)["object"]["metadata"]["name"]) for x in lines.splitlines()] == [
        ("DELETED", "a")]
