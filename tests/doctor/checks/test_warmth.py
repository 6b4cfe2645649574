"""Pools where an image of their profiles is on no node and pre-pulling is off (doctor.checks.warmth)."""

from __future__ import annotations

import pytest

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.cuda.image import image_cuda
from gpuspawner.doctor import checks
from gpuspawner.doctor.dra_state import DraState
from gpuspawner.doctor.facts import HubFacts, ProfileImage, hub_facts_from_values
from gpuspawner.spawn.tolerations import DEFAULT_TOLERATED_TAINT_KEYS
from tests.builders import GFD_T4_470, finding_ids as ids, gpu_node
from tests.builders.dra import device_class, gpu_device, group_node, resource_slice

CONFIG = CapacityConfig()
PT = "pt:cu124"  # needs CUDA 12.4: not on a T4 with driver 470
BASE = "quay.io/jupyter/base-notebook:2026"  # declares no CUDA


def holding(node: dict, *names: str) -> dict:
    """``node`` whose kubelet reports ``names`` (and the pause image) in status.images, as containerd names them."""
    node["status"]["images"] = [{"names": [n], "sizeBytes": 15 << 30} for n in names] + [
        {"names": ["registry.k8s.io/pause:3.10"], "sizeBytes": 320368}]
    return node


def hub(*, prepull=False, source="jupyterhub_config.py"):
    images = (ProfileImage("gpu", PT, image_cuda("12.4", name=PT)), ProfileImage("gpu", BASE, image_cuda(None, name=BASE),
                                                                                 choice="image:base"))
    return HubFacts(tolerated_taint_keys=DEFAULT_TOLERATED_TAINT_KEYS, images=images, source=source, prepull=prepull)


@pytest.mark.parametrize(
    "nodes, facts, expected, cold",
    [
        ([holding(gpu_node("a"), "docker.io/library/pt:cu124", BASE)], hub(), [], None),
        ([holding(gpu_node("a"), "docker.io/library/pt:cu124"), holding(gpu_node("b"))], hub(),
         ["image-not-cached"], [BASE]),
        ([holding(gpu_node("a"))], hub(), ["image-not-cached"], [PT, BASE]),
        ([holding(gpu_node("a"))], hub(prepull=True), [], None),
        ([holding(gpu_node("a"))], hub(source=None), [], None),
        ([gpu_node("a")], hub(), [], None),  # the kubelet reports no image at all: nothing to judge by
        ([holding(gpu_node("t4", labels=GFD_T4_470))], hub(), ["image-not-cached"], [BASE]),  # PT cannot run there
        ([holding(gpu_node("a", ready="False"))], hub(), [], None),  # not Ready: not in the pool's count
    ],
    ids=["all-cached", "cached-on-another-node-counts", "none-cached", "prepull-on", "no-config",
         "no-images-reported", "cuda-misfit-not-counted", "not-ready-node-not-judged"],
)
def test_image_not_cached(nodes, facts, expected, cold):
    found = checks.check_image_warmth(nodes, facts, CONFIG)
    assert ids(found) == expected
    if cold is not None:
        (f,) = found
        assert f.severity == "warning" and f.details["images"] == cold
        assert "c.GPUSpawner.gpu_prepull = True" in f.fix


def test_the_finding_names_the_pool_its_images_and_nodes():
    (f,) = checks.check_image_warmth([holding(gpu_node("a")), holding(gpu_node("b"))], hub(), CONFIG)
    pool = f.details["pool"]
    assert str(f.objects[0]) == f"pool/{pool}"
    assert f"Pool {pool}: 2 images of its profiles (pt:cu124, {BASE}) are on none of its 2 nodes" in f.summary
    assert f.details["nodes"] == 2


def test_gpu_prepull_comes_from_the_hub_config():
    values = {"gpu_tolerated_taint_keys": [], "gpu_profiles": [], "gpu_prepull": True}
    assert hub_facts_from_values(values, source="c.py").prepull is True
    assert hub_facts_from_values({**values, "gpu_prepull": False}, source="c.py").prepull is False


def test_run_checks_includes_it():
    found = checks.run_checks([holding(gpu_node("a"))], [], config=CONFIG, hub=hub(), rbac=None, now=0.0,
                              pending_after=300.0)
    assert "image-not-cached" in ids(found)


def dra_state(*node_devices: tuple[str, dict]) -> DraState:
    """DRA served, NVIDIA's classes, one ResourceSlice per (node, device attributes)."""
    return DraState(served=True, classes=[device_class("gpu.nvidia.com", device_type="gpu")],
                    slices=[resource_slice(f"{n}-gpus", n, [gpu_device("gpu-0", **dev)]) for n, dev in node_devices],
                    claims=[])


@pytest.mark.parametrize(
    "nodes, dra, cold",
    [
        ([holding(group_node("d1", "dra")), holding(group_node("d2", "dra"), "docker.io/library/pt:cu124")],
         dra_state(("d1", {}), ("d2", {})), [BASE]),
        ([holding(group_node("d1", "dra"))], dra_state(("d1", {"driver": "470.82.01", "cuda": "11.4.0"})), [BASE]),
        ([holding(group_node("d1", "dra"), "docker.io/library/pt:cu124", BASE)], dra_state(("d1", {})), None),
        ([holding(group_node("d1", "dra"))], DraState(served=True, classes=[], slices=None, claims=[]), None),
        ([holding(group_node("d1", "dra"))], None, None),
    ],
    ids=["cached-on-one-of-its-nodes", "cuda-misfit-not-counted", "all-cached", "slices-forbidden", "no-dra"],
)
def test_a_dra_pool_is_judged_on_the_nodes_its_slices_name(nodes, dra, cold):
    found = checks.check_image_warmth(nodes, hub(), CONFIG, dra)
    if cold is None:
        assert found == []
        return
    (f,) = found
    assert f.details["images"] == cold and f.details["nodes"] == len(nodes)
    assert f.details["pool"].endswith(":gpu.nvidia.com")  # the DRA pool's id: its DeviceClass last
