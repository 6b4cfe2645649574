"""The Kubernetes protobuf request bodies, decoded: real bodies kubectl 1.32 sent, and bad ones."""

from __future__ import annotations

import pytest

from gpuspawner.sim import protobuf

# Captured from /usr/bin/kubectl 1.32 against the simulated API server.
KUBECTL_BODIES = [
    pytest.param(  # kubectl create namespace hub
        b'k8s\x00\n\x0f\n\x02v1\x12\tNamespace\x12\x1b\n\x13\n\x03hub\x12\x00\x1a\x00"\x00*\x002\x008\x00B\x00\x12'
        b'\x00\x1a\x02\n\x00\x1a\x00"\x00',
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "hub"}}, id="namespace"),
    pytest.param(  # kubectl create service nodeport web --tcp=80:8888 --node-port=30080
        b'k8s\x00\n\r\n\x02v1\x12\x07Service\x12j\n\x1f\n\x03web\x12\x00\x1a\x00"\x00*\x002\x008\x00B\x00Z\n\n\x03app'
        b'\x12\x03web\x12C\n\x1d\n\x0780-8888\x12\x03TCP\x18P"\x07\x08\x00\x10\xb8E\x1a\x00(\x80\xeb\x01\x12\n\n\x03app'
        b'\x12\x03web\x1a\x00"\x08NodePort:\x00B\x00R\x00Z\x00`\x00h\x00\x1a\x02\n\x00\x1a\x00"\x00',
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "labels": {"app": "web"}},
         "spec": {"ports": [{"name": "80-8888", "protocol": "TCP", "port": 80, "targetPort": 8888,
                             "nodePort": 30080}],
                  "selector": {"app": "web"}, "type": "NodePort"}}, id="service"),
    pytest.param(  # kubectl create configmap cfg --from-literal=a=b --from-literal=c=d
        b'k8s\x00\n\x0f\n\x02v1\x12\tConfigMap\x12%\n\x13\n\x03cfg\x12\x00\x1a\x00"\x00*\x002\x008\x00B\x00\x12\x06\n'
        b'\x01a\x12\x01b\x12\x06\n\x01c\x12\x01d\x1a\x00"\x00',
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"a": "b", "c": "d"}},
        id="configmap"),
    pytest.param(  # kubectl create secret generic tok --from-literal=token=s3cr3t --type=example.com/token
        b'k8s\x00\n\x0c\n\x02v1\x12\x06Secret\x129\n\x13\n\x03tok\x12\x00\x1a\x00"\x00*\x002\x008\x00B\x00\x12\x0f\n'
        b'\x05token\x12\x06s3cr3t\x1a\x11example.com/token\x1a\x00"\x00',
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tok"}, "data": {"token": "czNjcjN0"},
         "type": "example.com/token"}, id="secret-bytes-become-base64"),
    pytest.param(  # kubectl create serviceaccount spawner
        b'k8s\x00\n\x14\n\x02v1\x12\x0eServiceAccount\x12\x19\n\x17\n\x07spawner\x12\x00\x1a\x00"\x00*\x002\x008\x00B'
        b'\x00\x1a\x00"\x00',
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "spawner"}}, id="serviceaccount"),
    pytest.param(  # kubectl drain's DELETE (before pods/eviction was served): empty DeleteOptions
        b'k8s\x00\n\x13\n\x02v1\x12\rDeleteOptions\x12\x00\x1a\x00"\x00',
        {"apiVersion": "v1", "kind": "DeleteOptions"}, id="delete-options"),
]


@pytest.mark.parametrize("body, expected", KUBECTL_BODIES)
def test_kubectl_bodies_decode_to_their_json_form(body, expected):
    assert protobuf.decode_object(body) == expected


def _field(number: int, wire: int, payload: bytes) -> bytes:
    key = bytes([number << 3 | wire])
    return key + (bytes([len(payload)]) + payload if wire == 2 else payload)


def _envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    type_meta = _field(1, 2, api_version.encode()) + _field(2, 2, kind.encode())
    return protobuf.MAGIC + _field(1, 2, type_meta) + _field(2, 2, raw)


def test_pointer_fields_keep_an_explicit_zero():
    # DeleteOptions{gracePeriodSeconds: 0, orphanDependents: false, propagationPolicy: "Foreground"}
    raw = _field(1, 0, b"\x00") + _field(3, 0, b"\x00") + _field(4, 2, b"Foreground")
    out = protobuf.decode_object(_envelope("meta.k8s.io/v1", "DeleteOptions", raw))
    assert out == {"apiVersion": "meta.k8s.io/v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                   "orphanDependents": False, "propagationPolicy": "Foreground"}


def test_eviction_carries_its_delete_options():
    meta = _field(1, 2, b"jupyter-alice") + _field(3, 2, b"hub")
    opts = _field(1, 0, b"\x05")  # gracePeriodSeconds: 5
    out = protobuf.decode_object(_envelope("policy/v1", "Eviction", _field(1, 2, meta) + _field(2, 2, opts)))
    assert out["metadata"] == {"name": "jupyter-alice", "namespace": "hub"}
    assert out["deleteOptions"] == {"gracePeriodSeconds": 5}


@pytest.mark.parametrize("body, error", [
    (b'{"kind": "Namespace"}', "magic number"),
    (_envelope("v1", "Namespace", b"\x0a\x05ab"), "runs past the end"),
    (_envelope("v1", "Namespace", _field(9, 2, b"x")), "field 9 of Namespace is not decoded"),
    (_envelope("v1", "Namespace", _field(1, 0, b"\x01")), "wire type 0, expected 2"),
    (protobuf.MAGIC + _field(1, 2, b"") + _field(3, 2, b"gzip"), "contentEncoding 'gzip'"),
], ids=["json-body", "truncated", "unknown-field", "wrong-wire-type", "content-encoding"])
def test_malformed_bodies_are_refused_with_the_reason(body, error):
    with pytest.raises(protobuf.ProtobufError, match=error):
        protobuf.decode_object(body)


def test_a_kind_without_a_schema_is_named():
    with pytest.raises(KeyError) as e:
        protobuf.decode_object(_envelope("v1", "Pod", b""))
    assert e.value.args[0] == "v1, Kind=Pod"
