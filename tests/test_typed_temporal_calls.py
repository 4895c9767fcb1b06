"""Our workflows, their handlers and their types are called by method, never by name: a renamed handler then fails
mypy, not a user at run time (issue #39)."""

from __future__ import annotations

import ast
from pathlib import Path

import agent_sre

PACKAGE = Path(agent_sre.__file__).parent
BY_NAME = frozenset({"query", "signal", "execute_update", "start_update", "start_workflow", "execute_workflow",
                     "start_child_workflow", "execute_child_workflow"})
# (path under agent_sre/, method, name) -> why a string is needed there. None is, today.
ALLOWED: dict[tuple[str, str, str], str] = {}


def calls_by_name(source: str) -> list[tuple[str, str, int]]:
    """(method, name, line) of every call of a Temporal method whose first argument is a string."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in BY_NAME
                and node.args):
            continue
        first = node.args[0]
        if isinstance(first, ast.JoinedStr) or (isinstance(first, ast.Constant) and isinstance(first.value, str)):
            found.append((node.func.attr, ast.unparse(first), node.lineno))
    return found


def test_the_check_sees_a_call_by_name() -> None:
    source = 'await handle.query("status")\nawait handle.query(W.status)\nawait client.start_workflow(f"W{n}", x)\n'
    assert calls_by_name(source) == [("query", "'status'", 1), ("start_workflow", "f'W{n}'", 3)]


def test_agent_sre_calls_its_workflows_by_method() -> None:
    seen, unexpected = set(), []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = str(path.relative_to(PACKAGE))
        for method, name, line in calls_by_name(path.read_text()):
            seen.add((where, method, name))
            if (where, method, name) not in ALLOWED:
                unexpected.append(f"agent_sre/{where}:{line}: .{method}({name}, ...)")
    assert not unexpected, "call the workflow's method instead (e.g. handle.query(ModelRolloutWorkflow.status)):\n" \
        + "\n".join(unexpected)
    assert set(ALLOWED) <= seen, f"allowed but gone: {sorted(set(ALLOWED) - seen)}"
