"""The structured-parameters allocator against hand-written cases."""

import pytest

from tests.builders.dra import claim, device_classes, dra_node, gpu_slice, request
from gpuspawner.sim.dra.allocator import AllocationError, DeviceID, allocate, allocated_devices
from testcluster.node.dra import nvidia

NODE = dra_node("n1")
CLASSES = device_classes()
GPU = nvidia.DRIVER


def devices(result):
    return [r["device"] for r in result["devices"]["results"]]


def run(claims, slices, allocated=(), node=NODE, classes=CLASSES):
    return allocate(claims, node, slices, classes, set(allocated))


def test_exact_count_takes_the_first_free_devices_in_order_and_pins_the_node():
    [res] = run([claim("c", request(count=2))], [gpu_slice("n1", "u1")])
    assert devices(res) == ["gpu-0", "gpu-1"]
    assert res["devices"]["results"][0] == {"request": "gpu", "driver": GPU, "pool": "n1", "device": "gpu-0"}
    assert res["nodeSelector"] == {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}


def test_a_device_is_never_given_twice_across_claims_or_to_an_allocated_one():
    taken = {DeviceID(GPU, "n1", "gpu-0")}
    a, b = run([claim("a", request(count=2)), claim("b", request(count=1))], [gpu_slice("n1", "u1")], taken)
    assert devices(a) == ["gpu-1", "gpu-2"]
    assert devices(b) == ["gpu-3"]


def test_exhaustion_gives_none():
    assert run([claim("a", request(count=3)), claim("b", request(count=2))], [gpu_slice("n1", "u1")]) is None


def test_other_nodes_slices_are_not_used():
    assert run([claim("a")], [gpu_slice("n2", "u2")]) is None


MIG = {"mig": {"2": [{"profile": "1g.10gb", "count": 7}], "3": [{"profile": "3g.40gb", "count": 2}]}}


def test_mig_devices_through_the_mig_class_and_a_profile_selector():
    rs = gpu_slice("n1", "u1", **MIG)
    sel = "device.attributes['gpu.nvidia.com'].profile == '3g.40gb'"
    [res] = run([claim("m", request(cls="mig.nvidia.com", count=2, selectors=[sel]))], [rs])
    assert devices(res) == ["gpu-3-mig-9-0-4", "gpu-3-mig-9-4-4"]
    # the gpu class never hands out MIG devices: only the two whole GPUs are there
    assert run([claim("g", request(count=3))], [rs]) is None


def test_all_mode_takes_every_matching_device_and_needs_at_least_one():
    rs = gpu_slice("n1", "u1", **MIG)
    [res] = run([claim("m", request(cls="mig.nvidia.com", mode="All",
                                   selectors=["device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"]))], [rs])
    assert len(devices(res)) == 7
    none = request(cls="mig.nvidia.com", mode="All", selectors=["device.attributes['gpu.nvidia.com'].profile == 'x'"])
    assert run([claim("m", none)], [rs]) is None


def test_selectors_with_semver_and_quantity():
    old = gpu_slice("n1", "u1", cudaDriverVersion="12.2")
    new = gpu_slice("n2", "u2", cudaDriverVersion="12.8", memory="40Gi")
    sel = ["device.attributes['gpu.nvidia.com'].cudaDriverVersion.compareTo(semver('12.4.0')) >= 0",
           "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0"]
    c = claim("c", request(selectors=sel))
    assert run([c], [old, new]) is None  # n1 has only CUDA 12.2
    assert devices(run([c], [old, new], node=dra_node("n2"))[0]) == ["gpu-0"]
    big = claim("c", request(selectors=["device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('40Gi'))"]))
    assert run([big], [new], node=dra_node("n2")) is None


def test_mixed_drivers_each_class_takes_its_own():
    nic = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
           "metadata": {"name": "n1-nic", "uid": "u3", "resourceVersion": "1"},
           "spec": {"driver": "dra.net", "nodeName": "n1", "pool": {"name": "n1", "resourceSliceCount": 1},
                    "devices": [{"name": "eth1", "attributes": {"rdma": {"bool": True}}}]}}
    classes = dict(CLASSES, nic={"metadata": {"name": "nic"}, "spec": {"selectors": [
        {"cel": {"expression": "device.driver == 'dra.net'"}}]}})
    [res] = run([claim("c", request("gpu", count=1), request("nic", cls="nic"))], [nic, gpu_slice("n1", "u1")],
                classes=classes)
    assert [(r["request"], r["driver"], r["device"]) for r in res["devices"]["results"]] == [
        ("gpu", GPU, "gpu-0"), ("nic", "dra.net", "eth1")]


