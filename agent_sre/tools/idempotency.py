"""Idempotent writes: a write retried with the same key acts once, on the simulator and on a real cluster alike.

Temporal retries an activity whose worker died after the cluster applied its write but before the result was
recorded. Without care the retry acts twice: a second `rollout undo` goes back one revision further, a second
`rollout restart` restarts again. The scheme needs no state outside the cluster:

* Patches. Every patch a tool sends sets the annotation `agent-sre.io/idempotency-key: <key>` on the object it
  changes, in the same request, so the change and its mark land atomically. Before patching, the tool reads the
  object; if the annotation already holds this call's key, the earlier attempt succeeded and the tool returns
  `idempotent_replay=True` ("already applied") without writing. The key is unique per tool call (the workflow
  derives it from its id and the step), so a later, different call on the same object writes normally.
  Temporal runs one attempt of an activity at a time, so the read-then-patch window is never raced by a
  retry of the same call.
* Deletes. A delete leaves nothing to mark. On a retry (activity attempt > 1), `NotFound` means an earlier
  attempt deleted the object: the tool reports `idempotent_replay=True` ("already deleted"). On a first
  attempt `NotFound` is a real error for the model. A pod re-created by its controller has a new name, so a
  retried `delete_pod` cannot delete its replacement.
* No-op writes (uncordoning a schedulable node) send nothing at all, so they are trivially idempotent.
"""

from __future__ import annotations

import copy
from typing import Any

from agent_sre.tools.guardrails import IDEMPOTENCY_ANNOTATION

Obj = dict[str, Any]


def applied_key(obj: Obj) -> str | None:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(IDEMPOTENCY_ANNOTATION)


def with_key(body: Any, patch_type: str, current: Obj, key: str) -> Any:
    """`body` plus the operation that stamps `key` on the object, in the body's own patch format."""
    if patch_type == "json":
        has_annotations = isinstance((current.get("metadata") or {}).get("annotations"), dict)
        stamp = ({"op": "add", "path": "/metadata/annotations/" + IDEMPOTENCY_ANNOTATION.replace("/", "~1"),
                  "value": key} if has_annotations else
                 {"op": "add", "path": "/metadata/annotations", "value": {IDEMPOTENCY_ANNOTATION: key}})
        return [stamp, *body]  # first, so the body's own ops may add annotations to a map it creates
    stamped = copy.deepcopy(body)
    metadata = stamped.setdefault("metadata", {})
    metadata.setdefault("annotations", {})[IDEMPOTENCY_ANNOTATION] = key
    return stamped
