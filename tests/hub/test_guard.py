"""The size limit in front of the spawn and server endpoints (``hub.guard.BodyLimit``): a body over
the limit is answered 413 with a JSON message and never reaches the handler, whatever way its size
is told; a body within it reaches the handler as tornado would hand it over.  A real tornado server
on loopback and a raw HTTP/1.1 client (the end-to-end run through JupyterHub is in
``tests/e2e/test_options_e2e.py``)."""

from __future__ import annotations

import asyncio
import socket

import pytest
from tornado import httpserver, netutil, web

from gpuspawner.hub import guard
from tests.builders import rawhttp

LIMIT = 1024


@web.stream_request_body
class Echo(guard.BodyLimit, web.RequestHandler):
    DRAINED = frozenset({"POST"})
    max_body_bytes = LIMIT
    seen: list[bytes] = []

    def post(self):
        if self.take_body():
            return
        Echo.seen.append(self.request.body)
        self.finish({"bytes": len(self.request.body), "form": sorted(self.request.body_arguments)})

    def get(self):
        self.finish({"ok": True})


@pytest.fixture
async def server():
    Echo.seen = []
    sockets = netutil.bind_sockets(0, "127.0.0.1", family=socket.AF_INET)
    srv = httpserver.HTTPServer(web.Application([(r"/echo", Echo)]))
    srv.add_sockets(sockets)
    yield sockets[0].getsockname()[1]
    srv.stop()
    await srv.close_all_connections()


async def exchange(port: int, head: str, body=(), *, read_first: bool = False):
    return await asyncio.to_thread(rawhttp.exchange, port, head, body, read_first=read_first, timeout=10)


BIG = 3 * 1024 * 1024  # 3 MiB: 3,000 times the limit

TOO_BIG = [
    pytest.param(f"POST /echo HTTP/1.1\nHost: x\nContent-Length: {BIG}\n", [b"x" * 65536] * (BIG // 65536), False,
                 f"this one is {BIG:,} bytes", id="content-length"),
    pytest.param(f"POST /echo HTTP/1.1\nHost: x\nContent-Length: {BIG}\nExpect: 100-continue\n", [], True,
                 f"this one is {BIG:,} bytes", id="expect-100-continue-before-the-body"),
    pytest.param("POST /echo HTTP/1.1\nHost: x\nTransfer-Encoding: chunked\n", rawhttp.chunked([b"y" * 600] * 4), False,
                 "this one is more", id="chunked"),
    pytest.param(f"GET /echo HTTP/1.1\nHost: x\nContent-Length: {BIG}\n", [], True,
                 f"this one is {BIG:,} bytes", id="a-method-that-takes-no-body"),
]


@pytest.mark.parametrize("head, parts, read_first, told", TOO_BIG)
async def test_a_body_over_the_limit_is_413_and_never_reaches_the_handler(server, head, parts, read_first, told):
    status, answer = await exchange(server, head, parts, read_first=read_first)
    assert status == 413
    assert answer["status"] == 413
    assert answer["message"].startswith(f"the request body may be at most {LIMIT:,} bytes; {told}. ")
    assert Echo.seen == []


@pytest.mark.parametrize(
    "head, body, expected",
    [
        ("Content-Type: application/json", b'{"profile": "gpu"}', {"bytes": 18, "form": []}),
        ("Content-Type: application/x-www-form-urlencoded", b"profile=gpu&gpus=2", {"bytes": 18, "form": ["gpus", "profile"]}),
        ("Content-Type: application/json", b"z" * LIMIT, {"bytes": LIMIT, "form": []}),
    ],
    ids=["json", "form", "exactly-the-limit"],
)
async def test_a_body_within_the_limit_is_handed_over(server, head, body, expected):
    status, answer = await exchange(server, f"POST /echo HTTP/1.1\nHost: x\n{head}\nContent-Length: {len(body)}",
                                    [body])
    assert (status, answer) == (200, expected)


async def test_a_content_length_that_is_no_number_is_400(server):
    status, answer = await exchange(server, "POST /echo HTTP/1.1\nHost: x\nContent-Length: 12abc", [b"x"],
                                    read_first=True)
    assert status == 400 and "is not a number of bytes" in answer["message"]


def test_the_hub_serves_its_spawn_and_server_routes_with_the_guarded_handlers():
    from jupyterhub import apihandlers, handlers

    guard.install_for_hub()
    guard.install_for_hub()  # idempotent
    routes = dict((r[0], r[1]) for r in apihandlers.default_handlers + handlers.default_handlers)
    assert routes[r"/api/users/([^/]+)/server"] is guard.GuardedServerAPIHandler
    assert routes[r"/api/users/([^/]+)/servers/([^/]*)"] is guard.GuardedServerAPIHandler
    for path in (r"/spawn", r"/spawn/([^/]+)", r"/spawn/([^/]+)/([^/]+)"):
        assert routes[path] is guard.GuardedSpawnHandler
