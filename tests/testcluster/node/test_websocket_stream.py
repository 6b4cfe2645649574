"""The channel.k8s.io WebSocket protocols: negotiation and the error channel's status (pure)."""

import json

import pytest

from testcluster.node import websocket_stream


@pytest.mark.parametrize("header,protocol", [
    ("v5.channel.k8s.io", "v5.channel.k8s.io"),
    ("v5.channel.k8s.io, v4.channel.k8s.io", "v5.channel.k8s.io"),   # the client's order
    ("v4.base64.channel.k8s.io,channel.k8s.io", "v4.base64.channel.k8s.io"),
    ("", ""), (None, ""),
    ("v3.channel.k8s.io", None),                                     # none served: refused
])
def test_negotiation(header, protocol):
    assert websocket_stream.negotiate(header) == protocol


def test_exit_status_as_each_path_words_it():
    v4 = websocket_stream.exit_status(3, ["sh", "-c", "exit 3"], websocket_stream.V4)
    assert json.loads(websocket_stream.status_bytes(v4, websocket_stream.V4)) == {
        "metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
        "message": "command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3",
        "details": {"causes": [{"reason": "ExitCode", "message": "3"}]}}
    v5 = websocket_stream.exit_status(3, ["sh", "-c", "exit 3"], websocket_stream.V5)
    assert v5["message"] == "command terminated with non-zero exit code: command terminated with exit code 3"


@pytest.mark.parametrize("protocol,status,data", [
    (websocket_stream.V5, websocket_stream.success(), b'{"metadata":{},"status":"Success"}'),
    (websocket_stream.V1, websocket_stream.success(), None),                                  # v1: nothing on success
    (websocket_stream.V1, websocket_stream.internal_error("boom"), b"Internal error occurred: boom"),
    (websocket_stream.V4, websocket_stream.internal_error("a <b>"), b'{"metadata":{},"status":"Failure","message":"Internal error occurred: '
                                        b'a \\u003cb\\u003e","reason":"InternalError","details":{"causes":'
                                        b'[{"message":"a \\u003cb\\u003e"}]},"code":500}'),
])
def test_status_bytes(protocol, status, data):
    assert websocket_stream.status_bytes(status, protocol) == data
