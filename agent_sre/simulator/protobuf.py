"""The few protobuf request bodies kubectl sends: its typed clients (`kubectl create namespace`, the pod
deletions of `kubectl drain`, `kubectl auth can-i`) encode built-in kinds as `application/vnd.kubernetes.protobuf`
and do not fall back to JSON on a 415. Decoded here to the JSON document the same object would be: the `k8s\\x00`
envelope (runtime.Unknown) around the kind's message, read by field number as in k8s.io/api's generated.proto.
Fields not listed are dropped, as an older apiserver drops fields it does not know."""

from __future__ import annotations

from typing import Any

from agent_sre.kube.errors import ApiError

PROTOBUF_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"

# A message: field number -> (JSON name, kind); a kind is "string", "int", "bool", "map", or a message (a dict),
# and a list of one kind is a repeated field.
Schema = dict[int, tuple[str, Any]]

OBJECT_META: Schema = {1: ("name", "string"), 2: ("generateName", "string"), 3: ("namespace", "string"),
                       5: ("uid", "string"), 6: ("resourceVersion", "string"), 11: ("labels", "map"),
                       12: ("annotations", "map"), 14: ("finalizers", ["string"])}
DELETE_OPTIONS: Schema = {1: ("gracePeriodSeconds", "int"),
                          2: ("preconditions", {1: ("uid", "string"), 2: ("resourceVersion", "string")}),
                          3: ("orphanDependents", "bool"), 4: ("propagationPolicy", "string"),
                          5: ("dryRun", ["string"])}
KINDS: dict[tuple[str, str], Schema] = {
    ("v1", "Namespace"): {1: ("metadata", OBJECT_META), 2: ("spec", {1: ("finalizers", ["string"])})},
    ("v1", "DeleteOptions"): DELETE_OPTIONS,
    ("meta.k8s.io/v1", "DeleteOptions"): DELETE_OPTIONS,
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"): {1: ("metadata", OBJECT_META), 2: ("spec", {
        1: ("resourceAttributes", {1: ("namespace", "string"), 2: ("verb", "string"), 3: ("group", "string"),
                                   4: ("version", "string"), 5: ("resource", "string"),
                                   6: ("subresource", "string"), 7: ("name", "string")}),
        2: ("nonResourceAttributes", {1: ("path", "string"), 2: ("verb", "string")})})},
}
_TYPE_META: Schema = {1: ("apiVersion", "string"), 2: ("kind", "string")}
_UNKNOWN: Schema = {1: ("typeMeta", _TYPE_META), 2: ("raw", "bytes")}
_MAP_ENTRY: Schema = {1: ("key", "string"), 2: ("value", "string")}


def decode(body: bytes) -> dict[str, Any]:
    """A protobuf request body as its JSON document; a 415 for a kind not listed in KINDS, a 400 if malformed."""
    if not body.startswith(MAGIC):
        raise ApiError(400, "BadRequest", "error decoding request body: a protobuf body must start with 'k8s\\x00'")
    try:
        envelope = _message(body[len(MAGIC):], _UNKNOWN)
        type_meta = envelope.get("typeMeta", {})
        key = (type_meta.get("apiVersion", ""), type_meta.get("kind", ""))
        schema = KINDS.get(key)
        if schema is None:
            raise ApiError(415, "UnsupportedMediaType",
                           f"the simulator decodes protobuf only for {', '.join(sorted({k for _, k in KINDS}))}, not "
                           f"{key[1] or 'this body'}: send it as application/json (kubectl create -f, apply -f)")
        return {"apiVersion": key[0], "kind": key[1], **_message(envelope.get("raw", b""), schema)}
    except (IndexError, ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, "BadRequest", f"error decoding request body: malformed protobuf ({exc})") from None


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if byte < 0x80:
            return value, at
        shift += 7


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """The (field number, value) pairs of a message: varints as ints, length-delimited fields as bytes."""
    out: list[tuple[int, int | bytes]] = []
    at = 0
    while at < len(data):
        tag, at = _varint(data, at)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, at = _varint(data, at)
            out.append((number, value))
        elif wire == 2:
            size, at = _varint(data, at)
            if at + size > len(data):
                raise ValueError("a field runs past the end of its message")
            out.append((number, data[at:at + size]))
            at += size
        elif wire in (1, 5):  # fixed 64 / 32 bits: no field kubectl sends here uses them
            at += 8 if wire == 1 else 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
    return out


def _message(data: bytes, schema: Schema) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for number, raw in _fields(data):
        if number not in schema:
            continue
        name, kind = schema[number]
        if isinstance(kind, list):
            doc.setdefault(name, []).append(_value(raw, kind[0]))
        elif kind == "map":
            entry = _message(_bytes(raw), _MAP_ENTRY)
            doc.setdefault(name, {})[entry.get("key", "")] = entry.get("value", "")
        elif raw != b"" or kind != "string":  # an unset string is written empty; JSON leaves it out
            doc[name] = _value(raw, kind)
    return doc


def _value(raw: int | bytes, kind: Any) -> Any:
    if isinstance(kind, dict):
        return _message(_bytes(raw), kind)
    if kind == "string":
        return _bytes(raw).decode()
    if kind == "bytes":
        return _bytes(raw)
    if isinstance(raw, bytes):
        raise ValueError(f"a {kind} field cannot be length-delimited")
    if kind == "bool":
        return bool(raw)
    return raw - (1 << 64) if raw >= 1 << 63 else raw  # int64: two's complement


def _bytes(raw: int | bytes) -> bytes:
    if not isinstance(raw, bytes):
        raise ValueError("a message or string field cannot be a varint")
    return raw
