"""The hub's pre-puller (hub/prepull.py) as the hub runs it: ``run_for_hub`` with the hub's config and a
Kubernetes client, against an API server that answers the DaemonSet and owner calls over HTTP (and
fails when told to); the capacity cache is the tests' fake."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from types import SimpleNamespace

import pytest
from aiohttp import web
from kubernetes_asyncio.client import ApiClient, Configuration
from traitlets.config import Config

from gpuspawner.hub.prepull import run_for_hub
from gpuspawner.hub.spawner import GPUSpawner
from gpuspawner.prepull.plan import daemonset_name
from tests.builders import FakeCache, pool_view

A100 = pool_view("a100", "NVIDIA-A100-SXM4-80GB", driver="550.54.15", cuda="12.4")
L4 = pool_view("l4", "NVIDIA-L4", driver="525.60.13", cuda="12.0")  # cannot run the CUDA 12.4 image
PROFILE = {
    "slug": "gpu", "cuda": "12.4", "kubespawner_override": {"image": "pt:cu124"},
    "profile_options": {"image": {"choices": {
        "cu124": {"display_name": "CUDA 12.4", "default": True},
        "cu118": {"kubespawner_override": {"image": "pt:cu118"}, "cuda": "11.8"},
    }}},
}
NAMESPACE = "jhub"
HUB_UID = "5f0c7d52-1111-4a6b-9c1e-000000000001"
APPS = f"/apis/apps/v1/namespaces/{NAMESPACE}"


class AppsServer:
    """The API server's answers to the pre-puller: DaemonSets of one namespace (list, create, read,
    replace, delete) and the Deployment that owns them. ``failures[kind]``: status codes the next
    requests for ``"daemonsets"`` or ``"deployments"`` get instead (one each); ``requests``: what was
    asked, in order."""

    def __init__(self) -> None:
        self.daemonsets: dict[str, dict] = {}
        self.deployments: dict[str, dict] = {}
        self.failures: dict[str, list[int]] = {"daemonsets": [], "deployments": []}
        self.requests: list[tuple[str, str]] = []
        self._rv = 0
        self.runner: web.AppRunner | None = None
        self.url = ""

    @staticmethod
    def _status(code: int, reason: str) -> web.Response:
        return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": reason,
                                  "reason": reason, "code": code}, status=code)

    @web.middleware
    async def _record(self, request: web.Request, handler):
        self.requests.append((request.method, request.path))
        failures = self.failures["deployments" if "/deployments/" in request.path else "daemonsets"]
        if failures:
            return self._status(failures.pop(0), "ServiceUnavailable")
        return await handler(request)

    def _stored(self, body: dict) -> dict:
        self._rv += 1
        return {**body, "metadata": {**body["metadata"], "resourceVersion": str(self._rv)}}

    async def list(self, request: web.Request) -> web.Response:
        return web.json_response({"kind": "DaemonSetList", "apiVersion": "apps/v1", "metadata": {},
                                  "items": list(self.daemonsets.values())})

    async def create(self, request: web.Request) -> web.Response:
        body = await request.json()
        name = body["metadata"]["name"]
        if name in self.daemonsets:
            return self._status(409, "AlreadyExists")
        self.daemonsets[name] = self._stored(body)
        return web.json_response(self.daemonsets[name], status=201)

    async def read(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in self.daemonsets:
            return self._status(404, "NotFound")
        return web.json_response(self.daemonsets[name])

    async def replace(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.daemonsets[request.match_info["name"]] = self._stored(body)
        return web.json_response(self.daemonsets[request.match_info["name"]])

    async def delete(self, request: web.Request) -> web.Response:
        if self.daemonsets.pop(request.match_info["name"], None) is None:
            return self._status(404, "NotFound")
        return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Success"})

    async def deployment(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in self.deployments:
            return self._status(404, "NotFound")
        return web.json_response(self.deployments[name])

    def add_hub_deployment(self) -> None:
        labels = {"component": "hub"}
        self.deployments["hub"] = {
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "hub", "namespace": NAMESPACE, "uid": HUB_UID},
            "spec": {"selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels}, "spec": {"containers": [{"name": "hub", "image": "hub:1"}]}}},
        }

    @property
    def open_connections(self) -> int:
        return len(self.runner.server.connections)

    async def start(self) -> None:
        app = web.Application(middlewares=[self._record])
        app.router.add_get(f"{APPS}/daemonsets", self.list)
        app.router.add_post(f"{APPS}/daemonsets", self.create)
        app.router.add_get(f"{APPS}/daemonsets/{{name}}", self.read)
        app.router.add_put(f"{APPS}/daemonsets/{{name}}", self.replace)
        app.router.add_delete(f"{APPS}/daemonsets/{{name}}", self.delete)
        app.router.add_get(f"{APPS}/deployments/{{name}}", self.deployment)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"


@pytest.fixture
async def server():
    api = AppsServer()
    await api.start()
    yield api
    await api.runner.cleanup()


def client_of(server: AppsServer):
    """``run_for_hub``'s ``make_client``: an ``ApiClient`` of the API server (the hub's own is
    configured from the pod's ServiceAccount or a kubeconfig)."""
    async def make(settings) -> ApiClient:
        conf = Configuration()
        conf.host = server.url
        return ApiClient(configuration=conf)

    return make


