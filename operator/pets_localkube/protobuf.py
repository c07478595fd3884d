"""Request bodies in Kubernetes' protobuf encoding (`application/vnd.kubernetes.protobuf`), read as JSON.

kubectl's typed clients (`kubectl create namespace|configmap|secret|serviceaccount|service`, typed
deletes) send their bodies as protobuf, and client-go does not fall back to JSON when a server
answers 415 for protobuf (it does so only for CBOR), so the local API server reads them.

The wire format: the magic `k8s\\0`, then a `runtime.Unknown` {typeMeta {apiVersion, kind}, raw,
contentEncoding, contentType} whose `raw` is the object in the message of its Go type
(`k8s.io/api/core/v1/generated.proto`, `k8s.io/apimachinery/pkg/apis/meta/v1/generated.proto`).
Each kind read here has its fields listed below by number; a field number not listed is refused
(`ProtobufError`), never skipped, so a body is read whole or not at all. A kind not listed is
refused by the server with 415 and a message naming the kinds it reads.

The result is what the same object looks like as JSON from the same client: zero values of plain
fields are left out (Go's `omitempty`), fields that are pointers in Go keep a zero value (for
example `automountServiceAccountToken: false`), bytes are base64, times are RFC 3339.
"""
from __future__ import annotations

import base64
import datetime
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"


class ProtobufError(ValueError):
    """A body that is not a readable Kubernetes protobuf message."""


class UnsupportedKind(ProtobufError):
    """A well-formed envelope around a kind this module has no field table for."""

    def __init__(self, api_version: str, kind: str):
        super().__init__(f"{api_version} {kind}")
        self.api_version = api_version
        self.kind = kind


# --- field tables ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Field:
    name: str
    kind: Any  # "string" | "bytes" | "bool" | "int" | "time" | "microtime" | "intstr" | "fieldsv1" | Message | MapOf
    repeated: bool = False
    pointer: bool = False  # a Go pointer: a zero value is kept (it was set); else a zero value is left out


@dataclass(frozen=True)
class MapOf:
    value: str  # "string" | "bytes"


class Message:
    def __init__(self, name: str, fields: dict[int, Field] | None = None):
        self.name = name
        self.fields = fields or {}


def _f(name: str, kind: Any = "string", repeated: bool = False, pointer: bool = False) -> Field:
    return Field(name, kind, repeated, pointer)


OWNER_REFERENCE = Message("OwnerReference", {
    5: _f("apiVersion"), 1: _f("kind"), 3: _f("name"), 4: _f("uid"),
    6: _f("controller", "bool", pointer=True), 7: _f("blockOwnerDeletion", "bool", pointer=True)})
MANAGED_FIELDS_ENTRY = Message("ManagedFieldsEntry", {
    1: _f("manager"), 2: _f("operation"), 3: _f("apiVersion"), 4: _f("time", "time", pointer=True),
    6: _f("fieldsType"), 7: _f("fieldsV1", "fieldsv1", pointer=True), 8: _f("subresource")})
OBJECT_META = Message("ObjectMeta", {
    1: _f("name"), 2: _f("generateName"), 3: _f("namespace"), 4: _f("selfLink"), 5: _f("uid"), 6: _f("resourceVersion"),
    7: _f("generation", "int"), 8: _f("creationTimestamp", "time"), 9: _f("deletionTimestamp", "time", pointer=True),
    10: _f("deletionGracePeriodSeconds", "int", pointer=True), 11: _f("labels", MapOf("string")),
    12: _f("annotations", MapOf("string")), 13: _f("ownerReferences", OWNER_REFERENCE, repeated=True),
    14: _f("finalizers", repeated=True), 17: _f("managedFields", MANAGED_FIELDS_ENTRY, repeated=True)})
CONDITION = Message("Condition", {
    1: _f("type"), 2: _f("status"), 3: _f("observedGeneration", "int"), 4: _f("lastTransitionTime", "time"),
    5: _f("reason"), 6: _f("message")})
