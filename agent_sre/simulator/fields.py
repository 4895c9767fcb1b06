"""Field selectors as the apiserver serves them: `?fieldSelector=a=b,c!=d`, only on the field labels each
resource supports, with the apiserver's errors."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from agent_sre.kube.errors import ApiError
from agent_sre.simulator.cluster import Obj

_COMMON_FIELDS = ("metadata.name", "metadata.namespace")
# Field labels the apiserver supports per resource (beyond metadata.name/namespace).
SUPPORTED_FIELDS: dict[str, tuple[str, ...]] = {
    "pods": ("status.phase", "spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
             "spec.serviceAccountName", "status.podIP", "status.nominatedNodeName"),
    "events": ("involvedObject.kind", "involvedObject.name", "involvedObject.namespace", "involvedObject.uid",
               "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
               "reason", "reportingComponent", "source", "type"),
    "nodes": ("spec.unschedulable",),
    "secrets": ("type",),
    "namespaces": ("status.phase",),
    "replicasets.apps": ("status.replicas",),
}


def _field_value(obj: Obj, path: str) -> str:
    if path == "source":
        return str((obj.get("source") or {}).get("component", ""))
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


class FieldSelector:
    """A parsed field selector: `a=b,c!=d`, only on the field labels the resource supports."""

    def __init__(self, terms: list[tuple[str, bool, str]]) -> None:
        self.terms = terms

    def matches(self, obj: Obj) -> bool:
        return all((_field_value(obj, f) == v) == eq for f, eq, v in self.terms)

    def value(self, field_path: str) -> str | None:
        """The exact value required for a field, if any (lets the router narrow a list to one name)."""
        return next((v for f, eq, v in self.terms if f == field_path and eq), None)


@lru_cache(maxsize=1024)
def parse_field_selector(text: str | None, resource: str) -> FieldSelector:
    terms: list[tuple[str, bool, str]] = []
    allowed = _COMMON_FIELDS + SUPPORTED_FIELDS.get(resource, ())
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        m = re.fullmatch(r"([A-Za-z0-9_.]+)\s*(!=|==|=)\s*(.*)", part)
        if m is None:
            raise ApiError(400, "BadRequest", f"invalid field selector: {part!r}")
        field_path, op, value = m.groups()
        if field_path not in allowed:
            raise ApiError(400, "BadRequest", f'"{field_path}" is not a known field selector: only '
                                              f'"{", ".join(allowed)}"')
        terms.append((field_path, op != "!=", value))
    return FieldSelector(terms)
