"""Request bodies as the fake API server reads them: JSON, merge patches, and the protobuf kubectl sends.

JSON and JSON merge patches are what the Python clients send (strategic merge patches are applied as merge
patches). kubectl's generators (``kubectl create configmap``, ``create pdb``, ``create priorityclass``) post through
client-go typed clients with ``Content-Type: application/vnd.kubernetes.protobuf``, which every real API server
accepts and client-go does not retry as JSON when refused. The demo's kill switch is a ConfigMap that a person
flips with exactly such a command, so the fake decodes that wire format for those kinds: the ``k8s\\x00`` envelope around a
``runtime.Unknown`` (apimachinery/pkg/runtime/generated.proto) and the field numbers of each kind's
generated.proto (k8s.io/api/core/v1, policy/v1, scheduling/v1; apimachinery meta/v1 ObjectMeta, LabelSelector and
util/intstr IntOrString). Fields left at their zero value are dropped, as JSON's omitempty drops them; any other
kind is answered with 415 (a known difference, in docs/fake-apiserver.md).
"""

from __future__ import annotations

import base64
import json
from typing import Any

from aiohttp import web

from watchdog.testbed.cluster.apiserver_store import ApiError

MAGIC = b"k8s\x00"
PROTOBUF = "application/vnd.kubernetes.protobuf"

Schema = dict[int, tuple[str, Any]]  # field number → (JSON name, "string" | "int" | "bool" | "bytes" | Schema | …)
_STRING_MAP = ("map", "string")
_OWNER: Schema = {1: ("kind", "string"), 3: ("name", "string"), 4: ("uid", "string"), 5: ("apiVersion", "string"),
                  6: ("controller", "bool"), 7: ("blockOwnerDeletion", "bool")}
_META: Schema = {1: ("name", "string"), 2: ("generateName", "string"), 3: ("namespace", "string"),
                 5: ("uid", "string"), 6: ("resourceVersion", "string"), 11: ("labels", _STRING_MAP),
                 12: ("annotations", _STRING_MAP), 13: ("ownerReferences", ("repeated", _OWNER)),
                 14: ("finalizers", ("repeated", "string"))}
_INT_OR_STRING: Schema = {1: ("type", "int"), 2: ("intVal", "int"), 3: ("strVal", "string")}
_SELECTOR: Schema = {1: ("matchLabels", _STRING_MAP), 2: ("matchExpressions", ("repeated", {
    1: ("key", "string"), 2: ("operator", "string"), 3: ("values", ("repeated", "string"))}))}
KINDS: dict[tuple[str, str], Schema] = {
    ("v1", "ConfigMap"): {1: ("metadata", _META), 2: ("data", _STRING_MAP), 3: ("binaryData", ("map", "bytes")),
                          4: ("immutable", "bool")},
    ("policy/v1", "PodDisruptionBudget"): {1: ("metadata", _META), 2: ("spec", {
        1: ("minAvailable", _INT_OR_STRING), 2: ("selector", _SELECTOR), 3: ("maxUnavailable", _INT_OR_STRING),
        4: ("unhealthyPodEvictionPolicy", "string")})},
    ("scheduling.k8s.io/v1", "PriorityClass"): {1: ("metadata", _META), 2: ("value", "int"),
                                                3: ("globalDefault", "bool"), 4: ("description", "string"),
                                                5: ("preemptionPolicy", "string")},
}
_UNKNOWN: Schema = {1: ("typeMeta", {1: ("apiVersion", "string"), 2: ("kind", "string")}), 2: ("raw", "bytes")}


class ProtobufError(ValueError):
    """A body the fake cannot read: not the envelope, truncated, or a kind it has no field numbers for."""


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data):
            raise ProtobufError("truncated varint")
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if not byte & 0x80:
            return value, at


def _fields(data: bytes):
    """(field number, wire type, value) for each field: an int for varints, bytes for length-delimited ones."""
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
        elif wire == 2:
            size, at = _varint(data, at)
            value, at = data[at:at + size], at + size
            if at > len(data):
                raise ProtobufError("truncated field")
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            value, at = int.from_bytes(data[at:at + width], "little"), at + width
        else:
            raise ProtobufError(f"unsupported wire type {wire}")
        yield number, wire, value


