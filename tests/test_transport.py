"""The in-process transport hands readers documents without a JSON round trip; these tests hold it to giving
exactly what decoding the body gives (over HTTP and in-process alike), as a copy the reader may change."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client, config
from sim_fixtures import NS, Served, seed, workload_available

from agent_sre.faults import inject
from agent_sre.scenarios import load_scenarios
from agent_sre.simulator.simulator import Simulator
from agent_sre.simulator.transport import in_process_api_client
from agent_sre.tools import ToolContext, execute


def _same(a: Any, b: Any, path: str = "") -> None:
    """Equal, and of the same JSON types all the way down (a tuple is not a list, 1 is not "1")."""
    assert type(a) is type(b), f"{path}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, dict):
        assert list(a) == list(b), path
        for key in a:
            _same(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{path}[{i}]")
    else:
        assert a == b, path


def _aliases(value: Any, seen: set[int]) -> list[int]:
    """Containers reached twice from one document (a JSON body can have none)."""
    if not isinstance(value, dict | list):
        return []
    if id(value) in seen:
        return [id(value)]
    seen.add(id(value))
    return [a for v in (value.values() if isinstance(value, dict) else value) for a in _aliases(v, seen)]


READS = [
    ("core", "list_namespaced_pod", (NS,)), ("core", "list_namespaced_event", (NS,)),
    ("core", "read_namespaced_endpoints", ("cart", NS)), ("apps", "list_namespaced_replica_set", (NS,)),
    ("apps", "read_namespaced_deployment", ("cart", NS)), ("core", "list_node", ()),
]


@pytest.mark.parametrize("transport", ["http", "in-process"])
def test_json_gives_the_decoded_body_as_a_copy(served: Served, transport: str) -> None:
    env = f"copies-{transport}"
    cluster = seed(served.simulator, env)
    kube = config.new_client_from_config(config_file=str(served.kubeconfig_for(env))) if transport == "http" \
        else in_process_api_client(served.simulator, env)
    apis = {"core": client.CoreV1Api(kube), "apps": client.AppsV1Api(kube)}
    for api, method, args in READS:
        read = getattr(apis[api], method)
        doc = read(*args, _preload_content=False).json()
        _same(doc, json.loads(read(*args, _preload_content=False).data))
        for item in doc.get("items") or [doc]:  # the reader's own: changing it changes nothing stored
            item["metadata"]["name"] = "changed"
        _same(read(*args, _preload_content=False).json(), json.loads(read(*args, _preload_content=False).data))
    assert not [obj for bucket in cluster.objects.values() for obj in bucket.values()
                if obj["metadata"]["name"] == "changed"]
    served.simulator.delete_env(env)


@pytest.mark.skipif(not workload_available(), reason="needs the workload model")
def test_stored_objects_are_plain_json_through_every_fault() -> None:
    """What lets the transport copy documents instead of encoding them: whatever the controllers and the faults
    write, the store holds JSON types only (str keys, lists, no tuples) and no object twice in a resource."""
    sim = Simulator(speed=0)
    seen_faults: set[str] = set()
    for scenario in load_scenarios():
        if scenario.fault in seen_faults:
            continue
        seen_faults.add(scenario.fault)
        cluster = sim.create_env(f"fault-{len(seen_faults)}", apps=[scenario.app], seed=scenario.seed)
        api = in_process_api_client(sim, cluster.name)
        inject(api, scenario)
        sim.advance(cluster.name, 300)
        ctx = ToolContext(api=api, namespace=scenario.namespace)
        for i, call in enumerate(scenario.ground_truth.fix):
            ctx.idempotency_key = f"{scenario.name}/fix-{i}"
            execute(call, ctx)
        sim.advance(cluster.name, 1800)
        for resource, bucket in cluster.objects.items():
            items = [obj for _, obj in sorted(bucket.items())]
            _same(json.loads(json.dumps(items)), items, f"{scenario.fault}: {resource}")
            assert not _aliases(items, set()), f"{scenario.fault}: {resource} holds an object twice"
    assert len(seen_faults) > 20
