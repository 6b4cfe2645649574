"""ResourceSlices and DeviceClasses as NVIDIA's GPU DRA driver publishes them.  Pure.
Design notes: docs/simulated-nodes.md.
"""

from __future__ import annotations

import uuid
from typing import Any, Mapping

DRIVER = "gpu.nvidia.com"
_NAMESPACE = uuid.UUID("0b6c2f4e-8c77-5e0f-9d43-5a3f1e7c2b90")

# giProfileId and memory-slice size per MIG profile prefix (NVML, A100/H100 family)
_MIG_PROFILES = {"1g": (19, 1, 14, 1), "2g": (14, 2, 28, 2), "3g": (9, 4, 42, 3), "4g": (5, 4, 56, 4),
                 "7g": (0, 8, 98, 7)}  # profile -> (giProfileId, memory slices, SMs, copy engines)


def semver_of(version: str) -> str:
    """``12.8`` -> ``12.8.0``; ``570.172.08`` -> ``570.172.8`` (semver has no leading zeros)."""
    parts = [p.lstrip("0") or "0" for p in str(version).split(".")]
    return ".".join((parts + ["0", "0"])[:3])


def device_uuid(node: str, index: int, mig: str = "") -> str:
    u = uuid.uuid5(_NAMESPACE, f"{node}/{index}/{mig}")
    return f"MIG-{u}" if mig else f"GPU-{u}"


def _common(spec: Mapping[str, Any], index: int) -> dict[str, Any]:
    return {
        "productName": {"string": str(spec["product"])},
        "brand": {"string": str(spec.get("brand", "Nvidia"))},
        "architecture": {"string": str(spec.get("architecture", ""))},
        "cudaComputeCapability": {"version": semver_of(spec.get("computeCapability", "8.0"))},
        "driverVersion": {"version": semver_of(spec["driverVersion"])},
        "cudaDriverVersion": {"version": semver_of(spec["cudaDriverVersion"])},
        "index": {"int": index},
        "minor": {"int": index},
    }


def gpu_device(node: str, index: int, spec: Mapping[str, Any]) -> dict[str, Any]:
    attrs = {"type": {"string": "gpu"}, "uuid": {"string": device_uuid(node, index)}, **_common(spec, index)}
    return {"name": f"gpu-{index}", "attributes": attrs, "capacity": {"memory": {"value": str(spec["memory"])}}}


def mig_devices(node: str, index: int, spec: Mapping[str, Any], layout: list[Mapping[str, Any]]) -> list[dict]:
    """The MIG devices of GPU ``index``, placed left to right in its eight memory slices."""
    out, start = [], 0
    for entry in layout:
        profile = str(entry["profile"])
        gi, size, sms, copies = _MIG_PROFILES[profile.split(".")[0]]
        mem = profile.split(".", 1)[1].upper().replace("GB", "Gi")
        for _ in range(int(entry.get("count", 1))):
            name = f"gpu-{index}-mig-{gi}-{start}-{size}"
            attrs = {"type": {"string": "mig"}, "uuid": {"string": device_uuid(node, index, name)},
                     "parentUUID": {"string": device_uuid(node, index)}, "profile": {"string": profile},
                     **_common(spec, index)}
            out.append({"name": name, "attributes": attrs,
                        "capacity": {"memory": {"value": mem}, "multiprocessors": {"value": str(sms)},
                                     "copyEngines": {"value": str(copies)}}})
            start += size
    return out


def node_slice(node: str, spec: Mapping[str, Any], generation: int = 0) -> dict[str, Any]:
    """The one ResourceSlice the driver's kubelet plugin publishes for ``node``."""
    mig = {int(k): v for k, v in (spec.get("mig") or {}).items()}
    devices: list[dict[str, Any]] = []
    for i in range(int(spec.get("count", 1))):
        devices += mig_devices(node, i, spec, mig[i]) if i in mig else [gpu_device(node, i, spec)]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {"driver": DRIVER, "nodeName": node,
                 "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
                 "devices": devices},
    }


def device_classes() -> list[dict[str, Any]]:
    """The DeviceClasses the driver's Helm chart installs."""
    def cls(name: str, kind: str) -> dict[str, Any]:
        expr = f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == '{kind}'"
        return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
                "spec": {"selectors": [{"cel": {"expression": expr}}]}}
    return [cls("gpu.nvidia.com", "gpu"), cls("mig.nvidia.com", "mig")]
