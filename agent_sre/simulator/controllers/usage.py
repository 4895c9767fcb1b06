"""metrics-server: what `kubectl top` reads, per container and per node, worked out when first read."""

from __future__ import annotations

from agent_sre.simulator import kubelet
from agent_sre.simulator.controllers.context import Pass

SYSTEM_CPU_M, SYSTEM_MEMORY = 180.0, 1.1 * 1024 ** 3  # kubelet, containerd and daemonsets on every node


def usage(p: Pass, load: dict[tuple[str, str], float]) -> tuple[dict[tuple[str, str], dict[str, tuple[float, float]]],
                                                              dict[str, tuple[float, float]]]:
    """(pod -> container -> (CPU, memory), node -> (CPU, memory)), as metrics-server reports them."""
    usage: dict[tuple[str, str], dict[str, tuple[float, float]]] = {}
    node_usage: dict[str, list[float]] = {n["metadata"]["name"]: [SYSTEM_CPU_M, SYSTEM_MEMORY]
                                          for n in p.c.list("nodes")}
    for (ns, name), ps in p.st.pods.items():
        pod = p.c.get("pods", ns, name)
        if pod is None:
            continue
        fx = p.effects.get((ns, name))
        app = (pod["metadata"].get("labels") or {}).get("app", "")
        figures = kubelet.usage(pod, ps, p.now, fx.cpu_millicores if fx else 0.0,
                                fx.memory_bytes if fx else 0.0, load.get((ns, app), 1.0))
        if figures:
            usage[(ns, name)] = figures
            totals = node_usage.setdefault(ps.node, [SYSTEM_CPU_M, SYSTEM_MEMORY])
            for cpu, memory in figures.values():
                totals[0] += cpu
                totals[1] += memory
    return usage, {n: (cpu, mem) for n, (cpu, mem) in node_usage.items()}
