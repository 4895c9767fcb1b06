"""The three patch formats the apiserver accepts: JSON merge patch, strategic merge patch and JSON patch.

Strategic merge knows the merge keys of the lists the agent and kubectl touch (containers by name, ports by
port number, ...); any other list is replaced whole, as the apiserver does for lists without a patch strategy.
"""

from __future__ import annotations

import json
from typing import Any

import jsonpatch

from agent_sre.kube.errors import ApiError
from agent_sre.simulator.cluster import clone

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
PATCH_TYPES = (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH)

# List field name -> merge key, from the `patchMergeKey` tags of the Kubernetes API types.
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "ownerReferences": "uid",
    "conditions": "type",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
    "ports": "port",  # container ports are keyed by containerPort: see _merge_key
}
# Lists of scalars merged as sets (`patchStrategy: merge` without a key).
SET_LISTS = frozenset({"finalizers"})


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return clone(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _merge_key(field: str, items: list[Any]) -> str | None:
    key = MERGE_KEYS.get(field)
    if field == "ports" and any(isinstance(i, dict) and "containerPort" in i for i in items):
        return "containerPort"
    return key


def _strategic_list(field: str, original: list[Any], patch: list[Any]) -> list[Any]:
    if field in SET_LISTS:
        return list(dict.fromkeys([*original, *patch]))
    key = _merge_key(field, [*original, *patch])
    if key is None or not all(isinstance(i, dict) for i in patch):
        return [strategic_merge_patch(None, i) if isinstance(i, dict) else clone(i) for i in patch]
    if any(i.get("$patch") == "replace" for i in patch):
        return [strategic_merge_patch(None, i) for i in patch if i.get("$patch") != "replace"]
    result = [clone(i) for i in original]
    for item in patch:
        if key not in item:
            raise ApiError(422, "Invalid", f"{field}: every element of the patch needs the merge key {key!r}")
        index = next((n for n, cur in enumerate(result) if isinstance(cur, dict) and cur.get(key) == item[key]),
                     None)
        if item.get("$patch") == "delete":
            if index is not None:
                del result[index]
        elif index is None:
            result.append(strategic_merge_patch(None, item))
        else:
            result[index] = strategic_merge_patch(result[index], item)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Kubernetes strategic merge patch for the list fields in MERGE_KEYS.

    `$setElementOrder/...` and `$retainKeys` only refine ordering and pruning, so they are accepted and ignored;
    `$patch: replace|delete` on maps and `$deleteFromPrimitiveList/...` are honoured.
    """
    if not isinstance(patch, dict):
        return clone(patch)
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    base = {} if directive == "replace" or not isinstance(target, dict) else dict(target)
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$patch", "$retainKeys"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            base[field] = [v for v in base.get(field) or [] if v not in value]
            continue
        if value is None:
            base.pop(key, None)
        elif isinstance(value, dict):
            merged = strategic_merge_patch(base.get(key), value)
            if merged is None:
                base.pop(key, None)
            else:
                base[key] = merged
        elif isinstance(value, list) and isinstance(base.get(key), list):
            base[key] = _strategic_list(key, base[key], value)
        elif isinstance(value, list):
            base[key] = _strategic_list(key, [], value)
        else:
            base[key] = value
    return base


def apply_patch(obj: dict[str, Any], content_type: str, body: bytes) -> dict[str, Any]:
    """Apply a patch body of the given Content-Type to `obj`, returning a new object (`obj` is untouched)."""
    patch_type = content_type.split(";", 1)[0].strip().lower()
    if patch_type not in PATCH_TYPES:
        raise ApiError(415, "UnsupportedMediaType",
                       f"the body of the request was in an unknown format - accepted media types include: "
                       f"{', '.join(PATCH_TYPES)}")
    try:
        patch = json.loads(body or b"null")
    except ValueError as exc:
        raise ApiError(400, "BadRequest", f"error decoding patch: {exc}") from None
    obj = clone(obj)  # patched results share unpatched branches with their input
    if patch_type == JSON_PATCH:
        if not isinstance(patch, list):
            raise ApiError(400, "BadRequest", "a JSON patch must be a list of operations")
        try:
            patched: dict[str, Any] = jsonpatch.JsonPatch(patch).apply(obj, in_place=True)
            return patched
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, KeyError, TypeError) as exc:
            raise ApiError(422, "Invalid", f"the JSON patch could not be applied: {exc}") from None
    if not isinstance(patch, dict):
        raise ApiError(400, "BadRequest", "a merge patch must be a JSON object")
    merged: dict[str, Any] = merge_patch(obj, patch) if patch_type == MERGE_PATCH else strategic_merge_patch(obj, patch)
    return merged