OBJECT_REFERENCE = Message("ObjectReference", {
    1: _f("kind"), 2: _f("namespace"), 3: _f("name"), 4: _f("uid"), 5: _f("apiVersion"), 6: _f("resourceVersion"),
    7: _f("fieldPath")})
LOCAL_OBJECT_REFERENCE = Message("LocalObjectReference", {1: _f("name")})

NAMESPACE = Message("Namespace", {
    1: _f("metadata", OBJECT_META),
    2: _f("spec", Message("NamespaceSpec", {1: _f("finalizers", repeated=True)})),
    3: _f("status", Message("NamespaceStatus", {
        1: _f("phase"),
        2: _f("conditions", Message("NamespaceCondition", {
            1: _f("type"), 2: _f("status"), 4: _f("lastTransitionTime", "time"), 5: _f("reason"), 6: _f("message")}),
            repeated=True)}))})
CONFIG_MAP = Message("ConfigMap", {
    1: _f("metadata", OBJECT_META), 2: _f("data", MapOf("string")), 3: _f("binaryData", MapOf("bytes")),
    4: _f("immutable", "bool", pointer=True)})
SECRET = Message("Secret", {
    1: _f("metadata", OBJECT_META), 2: _f("data", MapOf("bytes")), 3: _f("type"), 4: _f("stringData", MapOf("string")),
    5: _f("immutable", "bool", pointer=True)})
SERVICE_ACCOUNT = Message("ServiceAccount", {
    1: _f("metadata", OBJECT_META), 2: _f("secrets", OBJECT_REFERENCE, repeated=True),
    3: _f("imagePullSecrets", LOCAL_OBJECT_REFERENCE, repeated=True),
    4: _f("automountServiceAccountToken", "bool", pointer=True)})
SERVICE_PORT = Message("ServicePort", {
    1: _f("name"), 2: _f("protocol"), 6: _f("appProtocol", pointer=True), 3: _f("port", "int"),
    4: _f("targetPort", "intstr"), 5: _f("nodePort", "int")})
SERVICE = Message("Service", {
    1: _f("metadata", OBJECT_META),
    2: _f("spec", Message("ServiceSpec", {
        1: _f("ports", SERVICE_PORT, repeated=True), 2: _f("selector", MapOf("string")), 3: _f("clusterIP"),
        18: _f("clusterIPs", repeated=True), 4: _f("type"), 5: _f("externalIPs", repeated=True),
        7: _f("sessionAffinity"), 8: _f("loadBalancerIP"), 9: _f("loadBalancerSourceRanges", repeated=True),
        10: _f("externalName"), 11: _f("externalTrafficPolicy"), 12: _f("healthCheckNodePort", "int"),
        13: _f("publishNotReadyAddresses", "bool"),
        14: _f("sessionAffinityConfig", Message("SessionAffinityConfig", {
            1: _f("clientIP", Message("ClientIPConfig", {1: _f("timeoutSeconds", "int", pointer=True)}), pointer=True)}),
            pointer=True),
        19: _f("ipFamilies", repeated=True), 17: _f("ipFamilyPolicy", pointer=True),
        20: _f("allocateLoadBalancerNodePorts", "bool", pointer=True), 21: _f("loadBalancerClass", pointer=True),
        22: _f("internalTrafficPolicy", pointer=True), 23: _f("trafficDistribution", pointer=True)})),
    3: _f("status", Message("ServiceStatus", {
        1: _f("loadBalancer", Message("LoadBalancerStatus", {
            1: _f("ingress", Message("LoadBalancerIngress", {
                1: _f("ip"), 2: _f("hostname"), 3: _f("ipMode", pointer=True),
                4: _f("ports", Message("PortStatus", {1: _f("port", "int"), 2: _f("protocol"), 3: _f("error", pointer=True)}),
                      repeated=True)}), repeated=True)})),
        2: _f("conditions", CONDITION, repeated=True)}))})
