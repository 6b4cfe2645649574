"""Namespace deletion: Terminating, the content deleted, the real conditions, then the namespace gone."""

from __future__ import annotations

import asyncio

import pytest

from gpuspawner.sim.errors import ApiError
from gpuspawner.sim.namespace_controller import NamespaceController, deletion_conditions, updated_conditions
from gpuspawner.sim.store import Store
from tests.builders.sim import pod


@pytest.fixture
async def controller():
    store = Store()
    store.create("namespaces", {"metadata": {"name": "hub"}})
    c = NamespaceController(store, max_wait=0.05)
    await c.start()
    yield c
    await c.stop()


def namespace(store, name="hub"):
    try:
        return store.get("namespaces", name)
    except ApiError as e:
        assert e.code == 404
        return None


async def until(check, timeout=5.0):
    for _ in range(int(timeout / 0.01)):
        value = check()
        if value:
            return value
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


def conditions(ns):
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in ns["status"].get("conditions", [])}


async def test_the_content_goes_then_the_namespace(controller):
    s = controller.store
    s.create("pods", pod("p"), "hub")
    s.create("configmaps", {"metadata": {"name": "c"}}, "hub")
    s.delete("namespaces", "hub")
    await until(lambda: namespace(s) is None)
    assert s.list("configmaps", "hub")["items"] == [] and s.list("pods", "hub")["items"] == []
    assert s.list("serviceaccounts", "hub")["items"] == []


async def test_content_held_by_a_finalizer_keeps_the_namespace_terminating_with_the_real_conditions(controller):
    s = controller.store
    s.create("configmaps", {"metadata": {"name": "held", "finalizers": ["example.com/keep"]}}, "hub")
    s.delete("namespaces", "hub")
    ns = await until(lambda: (n := namespace(s)) and len(n["status"].get("conditions", [])) == 5 and n)
    assert ns["status"]["phase"] == "Terminating"
    assert conditions(ns) == {
        "NamespaceDeletionDiscoveryFailure": ("False", "ResourcesDiscovered", "All resources successfully discovered"),
        "NamespaceDeletionGroupVersionParsingFailure": ("False", "ParsedGroupVersions",
                                                        "All legacy kube types successfully parsed"),
        "NamespaceDeletionContentFailure": ("False", "ContentDeleted",
                                            "All content successfully deleted, may be waiting on finalization"),
        "NamespaceContentRemaining": ("True", "SomeResourcesRemain",
                                      "Some resources are remaining: configmaps. has 1 resource instances"),
        "NamespaceFinalizersRemaining": ("True", "SomeFinalizersRemain",
                                         "Some content in the namespace has finalizers remaining: example.com/keep "
                                         "in 1 resource instances"),
    }
    s.patch("configmaps", "held", {"metadata": {"finalizers": None}}, "application/merge-patch+json", "hub")
    await until(lambda: namespace(s) is None)


async def test_a_namespace_created_without_the_kubernetes_finalizer_goes_at_once(controller):
    s = controller.store
    s.create("namespaces", {"metadata": {"name": "bare"}, "spec": {"finalizers": []}})
    s.delete("namespaces", "bare")
    await until(lambda: namespace(s, "bare") is None)


def test_conditions_name_what_remains_sorted():
    out = deletion_conditions({"pods.": 2, "leases.coordination.k8s.io": 1}, {"b/f": 1, "a/f": 2},
                              ["unexpected items still remain in namespace: hub for gvr: /v1, Resource=pods"])
    assert out["NamespaceContentRemaining"][2] == (
        "Some resources are remaining: leases.coordination.k8s.io has 1 resource instances, "
        "pods. has 2 resource instances")
    assert out["NamespaceFinalizersRemaining"][2] == (
        "Some content in the namespace has finalizers remaining: a/f in 2 resource instances, b/f in 1 resource "
        "instances")
    assert out["NamespaceDeletionContentFailure"] == (
        "True", "ContentDeletionFailed", "Failed to delete all resource types, 1 remaining: unexpected items still "
        "remain in namespace: hub for gvr: /v1, Resource=pods")


def test_transition_time_moves_only_when_the_status_does():
    first = updated_conditions([], deletion_conditions({"pods.": 1}, {}, []), "T1")
    assert first is not None and all(c["lastTransitionTime"] == "T1" for c in first)
    assert updated_conditions(first, deletion_conditions({"pods.": 1}, {}, []), "T2") is None
    second = updated_conditions(first, deletion_conditions({}, {}, []), "T3")
    times = {c["type"]: c["lastTransitionTime"] for c in second}
    assert times["NamespaceContentRemaining"] == "T3" and times["NamespaceDeletionDiscoveryFailure"] == "T1"
