"""Builders of ``resource.k8s.io/v1`` objects (Dynamic Resource Allocation) for the tests.

* as the test cluster's tests use them (NVIDIA's slices from ``testcluster.node.dra.nvidia``, claims,
  templates, pods with a claim): ``dra_node``, ``gpu_slice``, ``device_classes``, ``request``,
  ``claim``, ``claim_template``, ``claim_pod``;
* as the product's capacity, spawn, hub and doctor tests read them, device by device (allocated
  claims, classes with any selector, nodes in a node group): ``group_node``, ``gpu_device``,
  ``mig_device``, ``resource_slice``, ``device_class``, ``resource_claim``; DRA pools of a real
  DRA ledger whose nodes' images are counted as the capacity cache counts them: ``counted_dra_pools``.

Nodes and pods of the device-plugin path: ``tests.builders.node`` / ``tests.builders.pod``.
"""

from __future__ import annotations

from typing import Any

from gpuspawner.capacity import dra_objects as capacity_dra
from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.capacity.dra_accounts import DraAccounts
from gpuspawner.capacity.model import PoolView
from gpuspawner.capacity.nodeimages import NodeImages
from testcluster.node.dra import nvidia
from tests.builders import GKE, node

A100 = {"product": "NVIDIA A100-SXM4-80GB", "count": 4, "memory": "80Gi", "architecture": "Ampere",
        "computeCapability": "8.0", "driverVersion": "570.172.08", "cudaDriverVersion": "12.8"}


def dra_node(name: str, labels: dict[str, str] | None = None, allocatable: dict[str, str] | None = None) -> dict:
    """A Ready node with cpu/memory/pods (and ``allocatable`` extras), no GPU in allocatable."""
    alloc = {"cpu": "32", "memory": "256Gi", "pods": "110", **(allocatable or {})}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
            "status": {"capacity": dict(alloc), "allocatable": alloc,
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def gpu_slice(node: str, uid: str | None = None, **spec: Any) -> dict:
    """NVIDIA's slice for ``node`` (A100-80GB x4 unless ``spec`` says otherwise)."""
    rs = nvidia.node_slice(node, {**A100, **spec})
    if uid:
        rs["metadata"].update(uid=uid, resourceVersion="1")
    return rs


def device_classes() -> dict[str, dict]:
    return {c["metadata"]["name"]: c for c in nvidia.device_classes()}


def request(name: str = "gpu", cls: str = "gpu.nvidia.com", count: int | None = 1, mode: str = "ExactCount",
            selectors: list[str] = ()) -> dict:
    exactly: dict[str, Any] = {"deviceClassName": cls, "allocationMode": mode}
    if mode == "ExactCount":
        exactly["count"] = count
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return {"name": name, "exactly": exactly}


def claim(name: str, *requests: dict, namespace: str = "default", constraints: list | None = None) -> dict:
    devices: dict[str, Any] = {"requests": list(requests) or [request()]}
    if constraints:
        devices["constraints"] = constraints
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"devices": devices}}


def claim_template(name: str, *requests: dict, namespace: str = "default") -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": list(requests) or [request()]}}}}


def claim_pod(name: str, template: str, command: list[str] | None = None, tolerate_gpu: bool = True,
              **container: Any) -> dict:
    """A pod with one claim ``gpu`` from ``template``, used by its one container."""
    c = {"name": "main", "image": "python:3.11", "resources": {"claims": [{"name": "gpu"}]}, **container}
    if command:
        c["command"] = command
    spec: dict[str, Any] = {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
                            "containers": [c]}
    if tolerate_gpu:
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


# --- devices one by one (product tests)

NVIDIA = "gpu.nvidia.com"


def group_node(name: str, group: str | None = None, allocatable: dict | None = None, *,
               labels: dict[str, str] | None = None, **kw: Any) -> dict[str, Any]:
    """A Node in node group ``group`` (GKE's label) with ``labels`` besides, as ``tests.builders.node``
    builds it."""
    return node(name, allocatable, {**({GKE: group} if group else {}), **(labels or {})} or None, **kw)


def gpu_device(name: str, product: str = "NVIDIA A100-SXM4-80GB", *, driver: str = "550.54.15",
               cuda: str = "12.4.0", memory: str = "80Gi", **extra: Any) -> dict[str, Any]:
    """A full GPU as NVIDIA's DRA driver publishes it (deviceinfo.go: unqualified attribute names,
    versions as semver: ``535.183.01`` -> ``535.183.1``)."""
    return {
        "name": name,
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": f"GPU-{name}-0000"},
            "productName": {"string": product},
            "brand": {"string": "Nvidia"},
            "architecture": {"string": "Ampere"},
            "cudaComputeCapability": {"version": "8.0.0"},
            "driverVersion": {"version": nvidia.semver_of(driver)},
            "cudaDriverVersion": {"version": nvidia.semver_of(cuda)},
        },
        "capacity": {"memory": {"value": memory}},
        **extra,
    }