DELETE_OPTIONS = Message("DeleteOptions", {
    1: _f("gracePeriodSeconds", "int", pointer=True),
    2: _f("preconditions", Message("Preconditions", {1: _f("uid", pointer=True), 2: _f("resourceVersion", pointer=True)}),
          pointer=True),
    3: _f("orphanDependents", "bool", pointer=True), 4: _f("propagationPolicy", pointer=True), 5: _f("dryRun", repeated=True),
    6: _f("ignoreStoreReadErrorWithClusterBreakingPotential", "bool", pointer=True)})

# (apiVersion, kind) -> message; what kubectl's typed clients send as protobuf to the resources served here.
KINDS: dict[tuple[str, str], Message] = {
    ("v1", "Namespace"): NAMESPACE,
    ("v1", "ConfigMap"): CONFIG_MAP,
    ("v1", "Secret"): SECRET,
    ("v1", "ServiceAccount"): SERVICE_ACCOUNT,
    ("v1", "Service"): SERVICE,
    # DeleteOptions travel with the apiVersion of the client's group.
    ("v1", "DeleteOptions"): DELETE_OPTIONS,
    ("meta.k8s.io/v1", "DeleteOptions"): DELETE_OPTIONS,
}


def supported_kinds() -> list[str]:
    return sorted({f"{api_version} {kind}" for api_version, kind in KINDS})


# --- wire format -------------------------------------------------------------------------------

def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ProtobufError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ProtobufError("varint too long")


def _fields(data: bytes) -> list[tuple[int, int, Any]]:
    """(field number, wire type, value) in order; value: int for varints, bytes for the others."""
    out = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ProtobufError("field number 0")
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise ProtobufError("truncated length-delimited field")
            value, pos = data[pos:pos + length], pos + length
        elif wire == 1:
            value, pos = data[pos:pos + 8], pos + 8
        elif wire == 5:
            value, pos = data[pos:pos + 4], pos + 4
        else:
            raise ProtobufError(f"unsupported wire type {wire}")
        if pos > len(data):
            raise ProtobufError("truncated fixed-size field")
        out.append((number, wire, value))
    return out


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _bytes(wire: int, value: Any, where: str) -> bytes:
    if wire != 2:
        raise ProtobufError(f"{where}: expected a length-delimited field, got wire type {wire}")
    return value


def _int(wire: int, value: Any, where: str) -> int:
    if wire != 0:
        raise ProtobufError(f"{where}: expected a varint, got wire type {wire}")
    return _signed(value)


