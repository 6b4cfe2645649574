"""The garbage collector: dependents follow their owners by ownerReferences, as in a real cluster."""

from __future__ import annotations

import asyncio

import pytest

from gpuspawner.sim.errors import ApiError
from gpuspawner.sim.garbage_collector import GarbageCollector
from gpuspawner.sim.store import Store
from tests.builders.sim import owner_ref, pod


@pytest.fixture
async def gc():
    store = Store()
    store.create("namespaces", {"metadata": {"name": "hub"}})
    collector = GarbageCollector(store)
    await collector.start()
    yield collector
    await collector.stop()


def exists(store, plural, name, ns="hub"):
    try:
        return store.get(plural, name, ns)
    except ApiError as e:
        assert e.code == 404
        return None


async def until(check, timeout=5.0):
    for _ in range(int(timeout / 0.01)):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


def cm(name, *owners):
    meta = {"name": name, **({"ownerReferences": list(owners)} if owners else {})}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}


async def test_deleting_a_pod_removes_the_service_and_secret_it_owns(gc):
    """KubeSpawner's objects: a Service and a Secret owned by the pod (blockOwnerDeletion, no controller)."""
    s = gc.store
    owner = s.create("pods", pod("jupyter-alice"), "hub")
    ref = owner_ref(owner, block=True, controller=False)
    s.create("services", {"metadata": {"name": "jupyter-alice", "ownerReferences": [ref]},
                          "spec": {"ports": [{"port": 80}]}}, "hub")
    s.create("secrets", {"metadata": {"name": "jupyter-alice", "ownerReferences": [ref]}}, "hub")
    s.create("secrets", {"metadata": {"name": "unrelated"}}, "hub")
    s.delete("pods", "jupyter-alice", "hub")  # the default policy: Background
    await until(lambda: not exists(s, "services", "jupyter-alice") and not exists(s, "secrets", "jupyter-alice"))
    assert exists(s, "secrets", "unrelated")


async def test_background_deletion_cascades_through_generations(gc):
    s = gc.store
    a = s.create("configmaps", cm("a"), "hub")
    b = s.create("configmaps", cm("b", owner_ref(a)), "hub")
    s.create("configmaps", cm("c", owner_ref(b)), "hub")
    s.delete("configmaps", "a", "hub")
    await until(lambda: not exists(s, "configmaps", "b") and not exists(s, "configmaps", "c"))


