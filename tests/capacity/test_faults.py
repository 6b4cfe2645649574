"""The capacity cache under faults: a silent watch is stale well
before two minutes, failures are told in plain words, a re-check re-lists on demand, an API
server that is gone for minutes and comes back, and random watch events against a recount."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest

from gpuspawner.capacity import health
from gpuspawner.capacity.cache import CapacityCache, _HttpError
from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.capacity.plugin_accounts import PluginAccounts
from gpuspawner.spawn.profiles import capacity_problem
from scripts.faults import watch_fuzz
from scripts.faults.recount import counted, differences, from_api, recount
from tests.builders.realapi import proxied, ticking

from tests.builders import node, pod
from .test_cache import A100, NODE_LIST, POD_LIST, ScriptedApi, a100, listing, wait_for


class _Parked:
    """A watch response whose stream stays open: it gives what is :meth:`send` to it, and is
    silent in between."""

    def __init__(self):
        self.status = 200
        self.content = self
        self.chunks = []
        self.wake = asyncio.Event()

    def send(self, chunk: bytes) -> None:
        self.chunks.append(chunk)
        self.wake.set()

    async def read(self):
        return b""

    def release(self):
        pass

    async def readany(self):
        while not self.chunks:
            await self.wake.wait()
            self.wake.clear()
        return self.chunks.pop(0)


@pytest.fixture
async def caches():
    made = []

    def make(api, **kw):
        c = CapacityCache(kw.pop("config", CapacityConfig()), api_factory=lambda: api, **kw)
        c._owns_api = False
        made.append(c)
        c.start()
        return c

    yield make
    for c in made:
        await c.stop()


# --- a silent watch is stale after the stall bound (90 s), not after two minutes --------------------------

def test_the_stall_bound_is_90_s_and_configurable():
    assert CapacityConfig().stall_timeout == 90.0
    assert CapacityCache(CapacityConfig())._stall_timeout == 90.0
    assert CapacityCache(CapacityConfig(stall_timeout=75))._stall_timeout == 75
    with pytest.raises(ValueError, match="stall_timeout must be a number of seconds > 0"):
        CapacityConfig(stall_timeout=0)


def test_the_hub_setting_reaches_the_cache():
    from gpuspawner.hub.settings import GPUSpawnerSettings

    assert GPUSpawnerSettings(gpu_capacity_stall_timeout=80).capacity_config().stall_timeout == 80
    assert GPUSpawnerSettings().capacity_config().stall_timeout == 90


async def test_a_watch_silent_past_the_bound_makes_the_figures_stale(caches):
    clock = [1000.0]
    bookmark = json.dumps({"type": "BOOKMARK", "object": {"kind": "Node", "metadata": {"resourceVersion": "150"}}})
    nodes_watch = _Parked()
    pods_watch = _Parked()
    api = ScriptedApi(list_node=[listing(NODE_LIST), nodes_watch],
                      list_pod_for_all_namespaces=[listing(POD_LIST), pods_watch])
    cache = caches(api, clock=lambda: clock[0])
    assert await cache.wait_synced(10)
    await wait_for(lambda: cache.health["informers"]["pods"]["watches"] == 1, what="both watches open")
    # a bookmark a minute later (the API server's bookmarkFrequency) keeps the figures live
    clock[0] += 60
    nodes_watch.send((bookmark + "\n").encode())
    pods_watch.send((bookmark + "\n").encode())
    await wait_for(lambda: cache.health["informers"]["nodes"]["resource_version"] == "150", what="bookmark")
    clock[0] += 89  # 89 s after the last word: live
    snap = cache.snapshot()
    assert (snap.healthy, snap.error) == (True, None)
    assert snap.to_json()["healthy"] is True and snap.to_json()["error"] is None
    clock[0] += 2  # 91 s of silence: stale, and said so
    snap = cache.snapshot()
    assert snap.healthy is False
    assert snap.error == health.stalled_message(["nodes", "pods"], 90.0)
    body = snap.to_json()
    assert body["healthy"] is False and body["error"].startswith("the hub's watch of the cluster's nodes and pods")
    assert body["age_seconds"] == pytest.approx(91.0)
    assert capacity_problem(snap).endswith("; the last figures are 91 s old")


async def test_a_410_on_a_quiet_watch_is_no_stall(caches):
    """The API server answering a watch with 410 Gone speaks on it: the re-list that follows and its new
    watch (whose first bookmark comes a minute after its start) get a full window, so a quiet informer
    is not taken for stalled after a 410."""
    clock = [1000.0]
    gone = json.dumps({"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}})
    first, second = _Parked(), _Parked()
    pods_watch = _Parked()
    api = ScriptedApi(list_node=[listing(NODE_LIST), first, listing(NODE_LIST, rv="300"), second],
                      list_pod_for_all_namespaces=[listing(POD_LIST), pods_watch])
    cache = caches(api, clock=lambda: clock[0])
    assert await cache.wait_synced(10)
    await wait_for(lambda: cache.health["informers"]["pods"]["watches"] == 1, what="both watches open")
    clock[0] += 80
    pods_watch.send(b'{"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "200"}}}\n')
    first.send((gone + "\n").encode())
    await wait_for(lambda: cache.health["informers"]["nodes"]["watches"] == 2, what="re-listed and watching again")
    clock[0] += 85  # 165 s since the nodes' first list, 85 s since the 410: within the window
    snap = cache.snapshot()
    assert (snap.healthy, snap.error) == (True, None)
    assert cache.health["informers"]["nodes"]["stalled"] is False


@pytest.mark.parametrize("stall, watch_timeout, rand, seconds", [
    (90.0, 300.0, 0.0, 22),   # the defaults: watches of 22-45 s against a 90 s window
    (90.0, 300.0, 0.999, 44),
    (90.0, 10.0, 0.5, 15),    # a shorter watch_timeout is kept
    (8.0, 300.0, 0.0, 5),     # never under 5 s
    (600.0, 300.0, 0.5, 225),
])
def test_each_watch_ends_within_half_the_stall_window(stall, watch_timeout, rand, seconds):
    """A watch's timeoutSeconds is a quarter of the window, doubled at most by client-go's jitter:
    the server ends each watch within half the window."""
    cache = CapacityCache(CapacityConfig(stall_timeout=stall), watch_timeout=watch_timeout, rand=lambda: rand)
    assert cache._watch_seconds() == seconds


@pytest.mark.integration
async def test_a_quiet_cluster_stays_live_past_the_window(control_plane):
    """Nothing changes in the cluster for longer than the stall window: kube-apiserver sends no
    bookmark on a kind whose resourceVersion does not move, so the end of each watch at its
    deadline is the server's word on it. The figures stay live, with no stalled watch and no
    re-list, for every kind (DRA's too). Watches that outlived the window, or ends not counted,
    made the figures stale after 24 s."""
    async with proxied(control_plane) as real:
        await real.create("nodes", a100("quiet-1"))
        await real.create("pods", pod("web", 0, "quiet-1"), "jhub")
        cache = real.make_cache(CapacityConfig(stall_timeout=24.0))  # DRA too: its DeviceClasses never change
        assert await cache.wait_synced(10)
        oldest, unhealthy = 0.0, []
        loop = asyncio.get_running_loop()
        end = loop.time() + 32
        while loop.time() < end:
            snap = cache.snapshot()
            oldest = max(oldest, snap.age_seconds)
            if not snap.healthy:
                unhealthy.append(snap.error)
            await asyncio.sleep(0.25)
        assert unhealthy == []
        assert oldest <= 14.0  # half the window, and the time to open the next watch
        health = cache.health
        assert health["dra"]["api"] == "served"
        informers = {**health["informers"], **health["dra"]["informers"]}
        assert {"nodes", "pods", "resourceslices", "resourceclaims", "deviceclasses"} <= set(informers)
        for kind, informer in informers.items():
            assert (kind, informer["stuck_watches"], informer["relists"]) == (kind, 0, 0)
            assert informer["watches"] >= 3, kind  # 6-12 s each


@pytest.mark.integration
async def test_a_watch_request_that_is_never_answered_is_stale_then_restarted(control_plane):
    """The hostile tester's stalled watch: the API server takes the watch request and never answers.
    The figures turn stale after the bound and the watch is restarted; live again afterwards (a node
    and a pod change every 0.2 s, so that each working watch delivers within the bound)."""
    async with proxied(control_plane) as real:
        await real.create("nodes", a100("n1"))
        await real.create("pods", pod("web", 0, "n1"), "jhub")
        # DRA off: its three watches would take the stalled requests meant for nodes and pods
        cache = real.make_cache(CapacityConfig(stall_timeout=1.0, dra_drivers=()), backoff_base=0.01,
                                backoff_cap=0.05)
        async with ticking(real, [("nodes", "n1", None), ("pods", "web", "jhub")]):
            assert await cache.wait_synced(10)
            await wait_for(lambda: cache.snapshot().healthy, what="healthy")
            real.proxy.stall(3.0, verb="watch", count=2)  # the next two watch requests hang
            real.proxy.close_watches()
            await wait_for(lambda: not cache.snapshot().healthy, timeout=5, what="stale while unanswered")
            # the words say it is the watch, whichever the cache saw first under this load: a request left
            # unanswered, a silent watch (kube-apiserver sends no bookmark within 1 s), or watches that end at once
            error = cache.snapshot().error
            assert "the hub's watch" in error, error
            await wait_for(lambda: cache.health["informers"]["nodes"]["stuck_watches"] >= 1, what="restarted")
            await wait_for(lambda: cache.snapshot().healthy, timeout=10, what="live again")


@pytest.mark.integration
async def test_stalled_watches_with_lists_answering_are_never_trusted_until_a_watch_delivers(control_plane):
    """Every watch request hangs while lists still answer (the hostile tester's stall): the pools turn
    unhealthy within the window, re-lists (the spawns' re-checks) do not make them healthy again, a
    spawn would get the 503 of an outage; once watches answer, health comes back only after a fresh
    list and a watch that delivered (a node and a pod change every 0.2 s)."""
    async with proxied(control_plane) as real:
        for obj in (a100("n1"), a100("n2")):
            await real.create("nodes", obj)
        await real.create("pods", pod("web", 0, "n1"), "jhub")
        window = 1.0
        cache = real.make_cache(CapacityConfig(stall_timeout=window, dra_drivers=()), backoff_base=0.01,
                                backoff_cap=0.05, recheck_interval=0.0)
        loop = asyncio.get_running_loop()
        async with ticking(real, [("nodes", "n1", None), ("pods", "web", "jhub")]):
            assert await cache.wait_synced(10)
            await wait_for(lambda: cache.snapshot().healthy, what="healthy")
            real.proxy.stall(3600, verb="watch")  # every watch request hangs; lists answer
            real.proxy.close_watches()
            began = loop.time()
            await wait_for(lambda: cache.snapshot().age_seconds > window, timeout=window + 2,
                           what="a window of silence")
            assert loop.time() - began <= window + 1.0
            assert not cache.snapshot().healthy
            # the spawns' re-checks re-list for three windows: the lists answer, and still nothing is trusted
            lists = real.proxy.counts("list")
            healthy_seen = []
            end = loop.time() + 3 * window
            while loop.time() < end:
                cache.recheck()
                await asyncio.sleep(0.05)
                healthy_seen.append(cache.snapshot().healthy)
            assert real.proxy.counts("list") >= lists + 4  # re-listed, answered ...
            assert not any(healthy_seen)  # ... and never trusted for that
            problem = capacity_problem(cache.snapshot())
            assert problem.startswith("GPU capacity is unknown: the hub's watch of the cluster's")  # the 503's words
            assert cache.health["informers"]["nodes"].get("stalled") is True
            # the watches answer again: the held ones, started after the re-checks' fresh lists, deliver: healthy
            real.proxy.clear()
            await wait_for(lambda: cache.snapshot().healthy, timeout=10, what="healthy after a delivering watch")
            assert not any(i.get("stalled") for i in cache.health["informers"].values())


# --- plain words, never exception names --------------------------------------------------------------

def _refused() -> Exception:
    os_error = ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 1)")
    return aiohttp.ClientConnectorError(
        aiohttp.client_reqrep.ConnectionKey("127.0.0.1", 1, False, True, None, None, None), os_error
    )


@pytest.mark.parametrize(
    "error, words",
    [
        (_HttpError(500, "etcdserver: request timed out"),
         "the Kubernetes API server failed (HTTP 500 InternalError): etcdserver: request timed out"),
        (_HttpError(503, ""), "the Kubernetes API server failed (HTTP 503 ServiceUnavailable)"),
        (_HttpError(429, "too many requests"),
         "the Kubernetes API server is overloaded and asks to retry later (HTTP 429 TooManyRequests): "
         "too many requests"),
        (_HttpError(404, "the server could not find the requested resource"),
         "the Kubernetes API server has no such object or API (HTTP 404 NotFound): "
         "the server could not find the requested resource"),
        (_HttpError(400, "bad"), "the Kubernetes API server refused the request (HTTP 400 BadRequest): bad"),
        (_refused(), "cannot connect to the Kubernetes API server (connection refused)"),
        (aiohttp.ServerDisconnectedError(), "cannot connect to the Kubernetes API server (it closed the connection)"),
        (asyncio.TimeoutError(), "the Kubernetes API server did not answer within 60 s"),
        (aiohttp.ServerTimeoutError("Timeout on reading data from socket"),
         "the Kubernetes API server did not answer within 60 s"),
        (json.JSONDecodeError("Expecting value", "<html>", 0),
         "the Kubernetes API server sent a reply that is not valid JSON"),
        (aiohttp.ClientPayloadError("Response payload is not completed"),
         "the connection to the Kubernetes API server broke in the middle of a reply"),
        (KeyError("items"),
         "an unexpected error while reading from the Kubernetes API server (the hub's log has the details)"),
    ],
    ids=["500", "503-no-message", "429", "404", "400", "refused", "disconnected", "timeout", "read-timeout",
         "not-json", "payload", "other"],
)
def test_failures_are_told_in_plain_words(error, words):
    text = health.describe_failure(error, timeout=60)
    assert text == words
    assert type(error).__name__ not in text


def test_a_server_message_is_kept_short():
    text = health.describe_failure(_HttpError(500, "x" * 10_000))
    assert len(text) < 300 and text.endswith("...")


@pytest.mark.parametrize(
    "errors, words",
    [
        ({"nodes": "E", "pods": "E"}, "the hub cannot read the cluster's nodes and pods: E"),
        ({"nodes": "E", "pods": ""}, "the hub cannot read the cluster's nodes: E"),
        ({"nodes": "E", "pods": "F"}, "the hub cannot read the cluster's nodes: E; the hub cannot read the cluster's pods: F"),
        ({"nodes": "", "pods": ""}, None),
    ],
)
def test_informer_errors_combine_into_one_sentence(errors, words):
    assert health.combine(errors) == words


@pytest.mark.parametrize("seconds, words", [(0, "0 s"), (45.7, "45 s"), (119, "119 s"), (300, "5 min"),
                                            (7200, "2 h"), (7500, "2 h 5 min")])
def test_ages_in_words(seconds, words):
    assert health.age_words(seconds) == words


@pytest.mark.integration
async def test_a_failing_api_server_is_described_without_internal_names(control_plane):
    """The hostile tester read ``nodes: _HttpError: HTTP 500: ...`` in a 503; now the words say what failed."""
    async with proxied(control_plane) as real:
        await real.create("nodes", a100("n1"))
        real.proxy.fail(500, 1000, verb="list")
        cache = real.make_cache(backoff_base=0.01, backoff_cap=0.02)
        await wait_for(lambda: cache.health["consecutive_failures"] >= 1
                       and all(i["error"] for i in cache.health["informers"].values()), what="both failing")
        error = cache.snapshot().error
        assert error == "; ".join(
            f"the hub cannot read the cluster's {kind}: the Kubernetes API server failed (HTTP 500 InternalError): "
            f'an error on the server ("injected by the fault proxy for {kind}") has prevented the request from '
            f"succeeding (list {kind})" for kind in ("nodes", "pods"))
        assert "_HttpError" not in error and "HTTP 500:" not in error
        problem = capacity_problem(cache.snapshot())
        assert problem == f"GPU capacity is unknown: {error}"  # not synced: no figures, so no age


# --- re-check on demand ---------------------------------------------------------------------------

async def test_recheck_relists_both_kinds_once_per_interval(caches):
    clock = [500.0]
    api = ScriptedApi(
        list_node=[listing(NODE_LIST, rv="100"), _Parked(), listing([a100("n1")], rv="300"), _Parked()],
        list_pod_for_all_namespaces=[listing(POD_LIST, rv="100"), _Parked(), listing([], rv="300"), _Parked()],
    )
    cache = caches(api, clock=lambda: clock[0], recheck_interval=30.0)
    assert await cache.wait_synced(10)
    await wait_for(lambda: len(api.watch_calls("list_pod_for_all_namespaces")) == 1, what="watching")
    assert cache.snapshot().pool(A100).free == 13
    clock[0] += 1
    token = cache.recheck()
    assert not cache.rechecked_since(token)
    await wait_for(lambda: cache.rechecked_since(token), what="re-listed")
    assert len(api.list_calls("list_node")) == 2 and len(api.list_calls("list_pod_for_all_namespaces")) == 2
    # the re-list is the truth now: n2 and pod "a" are gone
    p = cache.snapshot().pool(A100)
    assert (p.nodes, p.free) == (1, 8)
    # within the interval a second request shares the first: no second re-list
    clock[0] += 10
    assert cache.recheck() == token
    await asyncio.sleep(0.05)
    assert len(api.list_calls("list_node")) == 2
    assert cache.health["rechecks"] == 1


# --- the API server gone for minutes, then back ------------------------------------------------------------

@pytest.mark.integration
async def test_api_server_unreachable_for_five_minutes_then_back(control_plane):
    """Scenario 1 in seconds: the server goes away (connections refused), five minutes pass on the
    cache's clock, the cluster changes meanwhile; the figures say unknown and their age, and once the
    server is back the counts equal a recount of the cluster from scratch."""
    async with proxied(control_plane) as real:
        for obj in (a100("n1"), a100("n2"), node("cpu-1")):
            await real.create("nodes", obj)
        await real.create("pods", pod("a", 3, "n1"), "jhub")
        offset = [0.0]
        cache = real.make_cache(clock=lambda: time.monotonic() + offset[0], backoff_base=0.05, backoff_cap=0.2)
        assert await cache.wait_synced(10)
        port = real.restart_proxy()  # unreachable: open connections die, new ones are refused
        await wait_for(lambda: all(i["consecutive_failures"] >= 2 for i in cache.health["informers"].values()),
                       what="both informers failing while it is away")
        offset[0] += 300  # five minutes pass
        # the cluster changes while the hub cannot see it
        await real.create("pods", pod("b", 8, "n2"), "jhub")
        await real.delete("pods", "a", "jhub")
        for i in range(150):
            await real.create("configmaps", {"metadata": {"name": f"c{i}"}}, "jhub")
        snap = cache.snapshot()
        assert snap.healthy is False
        assert snap.error == "the hub cannot read the cluster's nodes and pods: cannot connect to the " \
                             "Kubernetes API server (connection refused)"
        assert snap.age_seconds >= 300
        assert capacity_problem(snap).endswith("; the last figures are 5 min old")
        assert snap.pool(A100).free == 13  # the last figures are still served, marked unknown
        real.start_proxy(port)
        await wait_for(lambda: cache.snapshot().healthy, timeout=20, what="live again")
        nodes = await real.client.list(await real.resource("nodes"))
        pods = await real.client.list(await real.resource("pods"))
        expected = recount(nodes[1], pods[1], CapacityConfig())
        await wait_for(lambda: not differences(expected, counted(cache.snapshot())), timeout=10,
                       what="the counts of a fresh recount")
        assert cache.health["relists"] >= 1  # away longer than the window: a re-list


# --- random watch events against a recount from scratch ------------------------------------------------------

async def test_100000_random_watch_events_match_a_recount():
    """Scenario 2 as CI runs it (``scripts/faults/watch_fuzz.py`` runs a million): the cache's real
    list/watch loop over an in-memory API, with dropped watches, 410 Gone and restarts."""
    report = await watch_fuzz.run_memory(100_000, seed=7, checkpoint=1000)
    assert report.problems == []
    assert report.checkpoints == 100
    assert report.dropped_watches > 100 and report.gone > 50 and report.restarts > 10


@pytest.mark.integration
async def test_random_watch_events_written_to_kube_apiserver_match_a_recount(control_plane):
    """CI's size (``python -m scripts.faults.watch_fuzz --real`` runs 5,000): 400 writes, with watches
    dropped and 410s injected more often than the default mix does, so that a short run has both."""
    from tests.builders.realapi import no_nodes
    from testcluster.nodeagent.client import Client

    client = await Client(control_plane.kubeconfig).open()
    try:
        await no_nodes(client)  # the pools count every node of the cluster
    finally:
        await client.close()
    report = await watch_fuzz.run_real(400, control_plane, seed=3, checkpoint=100,
                                       mix=watch_fuzz.Mix(drop_watch=4, gone=2))
    assert report.problems == []
    assert report.checkpoints == 4 and report.dropped_watches and report.gone


async def test_the_fuzz_catches_a_ledger_that_forgets(monkeypatch):
    """The check can fail: a ledger that forgets one deletion of a bound GPU pod in five is caught
    at a checkpoint (with the re-lists that would repair it made rare)."""
    real = PluginAccounts.remove_pod
    calls = [0]

    def forgetful(self, key):
        rec = self._pods.get(key)
        if rec is not None and rec.node is not None:
            calls[0] += 1
            if calls[0] % 5 == 0:
                return False
        return real(self, key)

    monkeypatch.setattr(PluginAccounts, "remove_pod", forgetful)
    mix = watch_fuzz.Mix(drop_watch=0.5, gone=0, restart=0)
    report = await watch_fuzz.run_memory(5_000, seed=1, checkpoint=100, mix=mix)
    assert calls[0] >= 5
    assert report.problems and "recount (nodes, total, free, max per node)" in report.problems[0]


def test_the_recount_compares_device_plugin_pools_only():
    """``GET /hub/api/gpus`` lists DRA pools too; the recount reads Nodes and Pods, not slices and
    claims, so a DRA pool is left out of the comparison rather than reported as a mismatch."""
    pools = [
        {"id": "g:a100:nvidia.com/gpu", "allocation": "device-plugin", "nodes": 2, "total": 8, "free": 5,
         "max_free_per_node": 4},
        {"id": "h:h100:gpu.nvidia.com", "allocation": "dra", "nodes": 2, "total": 8, "free": 8,
         "max_free_per_node": 4},
    ]
    assert from_api(pools) == {"g:a100:nvidia.com/gpu": (2, 8, 5, 4)}
    assert differences({"g:a100:nvidia.com/gpu": (2, 8, 5, 4)}, from_api(pools)) == []