def _time(data: bytes, micro: bool) -> str | None:
    seconds = nanos = 0
    for number, wire, value in _fields(data):
        if number == 1:
            seconds = _int(wire, value, "Time.seconds")
        elif number == 2:
            nanos = _int(wire, value, "Time.nanos")
        else:
            raise ProtobufError(f"Time: unknown field {number}")
    if not seconds and not nanos:
        return None  # the zero time: null in JSON
    moment = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc) + datetime.timedelta(microseconds=nanos // 1000)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


def _int_or_string(data: bytes) -> int | str:
    kind, int_val, str_val = 0, 0, ""
    for number, wire, value in _fields(data):
        if number == 1:
            kind = _int(wire, value, "IntOrString.type")
        elif number == 2:
            int_val = _int(wire, value, "IntOrString.intVal")
        elif number == 3:
            str_val = _bytes(wire, value, "IntOrString.strVal").decode()
        else:
            raise ProtobufError(f"IntOrString: unknown field {number}")
    return str_val if kind == 1 else int_val


def _fields_v1(data: bytes) -> Any:
    for number, wire, value in _fields(data):
        if number == 1:
            return json.loads(_bytes(wire, value, "FieldsV1.Raw") or b"{}")
        raise ProtobufError(f"FieldsV1: unknown field {number}")
    return {}


def _map_entry(data: bytes, value_kind: str, where: str) -> tuple[str, Any]:
    key, item = "", b""
    for number, wire, value in _fields(data):
        if number == 1:
            key = _bytes(wire, value, where).decode()
        elif number == 2:
            item = _bytes(wire, value, where)
        else:
            raise ProtobufError(f"{where}: unknown map entry field {number}")
    return key, (base64.b64encode(item).decode() if value_kind == "bytes" else item.decode())


_SCALARS: dict[str, Callable[[int, Any, str], Any]] = {
    "string": lambda wire, value, where: _bytes(wire, value, where).decode(),
    "bytes": lambda wire, value, where: base64.b64encode(_bytes(wire, value, where)).decode(),
    "bool": lambda wire, value, where: bool(_int(wire, value, where)),
    "int": _int,
    "time": lambda wire, value, where: _time(_bytes(wire, value, where), micro=False),
    "microtime": lambda wire, value, where: _time(_bytes(wire, value, where), micro=True),
    "intstr": lambda wire, value, where: _int_or_string(_bytes(wire, value, where)),
    "fieldsv1": lambda wire, value, where: _fields_v1(_bytes(wire, value, where)),
}


def _is_zero(value: Any) -> bool:
    return value is None or value == "" or value == 0 and not isinstance(value, bool) or value is False or value == [] or value == {}


def decode_message(data: bytes, message: Message) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for number, wire, value in _fields(data):
        field = message.fields.get(number)
        if field is None:
            raise ProtobufError(f"{message.name}: field number {number} is not known to the local API server")
        where = f"{message.name}.{field.name}"
        if isinstance(field.kind, MapOf):
            key, item = _map_entry(_bytes(wire, value, where), field.kind.value, where)
            obj.setdefault(field.name, {})[key] = item
            continue
        if field.repeated and field.kind in ("int", "bool") and wire == 2:  # packed repeated scalars
            raise ProtobufError(f"{where}: packed repeated scalars are not expected here")
        if isinstance(field.kind, Message):
            decoded: Any = decode_message(_bytes(wire, value, where), field.kind)
        else:
            decoded = _SCALARS[field.kind](wire, value, where)
        if field.repeated:
            obj.setdefault(field.name, []).append(decoded)
        else:
            obj[field.name] = decoded
    for field in message.fields.values():
        if field.name not in obj:
            continue
        value = obj[field.name]
        if isinstance(field.kind, Message) and not field.repeated:
            continue  # a struct field: Go's JSON writes it even when empty, as gogo writes it on the wire
        if field.kind in ("time", "microtime") and value is None:
            del obj[field.name]  # the zero time
        elif not field.pointer and _is_zero(value):
            del obj[field.name]
    return obj


def decode(body: bytes) -> dict[str, Any]:
    """A protobuf request body -> the object as a JSON client would have sent it (apiVersion and kind first)."""
    if not body.startswith(MAGIC):
        raise ProtobufError("the body does not start with the Kubernetes protobuf prefix k8s\\x00")
    api_version = kind = ""
    raw = b""
    for number, wire, value in _fields(body[len(MAGIC):]):
        if number == 1:
            for type_number, type_wire, type_value in _fields(_bytes(wire, value, "Unknown.typeMeta")):
                if type_number == 1:
                    api_version = _bytes(type_wire, type_value, "TypeMeta.apiVersion").decode()
                elif type_number == 2:
                    kind = _bytes(type_wire, type_value, "TypeMeta.kind").decode()
        elif number == 2:
            raw = _bytes(wire, value, "Unknown.raw")
        elif number == 3:
            if _bytes(wire, value, "Unknown.contentEncoding"):
                raise ProtobufError("content encodings are not supported")
        elif number == 4:
            continue  # contentType: the raw bytes are protobuf (the only form inside this envelope)
        else:
            raise ProtobufError(f"Unknown: unknown field {number}")
    message = KINDS.get((api_version, kind))
    if message is None:
        raise UnsupportedKind(api_version, kind)
    return {"apiVersion": api_version, "kind": kind, **decode_message(raw, message)}
