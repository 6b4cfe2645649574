"""gpuspawner.capacity.gc_policy and how the capacity cache uses it: the cyclic collector is
paused while a list page is parsed and applied, and what the process holds is frozen once
after the first sync (docs/capacity.md, "Garbage collection")."""

from __future__ import annotations

import gc

import pytest

from gpuspawner.capacity import gc_policy
from gpuspawner.capacity.config import CapacityConfig

from .test_cache import NODE_LIST, POD_LIST, ScriptedApi, listing, make_cache  # noqa: F401 (a fixture)


@pytest.fixture(autouse=True)
def restore_gc():
    was = gc.isenabled()
    yield
    gc.unfreeze()  # what a test froze goes back to the collector
    (gc.enable if was else gc.disable)()


def test_paused_disables_and_restores_collection():
    with gc_policy.paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_paused_nests_across_overlapping_blocks():
    outer, inner = gc_policy.paused(), gc_policy.paused()
    outer.__enter__()
    inner.__enter__()
    outer.__exit__(None, None, None)  # the nodes informer's page is done, the pods' is not
    assert not gc.isenabled()
    inner.__exit__(None, None, None)
    assert gc.isenabled()


def test_paused_never_enables_a_collector_someone_else_disabled():
    gc.disable()
    with gc_policy.paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_paused_restores_on_an_exception():
    with pytest.raises(ZeroDivisionError), gc_policy.paused():
        1 / 0
    assert gc.isenabled()


def test_freeze_moves_what_is_alive_out_of_reach():
    gc.unfreeze()
    keep = [{"a": [i]} for i in range(1000)]  # tracked containers
    gc_policy.freeze("test")
    assert gc.get_freeze_count() >= 1000
    assert all(gc.is_tracked(x) for x in keep[:3])  # still tracked, in the permanent generation


async def test_cache_pauses_collection_while_a_page_is_applied(make_cache, monkeypatch):
    import gpuspawner.capacity.cache as cache_module

    seen = []
    real_apply = cache_module._Informer._apply

    def apply(self, obj):
        seen.append(gc.isenabled())
        return real_apply(self, obj)

    monkeypatch.setattr(cache_module._Informer, "_apply", apply)
    api = ScriptedApi(list_node=[listing(NODE_LIST[:1], cont="t1"), listing(NODE_LIST[1:])],
                      list_pod_for_all_namespaces=[listing(POD_LIST)])
    cache = make_cache(api, page_size=1)
    assert await cache.wait_synced(10)
    assert seen and not any(seen)  # never during a page
    assert gc.isenabled()  # and back on between pages and after


@pytest.mark.parametrize("freeze", [True, False])
async def test_cache_freezes_when_it_starts_and_once_after_its_first_sync(make_cache, monkeypatch, freeze):
    import gpuspawner.capacity.cache as cache_module

    frozen = []
    monkeypatch.setattr(cache_module.gc_policy, "freeze", lambda reason: frozen.append(reason))
    api = ScriptedApi(list_node=[listing(NODE_LIST)], list_pod_for_all_namespaces=[listing(POD_LIST)])
    cache = make_cache(api, CapacityConfig(), gc_freeze=freeze)
    assert frozen == (["the GPU capacity cache starts"] if freeze else [])
    assert await cache.wait_synced(10)
    cache._first_sync_done()  # once per cache, however often it is called
    assert frozen == (["the GPU capacity cache starts", "the GPU capacity cache has read the cluster"]
                      if freeze else [])


def test_defer_full_stops_full_collections_only_until_allowed():
    before = gc.get_threshold()
    gc_policy.defer_full()
    try:
        young0, young1, oldest = gc.get_threshold()
        assert (young0, young1) == before[:2] and oldest > 10**9  # the young generations still collected
        gc_policy.defer_full()  # a second deferral keeps the first one's thresholds to restore
    finally:
        gc_policy.allow_full()
    assert gc.get_threshold() == before
    gc_policy.allow_full()  # nothing deferred: nothing changes
    assert gc.get_threshold() == before


@pytest.mark.parametrize("synced", [True, False], ids=["after-the-first-sync", "stopped-before-it"])
async def test_cache_defers_full_collections_from_its_start_to_its_first_syncs_freeze(make_cache, synced):
    before = gc.get_threshold()
    lists = [listing(NODE_LIST)] if synced else []  # no node list: the sync never ends
    api = ScriptedApi(list_node=lists, list_pod_for_all_namespaces=[listing(POD_LIST)])
    cache = make_cache(api, CapacityConfig(), gc_freeze=True)
    assert gc.get_threshold()[2] > 10**9
    if synced:
        assert await cache.wait_synced(10)
    else:
        await cache.stop()
    assert gc.get_threshold() == before
