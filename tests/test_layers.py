"""The package layering (docs/architecture.md, "Layers"), checked on the import graph of every module.

`kube/` (the one client and the Kubernetes semantics) and `apps/` (the app catalog and its manifests) sit under
everything; faults, tools, scenarios, learning and `stack/kind` sit on them and work on any cluster. Only code that
runs a simulator imports `agent_sre.simulator`: the simulator itself, the training environment and episodes
(`training/`), the activities that create simulated environments, the `agent-sre sim` command and the stack's
process code. Every import counts, those inside functions and under TYPE_CHECKING too.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "agent_sre"

# Modules (or packages, by prefix) that genuinely run a simulator, and so may import it.
RUNS_A_SIMULATOR = ("agent_sre.simulator", "agent_sre.training", "agent_sre.activities.simulation",
                    "agent_sre.cli.sim", "agent_sre.stack.simulator")
# What each bottom layer may import from the project: nothing above it.
BOTTOM = {"agent_sre.kube": ("agent_sre.kube",), "agent_sre.apps": ("agent_sre.apps", "agent_sre.kube")}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _imports(path: Path, module: str) -> set[str]:
    """Every project module `path` imports, absolute or relative, `from x import y` counting `x.y` too (y may be
    a module)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in out if _within(name, ("agent_sre",))}


def _graph() -> dict[str, set[str]]:
    return {_module_name(path): _imports(path, _module_name(path)) for path in sorted(PACKAGE.rglob("*.py"))}


def test_the_import_graph_is_read_from_every_module() -> None:
    graph = _graph()
    assert "agent_sre.kube.client" in graph and "agent_sre.faults.base" in graph
    assert "agent_sre.kube.client" in graph["agent_sre.faults.base"]
    assert "agent_sre.simulator.simulator" in graph["agent_sre.training.environment"]


def test_only_code_that_runs_a_simulator_imports_it() -> None:
    offenders = {module: sorted(n for n in imported if _within(n, ("agent_sre.simulator",)))
                 for module, imported in _graph().items() if not _within(module, RUNS_A_SIMULATOR)}
    assert {m: names for m, names in offenders.items() if names} == {}


def test_kube_and_apps_import_nothing_above_them() -> None:
    graph = _graph()
    for layer, allowed in BOTTOM.items():
        above = {module: sorted(n for n in imported if not _within(n, allowed) and n != "agent_sre")
                 for module, imported in graph.items() if _within(module, (layer,))}
        assert {m: names for m, names in above.items() if names} == {}, layer
