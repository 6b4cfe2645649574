"""A started server is handed to JupyterHub once it accepts connections, checked every
``gpu_listen_check_interval`` seconds (``gpuspawner.hub.listen_wait``): real sockets on loopback, a
server that starts listening late and one that never does; the address and budget rules as tables.
"""

from __future__ import annotations

import asyncio
import socket
import time

import kubespawner.spawner
import pytest

from gpuspawner.hub import listen_wait
from tests.hub.test_pod_wait import POOL_A100, running, starting_spawner
from tests.hub.test_pod_wait import cluster, registry  # noqa: F401  (fixtures)


@pytest.mark.parametrize("url, expected", [
    ("http://10.4.0.7:8888", ("10.4.0.7", 8888)),
    ("https://jupyter-alice.jhub.svc:8443/user/alice/", ("jupyter-alice.jhub.svc", 8443)),
    ("http://[fd00::7]:8888", ("fd00::7", 8888)),
    ("http://10.4.0.7", ("10.4.0.7", 80)),
    ("https://10.4.0.7", ("10.4.0.7", 443)),
    (("10.4.0.7", 8888), ("10.4.0.7", 8888)),
    ("http://10.4.0.7:port", None),
    ("unix:///run/jupyter.sock", None),
    ("10.4.0.7:8888", None),
    (None, None),
    (("10.4.0.7", "8888"), None),
], ids=["pod-ip", "service-name", "ipv6", "http-default-port", "https-default-port", "ip-port-pair",
        "port-not-a-number", "unix-socket", "no-scheme", "none", "pair-with-a-string-port"])
def test_the_address_of_a_started_server(url, expected):
    assert listen_wait.address(url) == expected


@pytest.mark.parametrize("http_timeout, start_timeout, elapsed, expected", [
    (30, 300, 5, 30),            # http_timeout bounds it
    (30, 60, 40, 18),            # 60 - 40 - the 2 s margin
    (30, 60, 58.5, 0.0),         # no time left before JupyterHub cancels start
    (30, 60, 70, 0.0),           # past it
    (0, 300, 5, 0.0),            # an admin's http_timeout of 0
    (float("nan"), 300, 5, 0.0),
], ids=["http-timeout", "start-timeout-left", "margin-only", "past-start-timeout", "no-http-timeout", "nan"])
def test_the_wait_lasts_at_most_http_timeout_and_never_into_start_timeouts_last_seconds(
        http_timeout, start_timeout, elapsed, expected):
    assert listen_wait.budget(http_timeout, start_timeout, elapsed) == pytest.approx(expected)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def listen_after(port: int, delay: float) -> asyncio.AbstractServer:
    await asyncio.sleep(delay)
    return await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", port)


async def test_a_server_that_listens_late_is_found_within_an_interval_of_listening():
    port = free_port()
    began = time.monotonic()
    late = asyncio.create_task(listen_after(port, 0.4))
    assert await listen_wait.until_listening(("127.0.0.1", port), 0.05, 10)
    found = time.monotonic() - began
    (await late).close()
    # not before it listened; well before JupyterHub's backoff, whose 4th wait alone may last 1.6 s
    assert 0.4 <= found < 1.0


async def test_a_server_that_never_listens_is_given_up_after_the_budget():
    port = free_port()  # nothing listens there
    began = time.monotonic()
    assert not await listen_wait.until_listening(("127.0.0.1", port), 0.05, 0.5)
    assert 0.5 <= time.monotonic() - began < 1.5


def start_returning(url):
    """KubeSpawner's ``_start`` reduced to its seams: the options, the running pod, its URL."""
    async def _start(self):
        await self.load_user_options()
        self.pod_reflector.pods[f"{self.namespace}/{self.pod_name}"] = running(self.pod_name, POOL_A100.id)
        return url
    return _start


async def test_start_returns_once_the_server_listens(cluster, monkeypatch):  # noqa: F811
    port = free_port()
    monkeypatch.setattr(kubespawner.spawner.KubeSpawner, "_start", start_returning(f"http://127.0.0.1:{port}"))
    s = starting_spawner(gpu_listen_check_interval=0.05, http_timeout=30)
    s.user_options = {"profile": "gpu", "gpu_pool": POOL_A100.id, "gpus": 1}
    late = asyncio.create_task(listen_after(port, 0.4))
    began = time.monotonic()
    assert await s.start() == f"http://127.0.0.1:{port}"
    assert time.monotonic() - began >= 0.4  # it waited for the server
    (await late).close()
    assert s.http_timeout == 30  # JupyterHub's own check, which follows, answers at once


async def test_a_server_not_listening_in_time_leaves_jupyterhub_the_rest_of_http_timeout(cluster, monkeypatch):  # noqa: F811
    port = free_port()
    monkeypatch.setattr(kubespawner.spawner.KubeSpawner, "_start", start_returning(f"http://127.0.0.1:{port}"))
    # start_timeout 5: 3 s of it are the wait's (the last 2 s are JupyterHub's), less than http_timeout
    s = starting_spawner(gpu_listen_check_interval=0.05, http_timeout=30, start_timeout=5)
    s.user_options = {"profile": "gpu", "gpu_pool": POOL_A100.id, "gpus": 1}
    began = time.monotonic()
    await s.start()
    waited = time.monotonic() - began
    assert 2.5 <= waited < 4.5
    # 30 less the about 3 s spent, rounded up to whole seconds (JupyterHub's trait is an Integer)
    assert s.http_timeout in (27, 28)
    # the next spawn starts from the admin's http_timeout again
    s.start_timeout = 300
    late = asyncio.create_task(listen_after(port, 0))
    await s.start()
    (await late).close()
    assert s.http_timeout == 30


async def test_an_interval_of_0_leaves_the_wait_to_jupyterhub(cluster, monkeypatch):  # noqa: F811
    monkeypatch.setattr(kubespawner.spawner.KubeSpawner, "_start", start_returning(f"http://127.0.0.1:{free_port()}"))
    s = starting_spawner(gpu_listen_check_interval=0, http_timeout=30)
    s.user_options = {"profile": "gpu", "gpu_pool": POOL_A100.id, "gpus": 1}
    began = time.monotonic()
    await s.start()
    assert time.monotonic() - began < 0.5
    assert s.http_timeout == 30
