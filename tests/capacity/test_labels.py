import pytest

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.capacity.labels import (
    driver_versions,
    gpu_facts,
    node_group,
    node_record,
    product_label_for,
    version_key,
)
from gpuspawner.capacity.model import Taint

from tests.builders import GFD_A100, node

CFG = CapacityConfig()

# Example A of the reference (A100 MIG mixed) and B (T4 time-slicing), trimmed
MIG_LABELS = {
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
    "nvidia.com/mig.strategy": "mixed",
    "nvidia.com/mig-1g.10gb.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
    "nvidia.com/mig-1g.10gb.memory": "9728",
    "nvidia.com/mig-3g.40gb.memory": "40192",
}


@pytest.mark.parametrize(
    "resource, labels, product, memory, product_label",
    [
        ("nvidia.com/gpu", GFD_A100, "NVIDIA-A100-SXM4-80GB", 81920, "nvidia.com/gpu.product"),
        (
            "nvidia.com/gpu",
            {"nvidia.com/gpu.product": "Tesla-T4-SHARED", "nvidia.com/gpu.memory": "15360"},
            "Tesla-T4-SHARED",
            15360,
            "nvidia.com/gpu.product",
        ),
        (
            "nvidia.com/mig-1g.10gb",
            MIG_LABELS,
            "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
            9728,
            "nvidia.com/mig-1g.10gb.product",
        ),
        # older GFD without the per-profile product label: derived, and no label to pin on
        ("nvidia.com/mig-3g.40gb", MIG_LABELS, "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb", 40192, None),
        (
            "amd.com/gpu",
            {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM", "amd.com/gpu.vram": "192G"},
            "AMD_Instinct_MI300X_OAM",
            192 * 1024,
            "amd.com/gpu.product-name",
        ),
        ("nvidia.com/gpu", {}, None, None, None),
        ("nvidia.com/gpu", {"nvidia.com/gpu.memory": "lots"}, None, None, None),
        ("example.com/fpga", GFD_A100, None, None, None),
    ],
    ids=["a100", "t4-shared", "mig-mixed", "mig-no-product-label", "amd-mi300x", "no-gfd", "bad-memory", "unknown-vendor"],
)
def test_gpu_facts(resource, labels, product, memory, product_label):
    f = gpu_facts(resource, labels)
    assert (f.product, f.memory_mib, f.product_label) == (product, memory, product_label)


@pytest.mark.parametrize(
    "labels, expected",
    [
        (GFD_A100, ("570.172.08", "12.8", "8.0")),
        (
            {
                "nvidia.com/cuda.driver-version.major": "535",
                "nvidia.com/cuda.driver-version.minor": "183",
                "nvidia.com/cuda.driver-version.revision": "01",
                "nvidia.com/cuda.runtime-version.major": "12",
                "nvidia.com/cuda.runtime-version.minor": "2",
            },
            ("535.183.01", "12.2", None),
        ),
        (
            # GFD before v0.15.0: only the deprecated names
            {
                "nvidia.com/cuda.driver.major": "470",
                "nvidia.com/cuda.driver.minor": "82",
                "nvidia.com/cuda.driver.rev": "01",
                "nvidia.com/cuda.runtime.major": "11",
                "nvidia.com/cuda.runtime.minor": "4",
            },
            ("470.82.01", "11.4", None),
        ),
        ({"amd.com/gpu.driver-version": "6.8.5"}, ("6.8.5", None, None)),
        ({"nvidia.com/cuda.driver-version.full": "not-a-version"}, (None, None, None)),
        ({}, (None, None, None)),
    ],
    ids=["current-full", "current-parts", "deprecated", "amd", "garbage", "none"],
)
def test_driver_versions(labels, expected):
    assert driver_versions(labels) == expected


def test_version_key_is_numeric_not_lexical():
    assert version_key("12.10") > version_key("12.9")
    assert version_key("535.183.01") > version_key("535.54.03")


@pytest.mark.parametrize(
    "labels, expected",
    [
        ({"cloud.google.com/gke-nodepool": "a100-pool"}, ("cloud.google.com/gke-nodepool", "a100-pool")),
        ({"eks.amazonaws.com/nodegroup": "gpu-t4"}, ("eks.amazonaws.com/nodegroup", "gpu-t4")),
        ({"kubernetes.azure.com/agentpool": "gpunp"}, ("kubernetes.azure.com/agentpool", "gpunp")),
        ({"karpenter.sh/nodepool": "gpu"}, ("karpenter.sh/nodepool", "gpu")),
        # first configured label wins
        (
            {"karpenter.sh/nodepool": "k", "eks.amazonaws.com/nodegroup": "e"},
            ("eks.amazonaws.com/nodegroup", "e"),
        ),
        ({"kubernetes.io/hostname": "n1"}, (None, None)),
    ],
    ids=["gke", "eks", "aks", "karpenter", "order", "none"],
)
def test_node_group(labels, expected):
    assert node_group(labels, CFG.node_group_labels) == expected


def test_product_label_for():
    assert product_label_for("nvidia.com/gpu") == "nvidia.com/gpu.product"
    assert product_label_for("nvidia.com/mig-2g.20gb") == "nvidia.com/mig-2g.20gb.product"
    assert product_label_for("amd.com/gpu") == "amd.com/gpu.product-name"
    assert product_label_for("example.com/fpga") is None


def test_node_record_of_a_gke_a100_node():
    obj = node(
        "gke-a100-1",
        {"nvidia.com/gpu": "8"},
        {**GFD_A100, "cloud.google.com/gke-nodepool": "a100"},
        taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
    )
    rec = node_record(obj, CFG)
    assert rec is not None and rec.contributes
    (g,) = rec.gpus
    assert (g.resource, g.allocatable, g.pool_id) == ("nvidia.com/gpu", 8, "a100:nvidia-a100-sxm4-80gb:nvidia.com/gpu")
    assert g.defining_labels == (
        ("cloud.google.com/gke-nodepool", "a100"),
        ("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB"),
    )
    assert rec.taints == (Taint("nvidia.com/gpu", "present", "NoSchedule"),)
    assert (rec.driver_version, rec.cuda_version, rec.compute_capability) == ("570.172.08", "12.8", "8.0")
    assert ("kubernetes.io/hostname", "gke-a100-1") in rec.labels


def test_mig_mixed_node_is_in_one_pool_per_resource():
    obj = node("dgx", {"nvidia.com/mig-1g.10gb": "16", "nvidia.com/mig-3g.40gb": "8", "nvidia.com/gpu": "0"}, MIG_LABELS)
    rec = node_record(obj, CFG)
    assert [(g.resource, g.allocatable) for g in rec.gpus] == [
        ("nvidia.com/mig-1g.10gb", 16),
        ("nvidia.com/mig-3g.40gb", 8),
    ]
    assert len({g.pool_id for g in rec.gpus}) == 2


@pytest.mark.parametrize(
    "obj, config",
    [
        (node("cpu-1"), CFG),
        (node("zero", {"nvidia.com/gpu": "0"}), CFG),
        (node("bad", {"nvidia.com/gpu": "eight"}), CFG),
        (node("fpga", {"example.com/fpga": "2"}), CFG),
        ({"metadata": {}}, CFG),
    ],
    ids=["cpu-node", "zero-gpus", "bad-quantity", "not-configured", "no-name"],
)
def test_not_a_gpu_node(obj, config):
    assert node_record(obj, config) is None


def test_admin_added_resource_makes_a_gpu_node():
    cfg = CapacityConfig(gpu_resources=("example.com/fpga",))
    rec = node_record(node("fpga", {"example.com/fpga": "2"}), cfg)
    assert rec.gpus[0].pool_id == "default:unknown:example.com/fpga"


@pytest.mark.parametrize(
    "kwargs, ready, schedulable",
    [
        ({}, True, True),
        ({"ready": False}, False, True),
        ({"ready": None}, False, True),  # no Ready condition yet: not ready
        ({"unschedulable": True}, True, False),
    ],
    ids=["ready", "not-ready", "no-condition", "cordoned"],
)
def test_node_state(kwargs, ready, schedulable):
    rec = node_record(node("n", {"nvidia.com/gpu": "1"}, **kwargs), CFG)
    assert (rec.ready, rec.schedulable, rec.contributes) == (ready, schedulable, ready and schedulable)


def test_nodes_of_one_pool_share_their_gpu_entries_and_taints():
    taint = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    a, b = (node_record(node(n, {"nvidia.com/gpu": "8"}, GFD_A100, taints=taint), CFG) for n in ("n1", "n2"))
    assert a.gpus is b.gpus and a.gpus[0] is b.gpus[0]  # one object for thousands of equal entries
    assert a.taints is b.taints and a.taints == (Taint("nvidia.com/gpu", "present", "NoSchedule"),)
    other = node_record(node("n3", {"nvidia.com/gpu": "4"}, GFD_A100), CFG)
    assert other.gpus[0].allocatable == 4 and other.taints == ()


@pytest.mark.parametrize(
    "labels, resource, defining, absent",
    [
        ({"cloud.google.com/gke-nodepool": "a100", "nvidia.com/gpu.product": "A100"}, "nvidia.com/gpu",
         (("cloud.google.com/gke-nodepool", "a100"), ("nvidia.com/gpu.product", "A100")), ()),
        # EKS: grouped by its own label because GKE's is not set
        ({"eks.amazonaws.com/nodegroup": "g", "nvidia.com/gpu.product": "A100"}, "nvidia.com/gpu",
         (("eks.amazonaws.com/nodegroup", "g"), ("nvidia.com/gpu.product", "A100")),
         ("cloud.google.com/gke-nodepool",)),
        # device plugin only: no group label, no product label
        ({}, "nvidia.com/gpu", (), tuple(CFG.node_group_labels) + ("nvidia.com/gpu.product",)),
        # MIG mixed, product derived from the GPU's label: that label pins, the per-profile one is absent
        ({"nvidia.com/gpu.product": "A100"}, "nvidia.com/mig-1g.10gb", (("nvidia.com/gpu.product", "A100"),),
         tuple(CFG.node_group_labels) + ("nvidia.com/mig-1g.10gb.product",)),
        ({"amd.com/gpu.product-name": "MI300X"}, "amd.com/gpu", (("amd.com/gpu.product-name", "MI300X"),),
         tuple(CFG.node_group_labels)),
    ],
    ids=["gke", "eks", "no-labels", "mig-derived-product", "amd"],
)
def test_a_node_records_the_labels_that_pin_its_pool(labels, resource, defining, absent):
    (gpu,) = node_record(node("n", {resource: "4"}, labels), CFG).gpus
    assert gpu.defining_labels == defining
    assert gpu.absent_labels == absent