async def test_foreground_deletes_blocking_dependents_before_the_owner(gc):
    s = gc.store
    owner = s.create("configmaps", cm("owner"), "hub")
    s.create("configmaps", cm("blocker", owner_ref(owner, block=True)), "hub")
    s.create("configmaps", cm("plain", owner_ref(owner)), "hub")
    held = s.create("configmaps", dict(cm("held", owner_ref(owner, block=True)),
                                       metadata={"name": "held", "finalizers": ["example.com/keep"],
                                                 "ownerReferences": [owner_ref(owner, block=True)]}), "hub")
    out = s.delete("configmaps", "owner", "hub", propagation_policy="Foreground")
    assert out["metadata"]["finalizers"] == ["foregroundDeletion"] and out["metadata"]["deletionTimestamp"]
    await until(lambda: not exists(s, "configmaps", "blocker") and not exists(s, "configmaps", "plain"))
    # a blocking dependent that cannot go yet keeps the owner
    await asyncio.sleep(0.2)
    assert exists(s, "configmaps", "owner")["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert exists(s, "configmaps", "held")["metadata"]["deletionTimestamp"]
    s.patch("configmaps", "held", {"metadata": {"finalizers": None}}, "application/merge-patch+json", "hub")
    await until(lambda: not exists(s, "configmaps", "owner"))
    assert held["metadata"]["uid"]


@pytest.mark.parametrize("options", [{"propagation_policy": "Orphan"}, {"orphan_dependents": True}],
                         ids=["orphan-policy", "legacy-orphanDependents"])
async def test_orphan_keeps_dependents_and_removes_their_reference(gc, options):
    s = gc.store
    owner = s.create("configmaps", cm("owner"), "hub")
    other = s.create("configmaps", cm("other"), "hub")
    s.create("configmaps", cm("dep", owner_ref(owner), owner_ref(other)), "hub")
    out = s.delete("configmaps", "owner", "hub", **options)
    assert out["kind"] == "Status" or "orphan" in out["metadata"].get("finalizers", [])
    await until(lambda: not exists(s, "configmaps", "owner"))
    dep = exists(s, "configmaps", "dep")
    assert [r["name"] for r in dep["metadata"]["ownerReferences"]] == ["other"]


async def test_a_dependent_with_a_live_owner_keeps_living_without_the_gone_one(gc):
    s = gc.store
    a = s.create("configmaps", cm("a"), "hub")
    b = s.create("configmaps", cm("b"), "hub")
    s.create("configmaps", cm("dep", owner_ref(a), owner_ref(b)), "hub")
    s.delete("configmaps", "a", "hub")
    await until(lambda: [r["name"] for r in (exists(s, "configmaps", "dep")["metadata"]["ownerReferences"])] == ["b"])


@pytest.mark.parametrize("ref", [
    {"apiVersion": "v1", "kind": "ConfigMap", "name": "ghost", "uid": "no-such-uid"},
    {"apiVersion": "v1", "kind": "ConfigMap", "name": "real", "uid": "another-uid"},  # same name, other uid
], ids=["owner-missing", "uid-mismatch"])
async def test_a_dependent_whose_owner_is_gone_is_deleted(gc, ref):
    s = gc.store
    s.create("configmaps", cm("real"), "hub")
    s.create("configmaps", cm("dep", ref), "hub")
    await until(lambda: not exists(s, "configmaps", "dep"))
    assert exists(s, "configmaps", "real")


async def test_owners_of_kinds_not_served_never_count_as_gone(gc):
    s = gc.store
    s.create("pods", pod("web-7d9f", owners=[{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f",
                                              "uid": "rs-uid", "controller": True}]), "hub")
    await asyncio.sleep(0.3)
    assert exists(s, "pods", "web-7d9f")


async def test_an_owner_in_another_namespace_is_reported_and_its_dependent_deleted(gc):
    s = gc.store
    s.create("namespaces", {"metadata": {"name": "other"}})
    owner = s.create("configmaps", cm("owner"), "other")
    s.create("configmaps", cm("dep", owner_ref(owner)), "hub")
    await until(lambda: not exists(s, "configmaps", "dep"))
    events = [e for e in s.list("events", "hub")["items"] if e["reason"] == "OwnerRefInvalidNamespace"]
    assert events and events[0]["type"] == "Warning"
    assert events[0]["message"] == (f"ownerRef [v1/ConfigMap, namespace: hub, name: owner, uid: "
                                    f"{owner['metadata']['uid']}] does not exist in namespace \"hub\"")
    assert events[0]["source"]["component"] == "garbage-collector-controller"


async def test_a_cluster_scoped_owner_of_namespaced_dependents(gc):
    s = gc.store
    node = s.create("nodes", {"metadata": {"name": "gpu-1"}, "status": {"allocatable": {"pods": "10"}}})
    s.create("configmaps", cm("node-info", owner_ref(node)), "hub")
    await asyncio.sleep(0.2)
    assert exists(s, "configmaps", "node-info")
    s.delete("nodes", "gpu-1")
    await until(lambda: not exists(s, "configmaps", "node-info"))


@pytest.mark.integration
async def test_kubespawners_stop_removes_the_service_and_secret_over_http():
    """The objects KubeSpawner makes (kubespawner.objects.make_owner_reference) and the delete its
    stop() sends (V1DeleteOptions with a grace period, through kubernetes_asyncio)."""
    from kubernetes_asyncio import client
    from kubespawner.objects import make_owner_reference

    from gpuspawner.sim.cluster import SimCluster
    from tests.builders.sim import node

    c = SimCluster(manifests=[node("cpu-1")], run_pods=False)
    await c.start()
    try:
        async with client.ApiClient(client.Configuration(host=c.url)) as api_client:
            api = client.CoreV1Api(api_client)
            made = await api.create_namespaced_pod("default", pod("jupyter-carol", node_name="cpu-1"))
            ref = api_client.sanitize_for_serialization(make_owner_reference(made.metadata.name, made.metadata.uid))
            await api.create_namespaced_secret("default", {"metadata": {"name": "jupyter-carol",
                                                                        "ownerReferences": [ref]},
                                                           "stringData": {"token": "t"}})
            await api.create_namespaced_service("default", {"metadata": {"name": "jupyter-carol",
                                                                         "ownerReferences": [ref]},
                                                            "spec": {"ports": [{"port": 8888}]}})
            await api.delete_namespaced_pod("jupyter-carol", "default",
                                            body=client.V1DeleteOptions(grace_period_seconds=1),
                                            grace_period_seconds=1)
            await until(lambda: not exists(c.store, "pods", "jupyter-carol", "default")
                        and not exists(c.store, "services", "jupyter-carol", "default")
                        and not exists(c.store, "secrets", "jupyter-carol", "default"))
    finally:
        await c.stop()
