"""What the admin declares for the capacity cache (gpuspawner.capacity.config): pools that scale
from zero, GPU resource names, the reservation TTL; every mistake says what to fix."""

from __future__ import annotations

import pytest

from gpuspawner.capacity.config import CapacityConfig, DeclaredPool
from tests.builders import DECLARED_H100
from tests.builders import GKE


@pytest.mark.parametrize(
    "change, message",
    [
        ({"gpus_per_node": 0}, "gpus_per_node"),
        ({"max_nodes": "3"}, "max_nodes"),
        ({"minutes": -1}, "minutes"),
        ({"resource": "not a resource"}, "resource"),
        ({"node_group": None}, "together"),
        ({"taints": ["nvidia.com/gpu=present"]}, "taint"),
        ({"taints": [{"key": "a", "effect": "Sometimes"}]}, "effect"),
        ({"labels": {GKE: "other"}}, "contradicts"),
        ({"labels": {"nvidia.com/gpu.product": "Tesla-T4"}}, "contradicts product"),
        ({"labels": ["a=b"]}, "'labels' must be a dict"),
        ({"product": ""}, "'product' must be a non-empty string"),
        ({"cuda_version": "12"}, None),
        ({"driver_version": "latest"}, "driver_version"),
        ({"colour": "blue"}, "unknown field"),
    ],
    ids=lambda v: str(v)[:30],
)
def test_declared_pool_validation_says_what_to_fix(change, message):
    if message is None:  # valid
        DeclaredPool.from_config({**DECLARED_H100, **change})
        return
    with pytest.raises(ValueError, match=message):
        DeclaredPool.from_config({**DECLARED_H100, **change})


def test_declared_pool_labels_follow_its_group_and_product():
    pool = DeclaredPool.from_config({**DECLARED_H100, "labels": {"example.com/rack": "r1"}, "memory_mib": 81559,
                                     "driver_version": "570.172.08"})
    assert pool.labels == {"example.com/rack": "r1", GKE: "h100-spot",
                           "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert (pool.memory_mib, pool.driver_version, pool.cuda_version) == (81559, "570.172.08", None)
    assert pool.id == "h100-spot:nvidia-h100-80gb-hbm3:nvidia.com/gpu"


def test_declared_pool_missing_field():
    d = dict(DECLARED_H100)
    del d["max_nodes"]
    with pytest.raises(ValueError, match="'max_nodes' is required"):
        DeclaredPool.from_config(d)


def test_config_validation():
    with pytest.raises(ValueError, match="declared twice"):
        CapacityConfig(declared_pools=(DECLARED_H100, DECLARED_H100))
    with pytest.raises(ValueError, match="not a GPU resource"):
        CapacityConfig(declared_pools=({**DECLARED_H100, "resource": "example.com/fpga"},))
    with pytest.raises(ValueError, match="reservation_ttl"):
        CapacityConfig(reservation_ttl=0)
    with pytest.raises(ValueError, match="gpu_resources must be a list of names"):
        CapacityConfig(gpu_resources="nvidia.com/gpu")
    assert CapacityConfig(declared_pools=(DECLARED_H100,)).declared_pools[0].labels[GKE] == "h100-spot"


@pytest.mark.parametrize("name, prefix, good", [
    ("nvidia.com/gpu", False, True), ("nvidia.com/gpu.shared", False, True), ("amd.com/gpu", False, True),
    ("example.com/fpga", False, True), ("nvidia.com/mig-", True, True),
    ("cpu", False, False), ("memory", False, False), ("ephemeral-storage", False, False), ("pods", False, False),
    ("hugepages-2Mi", False, False), ("kubernetes.io/batman", False, False), ("x.kubernetes.io/y", False, False),
    ("requests.nvidia.com/gpu", False, False), ("example/gpu", False, False), ("nvidia.com/", False, False),
    ("nvidia.com/mig-", False, False), ("mig-", True, False), ("", False, False), (7, False, False),
], ids=["nvidia", "nvidia-shared", "amd", "other-vendor", "mig-prefix", "cpu", "memory", "ephemeral-storage",
        "pods", "hugepages", "kubernetes.io", "sub-kubernetes.io", "quota-name", "domain-without-dot",
        "no-name", "prefix-as-name", "prefix-without-domain", "empty", "not-a-string"])
def test_gpu_resources_are_device_extended_resources_only(name, prefix, good):
    from gpuspawner.capacity.config import check_device_resource

    if good:
        assert check_device_resource(name, prefix=prefix) == name
    else:
        with pytest.raises(ValueError, match="not (the start of )?a device's extended resource: write <vendor domain>"):
            check_device_resource(name, prefix=prefix)