def _scalar(kind: Any, value: Any) -> Any:
    if kind == "string":
        return value.decode()
    if kind == "bytes":
        return value
    if kind == "bool":
        return bool(value)
    if kind == "int":
        return value - (1 << 64) if value >= 1 << 63 else value  # negative int32/int64 are 10-byte varints
    return decode_message(value, kind)


def decode_message(data: bytes, schema: Schema) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for number, _, value in _fields(data):
        if number not in schema:
            continue  # a field the fake does not keep (managedFields, timestamps, status)
        name, kind = schema[number]
        if isinstance(kind, tuple) and kind[0] == "map":
            entry = decode_message(value, {1: ("key", "string"), 2: ("value", kind[1])})
            result.setdefault(name, {})[entry.get("key", "")] = entry.get("value", b"" if kind[1] == "bytes" else "")
        elif isinstance(kind, tuple) and kind[0] == "repeated":
            result.setdefault(name, []).append(_scalar(kind[1], value))
        else:
            result[name] = _scalar(kind, value)
    return {k: v for k, v in result.items() if v not in ("", 0, False, None) or k == "value"}


def _int_or_string(value: dict[str, Any]) -> int | str:
    return value.get("strVal", "") if value.get("type") == 1 else int(value.get("intVal", 0))


def decode(body: bytes) -> dict[str, Any]:
    """The JSON-shaped object a protobuf request body carries."""
    if not body.startswith(MAGIC):
        raise ProtobufError("the body does not start with the k8s protobuf envelope")
    unknown = decode_message(body[len(MAGIC):], _UNKNOWN)
    type_meta = unknown.get("typeMeta") or {}
    api_version, kind = type_meta.get("apiVersion", ""), type_meta.get("kind", "")
    schema = KINDS.get((api_version, kind))
    if schema is None:
        raise ProtobufError(f"no protobuf support in the fake API server for {api_version} {kind}")
    obj = {"apiVersion": api_version, "kind": kind, **decode_message(unknown.get("raw", b""), schema)}
    spec = obj.get("spec") or {}
    for key in ("minAvailable", "maxUnavailable"):
        if key in spec:
            spec[key] = _int_or_string(spec[key])
    if "binaryData" in obj:
        obj["binaryData"] = {k: base64.b64encode(v).decode() for k, v in obj["binaryData"].items()}
    return obj


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (strategic merge patches are applied the same way: lists are replaced)."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def check_patch_type(request: web.Request) -> None:
    kind = request.content_type
    if kind not in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
        raise ApiError(415, f"the body of the request was in an unknown format - accepted media types "
                            f"include: application/merge-patch+json, application/strategic-merge-patch+json "
                            f"(got {kind})")


_JSON_BODIES = ("application/json", "application/merge-patch+json", "application/strategic-merge-patch+json",
                "application/octet-stream")  # aiohttp's content_type when a request names none


async def read_body(request: web.Request, *, empty: bool = False) -> dict[str, Any]:
    raw = await request.read()
    if not raw:
        if empty:
            return {}
        raise ApiError(400, "the request body is empty")
    if request.content_type == PROTOBUF:
        try:
            return decode(raw)
        except (ProtobufError, UnicodeDecodeError) as error:
            # What a server that cannot read a media type answers (handlers/negotiation NewUnsupportedMediaTypeError).
            raise ApiError(415, f"the body of the request was in an unknown format - accepted media types include: "
                                f"application/json ({error})") from None
    if request.content_type not in _JSON_BODIES:
        raise ApiError(415, "the body of the request was in an unknown format - accepted media types include: "
                            "application/json, application/vnd.kubernetes.protobuf")
    try:
        body = json.loads(raw)
    except ValueError as error:
        raise ApiError(400, f"the body of the request is not valid JSON: {error}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the body of the request must be a JSON object")
    return body

