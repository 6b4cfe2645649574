"""Probes: one try of each kind against real servers, and the worker's thresholds and gating."""

from __future__ import annotations

import asyncio
import socket

import pytest
from aiohttp import web

from testcluster.node.kubelet.probes import LIVENESS, READINESS, STARTUP, USER_AGENT, ProbeConfig, ProbeWorker, probe_once


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
async def server():
    seen = {}

    async def handle(request):
        seen["ua"] = request.headers.get("User-Agent")
        if request.path == "/moved":
            raise web.HTTPFound("/ok")
        if request.path == "/slow":
            await asyncio.sleep(2)
        return web.Response(status=200 if request.path in ("/ok", "/slow") else 503)

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port = _free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield port, seen
    await runner.cleanup()


async def _noexec(argv, timeout):
    raise AssertionError("no exec expected")


async def test_http_probes(server):
    port, seen = server

    async def once(path, timeout=1.0, port_=port):
        cfg = ProbeConfig({"path": path, "port": "web"}, "httpGet", timeout=timeout)
        return await probe_once(cfg, pod_ip="127.0.0.1", ports={"web": port_}, exec_fn=_noexec)

    assert await once("/ok") == (True, "")
    assert seen["ua"] == USER_AGENT
    assert await once("/moved") == (True, "")  # a same-host redirect is followed
    assert await once("/down") == (False, "HTTP probe failed with statuscode: 503")
    ok, why = await once("/slow", timeout=0.2)
    assert not ok and why == (f'Get "http://127.0.0.1:{port}/slow": context deadline exceeded '
                              "(Client.Timeout exceeded while awaiting headers)")
    closed = _free_port()
    assert await once("/", port_=closed) == (
        False, f'Get "http://127.0.0.1:{closed}/": dial tcp 127.0.0.1:{closed}: connect: connection refused')


async def test_tcp_and_exec_probes(server):
    port, _ = server
    ok = await probe_once(ProbeConfig({"port": port}, "tcpSocket"), pod_ip="127.0.0.1", ports={}, exec_fn=_noexec)
    assert ok == (True, "")
    closed = _free_port()
    refused = await probe_once(ProbeConfig({"port": closed}, "tcpSocket"), pod_ip="127.0.0.1", ports={},
                               exec_fn=_noexec)
    assert refused == (False, f"dial tcp 127.0.0.1:{closed}: connect: connection refused")

    async def slow(argv, timeout):
        raise asyncio.TimeoutError

    cfg = ProbeConfig({"command": ["sh", "-c", "sleep 9"]}, "exec")
    assert await probe_once(cfg, pod_ip="", ports={}, exec_fn=slow) == (False, 'command "sh -c sleep 9" timed out')


def _worker(kind, results, *, success=1, failure=3, may_run=lambda kind: True):
    changes, failures = [], []
    results = list(results)

    async def fake_exec(argv, timeout):
        return (0, "") if results.pop(0) else (1, "nope\n")

    cfg = ProbeConfig({"command": ["x"]}, "exec", period=0.01, success_threshold=success, failure_threshold=failure)
    w = ProbeWorker(kind, cfg, started_at=0.0, pod_ip="", ports={}, exec_fn=fake_exec,
                    on_result=lambda k, ok: changes.append((k, ok)), on_failure=lambda k, out: failures.append(out),
                    may_run=may_run)
    return w, changes, failures, results


async def _until(cond, timeout=2.0):
    for _ in range(int(timeout / 0.01)):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


async def test_readiness_needs_success_threshold_in_a_row():
    w, changes, failures, left = _worker(READINESS, [True, False, True, True, True, True], success=2)
    w.start()
    await _until(lambda: changes)
    w.stop()
    assert changes == [(READINESS, True)] and failures == ["nope\n"]


async def test_liveness_fails_after_failure_threshold_then_holds():
    w, changes, failures, left = _worker(LIVENESS, [False, False, True, False, False, False, True, True], failure=3)
    w.start()
    await asyncio.wait_for(w.task, 2)  # it holds (ends) once the container must restart
    assert changes == [(LIVENESS, False)] and len(failures) == 5 and left == [True, True]


async def test_startup_gates_and_stops_after_success():
    gate = {"started": False}
    w, changes, _, left = _worker(STARTUP, [False, True, True], failure=5)
    r, rchanges, _, rleft = _worker(READINESS, [True], may_run=lambda kind: gate["started"])
    w.start()
    r.start()
    await asyncio.wait_for(w.task, 2)
    assert changes == [(STARTUP, True)] and left == [True]
    await asyncio.sleep(0.05)
    assert rchanges == [] and rleft == [True]  # readiness waits for the startup probe
    gate["started"] = True
    await _until(lambda: rchanges)
    r.stop()
