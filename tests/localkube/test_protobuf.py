"""`pets_localkube.protobuf`: Kubernetes protobuf request bodies read as the JSON the same client
would send (the end-to-end check with the real kubectl is in test_kubectl_fidelity.py)."""
from __future__ import annotations

import pytest

from pets_localkube import protobuf


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative numbers: two's complement, ten bytes
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def field(number: int, payload: bytes | int) -> bytes:
    if isinstance(payload, int):
        return varint(number << 3) + varint(payload)
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    type_meta = field(1, api_version.encode()) + field(2, kind.encode())
    return protobuf.MAGIC + field(1, type_meta) + field(2, raw) + field(3, b"") + field(4, b"")


def meta(name: str, **extra: bytes) -> bytes:
    # What gogo writes for an ObjectMeta: every plain field, empty or not.
    return field(1, field(1, name.encode()) + field(2, b"") + field(3, b"") + field(5, b"") + field(7, 0) + field(8, b"")
                 + b"".join(extra.values()))


def test_a_secret_with_maps_bytes_and_a_pointer_bool():
    raw = (meta("creds", labels=field(11, field(1, b"app") + field(2, b"web")))
           + field(2, field(1, b"password") + field(2, b"\x00s3cr3t"))
           + field(3, b"Opaque") + field(5, 0))  # immutable: false, a *bool: kept
    assert protobuf.decode(envelope("v1", "Secret", raw)) == {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "labels": {"app": "web"}},
        "data": {"password": "AHMzY3IzdA=="}, "type": "Opaque", "immutable": False}


def test_a_service_with_int_or_string_ports_negative_ints_and_empty_structs():
    def port(*parts):
        return field(1, b"".join(parts))
    spec = (port(field(1, b"http"), field(2, b"TCP"), field(3, 80), field(4, field(1, 0) + field(2, 8080)), field(5, 0))
            + port(field(1, b"tls"), field(3, 443), field(4, field(1, 1) + field(3, b"https")))
            + field(2, field(1, b"app") + field(2, b"web")) + field(4, b"ClusterIP") + field(13, 0)
            + field(14, field(1, field(1, -1))))
    decoded = protobuf.decode(envelope("v1", "Service", meta("web") + field(2, spec) + field(3, field(1, b""))))
    assert decoded["spec"] == {
        "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080},
                  {"name": "tls", "port": 443, "targetPort": "https"}],
        "selector": {"app": "web"}, "type": "ClusterIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": -1}}}
    assert decoded["status"] == {"loadBalancer": {}}  # a struct is written even when empty, as Go's JSON does


def test_times_and_delete_options():
    raw = meta("ns", deletion=field(9, field(1, 1700000000) + field(2, 0)))
    assert protobuf.decode(envelope("v1", "Namespace", raw))["metadata"]["deletionTimestamp"] == "2023-11-14T22:13:20Z"
    options = field(1, 0) + field(2, field(1, b"uid-1")) + field(4, b"Foreground") + field(5, b"All")
    assert protobuf.decode(envelope("v1", "DeleteOptions", options)) == {
        "apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0, "preconditions": {"uid": "uid-1"},
        "propagationPolicy": "Foreground", "dryRun": ["All"]}


def test_what_cannot_be_read_is_refused_never_skipped():
    with pytest.raises(protobuf.UnsupportedKind) as unsupported:
        protobuf.decode(envelope("v1", "Pod", meta("p")))
    assert (unsupported.value.api_version, unsupported.value.kind) == ("v1", "Pod")
    with pytest.raises(protobuf.ProtobufError, match="ConfigMap: field number 9 is not known"):
        protobuf.decode(envelope("v1", "ConfigMap", meta("c") + field(9, b"x")))
    with pytest.raises(protobuf.ProtobufError, match="prefix"):
        protobuf.decode(b'{"kind": "ConfigMap"}')
    with pytest.raises(protobuf.ProtobufError, match="truncated"):
        protobuf.decode(protobuf.MAGIC + b"\x0a\x7f\x01")
    assert "v1 ConfigMap" in protobuf.supported_kinds()
