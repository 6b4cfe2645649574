"""The capacity cache on a cluster that serves resource.k8s.io/v1: discovery, the DRA informers,
DRA pools beside device-plugin pools, and DRA trouble that never breaks the device-plugin path.
Scripted API (``test_cache.ScriptedApi``); then end to end on kube-apiserver (resource.k8s.io/v1) through the
fault proxy."""

from __future__ import annotations

import json

import pytest

from gpuspawner.capacity.model import pool_id

from tests.builders import pod
from tests.builders.dra import device_class, gpu_device, group_node, resource_claim, resource_slice
from tests.capacity.test_cache import A100
from tests.capacity.test_cache import (  # noqa: F401
    NODE_LIST, POD_LIST, ScriptedApi, _Resp, listing, make_cache, status, wait_for, watching,
)

DRA_A100 = pool_id("dra-a100", "NVIDIA A100-SXM4-80GB", "gpu.nvidia.com")
RESOURCES = {"kind": "APIResourceList", "groupVersion": "resource.k8s.io/v1", "resources": [
    {"name": n, "namespaced": n in ("resourceclaims", "resourceclaimtemplates")}
    for n in ("deviceclasses", "resourceclaims", "resourceclaimtemplates", "resourceslices")]}


def served():
    return _Resp(body=json.dumps(RESOURCES).encode())


def dra_api(*, slices=None, claims=None, classes=None, nodes=None, pods=None):
    """Scripts per list method (``slices``, ``claims``, ``classes``, ``pods``: lists of responses)."""
    return ScriptedApi(
        list_node=[listing(nodes if nodes is not None else NODE_LIST + [group_node("d1", "dra-a100"),
                                                                        group_node("d2", "dra-a100")])],
        list_pod_for_all_namespaces=pods if pods is not None else [listing(POD_LIST)],
        get_api_resources=[served()],
        list_resource_slice=slices if slices is not None else [listing([
            resource_slice("d1-gpus", "d1", [gpu_device(f"gpu-{i}") for i in range(4)]),
            resource_slice("d2-gpus", "d2", [gpu_device(f"gpu-{i}") for i in range(2)]),
        ], rv="200")],
        list_resource_claim_for_all_namespaces=claims if claims is not None else [listing([
            resource_claim("other-gpus", "research", devices=[("d1", "gpu-0")]),
        ], rv="210")],
        list_device_class=classes if classes is not None else [listing([
            device_class("gpu.nvidia.com", device_type="gpu"),
            device_class("mig.nvidia.com", device_type="mig"),
        ], rv="220")],
    )


async def test_dra_pools_beside_device_plugin_pools(make_cache):
    api = dra_api()
    cache = make_cache(api)
    assert await cache.wait_synced(10)
    snap = cache.snapshot()
    assert [p.id for p in snap.pools] == sorted([A100, DRA_A100])
    dra = snap.pool(DRA_A100)
    assert (dra.allocation, dra.resource, dra.nodes, dra.total, dra.free, dra.max_free_per_node) == (
        "dra", "gpu.nvidia.com", 2, 6, 5, 3)
    assert snap.pool(A100).allocation == "device-plugin"
    # the three informers list in pages and then watch, each from its own list's resourceVersion
    for method, rv in (("list_resource_slice", "200"), ("list_resource_claim_for_all_namespaces", "210"),
                       ("list_device_class", "220")):
        await wait_for(lambda m=method: api.watch_calls(m), what=f"{method} watch")
        (w,) = api.watch_calls(method)
        assert (w["resource_version"], w["allow_watch_bookmarks"]) == (rv, True)
    health = cache.health
    assert health["dra"]["api"] == "served" and health["dra"]["synced"]
    assert (health["dra"]["resource_slices"], health["dra"]["resource_claims"]) == (2, 1)
    assert health["healthy"] and health["error"] is None


