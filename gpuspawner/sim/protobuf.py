"""Request bodies in the Kubernetes protobuf encoding, decoded to the JSON form the store keeps.
Design notes: docs/simulated-apiserver.md.
"""

from __future__ import annotations

import base64
import datetime as _dt
from dataclasses import dataclass, field
from typing import Any, Iterator

__all__ = ["PROTOBUF", "MAGIC", "ProtobufError", "decode_object", "decode_unknown", "kinds"]

PROTOBUF = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"


class ProtobufError(ValueError):
    """A body that is not the protobuf encoding of a known Kubernetes object."""


# --- the wire format (https://protobuf.dev/programming-guides/encoding/) ---------------

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ProtobufError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise ProtobufError("varint longer than 10 bytes")


def fields(buf: bytes) -> Iterator[tuple[int, int, Any]]:
    """``(field number, wire type, value)`` of each field of one message, in order.

    A varint or fixed-width value is an ``int``; a length-delimited one, ``bytes``.
    """
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ProtobufError("field number 0")
        if wire == _VARINT:
            value, pos = _varint(buf, pos)
        elif wire in (_I64, _I32):
            width = 8 if wire == _I64 else 4
            if pos + width > len(buf):
                raise ProtobufError("truncated fixed-width field")
            value, pos = int.from_bytes(buf[pos:pos + width], "little"), pos + width
        elif wire == _LEN:
            size, pos = _varint(buf, pos)
            if pos + size > len(buf):
                raise ProtobufError(f"field {number}: length {size} runs past the end of the message")
            value, pos = bytes(buf[pos:pos + size]), pos + size
        else:
            raise ProtobufError(f"field {number}: unsupported wire type {wire}")
        yield number, wire, value


# --- message schemas -----------------------------------------------------------------


@dataclass(frozen=True)
class F:
    """One field: its JSON name and type.

    ``kind``: string, bytes (JSON base64), int (int32/int64 varint), bool,
    time (meta/v1 Time -> RFC 3339), intorstr, map (string -> string),
    mapbytes (string -> bytes) or message (``message`` names it).
    ``pointer``: a Go pointer field, kept when it holds its zero value.
    """

    name: str
    kind: str
    message: str | None = None
    repeated: bool = False
    pointer: bool = False


@dataclass(frozen=True)
class Message:
    name: str
    fields: dict[int, F] = field(default_factory=dict)


def _s(name: str, **kw: Any) -> F:
    return F(name, "string", **kw)


