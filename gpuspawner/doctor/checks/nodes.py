"""GPU nodes: does a node have GPUs, does its device plugin advertise them, is it Ready and
schedulable?  Findings ``gpu-node-no-allocatable``, ``gpu-node-not-ready``,
``gpu-node-cordoned`` and ``no-gpu-nodes``.  Pure.  Design notes: docs/troubleshooting.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.capacity.quantity import QuantityError, parse_count
from gpuspawner.doctor.findings import Finding, node_ref, plural
from gpuspawner.kube import objects

__all__ = ["GpuEvidence", "gpu_evidence", "check_nodes"]


def _count(raw: Any) -> int:
    try:
        return parse_count(raw)
    except (QuantityError, TypeError):
        return 0


def _gpu_amounts(resources: Mapping[str, Any], config: CapacityConfig) -> dict[str, int]:
    return {r: _count(v) for r, v in resources.items() if isinstance(r, str) and config.is_gpu_resource(r)}


def _is_ready(node: Mapping[str, Any]) -> bool:
    cond = objects.condition(node, "Ready")
    return cond is not None and cond.get("status") == "True"


def _is_cordoned(node: Mapping[str, Any]) -> bool:
    return bool(objects.section(node, "spec").get("unschedulable"))


# ---------------------------------------------------------------------------
# is it a GPU node?  (GFD, NFD and the cloud providers' GPU labels)

#: Labels that say a node has GPUs even when no device plugin advertises them:
#: NFD's PCI vendor labels (10de NVIDIA, 1002 AMD), the GPU Operator's
#: ``nvidia.com/gpu.present`` (set from the NFD label), the clouds' accelerator
#: labels (GKE, AKS).  (label, expected value or None for "any non-empty", vendor)
_HARDWARE_LABELS: tuple[tuple[str, str | None, str], ...] = (
    ("feature.node.kubernetes.io/pci-10de.present", "true", "nvidia"),  # NFD's PCI vendor label (NVIDIA: 10de)
    ("nvidia.com/gpu.present", "true", "nvidia"),  # NVIDIA/gpu-operator controllers/state_manager.go
    ("cloud.google.com/gke-accelerator", None, "nvidia"),  # cloud.google.com/kubernetes-engine/docs/how-to/gpus
    ("kubernetes.azure.com/accelerator", "nvidia", "nvidia"),  # learn.microsoft.com/azure/aks/use-labels
    ("feature.node.kubernetes.io/pci-1002.present", "true", "amd"),  # NFD's PCI vendor label (AMD: 1002)
)


@dataclass(frozen=True, slots=True)
class GpuEvidence:
    """Why a node is a GPU node, and what its device plugin advertises."""

    vendor: str | None  # nvidia | amd | None
    hardware_labels: tuple[str, ...]  # "label=value" that show GPU hardware
    capacity: Mapping[str, int]  # GPU resources in status.capacity
    allocatable: Mapping[str, int]  # GPU resources in status.allocatable

    @property
    def is_gpu_node(self) -> bool:
        return bool(self.hardware_labels) or any(self.capacity.values()) or any(self.allocatable.values())

    @property
    def allocatable_total(self) -> int:
        return sum(self.allocatable.values())


def gpu_evidence(node: Mapping[str, Any], config: CapacityConfig) -> GpuEvidence:
    labels = objects.labels(node)
    found: list[str] = []
    vendor: str | None = None
    for key, want, who in _HARDWARE_LABELS:
        value = labels.get(key)
        if isinstance(value, str) and value and (want is None or value.lower() == want):
            found.append(f"{key}={value}")
            vendor = vendor or who
    # GFD's count of full GPUs: written from NVML, so the GPUs are there
    if _count(labels.get("nvidia.com/gpu.count")) > 0:
        found.append(f"nvidia.com/gpu.count={labels['nvidia.com/gpu.count']}")
        vendor = vendor or "nvidia"
    status = objects.section(node, "status")
    capacity = _gpu_amounts(objects.section(status, "capacity"), config)
    allocatable = _gpu_amounts(objects.section(status, "allocatable"), config)
    if vendor is None:
        for resource in (*allocatable, *capacity):
            if resource.startswith("nvidia.com/"):
                vendor = "nvidia"
                break
            if resource.startswith("amd.com/"):
                vendor = "amd"
                break
    return GpuEvidence(vendor, tuple(found), capacity, allocatable)


# ---------------------------------------------------------------------------
# nodes: no allocatable, NotReady, cordoned


def _device_plugin_fix(node: Mapping[str, Any], ev: GpuEvidence) -> str:
    name = objects.name(node) or "NODE"
    labels = objects.labels(node)
    see = f"kubectl get pods -A -o wide --field-selector spec.nodeName={name}"
    if ev.vendor == "amd":
        return (
            f"Check that the AMD GPU device plugin (ROCm/k8s-device-plugin) runs on {name} and its log "
            f"shows the GPUs ({see}); it advertises amd.com/gpu once the amdgpu driver is loaded."
        )
    deploy = labels.get("nvidia.com/gpu.deploy.device-plugin")
    if deploy is not None and deploy != "true":
        # GPU Operator: state_manager.go deploys an operand only where its deploy label is "true"
        return (
            f"The GPU Operator does not deploy the device plugin on {name} "
            f"(nvidia.com/gpu.deploy.device-plugin={deploy}): "
            f"kubectl label node {name} nvidia.com/gpu.deploy.device-plugin=true --overwrite"
        )
    if labels.get("cloud.google.com/gke-accelerator") and not labels.get("nvidia.com/gpu.present"):
        return (
            f"On GKE the driver installer DaemonSet must run on {name} before nvidia.com/gpu appears: "
            f"check {see} (nvidia-driver-installer / nvidia-gpu-device-plugin), or create the node pool "
            "with --accelerator ...,gpu-driver-version=default."
        )
    if any(ev.capacity.values()):
        return (
            f"The device plugin reports the GPUs of {name} as unhealthy (capacity > allocatable): "
            f"look for Xid errors in its log ({see}) and in `dmesg` on the node; reboot or drain the node."
        )
    return (
        f"Make sure the NVIDIA driver, container toolkit and device plugin run on {name} ({see}; "
        "GPU Operator: kubectl get pods -n gpu-operator -o wide) and that the device plugin's log lists "
        "the GPUs; with MIG, check that nvidia.com/mig.config.state is success."
    )


def _no_allocatable(node: Mapping[str, Any], ev: GpuEvidence) -> Finding:
    ref = node_ref(node)
    why = ", ".join(ev.hardware_labels) or (
        "capacity " + ", ".join(f"{r}={n}" for r, n in sorted(ev.capacity.items()))
    )
    return Finding(
        "gpu-node-no-allocatable",
        "error",
        f"Node {ref.name} has GPUs ({why}) but its device plugin advertises none "
        "(allocatable GPU resources are 0), so no GPU server can start there.",
        _device_plugin_fix(node, ev),
        (ref,),
        {"vendor": ev.vendor, "hardware_labels": list(ev.hardware_labels),
         "capacity": dict(ev.capacity), "allocatable": dict(ev.allocatable)},
    )


def _not_ready(node: Mapping[str, Any]) -> Finding:
    ref = node_ref(node)
    cond = objects.condition(node, "Ready") or {}
    state = cond.get("status", "missing")
    reason = cond.get("reason") or ""
    message = cond.get("message") or ""
    tail = f": {reason}" if reason else ""
    tail += f" ({message})" if message else ""
    return Finding(
        "gpu-node-not-ready",
        "error",
        f"GPU node {ref.name} is not Ready (Ready={state}{tail}); the scheduler keeps new "
        "pods off it and its GPUs do not count.",
        f"kubectl describe node {ref.name}; then check the kubelet and container runtime "
        "on the node (journalctl -u kubelet), or replace the node.",
        (ref,),
        {"ready": state, "reason": reason, "message": message},
    )


def _cordoned(node: Mapping[str, Any], ev: GpuEvidence) -> Finding:
    ref = node_ref(node)
    return Finding(
        "gpu-node-cordoned",
        "warning",
        f"GPU node {ref.name} is cordoned (spec.unschedulable): its "
        f"{plural(ev.allocatable_total, 'GPU')} cannot take new servers.",
        f"kubectl uncordon {ref.name} (once its maintenance is over)",
        (ref,),
    )


def _no_gpu_nodes(nodes: Sequence[Mapping[str, Any]], config: CapacityConfig) -> Finding:
    return Finding(
        "no-gpu-nodes",
        "warning",
        f"None of the {plural(len(nodes), 'node')} has GPUs: no GPU resource "
        f"({', '.join(config.gpu_resources)}, {', '.join(p + '*' for p in config.gpu_resource_prefixes)}) "
        "and no GPU hardware label (NFD pci-10de/pci-1002, nvidia.com/gpu.present).",
        "Add a GPU node group, or if GPU nodes exist install Node Feature Discovery and the "
        "device plugin (NVIDIA GPU Operator: helm install gpu-operator nvidia/gpu-operator -n "
        "gpu-operator --create-namespace); if your GPUs use another resource name set "
        'c.GPUSpawner.gpu_resources = ["example.com/gpu"].',
    )


def check_nodes(nodes: Sequence[Mapping[str, Any]], config: CapacityConfig) -> list[Finding]:
    """``gpu-node-no-allocatable``, ``gpu-node-not-ready``, ``gpu-node-cordoned``, ``no-gpu-nodes``."""
    out: list[Finding] = []
    gpu_nodes = 0
    for node in nodes:
        ev = gpu_evidence(node, config)
        if not ev.is_gpu_node:
            continue
        gpu_nodes += 1
        if ev.allocatable_total == 0:
            out.append(_no_allocatable(node, ev))
        if not _is_ready(node):
            out.append(_not_ready(node))
        if _is_cordoned(node):
            out.append(_cordoned(node, ev))
    if gpu_nodes == 0:
        out.append(_no_gpu_nodes(nodes, config))
    return out