def test_first_available_falls_back_to_the_next_subrequest():
    rs = gpu_slice("n1", "u1", **MIG)
    req = {"name": "acc", "firstAvailable": [
        {"name": "big", "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 3},
        {"name": "small", "deviceClassName": "mig.nvidia.com", "allocationMode": "ExactCount", "count": 1}]}
    [res] = run([claim("c", req)], [rs])
    assert [(r["request"], r["device"]) for r in res["devices"]["results"]] == [("acc/small", "gpu-2-mig-19-0-1")]


def test_match_attribute_keeps_devices_on_one_parent_gpu():
    rs = gpu_slice("n1", "u1", mig={"2": [{"profile": "3g.40gb", "count": 1}, {"profile": "1g.10gb", "count": 4}],
                                    "3": [{"profile": "1g.10gb", "count": 7}]})
    sel = ["device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"]
    c = claim("c", request(cls="mig.nvidia.com", count=5, selectors=sel),
              constraints=[{"matchAttribute": "gpu.nvidia.com/parentUUID"}])
    [res] = run([c], [rs])
    assert all(d.startswith("gpu-3-") for d in devices(res))


def test_incomplete_pool_is_skipped_and_fails_all_mode():
    rs = gpu_slice("n1", "u1")
    rs["spec"]["pool"]["resourceSliceCount"] = 2
    assert run([claim("c")], [rs]) is None
    with pytest.raises(AllocationError, match="resource pool gpu.nvidia.com/n1 is currently being updated"):
        run([claim("c", request(mode="All"))], [rs])


def test_only_the_newest_generation_counts():
    old, new = gpu_slice("n1", "u1", count=1), gpu_slice("n1", "u2", count=2)
    new["metadata"]["name"] += "-2"
    new["spec"]["pool"]["generation"] = 1
    [res] = run([claim("c", request(count=2))], [old, new])
    assert devices(res) == ["gpu-0", "gpu-1"]


def test_cel_runtime_error_aborts_with_the_allocators_words():
    bad = claim("c", request(selectors=["device.attributes['gpu.nvidia.com'].nosuch == 1"]))
    with pytest.raises(AllocationError, match=r"claim default/c: selector #0 on device gpu.nvidia.com/n1/gpu-0: "
                                                 r"CEL runtime error: no such key: nosuch"):
        run([bad], [gpu_slice("n1", "u1")])


def test_missing_class_is_an_error():
    with pytest.raises(AllocationError, match='could not retrieve device class nope: deviceclass.resource.k8s.io '
                                                 '"nope" not found'):
        run([claim("c", request(cls="nope"))], [gpu_slice("n1", "u1")])


def test_class_config_comes_before_claim_config():
    classes = {k: dict(v, spec=dict(v["spec"], config=[{"opaque": {"driver": GPU, "parameters": {"a": 1}}}]))
               for k, v in CLASSES.items()}
    c = claim("c")
    c["spec"]["devices"]["config"] = [{"requests": ["gpu"], "opaque": {"driver": GPU, "parameters": {"b": 2}}}]
    [res] = run([c], [gpu_slice("n1", "u1")], classes=classes)
    assert [(x["source"], x["opaque"]["parameters"]) for x in res["devices"]["config"]] == [
        ("FromClass", {"a": 1}), ("FromClaim", {"b": 2})]
    assert all("requests" not in x for x in res["devices"]["config"])  # all requests: "empty means all"


def test_allocated_devices_reads_claim_statuses():
    c = {"status": {"allocation": {"devices": {"results": [{"driver": GPU, "pool": "n1", "device": "gpu-1"}]}}}}
    assert allocated_devices([c, {"status": {}}]) == {DeviceID(GPU, "n1", "gpu-1")}
