"""The device-plugin source of the capacity cache: what a listed or watched Node or Pod does to the
counts, the key a re-list keeps, and what a re-list drops.  Pure: no API server."""

from __future__ import annotations

import pytest

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.capacity.device_plugin_source import DevicePluginSource
from gpuspawner.capacity.dra_source import DraSource

from tests.builders import container, gpu_node, node, pod


def source_with(*objects: tuple[str, dict]) -> DevicePluginSource:
    src = DevicePluginSource(CapacityConfig())
    for kind, obj in objects:
        src.apply(kind, obj)
    return src


def free_and_total(src: DevicePluginSource) -> list[tuple[int, int]]:
    return [(p.free, p.total) for p in src.pools()]


@pytest.mark.parametrize(("kind", "obj", "key"), [
    ("nodes", gpu_node("gpu-0", 4), "gpu-0"),
    ("nodes", node("cpu-0"), "cpu-0"),  # every node is kept: its taints count
    ("pods", pod("jupyter-ada", 1, "gpu-0"), "jhub/jupyter-ada"),
    ("pods", pod("web", 0, "gpu-0"), "jhub/web"),
    ("pods", pod("unbound", 0), None),
    ("pods", {"kind": "Pod", "metadata": {}}, None),
], ids=["gpu-node", "cpu-node", "gpu-pod", "cpu-pod-bound", "cpu-pod-unbound", "pod-without-name"])
def test_apply_returns_the_key_a_relist_keeps(kind, obj, key):
    assert DevicePluginSource(CapacityConfig()).apply(kind, obj) == key


def test_a_gpu_pod_takes_gpus_of_its_node_and_gives_them_back_when_removed():
    src = source_with(("nodes", gpu_node("gpu-0", 4)), ("pods", pod("jupyter-ada", 3, "gpu-0")))
    assert free_and_total(src) == [(1, 4)]
    src.remove("pods", pod("jupyter-ada", 3, "gpu-0"))
    assert free_and_total(src) == [(4, 4)]


def test_a_pod_without_gpus_is_kept_for_what_it_asks_of_its_node():
    cpu_pod = pod("web", 0, "gpu-0", containers=[container("web", requests={"cpu": "2"})])
    src = source_with(("nodes", gpu_node("gpu-0", 4)), ("pods", cpu_pod))
    assert (src.accounts.pod_count, src.accounts.base_pod_count) == (0, 1)
    src.remove("pods", cpu_pod)
    assert src.accounts.base_pod_count == 0


@pytest.mark.parametrize("gone", [
    ("apply", node("gpu-0")),
    ("remove", gpu_node("gpu-0", 4)),
], ids=["node-loses-its-gpus", "node-deleted"])
def test_a_node_that_loses_its_gpus_or_goes_leaves_its_pool(gone):
    src = source_with(("nodes", gpu_node("gpu-0", 4)), ("nodes", gpu_node("gpu-1", 4)))
    how, obj = gone
    getattr(src, how)("nodes", obj)
    assert src.accounts.node_names() == {"gpu-1"}
    assert free_and_total(src) == [(4, 4)]


@pytest.mark.parametrize(("kind", "keep", "dropped", "left"), [
    ("nodes", {"gpu-1"}, 1, {"gpu-1"}),
    ("nodes", {"gpu-0", "gpu-1"}, 0, {"gpu-0", "gpu-1"}),
], ids=["one-vanished", "none-vanished"])
def test_retain_drops_what_a_relist_no_longer_saw(kind, keep, dropped, left):
    src = source_with(("nodes", gpu_node("gpu-0", 4)), ("nodes", gpu_node("gpu-1", 4)))
    assert src.retain(kind, keep) == dropped
    assert src.accounts.node_names() == left


def test_retain_drops_vanished_gpu_pods():
    src = source_with(("nodes", gpu_node("gpu-0", 4)), ("pods", pod("a", 1, "gpu-0")), ("pods", pod("b", 1, "gpu-0")))
    assert src.retain("pods", {"jhub/b"}) == 1
    assert free_and_total(src) == [(3, 4)]


def test_each_source_owns_its_kinds_and_the_dra_source_also_reads_nodes_and_pods():
    assert set(DevicePluginSource.kinds) == set(DevicePluginSource.reads) == {"nodes", "pods"}
    assert set(DraSource.kinds) == {"resourceslices", "resourceclaims", "deviceclasses"}
    assert DraSource.reads == {*DraSource.kinds, "nodes", "pods"}