async def test_watched_claims_move_dra_counts(make_cache):
    claim = resource_claim("ada-gpus", "jhub", devices=[("d2", "gpu-0"), ("d2", "gpu-1")], owner_pod="jupyter-ada")
    api = dra_api(claims=[
        listing([], rv="210"),
        watching({"type": "ADDED", "object": {**claim, "metadata": {**claim["metadata"], "resourceVersion": "211"}}}),
    ])
    cache = make_cache(api)
    assert await cache.wait_synced(10)
    await wait_for(lambda: cache.snapshot().pool(DRA_A100).free == 4, what="claim counted")
    assert cache.snapshot().pool(DRA_A100).max_free_per_node == 4


async def test_no_dra_pool_until_every_dra_informer_has_listed(make_cache):
    api = dra_api(classes=[])  # the DeviceClass list never answers
    cache = make_cache(api)
    await wait_for(lambda: cache.synced, what="device-plugin informers synced")
    await wait_for(lambda: cache.health["dra"]["informers"]["resourceslices"]["synced"], what="slices listed")
    assert cache.snapshot().pool(DRA_A100) is None
    assert cache.snapshot().pool(A100) is not None


async def test_dra_forbidden_keeps_the_device_plugin_path_and_names_the_rules(make_cache):
    forbidden = 'resourceslices.resource.k8s.io is forbidden: User "system:serviceaccount:jhub:hub" cannot list'
    api = dra_api(slices=[status(403, "Forbidden", forbidden)])
    cache = make_cache(api, sleep=__import__("asyncio").Event().wait)  # stays in its first backoff
    assert await cache.wait_synced(10)
    await wait_for(lambda: cache.health["dra"]["informers"]["resourceslices"]["forbidden"], what="forbidden")
    snap = cache.snapshot()
    assert snap.healthy and snap.error is None and snap.pool(A100) is not None
    assert snap.pool(DRA_A100) is None
    err = cache.health["dra"]["error"]
    assert 'apiGroups: ["resource.k8s.io"], resources: [resourceslices]' in err and "list" in err


async def test_a_cluster_without_dra_is_settled_at_once(make_cache):
    api = ScriptedApi(list_node=[listing(NODE_LIST)], list_pod_for_all_namespaces=[listing(POD_LIST)])
    cache = make_cache(api)
    assert await cache.wait_synced(10)
    assert cache.health["dra"]["api"] == "not served"
    assert not api.list_calls("list_resource_slice")


async def test_reservations_go_to_the_ledger_of_the_pool(make_cache):
    cache = make_cache(dra_api())
    assert await cache.wait_synced(10)
    cache.reserve("jhub/jupyter-ada", DRA_A100, 2)
    cache.reserve("jhub/jupyter-bob", A100, 1)
    snap = cache.snapshot()
    assert (snap.pool(DRA_A100).free, snap.pool(A100).free) == (3, 12)
    cache.release("jhub/jupyter-ada")
    assert cache.snapshot().pool(DRA_A100).free == 5


class _Gated:
    """A watch stream that sends its events once ``gate`` is set."""

    def __init__(self, gate, *events):
        self.gate = gate
        self.chunks = [(json.dumps(e) + "\n").encode() for e in events]

    async def readany(self):
        await self.gate.wait()
        return self.chunks.pop(0) if self.chunks else b""


async def test_a_pod_that_ends_or_goes_releases_its_dra_reservation(make_cache):
    import asyncio

    def event(kind, obj, rv):
        return {"type": kind, "object": {**obj, "metadata": {**obj["metadata"], "resourceVersion": rv}}}

    failed = pod("jupyter-bob", 0, None)
    failed["status"] = {"phase": "Failed"}
    gate, stream = asyncio.Event(), _Resp()
    stream.content = _Gated(gate, event("ADDED", pod("jupyter-ada", 0, None), "121"),
                            event("MODIFIED", failed, "122"),
                            event("DELETED", pod("jupyter-ada", 0, None), "123"))
    cache = make_cache(dra_api(pods=[listing(POD_LIST, rv="120"), stream]))
    assert await cache.wait_synced(10)
    cache.reserve("jhub/jupyter-ada", DRA_A100, 2)
    cache.reserve("jhub/jupyter-bob", DRA_A100, 1)
    assert cache.snapshot().pool(DRA_A100).free == 2
    gate.set()  # ada's pod appears (pending: still reserved), bob's fails, ada's is deleted
    await wait_for(lambda: cache.snapshot().pool(DRA_A100).free == 5, what="reservations released")


