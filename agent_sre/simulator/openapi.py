"""OpenAPI v3 schemas for `kubectl explain`, built from the official `kubernetes` Python client's models.

kubectl 1.32 explains a resource from `/openapi/v3/<group-version>`: the operation on the resource's path names its
kind (`x-kubernetes-group-version-kind`), and `components.schemas` holds the kind's schema with that extension,
its properties' descriptions and `$ref`s to nested types (kubernetes staging/src/k8s.io/kubectl/pkg/explain/v2/
templates/plaintext.tmpl). The client's models are generated from the Kubernetes API's own OpenAPI document: each
field keeps its JSON name, type, requiredness and description, and each type its description, so the schemas served
here are that document's, for the version of API the installed client was generated from (its `__version__`,
e.g. 37 for Kubernetes 1.37: a field newer than the simulator's v1.32 can show). Chaos Mesh's resources have no
model there: their schema says so instead of listing fields.
"""

from __future__ import annotations

import datetime
import json
import re
import types
import typing
from functools import lru_cache
from typing import Any

from pydantic import BaseModel

from agent_sre.simulator.discovery import documents
from agent_sre.simulator.patching import MERGE_KEYS, SET_LISTS
from agent_sre.simulator.resources import RESOURCE_TYPES, ResourceType

REF = "#/components/schemas/"
INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
_VERSIONED = re.compile(r"^(V\d+(?:alpha\d+|beta\d+)?)([A-Z]\w*)$")


def _model(rt: ResourceType) -> type[BaseModel] | None:
    """The client's model of a served kind (`V1Pod`, `V2HorizontalPodAutoscaler`), or None (custom resources)."""
    from kubernetes.client import models  # imported on the first explain: a second or so

    model = getattr(models, f"{rt.version[0].upper()}{rt.version[1:]}{rt.kind}", None)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _name(model: type[BaseModel]) -> str:
    """A schema's name, as the API's document names them to the last segment (which explain prints: `<PodSpec>`)."""
    match = _VERSIONED.match(model.__name__)
    version, kind = (match.group(1).lower(), match.group(2)) if match else ("", model.__name__)
    return f"io.k8s.{version}.{kind}" if version else f"io.k8s.{kind}"


def _description(model: type[BaseModel]) -> str:
    """A type's description: its model's docstring up to the generator's notes."""
    text = (model.__doc__ or "").split("Attributes:", 1)[0].strip()
    return "" if text.startswith("NOTE: This class is auto generated") else " ".join(text.split())


class _Builder:
    def __init__(self) -> None:
        self.schemas: dict[str, dict[str, Any]] = {}

    def ref(self, model: type[BaseModel]) -> str:
        name = _name(model)
        if name not in self.schemas:
            self.schemas[name] = {}  # reserved first: types refer to each other
            self.schemas[name] = self.model(model)
        return REF + name

    def model(self, model: type[BaseModel]) -> dict[str, Any]:
        properties: dict[str, Any] = {}
        required = []
        for field_name, field in model.model_fields.items():
            json_name = field.serialization_alias or field.alias or field_name
            schema = self.type(field.annotation)
            if schema.get("type") == "array":  # what kubectl's client-side apply merges lists by
                schema.update(_patch_strategy(json_name, schema["items"]))
            if field.description:
                schema = ({"description": field.description, "allOf": [schema]} if "$ref" in schema
                          else {**schema, "description": field.description})
            properties[json_name] = schema
            if field.is_required():
                required.append(json_name)
        out: dict[str, Any] = {"type": "object", "properties": properties}
        if description := _description(model):
            out["description"] = description
        if required:
            out["required"] = required
        return out

    def type(self, annotation: Any) -> dict[str, Any]:
        origin, args = typing.get_origin(annotation), typing.get_args(annotation)
        if origin is typing.Annotated:
            return self.type(args[0])
        if origin in (typing.Union, types.UnionType):
            kinds = [a for a in args if a is not type(None)]
            if len(kinds) == 1:
                return self.type(kinds[0])
            self.schemas.setdefault(INT_OR_STRING, {"type": "string", "format": "int-or-string",
                                                    "description": "IntOrString is a type that can hold an int32 "
                                                                   "or a string."})
            return {"$ref": REF + INT_OR_STRING}
        if origin in (list, typing.List):  # noqa: UP006  # the client's models say List
            return {"type": "array", "items": self.type(args[0]) if args else {}}
        if origin in (dict, typing.Dict):  # noqa: UP006  # the client's models say Dict
            return {"type": "object", "additionalProperties": self.type(args[1]) if len(args) == 2 else {}}
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return {"$ref": self.ref(annotation)}
        simple = {str: {"type": "string"}, bool: {"type": "boolean"}, int: {"type": "integer"},
                  float: {"type": "number", "format": "double"}, bytes: {"type": "string", "format": "byte"},
                  datetime.datetime: {"type": "string", "format": "date-time"},
                  datetime.date: {"type": "string", "format": "date"}}
        return dict(simple.get(annotation, {"type": "object", "x-kubernetes-preserve-unknown-fields": True}))


def _patch_strategy(field: str, items: dict[str, Any]) -> dict[str, str]:
    """The API types' `patchStrategy`/`patchMergeKey` tags, which the document carries as extensions and kubectl's
    three-way merge reads (the ones the simulator's strategic merge patch knows, simulator/patching.py)."""
    if field in SET_LISTS:
        return {"x-kubernetes-patch-strategy": "merge"}
    key = MERGE_KEYS.get(field)
    if key is None or "$ref" not in items:
        return {}
    if field == "ports" and items["$ref"].endswith(".ContainerPort"):
        key = "containerPort"
    return {"x-kubernetes-patch-strategy": "merge", "x-kubernetes-patch-merge-key": key}


@lru_cache
def document(path: str) -> bytes | None:
    """The OpenAPI v3 document of one group-version (`/openapi/v3/api/v1`, `/openapi/v3/apis/apps/v1`): the
    discovery document's paths, and the schemas of the kinds served there with every type they refer to."""
    base = documents().get(path)
    if base is None:
        return None
    doc = json.loads(base)
    builder = _Builder()
    gv_path = path.removeprefix("/openapi/v3/")
    for rt in RESOURCE_TYPES:
        if gv_path != (f"api/{rt.version}" if not rt.group else f"apis/{rt.group}/{rt.version}"):
            continue
        gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
        model = _model(rt)
        if model is None:
            builder.schemas[f"{rt.group}.{rt.version}.{rt.kind}"] = {
                "type": "object", "x-kubernetes-preserve-unknown-fields": True,
                "x-kubernetes-group-version-kind": [gvk],
                "description": f"{rt.kind} of {rt.group} {rt.version}. The simulator has no schema for this custom "
                               "resource (no CRD schema is served): its fields are those its project documents."}
            continue
        schema = builder.schemas[builder.ref(model).removeprefix(REF)]
        schema["x-kubernetes-group-version-kind"] = [gvk]
    doc["components"] = {"schemas": builder.schemas}
    return json.dumps(doc, separators=(",", ":")).encode()
