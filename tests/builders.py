"""Shared test builders: DRA objects (resource.k8s.io/v1) as JSON dicts, as the API server sends them.

Nodes and pods: ``tests.capacity.node`` / ``tests.capacity.pod``."""

from __future__ import annotations

from typing import Any

from tests.capacity import node

NVIDIA = "gpu.nvidia.com"
GROUP_LABEL = "cloud.google.com/gke-nodepool"


def group_node(name: str, group: str | None = None, allocatable: dict | None = None, **kw: Any) -> dict[str, Any]:
    """A Node in node group ``group`` (GKE's label), as ``tests.capacity.node`` builds it."""
    return node(name, allocatable, {GROUP_LABEL: group} if group else None, **kw)


def semver(version: str) -> str:
    """A version as NVIDIA's driver publishes it (Masterminds semver ``String()``): ``535.183.01`` ->
    ``535.183.1``, ``12.4`` -> ``12.4.0``."""
    parts = [str(int(p)) for p in version.split(".")]
    return ".".join((parts + ["0", "0"])[:3])


def gpu_device(name: str, product: str = "NVIDIA A100-SXM4-80GB", *, driver: str = "550.54.15",
               cuda: str = "12.4.0", memory: str = "80Gi", **extra: Any) -> dict[str, Any]:
    """A full GPU as NVIDIA's DRA driver publishes it (deviceinfo.go: unqualified attribute names,
    versions as semver)."""
    return {
        "name": name,
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": f"GPU-{name}-0000"},
            "productName": {"string": product},
            "brand": {"string": "Nvidia"},
            "architecture": {"string": "Ampere"},
            "cudaComputeCapability": {"version": "8.0.0"},
            "driverVersion": {"version": semver(driver)},
            "cudaDriverVersion": {"version": semver(cuda)},
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
                 extended_resource_name: str | None = None) -> dict[str, Any]:
    """NVIDIA's classes: ``device_type`` "gpu" (gpu.nvidia.com) or "mig" (mig.nvidia.com)."""
    if expression is None:
        expression = f"device.driver == '{NVIDIA}'"
        if device_type:
            expression += f" && device.attributes['{NVIDIA}'].type == '{device_type}'"
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": expression}}]}
    if extended_resource_name:
        spec["extendedResourceName"] = extended_resource_name
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