async def test_no_dra_drivers_turns_dra_off(make_cache):
    from gpuspawner.capacity.config import CapacityConfig

    api = dra_api()
    cache = make_cache(api, CapacityConfig(dra_drivers=()))
    assert await cache.wait_synced(10)
    assert cache.health["dra"]["api"].startswith("off")
    assert not [m for m, _ in api.calls if m in ("get_api_resources", "list_resource_slice")]
    assert cache.snapshot().pool(DRA_A100) is None


# ---------------------------------------------------------------------------
# integration: kube-apiserver (resource.k8s.io/v1) through the fault proxy, with kubernetes_asyncio


@pytest.fixture
async def dra_real(control_plane):
    """An A100 device-plugin node n1; DRA nodes d1 (4 GPUs) and d2 (2) with their slices; NVIDIA's classes."""
    from tests.builders.realapi import proxied

    from .test_cache import a100

    async with proxied(control_plane) as c:
        for obj in (a100("n1"), group_node("d1", "dra-a100"), group_node("d2", "dra-a100")):
            await c.create("nodes", obj)
        for obj in (device_class("gpu.nvidia.com", device_type="gpu"), device_class("mig.nvidia.com", device_type="mig")):
            await c.create("deviceclasses", obj)
        await c.create("resourceslices", resource_slice("d1-gpus", "d1", [gpu_device(f"gpu-{i}") for i in range(4)]))
        await c.create("resourceslices", resource_slice("d2-gpus", "d2", [gpu_device(f"gpu-{i}") for i in range(2)]))
        c.proxy.reset_counts()
        yield c


def dra_counts(cache):
    p = cache.snapshot().pool(DRA_A100)
    return None if p is None else (p.nodes, p.total, p.free)


async def allocate(real, name, devices):
    """A claim, then its allocation written through the status subresource (as the scheduler does)."""
    await real.create("resourceclaims", resource_claim(name, devices=devices), "jhub", status=True)


@pytest.mark.integration
async def test_real_dra_pools_and_claims_live(dra_real):
    cache = dra_real.make_cache()
    assert await cache.wait_synced(10)
    assert dra_counts(cache) == (2, 6, 6)
    assert cache.snapshot().pool(A100).allocation == "device-plugin"
    await allocate(dra_real, "ada-gpus", [("d1", "gpu-0"), ("d1", "gpu-1")])
    await wait_for(lambda: dra_counts(cache) == (2, 6, 4), what="allocated claim counted")
    await dra_real.delete("resourceclaims", "ada-gpus", "jhub")
    await wait_for(lambda: dra_counts(cache) == (2, 6, 6), what="deleted claim gives its devices back")
    assert dra_real.proxy.counts("list", "resourceclaims") == 1  # watched, never re-listed


@pytest.mark.integration
async def test_real_new_generation_is_used_only_when_complete(dra_real):
    cache = dra_real.make_cache()
    assert await cache.wait_synced(10)
    # the driver republishes d2's pool as generation 2 in two slices; the old slice stays meanwhile
    await dra_real.create("resourceslices", resource_slice("d2-gen2-a", "d2", [gpu_device("gpu-0")], pool="d2",
                                                           generation=2, count=2))
    await wait_for(lambda: dra_counts(cache) == (1, 4, 4), what="d2's pool untrusted while incomplete")
    assert cache.health["dra"]["incomplete_pools"] == ["gpu.nvidia.com/d2"]
    await dra_real.create("resourceslices", resource_slice("d2-gen2-b", "d2", [gpu_device("gpu-1"), gpu_device("gpu-2")],
                                                           pool="d2", generation=2, count=2))
    await wait_for(lambda: dra_counts(cache) == (2, 7, 7), what="the complete new generation counted")