def mig_device(name: str, profile: str = "1g.10gb", product: str = "NVIDIA A100-SXM4-80GB", *,
               driver: str = "550.54.15", cuda: str = "12.4.0", memory: str = "9856Mi") -> dict[str, Any]:
    dev = gpu_device(name, product, driver=driver, cuda=cuda, memory=memory)
    dev["attributes"]["type"] = {"string": "mig"}
    dev["attributes"]["profile"] = {"string": profile}
    dev["attributes"]["parentUUID"] = {"string": "GPU-parent"}
    return dev


def resource_slice(name: str, node_name: str | None, devices: list[dict], *, driver: str = NVIDIA,
                   pool: str | None = None, generation: int = 1, count: int = 1) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": pool or node_name or name, "generation": generation, "resourceSliceCount": count},
        "devices": devices,
    }
    if node_name is not None:
        spec["nodeName"] = node_name
    else:
        spec["allNodes"] = True
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name}, "spec": spec}


def device_class(name: str, expression: str | None = None, *, device_type: str | None = None,
                 extended_resource_name: str | None = None, sharing: str | None = None) -> dict[str, Any]:
    """NVIDIA's classes: ``device_type`` "gpu" (gpu.nvidia.com) or "mig" (mig.nvidia.com); ``sharing``
    ("TimeSlicing", "MPS") adds a GpuConfig of NVIDIA's DRA driver to the class's ``spec.config``."""
    if expression is None:
        expression = f"device.driver == '{NVIDIA}'"
        if device_type:
            expression += f" && device.attributes['{NVIDIA}'].type == '{device_type}'"
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": expression}}]}
    if extended_resource_name:
        spec["extendedResourceName"] = extended_resource_name
    if sharing:
        spec["config"] = [{"opaque": {"driver": NVIDIA, "parameters": {
            "apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "sharing": {"strategy": sharing}}}}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def resource_claim(name: str, namespace: str = "jhub", *, devices: list[tuple[str, str]] = (),
                   owner_pod: str | None = None, driver: str = NVIDIA, allocated: bool | None = None,
                   admin_access: bool = False) -> dict[str, Any]:
    """A claim; ``devices``: (pool, device) pairs of its allocation (allocated when given)."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if owner_pod:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": owner_pod, "uid": "u-1",
                                    "controller": True, "blockOwnerDeletion": True}]
    status: dict[str, Any] = {}
    if devices or allocated:
        results = [{"request": "gpus", "driver": driver, "pool": p, "device": d,
                    **({"adminAccess": True} if admin_access else {})} for p, d in devices]
        status["allocation"] = {"devices": {"results": results}}
    request = {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount",
                                           "count": max(len(devices), 1)}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta,
            "spec": {"devices": {"requests": [request]}}, "status": status}


def counted_dra_pools(counts: NodeImages, nodes: dict[str, tuple[int, dict[str, int]]],
                      group: str = "dra-a100", **dev: Any) -> tuple[PoolView, ...]:
    """The pools of real ``DraAccounts`` on ``nodes`` (name -> (full GPUs, the images it holds,
    ref -> bytes)) in node group ``group``, its nodes joining ``counts`` as the capacity cache wires
    them (``on_member``), each node's images noted as the cache notes a node without device-plugin GPUs."""
    cfg = CapacityConfig()
    ledger = DraAccounts()
    ledger.ledger.on_member = counts.dra_member
    ledger.upsert_class(capacity_dra.class_record(device_class("gpu.nvidia.com", device_type="gpu")))
    for name, (gpus, images) in nodes.items():
        counts.update_other(name, images)
        ledger.upsert_node(capacity_dra.dra_node(group_node(name, group), cfg.node_group_labels,
                                                 cfg.is_gpu_resource))
        ledger.upsert_slice(capacity_dra.slice_record(
            resource_slice(f"{name}-gpus", name, [gpu_device(f"gpu-{i}", **dev) for i in range(gpus)]),
            cfg.dra_drivers))
    return ledger.ledger.pools()
def dra_a100_pools() -> dict:
    """DRA pools of one A100 node group as the capacity cache reports them, by DeviceClass: two nodes
    of whole GPUs (drivers 550 and 535) and one of MIG slices, all with the usual GPU taint."""
    class_record, dra_node, slice_record = capacity_dra.class_record, capacity_dra.dra_node, capacity_dra.slice_record
    cfg = CapacityConfig()
    ledger = DraAccounts()
    for c in (device_class("gpu.nvidia.com", device_type="gpu"), device_class("mig.nvidia.com", device_type="mig")):
        ledger.upsert_class(class_record(c))
    for name, devices in (("d1", [gpu_device(f"gpu-{i}") for i in range(4)]),
                          ("d2", [gpu_device(f"gpu-{i}", driver="535.183.01", cuda="12.2.0") for i in range(4)]),
                          ("m1", [mig_device(f"gpu-0-mig-{i}") for i in range(7)])):
        ledger.upsert_node(dra_node(group_node(name, "dra-a100", taints=[
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]), cfg.node_group_labels,
            cfg.is_gpu_resource))
        ledger.upsert_slice(slice_record(resource_slice(f"{name}-s", name, devices), cfg.dra_drivers))
    return {p.dra.device_class: p for p in ledger.ledger.pools()}
