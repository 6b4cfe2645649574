"""What the admin declares for the capacity cache (gpuspawner.capacity.config): pools that scale
from zero, GPU resource names, the reservation TTL; every mistake says what to fix."""

from __future__ import annotations

import pytest

from gpuspawner.capacity.config import CapacityConfig, DeclaredPool
from tests.builders import DECLARED_H100 as H100
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
        DeclaredPool.from_config({**H100, **change})
        return
    with pytest.raises(ValueError, match=message):
        DeclaredPool.from_config({**H100, **change})


def test_declared_pool_labels_follow_its_group_and_product():
    pool = DeclaredPool.from_config({**H100, "labels": {"example.com/rack": "r1"}, "memory_mib": 81559,
                                     "driver_version": "570.172.08"})
    assert pool.labels == {"example.com/rack": "r1", GKE: "h100-spot",
                           "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert (pool.memory_mib, pool.driver_version, pool.cuda_version) == (81559, "570.172.08", None)
    assert pool.id == "h100-spot:nvidia-h100-80gb-hbm3:nvidia.com/gpu"


def test_declared_pool_missing_field():
    d = dict(H100)
    del d["max_nodes"]
    with pytest.raises(ValueError, match="'max_nodes' is required"):
        DeclaredPool.from_config(d)


def test_config_validation():
    with pytest.raises(ValueError, match="declared twice"):
        CapacityConfig(declared_pools=(H100, H100))
    with pytest.raises(ValueError, match="not a GPU resource"):
        CapacityConfig(declared_pools=({**H100, "resource": "example.com/fpga"},))
    with pytest.raises(ValueError, match="reservation_ttl"):
        CapacityConfig(reservation_ttl=0)
    with pytest.raises(ValueError, match="list of strings"):
        CapacityConfig(gpu_resources="nvidia.com/gpu")
    assert CapacityConfig(declared_pools=(H100,)).declared_pools[0].labels[GKE] == "h100-spot"
