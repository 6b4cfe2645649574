"""Pools where an image of their profiles is on no node and pre-pulling is off (doctor.checks.warmth)."""

from __future__ import annotations

import pytest

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.cuda.image import image_cuda
from gpuspawner.doctor import checks
from gpuspawner.doctor.facts import HubFacts, ProfileImage, hub_facts_from_values
from gpuspawner.spawn.taints import DEFAULT_TOLERATED_TAINT_KEYS
from tests.builders import GFD_T4_470, finding_ids as ids, gpu_node

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