_MESSAGES: dict[str, Message] = {m.name: m for m in (
    Message("TypeMeta", {1: _s("apiVersion"), 2: _s("kind")}),  # runtime.TypeMeta
    Message("Unknown", {1: F("typeMeta", "message", "TypeMeta"), 2: F("raw", "bytes"),
                        3: _s("contentEncoding"), 4: _s("contentType")}),
    Message("OwnerReference", {5: _s("apiVersion"), 1: _s("kind"), 3: _s("name"), 4: _s("uid"),
                               6: F("controller", "bool", pointer=True),
                               7: F("blockOwnerDeletion", "bool", pointer=True)}),
    Message("ObjectMeta", {
        1: _s("name"), 2: _s("generateName"), 3: _s("namespace"), 4: _s("selfLink"), 5: _s("uid"),
        6: _s("resourceVersion"), 7: F("generation", "int"), 8: F("creationTimestamp", "time"),
        9: F("deletionTimestamp", "time"), 10: F("deletionGracePeriodSeconds", "int", pointer=True),
        11: F("labels", "map"), 12: F("annotations", "map"),
        13: F("ownerReferences", "message", "OwnerReference", repeated=True),
        14: _s("finalizers", repeated=True),
        # managedFields (17) is dropped by the server on every write: not decoded.
    }),
    Message("NamespaceSpec", {1: _s("finalizers", repeated=True)}),
    Message("NamespaceStatus", {1: _s("phase")}),
    Message("Namespace", {1: F("metadata", "message", "ObjectMeta"), 2: F("spec", "message", "NamespaceSpec"),
                          3: F("status", "message", "NamespaceStatus")}),
    Message("ConfigMap", {1: F("metadata", "message", "ObjectMeta"), 2: F("data", "map"),
                          3: F("binaryData", "mapbytes"), 4: F("immutable", "bool", pointer=True)}),
    Message("Secret", {1: F("metadata", "message", "ObjectMeta"), 2: F("data", "mapbytes"), 3: _s("type"),
                       4: F("stringData", "map"), 5: F("immutable", "bool", pointer=True)}),
    Message("ObjectReference", {1: _s("kind"), 2: _s("namespace"), 3: _s("name"), 4: _s("uid"),
                                5: _s("apiVersion"), 6: _s("resourceVersion"), 7: _s("fieldPath")}),
    Message("LocalObjectReference", {1: _s("name")}),
    Message("ServiceAccount", {1: F("metadata", "message", "ObjectMeta"),
                               2: F("secrets", "message", "ObjectReference", repeated=True),
                               3: F("imagePullSecrets", "message", "LocalObjectReference", repeated=True),
                               4: F("automountServiceAccountToken", "bool", pointer=True)}),
    Message("ServicePort", {1: _s("name"), 2: _s("protocol"), 6: _s("appProtocol", pointer=True),
                            3: F("port", "int"), 4: F("targetPort", "intorstr"), 5: F("nodePort", "int")}),
    Message("ClientIPConfig", {1: F("timeoutSeconds", "int", pointer=True)}),
    Message("SessionAffinityConfig", {1: F("clientIP", "message", "ClientIPConfig")}),
    Message("ServiceSpec", {
        1: F("ports", "message", "ServicePort", repeated=True), 2: F("selector", "map"), 3: _s("clusterIP"),
        18: _s("clusterIPs", repeated=True), 4: _s("type"), 5: _s("externalIPs", repeated=True),
        7: _s("sessionAffinity"), 8: _s("loadBalancerIP"), 9: _s("loadBalancerSourceRanges", repeated=True),
        10: _s("externalName"), 11: _s("externalTrafficPolicy"), 12: F("healthCheckNodePort", "int"),
        13: F("publishNotReadyAddresses", "bool"),
        14: F("sessionAffinityConfig", "message", "SessionAffinityConfig"),
        19: _s("ipFamilies", repeated=True), 17: _s("ipFamilyPolicy", pointer=True),
        20: F("allocateLoadBalancerNodePorts", "bool", pointer=True), 21: _s("loadBalancerClass", pointer=True),
        22: _s("internalTrafficPolicy", pointer=True), 23: _s("trafficDistribution", pointer=True),
    }),
    Message("PortStatus", {1: F("port", "int"), 2: _s("protocol"), 3: _s("error", pointer=True)}),
    Message("LoadBalancerIngress", {1: _s("ip"), 2: _s("hostname"), 3: _s("ipMode", pointer=True),
                                    4: F("ports", "message", "PortStatus", repeated=True)}),
    Message("LoadBalancerStatus", {1: F("ingress", "message", "LoadBalancerIngress", repeated=True)}),
    # conditions (2) are set by controllers through /status, never sent on create
    Message("ServiceStatus", {1: F("loadBalancer", "message", "LoadBalancerStatus")}),
    Message("Service", {1: F("metadata", "message", "ObjectMeta"), 2: F("spec", "message", "ServiceSpec"),
                        3: F("status", "message", "ServiceStatus")}),
    Message("Preconditions", {1: _s("uid", pointer=True), 2: _s("resourceVersion", pointer=True)}),
    Message("DeleteOptions", {1: F("gracePeriodSeconds", "int", pointer=True),
                              2: F("preconditions", "message", "Preconditions"),
                              3: F("orphanDependents", "bool", pointer=True),
                              4: _s("propagationPolicy", pointer=True), 5: _s("dryRun", repeated=True),
                              6: F("ignoreStoreReadErrorWithClusterBreakingPotential", "bool", pointer=True)}),
    Message("Eviction", {1: F("metadata", "message", "ObjectMeta"),
                         2: F("deleteOptions", "message", "DeleteOptions")}),
)}

# (apiVersion, kind) -> message; DeleteOptions arrives as meta.k8s.io/v1 or as the group's version
_KINDS: dict[tuple[str, str], str] = {
    ("v1", "Namespace"): "Namespace", ("v1", "ConfigMap"): "ConfigMap", ("v1", "Secret"): "Secret",
    ("v1", "ServiceAccount"): "ServiceAccount", ("v1", "Service"): "Service",
    ("policy/v1", "Eviction"): "Eviction", ("policy/v1beta1", "Eviction"): "Eviction",
    ("meta.k8s.io/v1", "DeleteOptions"): "DeleteOptions", ("v1", "DeleteOptions"): "DeleteOptions",
    ("policy/v1", "DeleteOptions"): "DeleteOptions",
}


def kinds() -> list[str]:
    """The kinds this module decodes, as ``apiVersion/kind`` (for error messages and docs)."""
    return sorted(f"{api_version} {kind}" for api_version, kind in _KINDS)