@pytest.mark.integration
async def test_real_dra_forbidden_leaves_device_plugin_pools(dra_real):
    dra_real.proxy.fail(403, 1000, verb="list", resource="resourceslices")
    cache = dra_real.make_cache()
    assert await cache.wait_synced(10)
    await wait_for(lambda: cache.health["dra"]["informers"]["resourceslices"]["forbidden"], what="forbidden")
    snap = cache.snapshot()
    assert snap.healthy and snap.error is None and snap.pool(A100) is not None
    assert snap.pool(DRA_A100) is None
    assert "resourceslices" in cache.health["dra"]["error"]


@pytest.mark.integration
async def test_real_stalled_dra_watches_take_dra_pools_off_until_one_delivers(dra_real):
    """DRA watches stalled while their lists answer: the DRA pools go off within the window, stay off
    through re-lists, and come back only once the DRA watches deliver again (kube-apiserver's bookmarks
    come about once a minute: here changes to each DRA kind deliver); the device-plugin pools stay."""
    import asyncio

    from tests.builders.realapi import ticking

    window = 1.0
    await dra_real.create("resourceclaims", resource_claim("tick"), "jhub")

    cache = dra_real.make_cache(stall_timeout=window)
    assert await cache.wait_synced(10)
    assert dra_counts(cache) == (2, 6, 6)
    for kind in ("resourceslices", "resourceclaims", "deviceclasses"):
        dra_real.proxy.stall(3600, verb="watch", resource=kind)
    dra_real.proxy.close_watches()
    await wait_for(lambda: dra_counts(cache) is None, timeout=window + 3, what="DRA pools off within the window")
    lists = dra_real.proxy.counts("list", "resourceslices")
    seen = []
    for _ in range(40):  # two windows of re-lists (each stuck DRA watch is re-listed), the pools stay off
        await asyncio.sleep(0.05)
        seen.append(dra_counts(cache))
    assert dra_real.proxy.counts("list", "resourceslices") > lists
    assert seen == [None] * len(seen)
    assert cache.snapshot().pool(A100) is not None  # the device-plugin path is not touched
    dra_real.proxy.clear()
    async with ticking(dra_real, [("deviceclasses", "mig.nvidia.com", None), ("resourceclaims", "tick", "jhub"),
                                  ("resourceslices", "d1-gpus", None)]):
        await wait_for(lambda: dra_counts(cache) == (2, 6, 6)
                       and not any(i["stalled"] for i in cache.health["dra"]["informers"].values()),
                       timeout=10, what="DRA pools back after a delivery")


async def test_a_failing_dra_watch_takes_dra_pools_off_until_it_works_again(make_cache):
    import asyncio

    resume = asyncio.Event()

    async def backoff(delay):  # the informer's backoff ends when the test says so
        await resume.wait()

    stream = _Resp()
    stream.content = _Gated(asyncio.Event())  # the watch after the failure: open, silent
    api = dra_api(claims=[listing([], rv="210"), status(500, message="etcd leader changed"), stream])
    cache = make_cache(api, sleep=backoff)
    assert await cache.wait_synced(10)
    await wait_for(lambda: cache.health["dra"]["informers"]["resourceclaims"]["consecutive_failures"] == 1,
                   what="the claim watch failed")
    assert cache.snapshot().pool(DRA_A100) is None and not cache.health["dra"]["healthy"]
    assert cache.snapshot().healthy and cache.snapshot().pool(A100) is not None
    resume.set()
    await wait_for(lambda: api.watch_calls("list_resource_claim_for_all_namespaces")[1:], what="watch again")
    await wait_for(lambda: cache.health["dra"]["healthy"], what="DRA healthy again")
    assert cache.snapshot().pool(DRA_A100).free == 6  # no claim in this cluster
