"""DRA objects as records: devices, slices, claims, DeviceClass selectors, nodes."""

from __future__ import annotations

import pytest

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.capacity.dra_objects import (
    DevKey,
    choose_class,
    claim_record,
    class_record,
    dra_node,
    parse_class_selector,
    semver_text,
    short_version,
    slice_record,
)
from tests.builders.dra import NVIDIA, device_class, gpu_device, mig_device, resource_claim, resource_slice
from tests.builders.dra import group_node as node



@pytest.mark.parametrize(
    "given, semver, short",
    [
        ("12.4.0", "12.4.0", "12.4"),
        ("12.4", "12.4.0", "12.4"),
        ("535.183.01", "535.183.1", "535.183"),  # leading zeros are not semver
        ("v13.0.1-rc.1", "13.0.1", "13.0"),
        ("not a version", None, None),
        (None, None, None),
    ],
)
def test_versions(given, semver, short):
    assert semver_text(given) == semver
    assert short_version(given) == short


def test_gpu_device_as_nvidia_publishes_it():
    rec = slice_record(resource_slice("n1-gpu", "n1", [gpu_device("gpu-0", driver="535.183.01", cuda="12.2.0")]), (NVIDIA,))
    assert (rec.driver, rec.pool, rec.generation, rec.count, rec.node) == (NVIDIA, "n1", 1, 1, "n1")
    (d,) = rec.devices
    assert (d.name, d.device_type, d.product, d.profile) == ("gpu-0", "gpu", "NVIDIA A100-SXM4-80GB", None)
    assert (d.driver_version, d.cuda_version, d.compute_capability, d.memory_mib) == ("535.183.1", "12.2", "8.0", 81920)
    assert d.attribute(f"{NVIDIA}/type") == "gpu" and d.usable


def test_mig_device_and_qualified_attribute_names():
    dev = mig_device("gpu-0-mig-9-0-1", "1g.10gb")
    dev["attributes"][f"{NVIDIA}/extra"] = dev["attributes"].pop("brand")  # already qualified: kept as is
    (d,) = slice_record(resource_slice("s", "n1", [dev]), (NVIDIA,)).devices
    assert (d.device_type, d.profile, d.memory_mib) == ("mig", "1g.10gb", 9856)
    assert d.attribute(f"{NVIDIA}/extra") == "Nvidia"


@pytest.mark.parametrize(
    "extra",
    [
        {"consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": "1"}}}]},
        {"allowMultipleAllocations": True},
        {"taints": [{"key": "example.com/broken", "effect": "NoSchedule"}]},
        {"taints": [{"key": "example.com/broken", "effect": "NoExecute"}]},
    ],
    ids=["partitionable", "consumable-capacity", "taint-noschedule", "taint-noexecute"],
)
def test_devices_gpuspawner_does_not_offer(extra):
    (d,) = slice_record(resource_slice("s", "n1", [gpu_device("gpu-0", **extra)]), (NVIDIA,)).devices
    assert not d.usable


def test_informational_device_taint_keeps_it_usable():
    dev = gpu_device("gpu-0", taints=[{"key": "example.com/note", "effect": "None"}])
    assert slice_record(resource_slice("s", "n1", [dev]), (NVIDIA,)).devices[0].usable


@pytest.mark.parametrize(
    "obj",
    [
        resource_slice("nic", "n1", [gpu_device("eth0")], driver="dra.net"),  # not a GPU driver
        {"metadata": {"name": "x"}, "spec": {"driver": NVIDIA, "pool": {"name": "p", "generation": 1}}},
        {"metadata": {"name": "x"}, "spec": {"driver": NVIDIA, "pool": {"name": "p", "generation": 1, "resourceSliceCount": 0}}},
        {"metadata": {}, "spec": {}},
    ],
    ids=["other-driver", "no-count", "zero-count", "no-name"],
)
def test_slices_not_counted(obj):
    assert slice_record(obj, (NVIDIA,)) is None


