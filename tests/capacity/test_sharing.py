import pytest

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.capacity.labels import node_record
from gpuspawner.capacity.sharing import (
    MIG,
    MPS,
    NONE,
    NOT_SHARED,
    TIME_SLICING,
    Sharing,
    class_sharing,
    mig_fraction,
    node_sharing,
)

from tests.builders import GFD_A100, node

# a time-sliced node, label names as GFD writes them (NVIDIA/k8s-device-plugin internal/lm), values
# illustrative (g4dn.xlarge, one T4 time-sliced four ways), trimmed
T4_TIME_SLICED = {
    "nvidia.com/gpu.count": "1",
    "nvidia.com/gpu.memory": "15360",
    "nvidia.com/gpu.product": "Tesla-T4-SHARED",
    "nvidia.com/gpu.replicas": "4",
    "nvidia.com/gpu.sharing-strategy": "time-slicing",
}
MIG_MIXED = {
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
    "nvidia.com/gpu.replicas": "0",
    "nvidia.com/gpu.sharing-strategy": "none",
    "nvidia.com/mig.strategy": "mixed",
    "nvidia.com/mig-1g.10gb.replicas": "1",
    "nvidia.com/mig-1g.10gb.sharing-strategy": "none",
}


@pytest.mark.parametrize(
    "resource, labels, allocatable, expected",
    [
        ("nvidia.com/gpu", GFD_A100, 8, NOT_SHARED),
        ("nvidia.com/gpu", T4_TIME_SLICED, 4, Sharing(TIME_SLICING, 4)),
        ("nvidia.com/gpu", {**T4_TIME_SLICED, "nvidia.com/gpu.sharing-strategy": "mps"}, 4, Sharing(MPS, 4)),
        # GFD before v0.15: no strategy label, only the -SHARED suffix and replicas
        ("nvidia.com/gpu", {"nvidia.com/gpu.product": "Tesla-T4-SHARED", "nvidia.com/gpu.replicas": "4"}, 4,
         Sharing(TIME_SLICING, 4)),
        # renameByDefault: the resource is nvidia.com/gpu.shared and the product keeps its name
        ("nvidia.com/gpu.shared", {"nvidia.com/gpu.product": "Tesla-T4", "nvidia.com/gpu.replicas": "2"}, 2,
         Sharing(TIME_SLICING, 2)),
        # a strategy without a replicas label: allocatable over the physical count
        ("nvidia.com/gpu", {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.count": "2"}, 8,
         Sharing(TIME_SLICING, 4)),
        ("nvidia.com/gpu", {"nvidia.com/gpu.sharing-strategy": "time-slicing"}, 8, NOT_SHARED),
        ("nvidia.com/gpu", {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "1"}, 1,
         NOT_SHARED),
        ("nvidia.com/gpu", {"nvidia.com/gpu.replicas": "lots"}, 1, NOT_SHARED),
        ("nvidia.com/mig-1g.10gb", MIG_MIXED, 7, Sharing(MIG, 1)),
        ("nvidia.com/mig-1g.10gb", {**MIG_MIXED, "nvidia.com/mig-1g.10gb.replicas": "2",
                                    "nvidia.com/mig-1g.10gb.sharing-strategy": "time-slicing"}, 14, Sharing(MIG, 2)),
        # MIG single strategy: GFD rewrites the product
        ("nvidia.com/gpu", {"nvidia.com/mig.strategy": "single",
                            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"}, 7, Sharing(MIG, 1)),
        # GKE's own GPU-sharing labels
        ("nvidia.com/gpu", {"cloud.google.com/gke-gpu-sharing-strategy": "time-sharing",
                            "cloud.google.com/gke-max-shared-clients-per-gpu": "3"}, 3, Sharing(TIME_SLICING, 3)),
        ("amd.com/gpu", {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"}, 8, NOT_SHARED),
    ],
    ids=["whole", "time-sliced", "mps", "old-gfd-suffix", "renamed", "replicas-from-count", "strategy-only",
         "one-replica", "odd-replicas", "mig-mixed", "mig-time-sliced", "mig-single", "gke", "amd"],
)
def test_node_sharing(resource, labels, allocatable, expected):
    assert node_sharing(resource, labels, allocatable) == expected


def test_a_node_record_carries_the_sharing_of_each_gpu_resource():
    rec = node_record(node("t4-0", {"nvidia.com/gpu": "4"}, T4_TIME_SLICED), CapacityConfig())
    assert [g.sharing for g in rec.gpus] == [Sharing(TIME_SLICING, 4)]


@pytest.mark.parametrize(
    "config, expected",
    [
        ([{"opaque": {"driver": "gpu.nvidia.com", "parameters": {
            "apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
            "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}}}}], TIME_SLICING),
        ([{"opaque": {"driver": "gpu.nvidia.com", "parameters": {"sharing": {"strategy": "MPS"}}}}], MPS),
        ([{"opaque": {"driver": "other.example.com", "parameters": {"sharing": {"strategy": "MPS"}}}}], None),
        ([{"opaque": {"driver": "gpu.nvidia.com", "parameters": "not a dict"}}], None),
        (None, None),
        ("junk", None),
    ],
    ids=["time-slicing", "mps", "other-driver", "bad-parameters", "no-config", "not-a-list"],
)
def test_class_sharing(config, expected):
    assert class_sharing(config, "gpu.nvidia.com") == expected


@pytest.mark.parametrize(
    "profile, product, expected",
    [
        ("1g.10gb", "NVIDIA A100-SXM4-80GB", (1, 7, 10)),
        ("3g.40gb", "NVIDIA-A100-SXM4-80GB", (3, 7, 40)),
        ("1g.6gb", "NVIDIA-A30", (1, 4, 6)),
        ("1g.10gb+me", "NVIDIA-H100-80GB-HBM3", (1, 7, 10)),
        ("weird", "NVIDIA-A100-SXM4-80GB", None),
    ],
    ids=["a100-1g", "a100-3g", "a30", "media-extension", "not-a-profile"],
)
def test_mig_fraction(profile, product, expected):
    assert mig_fraction(profile, product) == expected


def test_strategies_are_the_exact_api_words():
    assert (NONE, TIME_SLICING, MPS, MIG) == ("none", "time-slicing", "mps", "mig")


def test_a_time_sliced_pool_counts_shares_and_says_so_in_the_api():
    from gpuspawner.capacity.plugin_accounts import PluginAccounts

    ledger = PluginAccounts()
    ledger.upsert_node(node_record(node("t4-0", {"nvidia.com/gpu": "4"}, T4_TIME_SLICED), CapacityConfig()))
    ledger.upsert_node(node_record(node("a100-0", {"nvidia.com/gpu": "8"}, GFD_A100), CapacityConfig()))
    by_product = {p.product: p for p in ledger.ledger.pools()}
    t4, a100 = by_product["Tesla-T4-SHARED"], by_product["NVIDIA-A100-SXM4-80GB"]
    assert (t4.sharing, t4.replicas, t4.total, t4.physical) == (TIME_SLICING, 4, 4, 1)
    body = t4.to_json()
    assert (body["sharing"], body["replicas"], body["display_name"]) == ("time-slicing", 4, "NVIDIA T4")
    assert (a100.to_json()["sharing"], a100.to_json()["replicas"]) == ("none", 1)
