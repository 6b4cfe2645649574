"""The NVIDIA GPUs of a simulated node, as DCGM would enumerate them.  Pure, stdlib only.
Design notes: docs/simulated-nodes.md.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import devices
from .pod_resources import QuantityError, scheduler_units

__all__ = ["Gpu", "MigInstance", "driver_version", "node_gpus", "has_nvidia_gpus"]

FULL = "nvidia.com/gpu"
SHARED = "nvidia.com/gpu.shared"
MIG_PREFIX = "nvidia.com/mig-"
_MIG_PROFILE = re.compile(r"^(\d+)g\.")


@dataclass(frozen=True)
class MigInstance:
    gpu_instance_id: int
    profile: str  # "1g.10gb"
    uuid: str  # the plugin's MIG-... id
    memory_mib: int


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    model: str
    memory_mib: int
    pci_bus_id: str
    aliases: tuple[str, ...] = ()  # other plugin ids that are this GPU (time-slicing replicas)
    instances: tuple[MigInstance, ...] = field(default_factory=tuple)

    @property
    def device(self) -> str:
        return f"nvidia{self.index}"

    @property
    def plugin_ids(self) -> tuple[str, ...]:
        return (self.uuid, *self.aliases)


def _allocatable(node: Mapping[str, Any]) -> dict[str, int]:
    status = node.get("status") or {}
    raw = status.get("allocatable") or status.get("capacity") or {}
    out: dict[str, int] = {}
    for name, value in raw.items():
        if name.startswith("nvidia.com/"):
            try:
                out[name] = scheduler_units(name, value)
            except QuantityError:
                continue
    return out


def _label_int(labels: Mapping[str, str], key: str) -> int | None:
    try:
        return int(labels[key])
    except (KeyError, TypeError, ValueError):
        return None


def has_nvidia_gpus(node: Mapping[str, Any]) -> bool:
    """Whether DCGM would find NVIDIA GPUs on the node (any NVIDIA GPU resource > 0)."""
    return any(n > 0 for n in _allocatable(node).values())


def model_name(product: str) -> str:
    """NVML's name from GFD's ``nvidia.com/gpu.product`` (see the module's note)."""
    product = re.sub(r"-MIG-\d+g\.\d+gb$", "", product or "")
    brand, dash, rest = product.partition("-")
    return f"{brand} {rest}" if dash else product


def driver_version(node: Mapping[str, Any]) -> str:
    labels = (node.get("metadata") or {}).get("labels") or {}
    full = labels.get("nvidia.com/cuda.driver-version.full")
    if full:
        return full
    parts = [labels.get(f"nvidia.com/cuda.driver.{k}") for k in ("major", "minor", "rev")]
    return ".".join(p for p in parts if p)


def _mig_instances(name: str, labels: Mapping[str, str], alloc: Mapping[str, int], mig_gpus: int
                   ) -> dict[int, list[tuple[str, str, int]]]:
    """MIG GPU ordinal -> [(profile, uuid, memory MiB)], larger profiles first."""
    per_gpu: dict[int, list[tuple[int, str, str, int]]] = {}
    for resource in sorted(r for r in alloc if r.startswith(MIG_PREFIX)):
        count = alloc[resource]
        profile = resource[len(MIG_PREFIX):]
        memory = _label_int(labels, f"nvidia.com/mig-{profile}.memory") or 0
        m = _MIG_PROFILE.match(profile)
        slices = int(m.group(1)) if m else 0
        share = max(1, math.ceil(count / mig_gpus))
        for j in range(count):
            per_gpu.setdefault(min(j // share, mig_gpus - 1), []).append(
                (slices, profile, devices.device_id(name, resource, j), memory))
    return {g: [(p, u, mem) for _, p, u, mem in sorted(items, key=lambda t: (-t[0], t[1]))]
            for g, items in per_gpu.items()}


def node_gpus(node: Mapping[str, Any]) -> list[Gpu]:
    """The node's NVIDIA GPUs in index order (see the module's docstring)."""
    meta = node.get("metadata") or {}
    name, labels = meta.get("name") or "", meta.get("labels") or {}
    alloc = _allocatable(node)
    model = model_name(labels.get("nvidia.com/gpu.product", "NVIDIA GPU"))
    memory = _label_int(labels, "nvidia.com/gpu.memory") or 0
    full = alloc.get(FULL, 0)
    shared = alloc.get(SHARED, 0)
    replicas = max(_label_int(labels, "nvidia.com/gpu.replicas") or 1, 1)
    mig = any(r.startswith(MIG_PREFIX) and n > 0 for r, n in alloc.items())
    counted = _label_int(labels, "nvidia.com/gpu.count") or 0
    physical_shared = math.ceil(shared / replicas) if shared else 0
    mig_gpus = max(counted - full - physical_shared, 1) if mig else 0
    gpus: list[Gpu] = []

    def add(aliases: tuple[str, ...] = (), instances: tuple[MigInstance, ...] = ()) -> None:
        i = len(gpus)
        gpus.append(Gpu(i, devices.device_id(name, FULL, i), model, memory, f"00000000:{0x10 + i:02X}:00.0",
                        aliases, instances))
    for _ in range(full):
        add()
    for k in range(physical_shared):
        add(tuple(devices.device_id(name, SHARED, j) for j in range(k * replicas, min((k + 1) * replicas, shared))))
    layout = _mig_instances(name, labels, alloc, mig_gpus) if mig else {}
    for g in range(mig_gpus):
        add(instances=tuple(MigInstance(n + 1, p, u, mem) for n, (p, u, mem) in enumerate(layout.get(g, []))))
    return gpus
