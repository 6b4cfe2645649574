"""A holding's share of a GPU (whole, MIG slice, time-sliced share) and the admin's weights."""

import pytest

from gpuspawner.usage.weights import Weights, share_fraction


@pytest.mark.parametrize("resource, product, replicas, share", [
    ("nvidia.com/gpu", "NVIDIA-A100-SXM4-80GB", None, 1.0),
    ("nvidia.com/mig-1g.10gb", "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", None, 1 / 7),
    ("nvidia.com/mig-3g.40gb", "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb", None, 3 / 7),
    ("nvidia.com/mig-2g.12gb", "NVIDIA-A30-MIG-2g.12gb", None, 2 / 4),
    ("nvidia.com/gpu", "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", None, 1 / 7),
    ("nvidia.com/gpu.shared", "NVIDIA-T4", 4, 0.25),
    ("nvidia.com/gpu", "Tesla-T4-SHARED", 2, 0.5),
    ("nvidia.com/gpu.shared", "NVIDIA-T4", None, 1.0),
    ("amd.com/gpu", "MI300X", None, 1.0),
], ids=["whole", "mig-1g", "mig-3g-h100", "mig-a30", "mig-single-strategy", "shared-renamed", "shared-suffix",
        "shared-replicas-unknown", "amd"])
def test_share_fraction(resource, product, replicas, share):
    assert share_fraction(resource, product, replicas) == pytest.approx(share)


@pytest.mark.parametrize("config, pool, product, weight", [
    ({}, "h100:nvidia-h100:nvidia.com/gpu", "NVIDIA-H100-80GB-HBM3", 1.0),
    ({"NVIDIA H100 80GB HBM3": 2}, "h100:x:nvidia.com/gpu", "NVIDIA-H100-80GB-HBM3", 2.0),
    ({"NVIDIA H100 80GB HBM3": 2}, "h100:x:nvidia.com/mig-1g.10gb", "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", 2.0),
    ({"h100:*": 3, "NVIDIA H100 80GB HBM3": 2}, "h100:x:nvidia.com/gpu", "NVIDIA-H100-80GB-HBM3", 3.0),
    ({"t4:*": 0.5}, "a100:x:nvidia.com/gpu", "NVIDIA-A100", 1.0),
], ids=["default-1", "by-product-loose-name", "slice-weighs-as-its-gpu", "pool-glob-first", "no-match"])
def test_weight(config, pool, product, weight):
    assert Weights.from_config(config).weight(pool, product) == weight


@pytest.mark.parametrize("config, says", [
    ([1], "must be a dict"),
    ({"": 1}, "keys must be product names"),
    ({"NVIDIA A100": -1}, "0 or more"),
    ({"NVIDIA A100": "2"}, "0 or more"),
    ({"NVIDIA A100": float("inf")}, "0 or more"),
    ({"NVIDIA A100": True}, "0 or more"),
], ids=["not-a-dict", "empty-key", "negative", "string", "infinite", "bool"])
def test_bad_weights_say_what_to_fix(config, says):
    with pytest.raises(ValueError, match=says):
        Weights.from_config(config)