class Waits:
    """The pre-puller's waits (``run_for_hub``'s ``sleep``): recorded, and a moment long each; ``on``:
    what happens in the cluster during the next waits of that many seconds, in turn."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.on: dict[float, list[Callable[[], None]]] = {}

    async def sleep(self, seconds: float) -> None:
        self.seconds.append(seconds)
        actions = self.on.get(seconds)
        if actions:
            actions.pop(0)()
        await asyncio.sleep(0.01)


def hub(prepull: bool = True, owner: str = "") -> SimpleNamespace:
    """What ``run_for_hub`` reads of JupyterHub: its config and spawner class."""
    c = Config()
    c.GPUSpawner.gpu_profiles = [PROFILE]
    c.GPUSpawner.cuda_policy = "strict"
    c.GPUSpawner.namespace = NAMESPACE
    c.GPUSpawner.gpu_prepull = prepull
    c.GPUSpawner.gpu_prepull_interval = 5
    c.GPUSpawner.gpu_prepull_owner = owner
    return SimpleNamespace(config=c, spawner_class=GPUSpawner)


async def until(what: str, check, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not within {timeout:.0f} s: {what}")
        await asyncio.sleep(0.01)


def pulled(daemonset: dict) -> list[str]:
    return [c["image"] for c in daemonset["spec"]["template"]["spec"]["initContainers"]]


async def stopped(task: asyncio.Task) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_off_it_returns_at_once_and_asks_the_cluster_nothing(server, install_cache):
    cache = install_cache(FakeCache(A100, L4))
    await asyncio.wait_for(run_for_hub(hub(prepull=False), make_client=client_of(server)), 5)
    assert server.requests == [] and cache.snapshots == 0


async def test_started_it_keeps_one_daemonset_per_pool_and_stopped_it_lets_go_of_the_cluster(server, install_cache):
    cache = install_cache(FakeCache(A100, L4))
    server.add_hub_deployment()
    waits = Waits()
    task = asyncio.create_task(run_for_hub(hub(owner="Deployment/hub"), make_client=client_of(server),
                                           sleep=waits.sleep))
    try:
        await until("a DaemonSet per pool", lambda: len(server.daemonsets) == 2)
        a100, l4 = server.daemonsets[daemonset_name(A100.id)], server.daemonsets[daemonset_name(L4.id)]
        # only the images that run on each pool (the L4's driver cannot run the CUDA 12.4 one)
        assert sorted(pulled(a100)) == ["pt:cu118", "pt:cu124"] and pulled(l4) == ["pt:cu118"]
        assert {d["metadata"]["namespace"] for d in (a100, l4)} == {NAMESPACE}
        for daemonset in (a100, l4):  # deleted with the hub's Deployment
            (ref,) = daemonset["metadata"]["ownerReferences"]
            assert {k: ref[k] for k in ("apiVersion", "kind", "name", "uid")} == {
                "apiVersion": "apps/v1", "kind": "Deployment", "name": "hub", "uid": HUB_UID}
        # a pass every gpu_prepull_interval; a pool that goes away takes its DaemonSet
        await until("a second pass", lambda: waits.seconds.count(5) >= 2)
        del cache.pools[L4.id]
        await until("the L4 pool's DaemonSet removed", lambda: set(server.daemonsets) == {daemonset_name(A100.id)})
        assert not task.done()
    finally:
        await stopped(task)
    # stopped with the hub: no more requests, and its client's connections are closed
    asked = len(server.requests)
    await asyncio.sleep(0.1)
    assert len(server.requests) == asked
    await until("the client's connections closed", lambda: server.open_connections == 0)


async def test_it_survives_api_errors_and_says_each_once(server, install_cache, caplog):
    install_cache(FakeCache(A100, L4))
    waits = Waits()

    # the owner is missing (404), then the API server fails once (503); then the DaemonSet lists fail twice
    waits.on[60] = [lambda: (server.add_hub_deployment(), server.failures["deployments"].append(503))]
    server.failures["daemonsets"] = [503, 503]
    task = asyncio.create_task(run_for_hub(hub(owner="Deployment/hub"), make_client=client_of(server),
                                           sleep=waits.sleep))
    try:
        with caplog.at_level(logging.INFO, logger="gpuspawner.prepull"):
            await until("a DaemonSet per pool after the errors", lambda: len(server.daemonsets) == 2)
            await until("a pass at the interval again", lambda: 5 in waits.seconds)
        assert not task.done()
    finally:
        await stopped(task)
    # the owner read again a minute later until it answered; the lists retried with growing backoff
    assert waits.seconds[:2] == [60, 60]
    first, second = waits.seconds[2:4]
    assert 5 <= first <= 10 and 10 <= second <= 20
    assert list(server.daemonsets.values())[0]["metadata"]["ownerReferences"][0]["uid"] == HUB_UID
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    owner = [e for e in errors if "gpu_prepull_owner 'Deployment/hub'" in e]
    assert len(owner) == 2 and "(HTTP 404 NotFound)" in owner[0] and "(HTTP 503 ServiceUnavailable)" in owner[1]
    failed = [e for e in errors if "pre-pull failed" in e]
    assert len(failed) == 1 and "the Kubernetes API server failed (HTTP 503 ServiceUnavailable)" in failed[0]
    assert any("works again" in r.getMessage() for r in caplog.records)