def test_slice_that_is_not_node_local():
    assert slice_record(resource_slice("s", None, [gpu_device("gpu-0")], pool="net"), (NVIDIA,)).node is None


def test_claim_takes_allocated_devices_but_not_admin_access():
    rec = claim_record(resource_claim("ada-gpus-x1", devices=[("n1", "gpu-0"), ("n1", "gpu-1")], owner_pod="jupyter-ada"))
    assert rec.key == "jhub/ada-gpus-x1" and rec.owner == "jhub/jupyter-ada" and rec.allocated
    assert rec.devices == (DevKey(NVIDIA, "n1", "gpu-0"), DevKey(NVIDIA, "n1", "gpu-1"))
    monitor = claim_record(resource_claim("dcgm", devices=[("n1", "gpu-0")], admin_access=True))
    assert monitor.allocated and monitor.devices == ()
    pending = claim_record(resource_claim("waiting"))
    assert not pending.allocated and pending.devices == () and pending.owner is None


@pytest.mark.parametrize(
    "expression, terms",
    [
        ("device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
         [("driver", NVIDIA), (f"{NVIDIA}/type", "gpu")]),
        ('(device.driver == "gpu.nvidia.com") && (device.attributes["gpu.nvidia.com"]["type"] == "mig")',
         [("driver", NVIDIA), (f"{NVIDIA}/type", "mig")]),
        ("'gpu.nvidia.com' == device.driver", [("driver", NVIDIA)]),
        ("'gpu' == device.attributes['gpu.nvidia.com'].type", [(f"{NVIDIA}/type", "gpu")]),
        ("device.driver == 'a' || device.driver == 'b'", None),
        ("!(device.attributes['gpu.nvidia.com'].type == 'mig')", None),
        ("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0", None),
        ("device.attributes['gpu.nvidia.com'].type != 'mig'", None),
    ],
)
def test_class_selector_equalities(expression, terms):
    assert parse_class_selector(expression) == terms


def test_choose_the_most_specific_readable_class():
    classes = sorted(
        (class_record(device_class(n, device_type=t)) for n, t in
         [("gpu.nvidia.com", "gpu"), ("mig.nvidia.com", "mig"), ("any-nvidia", None)]),
        key=lambda c: c.name,
    )
    unreadable = class_record(device_class("big", "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0"))
    assert not unreadable.readable
    full, mig = (slice_record(resource_slice("s", "n", [gpu_device("g"), mig_device("m")]), (NVIDIA,)).devices)
    assert choose_class(classes, NVIDIA, full).name == "gpu.nvidia.com"
    assert choose_class(classes, NVIDIA, mig).name == "mig.nvidia.com"
    assert choose_class([c for c in classes if c.name == "any-nvidia"], NVIDIA, mig).name == "any-nvidia"
    assert choose_class(classes, "gpu.amd.com", full) is None


def test_class_extended_resource_name():
    rec = class_record(device_class("gpu.nvidia.com", device_type="gpu", extended_resource_name="nvidia.com/gpu"))
    assert rec.extended_resource_name == "nvidia.com/gpu" and rec.equalities == ((f"{NVIDIA}/type", "gpu"),)


def test_dra_node_facts():
    cfg = CapacityConfig()
    n = dra_node(node("g1", group="dra-a100", taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]),
                 cfg.node_group_labels, cfg.is_gpu_resource)
    assert (n.group_label, n.group, n.hostname, n.device_plugin, n.contributes) == (
        "cloud.google.com/gke-nodepool", "dra-a100", "g1", False, True)
    assert [t.key for t in n.taints] == ["nvidia.com/gpu"]
    both = dra_node(node("g2", allocatable={"nvidia.com/gpu": "8"}), cfg.node_group_labels, cfg.is_gpu_resource)
    assert both.device_plugin
    cordoned = dra_node(node("g3", unschedulable=True), cfg.node_group_labels, cfg.is_gpu_resource)
    assert not cordoned.contributes