# --- decoding --------------------------------------------------------------------------


def _int64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _rfc3339(seconds: int) -> str:
    return _dt.datetime.fromtimestamp(seconds, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _expect(f: F, wire: int, want: int, where: str) -> None:
    if wire != want:
        raise ProtobufError(f"{where}.{f.name}: wire type {wire}, expected {want}")


def _map_entry(raw: bytes, as_bytes: bool, where: str) -> tuple[str, str]:
    key, value = "", b"" if as_bytes else ""
    for number, wire, v in fields(raw):
        if wire != _LEN or number not in (1, 2):
            raise ProtobufError(f"{where}: malformed map entry")
        if number == 1:
            key = v.decode("utf-8")
        else:
            value = v if as_bytes else v.decode("utf-8")
    if as_bytes:
        return key, base64.b64encode(value).decode()  # type: ignore[arg-type]
    return key, value  # type: ignore[return-value]


def _scalar(f: F, wire: int, value: Any, where: str) -> Any:
    if f.kind == "string":
        _expect(f, wire, _LEN, where)
        return value.decode("utf-8")
    if f.kind == "bytes":
        _expect(f, wire, _LEN, where)
        return value
    if f.kind == "int":
        _expect(f, wire, _VARINT, where)
        return _int64(value)
    if f.kind == "bool":
        _expect(f, wire, _VARINT, where)
        return bool(value)
    _expect(f, wire, _LEN, where)
    if f.kind == "time":
        parts = {n: v for n, _, v in fields(value)}
        seconds = _int64(parts.get(1, 0))
        return _rfc3339(seconds) if seconds else None
    if f.kind == "intorstr":
        # intstr.IntOrString: type 0 = intVal, 1 = strVal
        parts = {n: v for n, _, v in fields(value)}
        if _int64(parts.get(1, 0)) == 1:
            return parts.get(3, b"").decode("utf-8")
        return _int64(parts.get(2, 0))
    return decode_message(f.message or "", value, f"{where}.{f.name}")


def _is_zero(value: Any) -> bool:
    return value in ("", 0, False, None, b"") or value == {} or value == []


def decode_message(name: str, buf: bytes, where: str | None = None) -> dict[str, Any]:
    """Decode one message of the schema table into its JSON form."""
    msg = _MESSAGES[name]
    where = where or name
    out: dict[str, Any] = {}
    for number, wire, value in fields(buf):
        f = msg.fields.get(number)
        if f is None:
            raise ProtobufError(f"{where}: field {number} of {name} is not decoded by the simulated API server")
        if f.kind in ("map", "mapbytes"):
            _expect(f, wire, _LEN, where)
            k, v = _map_entry(value, f.kind == "mapbytes", f"{where}.{f.name}")
            out.setdefault(f.name, {})[k] = v
            continue
        decoded = _scalar(f, wire, value, where)
        if f.repeated:
            out.setdefault(f.name, []).append(decoded)
        else:
            out[f.name] = decoded
    pointers = {f.name for f in msg.fields.values() if f.pointer}
    # omitempty: a zero value of a non-pointer field is not sent in JSON either
    return {k: v for k, v in out.items() if not _is_zero(v) or (k in pointers and v is not None)}


def decode_unknown(body: bytes) -> tuple[str, str, bytes]:
    """The envelope: ``(apiVersion, kind, raw)`` of a ``k8s\\x00`` + runtime.Unknown body."""
    if not body.startswith(MAGIC):
        raise ProtobufError("the body does not start with the protobuf magic number k8s\\x00")
    unknown = decode_message("Unknown", body[len(MAGIC):])
    encoding = unknown.get("contentEncoding", "")
    if encoding:
        raise ProtobufError(f"contentEncoding {encoding!r} is not supported")
    type_meta = unknown.get("typeMeta") or {}
    raw = unknown.get("raw", b"")
    return type_meta.get("apiVersion", ""), type_meta.get("kind", ""), raw if isinstance(raw, bytes) else b""


def decode_object(body: bytes) -> dict[str, Any]:
    """The JSON form (with ``apiVersion`` and ``kind``) of a protobuf request body.

    Raises :class:`ProtobufError` for a malformed body, ``KeyError`` (its
    ``args[0]`` is ``"apiVersion, Kind"``) for a kind this module does not decode.
    """
    api_version, kind, raw = decode_unknown(body)
    name = _KINDS.get((api_version, kind))
    if name is None:
        raise KeyError(f"{api_version}, Kind={kind}")
    obj = decode_message(name, raw)
    return {"apiVersion": api_version, "kind": kind, **obj}
