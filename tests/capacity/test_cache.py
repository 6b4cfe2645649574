"""The informer cache: scripted-API unit tests (exact backoff, 410, 403, stuck
watches) and integration tests against Kubernetes' own API server (the session's control plane)
through the fault proxy."""

from __future__ import annotations

import asyncio
import collections
import json

import aiohttp
import pytest

from gpuspawner.capacity.cache import CapacityCache
from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.capacity.model import Taint, pool_id
from gpuspawner.capacity.taintrule import NodeTaints

from tests.builders import GFD_A100, node, pod

GKE = "cloud.google.com/gke-nodepool"
A100 = pool_id("a100", "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu")


def a100(name, gpus=8, **kw):
    return node(name, {"nvidia.com/gpu": str(gpus)}, {**GFD_A100, GKE: "a100"}, **kw)


async def wait_for(cond, timeout=10.0, what="condition"):
    """Poll a condition with a generous timeout (robust on a loaded CI machine)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


# ---------------------------------------------------------------------------
# a scripted CoreV1Api: each call pops the next action of its method


class _Content:
    def __init__(self, chunks):
        self._chunks = chunks

    async def readany(self):
        if not self._chunks:
            return b""
        item = self._chunks.popleft()
        if isinstance(item, asyncio.Event):
            await item.wait()
            return b""
        if isinstance(item, BaseException):
            raise item
        return item


class _Resp:
    def __init__(self, status=200, body=b"", chunks=()):
        self.status = status
        self._body = body
        self.content = _Content(collections.deque(chunks))

    async def read(self):
        return self._body

    def release(self):
        pass


def listing(items, rv="100", cont=None):
    return _Resp(body=json.dumps({"items": items, "metadata": {"resourceVersion": rv, "continue": cont}}).encode())


def watching(*events, silent=False):
    chunks = [(json.dumps(e) + "\n").encode() for e in events]
    if silent:
        # what aiohttp raises when sock_read (= stall_timeout) passes without data
        chunks.append(aiohttp.ServerTimeoutError("Timeout on reading data from socket"))
    return _Resp(chunks=chunks)


def status(code, reason="Failure", message="boom"):
    return _Resp(code, json.dumps({"kind": "Status", "code": code, "reason": reason, "message": message}).encode())


class ScriptedApi:
    def __init__(self, **scripts):
        self.scripts = {k: collections.deque(v) for k, v in scripts.items()}
        self.calls = []

    async def _next(self, method, kw):
        self.calls.append((method, kw))
        script = self.scripts.setdefault(method, collections.deque())
        if not script:
            await asyncio.Event().wait()  # park: nothing more scripted
        action = script.popleft()
        if isinstance(action, BaseException):
            raise action
        return action

    async def list_node(self, **kw):
        return await self._next("list_node", kw)

    async def list_pod_for_all_namespaces(self, **kw):
        return await self._next("list_pod_for_all_namespaces", kw)

    # resource.k8s.io/v1: discovery answers 404 (a cluster without DRA) unless scripted
    async def get_api_resources(self, **kw):
        if not self.scripts.get("get_api_resources"):
            self.calls.append(("get_api_resources", kw))
            return status(404, "NotFound", "the server could not find the requested resource")
        return await self._next("get_api_resources", kw)

    async def list_resource_slice(self, **kw):
        return await self._next("list_resource_slice", kw)

    async def list_resource_claim_for_all_namespaces(self, **kw):
        return await self._next("list_resource_claim_for_all_namespaces", kw)

    async def list_device_class(self, **kw):
        return await self._next("list_device_class", kw)

    def watch_calls(self, method):
        return [kw for m, kw in self.calls if m == method and kw.get("watch")]

    def list_calls(self, method):
        return [kw for m, kw in self.calls if m == method and not kw.get("watch")]


class Sleeps(list):
    """The injected sleep: records each delay and returns at once."""

    async def __call__(self, delay):
        self.append(delay)
        await asyncio.sleep(0)


@pytest.fixture
async def make_cache():
    caches = []

    def make(api, config=None, **kw):
        kw.setdefault("sleep", Sleeps())
        kw.setdefault("rand", lambda: 0.5)
        c = CapacityCache(config or CapacityConfig(), api_factory=lambda: api, **kw)
        c._owns_api = False
        caches.append(c)
        c.start()
        return c

    yield make
    for c in caches:
        await c.stop()


NODE_LIST = [a100("n1"), a100("n2"), node("cpu-1")]
POD_LIST = [pod("a", 3, "n1"), pod("web", 0, "cpu-1")]


async def test_list_then_watch_counts_pools(make_cache):
    api = ScriptedApi(
        list_node=[listing(NODE_LIST[:1], cont="t1"), listing(NODE_LIST[1:], rv="100")],
        list_pod_for_all_namespaces=[listing(POD_LIST, rv="120")],
    )
    cache = make_cache(api, page_size=1)
    assert await cache.wait_synced(10)
    snap = cache.snapshot()
    p = snap.pool(A100)
    assert (snap.synced, snap.healthy, p.nodes, p.total, p.free, p.max_free_per_node) == (True, True, 2, 16, 13, 8)
    # paged list with continue tokens, raw JSON, then a watch from the list's resourceVersion
    lists = api.list_calls("list_node")
    assert [kw.get("_continue") for kw in lists] == [None, "t1"]
    assert all(kw["limit"] == 1 and kw["_preload_content"] is False for kw in lists)
    await wait_for(lambda: api.watch_calls("list_node"), what="node watch")
    w = api.watch_calls("list_node")[0]
    assert (w["resource_version"], w["allow_watch_bookmarks"], w["_preload_content"]) == ("100", True, False)
    assert api.watch_calls("list_pod_for_all_namespaces")[0]["resource_version"] == "120"
    # pods without GPUs are not stored at all
    assert cache.health["gpu_pods"] == 1


async def test_failures_back_off_exponentially_with_full_jitter_capped(make_cache):
    refused = aiohttp.ClientConnectionError("Connection refused")
    api = ScriptedApi(
        list_node=[refused, status(500), refused, refused, refused, listing(NODE_LIST)],
        list_pod_for_all_namespaces=[listing(POD_LIST)],
    )
    sleeps = Sleeps()
    cache = make_cache(api, sleep=sleeps, rand=lambda: 0.5, backoff_base=1.0, backoff_cap=4.0)
    assert await cache.wait_synced(10)
    # rand() * min(cap, base * 2**(n-1)) for n = 1..5
    assert sleeps == [0.5, 1.0, 2.0, 2.0, 2.0]
    h = cache.health
    assert (h["consecutive_failures"], h["error"], h["healthy"]) == (0, None, True)


async def test_an_informer_answered_after_failures_wakes_the_others_from_their_backoff(make_cache):
    """The API server is back: the first informer that gets an answer cuts every other informer's backoff
    short, so they all come back together (DRA's three and the node and pod informers alike), not up to
    the 30 s cap apart.  Here the first backoff ends at once and every later one would never end."""
    naps = []

    async def sleep(delay):
        naps.append(delay)
        if len(naps) > 1:
            await asyncio.Event().wait()  # a backoff that never ends by itself

    api = ScriptedApi(
        list_node=[status(500, "InternalError"), listing(NODE_LIST)],
        list_pod_for_all_namespaces=[status(500, "InternalError"), listing(POD_LIST)],
    )
    cache = make_cache(api, sleep=sleep)
    assert await cache.wait_synced(5)  # the second informer was woken by the first one's answer
    assert len(naps) == 2


async def test_failure_is_visible_in_health_while_it_lasts(make_cache):
    api = ScriptedApi(list_node=[status(500, message="etcdserver: request timed out")])
    cache = make_cache(api, sleep=asyncio.Event().wait)  # stays in its first backoff
    await wait_for(lambda: cache.health["consecutive_failures"] == 1)
    h = cache.health
    assert h["healthy"] is False and h["synced"] is False
    assert "500" in h["error"] and "etcdserver: request timed out" in h["error"]
    assert cache.snapshot().healthy is False


async def test_watch_resumes_after_a_normal_close_and_bookmarks_advance_it(make_cache):
    clock = [0.0]
    api = ScriptedApi(
        list_node=[
            listing(NODE_LIST, rv="100"),
            watching(
                {"type": "MODIFIED", "object": {**a100("n1", unschedulable=True),
                                                "metadata": {**a100("n1")["metadata"], "resourceVersion": "105"}}},
                {"type": "BOOKMARK", "object": {"kind": "Node", "metadata": {"resourceVersion": "150"}}},
            ),
        ],
        list_pod_for_all_namespaces=[listing(POD_LIST)],
    )
    cache = make_cache(api, clock=lambda: clock[0])
    assert await cache.wait_synced(10)
    await wait_for(lambda: len(api.watch_calls("list_node")) == 2, what="second watch")
    assert [w["resource_version"] for w in api.watch_calls("list_node")] == ["100", "150"]
    assert len(api.list_calls("list_node")) == 1  # no re-list
    assert cache.snapshot().pool(A100).nodes == 1  # n1 cordoned
    assert cache.health["watch_restarts"] >= 1 and cache.health["relists"] == 0


async def test_the_snapshot_counts_every_nodes_taints_as_the_watch_moves_them(make_cache):
    sku = {"key": "sku", "value": "gpu", "effect": "NoSchedule"}
    control = {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}
    tainted = node("cpu-2", taints=[sku])
    api = ScriptedApi(
        list_node=[
            listing([*NODE_LIST, node("cp-0", taints=[control]), tainted], rv="100"),
            watching(
                {"type": "MODIFIED", "object": {**a100("n1", unschedulable=True),
                                                "metadata": {**a100("n1")["metadata"], "resourceVersion": "105"}}},
                {"type": "DELETED", "object": {**tainted, "metadata": {**tainted["metadata"], "resourceVersion": "106"}}},
            ),
        ],
        list_pod_for_all_namespaces=[listing(POD_LIST)],
    )
    cache = make_cache(api)
    assert await cache.wait_synced(10)
    await wait_for(lambda: len(api.watch_calls("list_node")) == 2, what="the watch's events")
    control_plane = Taint("node-role.kubernetes.io/control-plane", None, "NoSchedule")
    assert cache.snapshot().node_taints == ((NodeTaints(False, (control_plane,)), 1), (NodeTaints(True, ()), 1))


@pytest.mark.parametrize("how", ["error-event", "http-410"])
async def test_relist_only_after_410(make_cache, how):
    gone = (
        watching({"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired",
                                              "message": "too old resource version: 100 (200)"}})
        if how == "error-event"
        else status(410, "Expired", "too old resource version")
    )
    api = ScriptedApi(
        list_node=[listing(NODE_LIST, rv="100"), gone, listing([a100("n1")], rv="300")],
        list_pod_for_all_namespaces=[listing(POD_LIST)],
    )
    sleeps = Sleeps()
    cache = make_cache(api, sleep=sleeps)
    await wait_for(lambda: len(api.watch_calls("list_node")) == 2, what="watch after re-list")
    assert len(api.list_calls("list_node")) == 2
    assert api.watch_calls("list_node")[1]["resource_version"] == "300"
    assert sleeps == []  # a re-list is not a failure: no backoff
    # n2 vanished while we were away: the re-list dropped it
    assert cache.snapshot().pool(A100).nodes == 1
    assert cache.health["relists"] == 1


async def test_stuck_watch_is_restarted_after_a_fresh_list(make_cache):
    """A watch that went silent may have missed anything: the informer lists afresh and watches
    from that list's resourceVersion (a resume from the old one would trust the stalled stream)."""
    api = ScriptedApi(
        list_node=[listing(NODE_LIST, rv="100"), watching(silent=True), listing(NODE_LIST, rv="170")],
        list_pod_for_all_namespaces=[listing(POD_LIST)],
    )
    cache = make_cache(api, stall_timeout=0.2)
    await wait_for(lambda: len(api.watch_calls("list_node")) == 2, what="watch restart")
    assert len(api.list_calls("list_node")) == 2
    assert api.watch_calls("list_node")[1]["resource_version"] == "170"
    assert cache.health["informers"]["nodes"]["stuck_watches"] == 1
    assert cache.health["informers"]["nodes"]["stalled"] is True  # until that watch delivers


async def test_forbidden_says_which_cluster_role_rules_are_missing(make_cache):
    msg = 'nodes is forbidden: User "system:serviceaccount:jhub:hub" cannot list resource "nodes" at the cluster scope'
    api = ScriptedApi(
        list_node=[status(403, "Forbidden", msg)],
        list_pod_for_all_namespaces=[status(403, "Forbidden", "pods is forbidden")],
    )
    config = CapacityConfig(declared_pools=({"resource": "nvidia.com/gpu", "product": "NVIDIA-L4",
                                             "gpus_per_node": 1, "max_nodes": 3, "minutes": 5},))
    cache = make_cache(api, config, sleep=asyncio.Event().wait)
    assert await cache.wait_synced(10) is False  # returns early: waiting longer would not help
    await wait_for(lambda: cache.health["informers"]["pods"]["forbidden"], what="pods forbidden")
    snap = cache.snapshot()
    assert (snap.synced, snap.healthy) == (False, False)
    assert "nodes: list, watch" in snap.error and "pods: list, watch" in snap.error
    assert "ClusterRole" in snap.error and "cluster scope" in snap.error
    # the admin's declared pools are still served
    assert [p.product for p in snap.pools] == ["NVIDIA-L4"]


async def test_reservation_counts_until_the_watch_shows_the_pod(make_cache):
    release = asyncio.Event()
    bound = pod("spawn", 8, "n2")
    bound["metadata"]["resourceVersion"] = "130"
    api = ScriptedApi(
        list_node=[listing(NODE_LIST)],
        list_pod_for_all_namespaces=[
            listing(POD_LIST, rv="120"),
            _Resp(chunks=[release, ]),
            watching({"type": "ADDED", "object": bound}),
        ],
    )
    clock = [1000.0]
    cache = make_cache(api, clock=lambda: clock[0])
    assert await cache.wait_synced(10)
    cache.reserve("jhub/spawn", A100, 8)
    assert cache.snapshot().pool(A100).free == 5
    release.set()  # the first watch ends; the next one delivers the bound pod
    await wait_for(lambda: cache.health["reservations"] == 0, what="reservation released by the watch")
    assert cache.snapshot().pool(A100).free == 5  # now counted as used, not twice
    # ttl
    cache.reserve("jhub/other", A100, 2)
    assert cache.snapshot().pool(A100).free == 3
    clock[0] += cache.config.reservation_ttl
    assert cache.snapshot().pool(A100).free == 5


async def test_snapshot_with_max_age_keeps_its_counts_that_long_and_health_current(make_cache):
    assert CapacityCache(CapacityConfig()).held_age() is None  # nothing held before a page asks
    api = ScriptedApi(list_node=[listing(NODE_LIST)], list_pod_for_all_namespaces=[listing(POD_LIST, rv="120")])
    clock = [1000.0]
    cache = make_cache(api, clock=lambda: clock[0])
    assert await cache.wait_synced(10)
    page = cache.snapshot(max_age=2)
    assert page.pool(A100).free == 13
    cache.reserve("jhub/spawn", A100, 4)
    # a spawn sees the reservation at once; the page keeps its counts (the same pools) for 2 s
    assert cache.snapshot().pool(A100).free == 9
    clock[0] += 2
    held = cache.snapshot(max_age=2)
    assert held.pools is page.pools and held.generation == page.generation
    assert held.age_seconds == 2.0  # the figures' age is always current
    clock[0] += 0.5
    later = cache.snapshot(max_age=2)
    assert later.pools is not page.pools and later.pool(A100).free == 9
    # renew: counted anew now, and held from now on
    cache.release("jhub/spawn")
    clock[0] += 1
    assert cache.held_age() == 1.0
    renewed = cache.snapshot(max_age=2, renew=True)
    assert renewed.pool(A100).free == 13 and cache.held_age() == 0.0
    assert cache.snapshot(max_age=2).pools is renewed.pools


def test_reserve_needs_an_owner_with_namespace():
    cache = CapacityCache(CapacityConfig())
    with pytest.raises(ValueError, match="namespace"):
        cache.reserve("spawn", A100, 1)


async def test_shared_is_one_per_loop_and_needs_no_api_to_answer():
    api = ScriptedApi()
    try:
        c1 = CapacityCache.shared(CapacityConfig(), api_factory=lambda: api)
        c2 = CapacityCache.shared(CapacityConfig(reservation_ttl=5), api_factory=lambda: api)
        assert c1 is c2
        expected = {"list_node", "list_pod_for_all_namespaces", "get_api_resources"}
        await wait_for(lambda: {m for m, _ in api.calls} == expected, what="both informers listing, DRA discovery")
        before = len(api.calls)
        for _ in range(100):
            c1.snapshot()
        assert len(api.calls) == before
    finally:
        await CapacityCache.reset_shared()


def test_shared_needs_a_running_loop():
    with pytest.raises(RuntimeError, match="running event loop"):
        CapacityCache.shared(CapacityConfig())


# ---------------------------------------------------------------------------
# integration: kube-apiserver through the fault proxy, with kubernetes_asyncio


@pytest.fixture
async def real(control_plane):
    """Nodes n1, n2 (A100) and cpu-1; pods a (3 GPUs on n1) and web (on cpu-1); DRA off: these tests
    count the node and pod informers' requests (DRA: test_dra_source.py)."""
    from tests.builders.realapi import NAMESPACE, proxied

    async with proxied(control_plane) as c:
        for obj in (a100("n1"), a100("n2"), node("cpu-1")):
            await c.create("nodes", obj)
        await c.create("pods", pod("a", 3, "n1"), NAMESPACE)
        await c.create("pods", pod("web", 0, "cpu-1"), NAMESPACE)
        c.proxy.reset_counts()
        yield c


NO_DRA = CapacityConfig(dra_drivers=())


def free(cache):
    p = cache.snapshot().pool(A100)
    return None if p is None else (p.nodes, p.free)


def watching_both(real):
    return real.proxy.counts("watch", "nodes") >= 1 and real.proxy.counts("watch", "pods") >= 1


@pytest.mark.integration
async def test_real_sync_and_incremental_updates(real):
    cache = real.make_cache(NO_DRA, page_size=1)
    assert await cache.wait_synced(10)
    assert free(cache) == (2, 13)
    assert real.proxy.counts("list", "nodes") == 3  # paged: 3 nodes, limit=1
    await real.create("pods", pod("b", 8, "n2"), "jhub")
    await wait_for(lambda: free(cache) == (2, 5), what="new pod counted")
    await real.patch("nodes", "n1", {"spec": {"unschedulable": True}})
    await wait_for(lambda: free(cache) == (1, 0), what="cordoned node dropped")
    await real.delete("pods", "b", "jhub")
    await wait_for(lambda: free(cache) == (1, 8), what="deleted pod released")
    assert cache.snapshot().healthy


@pytest.mark.integration
async def test_real_resume_after_a_normal_close_without_relist(real):
    cache = real.make_cache(NO_DRA)
    assert await cache.wait_synced(10)
    await wait_for(lambda: watching_both(real), what="both watches open")
    await real.create("pods", pod("b", 1, "n2"), "jhub")
    await wait_for(lambda: free(cache) == (2, 12))
    watches_before = real.proxy.counts("watch", "pods")
    assert real.proxy.close_watches() == 2
    # written while no watch is open: the resumed watch must still deliver it
    await real.create("pods", pod("c", 2, "n2"), "jhub")
    await wait_for(lambda: free(cache) == (2, 10), what="change made between watches")
    assert real.proxy.counts("watch", "pods") > watches_before
    assert real.proxy.counts("list", "pods") == 1 and real.proxy.counts("list", "nodes") == 1
    assert cache.health["relists"] == 0


@pytest.mark.integration
async def test_real_bookmarks_advance_the_resource_version(real):
    """Writes to other kinds only: kube-apiserver's watch bookmarks (about one a minute) tell the node
    watch the newer resourceVersion, and a watch resumed from it needs no re-list."""
    cache = real.make_cache(NO_DRA)
    assert await cache.wait_synced(10)
    for i in range(3):
        made = await real.create("configmaps", {"metadata": {"name": f"cm{i}"}}, "jhub")
    target = int(made["metadata"]["resourceVersion"])
    await wait_for(lambda: int(cache.health["informers"]["nodes"]["resource_version"] or 0) >= target,
                   timeout=90, what="a bookmark")
    real.proxy.close_watches()
    await wait_for(lambda: real.proxy.counts("watch", "nodes") >= 2, what="node watch resumed")
    assert real.proxy.counts("list", "nodes") == 1


@pytest.mark.integration
async def test_real_relists_after_410(real):
    cache = real.make_cache(NO_DRA)
    assert await cache.wait_synced(10)
    await wait_for(lambda: watching_both(real))
    real.proxy.fail(410, 1, verb="watch", resource="nodes")
    real.proxy.close_watches()
    await real.delete("nodes", "n2")  # must disappear through the re-list or the watch
    await wait_for(lambda: real.proxy.counts("list", "nodes") == 2, what="re-list")
    await wait_for(lambda: free(cache) == (1, 5))
    assert cache.health["relists"] == 1
    assert real.proxy.counts("list", "pods") == 1  # the pod informer just resumed


@pytest.mark.integration
async def test_real_backs_off_after_500s(real):
    sleeps = Sleeps()
    real.proxy.fail(500, 3, verb="list", resource="pods")
    cache = real.make_cache(NO_DRA, sleep=sleeps, rand=lambda: 0.5, backoff_base=1.0, backoff_cap=30.0)
    assert await cache.wait_synced(10)
    assert sleeps == [0.5, 1.0, 2.0]
    assert real.proxy.counts("list", "pods") == 4  # three answered 500, the fourth listed
    assert cache.health["consecutive_failures"] == 0 and cache.snapshot().healthy


@pytest.mark.integration
async def test_real_honours_retry_after_on_429(real):
    sleeps = Sleeps()
    real.proxy.fail(429, 1, verb="list", resource="nodes", retry_after=7)
    cache = real.make_cache(NO_DRA, sleep=sleeps, rand=lambda: 0.5, backoff_base=1.0, backoff_cap=30.0)
    assert await cache.wait_synced(10)
    assert sleeps == [7.0]  # the server's Retry-After, not the 0.5 s of the first backoff step


@pytest.mark.integration
async def test_real_recovers_after_refused_connections(real):
    cache = real.make_cache(NO_DRA)
    assert await cache.wait_synced(10)
    await wait_for(lambda: watching_both(real))
    # the API server goes away (its connections die; new ones are refused) ...
    port = real.restart_proxy()
    await wait_for(lambda: cache.health["consecutive_failures"] >= 2, what="failures while refused")
    snap = cache.snapshot()
    assert snap.healthy is False and snap.error
    assert free(cache) == (2, 13)  # the last known state is still served, marked unhealthy
    # ... and comes back on the same address, with a change made meanwhile
    await real.create("pods", pod("b", 1, "n2"), "jhub")
    real.start_proxy(port)
    await wait_for(lambda: free(cache) == (2, 12), what="recovered")
    await wait_for(lambda: cache.snapshot().healthy, what="healthy again")
    assert cache.health["relists"] == 0
    assert real.proxy.counts("list") == 0  # resumed from the last resourceVersion


@pytest.mark.integration
async def test_real_stuck_watch_is_restarted(real):
    cache = real.make_cache(NO_DRA, stall_timeout=0.3)
    assert await cache.wait_synced(10)
    await wait_for(lambda: watching_both(real))
    real.proxy.stall(5, verb="watch", resource="nodes", count=1)  # the next node watch hangs
    real.proxy.close_watches()
    await wait_for(lambda: cache.health["informers"]["nodes"]["stuck_watches"] >= 1, what="stuck detected")
    await real.patch("nodes", "n2", {"spec": {"unschedulable": True}})
    await wait_for(lambda: free(cache) == (1, 5), what="watch working again")
    assert real.proxy.counts("list", "nodes") >= 2  # a stuck watch is followed by a fresh list


@pytest.mark.integration
async def test_real_silent_watch_stream_is_restarted(real):
    """kube-apiserver sends a watch bookmark about once a minute: a node watch with nothing to say for
    longer than the stall timeout is taken for stuck, restarted after a fresh list."""
    cache = real.make_cache(NO_DRA, stall_timeout=0.3)
    assert await cache.wait_synced(10)
    await wait_for(lambda: cache.health["informers"]["nodes"]["stuck_watches"] >= 1, what="silence detected")
    await wait_for(lambda: real.proxy.counts("watch", "nodes") >= 2, what="watch restarted")
    assert real.proxy.counts("list", "nodes") >= 2  # after a fresh list
    await real.create("pods", pod("b", 2, "n2"), "jhub")
    await wait_for(lambda: free(cache) == (2, 11), what="events still flow")


@pytest.mark.integration
async def test_http_403_names_the_missing_cluster_role_rules(real):
    """The hub's ServiceAccount without the ClusterRole: kube-apiserver's RBAC answers 403 to the
    cluster-wide lists; the snapshot says which rules are missing."""
    cache = real.make_cache(NO_DRA, token=await real.token("hub-without-rules"))
    assert await cache.wait_synced(3) is False
    await wait_for(lambda: all(i["forbidden"] for i in cache.health["informers"].values()), what="forbidden")
    err = cache.snapshot().error
    assert "nodes: list, watch" in err and "pods: list, watch" in err
    assert "cannot list resource" in cache.health["informers"]["nodes"]["error"]
    assert not cache.snapshot().synced


# --- its own client: never the library's default configuration --------------------------------------------

KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://cluster.example:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: secret-token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


@pytest.mark.parametrize("overrides, host", [
    ({}, "https://cluster.example:6443"),
    ({"host": "https://proxy.example:8443"}, "https://proxy.example:8443"),  # KubeSpawner's k8s_api_host
], ids=["kubeconfig", "k8s_api_host"])
async def test_the_default_client_reads_its_own_configuration(tmp_path, monkeypatch, overrides, host):
    """A hub config that built a kubernetes_asyncio model object left a blank default configuration
    (no host) behind, as Zero to JupyterHub's does: the cache's client is configured from the kubeconfig
    (out of a cluster) all the same, and the library's default is left as it was."""
    from kubernetes_asyncio import config as kube_config
    from kubernetes_asyncio.client import Configuration, V1Container

    from gpuspawner.capacity.cache import _default_api

    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    monkeypatch.setenv("KUBECONFIG", str(path))
    monkeypatch.setattr(kube_config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(Configuration, "_default", None)
    V1Container(name="block-cloud-metadata")
    blank = Configuration._default
    assert blank is not None and blank.host == ""
    api = await _default_api(**overrides)
    try:
        conf = api.api_client.configuration
        assert conf.host == host
        assert conf.api_key.get("BearerToken") == "Bearer secret-token"  # the kubeconfig's credentials
        assert Configuration._default is blank and blank.host == ""  # the library's default untouched
    finally:
        await api.api_client.close()


async def test_a_burst_of_watch_events_in_one_chunk_is_applied_in_slices(make_cache):
    """Events that arrived while the hub's loop was busy come in one read: the loop's other tasks
    run while they are applied, as they do between a list page's slices."""
    burst = 3000
    events = [{"type": "ADDED", "object": pod(f"p{i}", 1, "n1")} for i in range(burst)]
    chunk = b"".join((json.dumps(e) + "\n").encode() for e in events)
    api = ScriptedApi(
        list_node=[listing(NODE_LIST)],
        list_pod_for_all_namespaces=[listing(POD_LIST, rv="120"), _Resp(chunks=[chunk])],
    )
    cache = make_cache(api)
    assert await cache.wait_synced(10)
    pods = cache._informers["pods"]
    seen_midway = []

    async def another_task():
        while pods.events < burst:
            if 0 < pods.events:
                seen_midway.append(pods.events)
            await asyncio.sleep(0)

    other = asyncio.create_task(another_task())
    await wait_for(lambda: pods.events >= burst, what="the burst applied")
    await other
    assert seen_midway, "the burst was applied in one step of the loop"
