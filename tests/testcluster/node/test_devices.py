"""Device ids and allocation: stable ids, never one device to two pods."""

from __future__ import annotations

import re

import pytest

from testcluster.node.devices import AMD_ENV, AllocationError, DeviceLedger, NVIDIA_ENV, device_env, device_id, is_device_resource, split_for_containers
from testcluster.node.pod_resources import container_requests


@pytest.mark.parametrize("resource,pattern", [
    ("nvidia.com/gpu", r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"),
    ("nvidia.com/mig-1g.10gb", r"^MIG-[0-9a-f-]{36}$"),
    ("amd.com/gpu", r"^0000:[0-9a-f]{2}:00\.0$"),
    ("example.com/fpga", r"^fpga-[0-9a-f]{12}$"),
], ids=["gpu", "mig", "amd", "other"])
def test_device_id_forms(resource, pattern):
    assert re.match(pattern, device_id("node-a", resource, 0))


def test_ids_are_stable_and_distinct():
    assert device_id("n", "nvidia.com/gpu", 1) == device_id("n", "nvidia.com/gpu", 1)
    ids = {device_id(n, "nvidia.com/gpu", i) for n in ("a", "b") for i in range(8)}
    assert len(ids) == 16


@pytest.mark.parametrize("resource,ok", [
    ("nvidia.com/gpu", True), ("amd.com/gpu", True), ("cpu", False),
    ("hugepages-2Mi", False), ("kubernetes.io/something", False),
])
def test_is_device_resource(resource, ok):
    assert is_device_resource(resource) is ok


def test_allocation_never_hands_a_device_twice():
    led = DeviceLedger()
    led.set_node("a", {"nvidia.com/gpu": 4, "cpu": 16})
    first = led.allocate("ns/p1", "a", {"nvidia.com/gpu": 3, "cpu": 1000})
    assert list(first) == ["nvidia.com/gpu"] and len(first["nvidia.com/gpu"]) == 3
    with pytest.raises(AllocationError, match=r"Requested: 2, Available: 1, which is unexpected"):
        led.allocate("ns/p2", "a", {"nvidia.com/gpu": 2})
    # the failed request took nothing
    second = led.allocate("ns/p2", "a", {"nvidia.com/gpu": 1})
    assert set(second["nvidia.com/gpu"]).isdisjoint(first["nvidia.com/gpu"])
    assert led.free("a", "nvidia.com/gpu") == []
    led.release("ns/p1")
    assert len(led.free("a", "nvidia.com/gpu")) == 3
    third = led.allocate("ns/p3", "a", {"nvidia.com/gpu": 3})
    assert set(third["nvidia.com/gpu"]).isdisjoint(second["nvidia.com/gpu"])
    for dev in third["nvidia.com/gpu"]:
        assert led.holder("a", dev) == "ns/p3"


def test_allocate_is_idempotent_per_pod():
    led = DeviceLedger()
    led.set_node("a", {"nvidia.com/gpu": 2})
    assert led.allocate("ns/p", "a", {"nvidia.com/gpu": 1}) == led.allocate("ns/p", "a", {"nvidia.com/gpu": 1})
    assert len(led.free("a", "nvidia.com/gpu")) == 1


def test_resizing_a_node_keeps_owners():
    led = DeviceLedger()
    led.set_node("a", {"nvidia.com/gpu": 1})
    got = led.allocate("ns/p", "a", {"nvidia.com/gpu": 1})
    led.set_node("a", {"nvidia.com/gpu": 2})
    assert led.holder("a", got["nvidia.com/gpu"][0]) == "ns/p"
    assert len(led.free("a", "nvidia.com/gpu")) == 1


def test_device_env():
    led = DeviceLedger()
    led.set_node("a", {"nvidia.com/gpu": 2, "nvidia.com/mig-1g.10gb": 2, "amd.com/gpu": 2})
    got = led.allocate("ns/p", "a", {"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 1, "amd.com/gpu": 1})
    env = device_env(got, led.node_devices("a"))
    assert env[NVIDIA_ENV].split(",") == got["nvidia.com/gpu"] + got["nvidia.com/mig-1g.10gb"]
    assert env[AMD_ENV] == "/dev/dri/renderD128"
    assert device_env({}) == {}


def test_split_for_containers():
    pod = {"spec": {
        "initContainers": [
            {"name": "probe", "resources": {"limits": {"nvidia.com/gpu": 2}}},
            {"name": "side", "restartPolicy": "Always", "resources": {"limits": {"nvidia.com/gpu": 1}}},
        ],
        "containers": [
            {"name": "nb", "resources": {"limits": {"nvidia.com/gpu": 1}}},
            {"name": "cpu-only"},
        ],
    }}
    ids = ["g0", "g1"]
    out = split_for_containers(pod, {"nvidia.com/gpu": ids}, container_requests)
    assert out["probe"] == {"nvidia.com/gpu": ["g0", "g1"]}  # reuses the pod's devices
    assert out["side"] == {"nvidia.com/gpu": ["g0"]}
    assert out["nb"] == {"nvidia.com/gpu": ["g1"]}  # disjoint from the running sidecar
    assert out["cpu-only"] == {}
