"""GPU Feature Discovery labels: findings ``gfd-labels-missing`` (per node group)
and ``gfd-labels-deprecated``.  Pure.  Design notes: docs/troubleshooting.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.capacity.labels import driver_versions, node_group
from gpuspawner.doctor.checks.nodes import gpu_evidence
from gpuspawner.doctor.findings import Finding, ObjectRef, names, node_ref, plural
from gpuspawner.kube import objects

__all__ = ["check_gfd_labels"]

_GFD_DEPRECATED_ONLY = ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.runtime.major")
_GFD_CURRENT = ("nvidia.com/cuda.driver-version.full", "nvidia.com/cuda.runtime-version.full")

GroupKey = tuple[str | None, str | None]  # (node-group label, node group)


def _lacks(labels: Mapping[str, Any]) -> list[str]:
    """The GFD labels a node lacks, by what gpuspawner reads."""
    driver, cuda, _cc = driver_versions(labels)
    lacks = []
    if not labels.get("nvidia.com/gpu.product"):
        lacks.append("nvidia.com/gpu.product")
    if driver is None:
        lacks.append("nvidia.com/cuda.driver-version.*")
    if cuda is None:
        lacks.append("nvidia.com/cuda.runtime-version.*")
    return lacks


def _missing(key: GroupKey, entries: list[tuple[ObjectRef, list[str]]]) -> Finding:
    label, group = key
    refs = tuple(r for r, _ in entries)
    lacks = sorted({x for _, ls in entries for x in ls})
    where = f"node group {group} ({label})" if group else "GPU nodes without a node-group label"
    return Finding(
        "gfd-labels-missing",
        "warning",
        f"{where}: {plural(len(refs), 'node')} ({names(refs)}) lack GPU Feature Discovery "
        f"labels {', '.join(lacks)}; pools show an unknown GPU and the CUDA/driver check is skipped.",
        "Run GPU Feature Discovery on these nodes (GPU Operator: it is on by default; "
        "device plugin chart: helm upgrade -i nvdp nvdp/nvidia-device-plugin -n nvidia-device-plugin "
        "--set gfd.enabled=true), check that its DaemonSet's nodeSelector/tolerations admit them, "
        "or run gpuspawner's labeller: kubectl apply -f deploy/label-node-daemonset.yaml",
        refs,
        {"node_group_label": label, "node_group": group, "missing_labels": lacks},
    )


def _deprecated(refs: list[ObjectRef]) -> Finding:
    return Finding(
        "gfd-labels-deprecated",
        "info",
        f"{plural(len(refs), 'GPU node')} ({names(refs)}) carry only the deprecated "
        "GFD driver labels (nvidia.com/cuda.driver.*, cuda.runtime.*) of GFD before v0.15.0; "
        "gpuspawner reads them, but newer tools read nvidia.com/cuda.driver-version.*.",
        "Upgrade GPU Feature Discovery (k8s-device-plugin v0.15.0 or newer, or a current GPU Operator).",
        tuple(refs),
    )


def check_gfd_labels(nodes: Sequence[Mapping[str, Any]], config: CapacityConfig) -> list[Finding]:
    """``gfd-labels-missing`` (one per node group) and ``gfd-labels-deprecated``, for NVIDIA
    nodes whose device plugin advertises GPUs."""
    missing: dict[GroupKey, list[tuple[ObjectRef, list[str]]]] = {}
    deprecated: list[ObjectRef] = []
    for node in nodes:
        ev = gpu_evidence(node, config)
        # a node whose device plugin advertises nothing is gpu-node-no-allocatable
        # first: GFD runs beside the device plugin and is fixed with it
        if ev.vendor != "nvidia" or ev.allocatable_total == 0:
            continue
        labels = objects.labels(node)
        lacks = _lacks(labels)
        if lacks:
            key = node_group(labels, config.node_group_labels)
            missing.setdefault(key, []).append((node_ref(node), lacks))
        elif all(labels.get(k) for k in _GFD_DEPRECATED_ONLY) and not any(labels.get(k) for k in _GFD_CURRENT):
            deprecated.append(node_ref(node))
    out = [_missing(key, entries)
           for key, entries in sorted(missing.items(), key=lambda kv: (kv[0][1] or "", kv[0][0] or ""))]
    if deprecated:
        out.append(_deprecated(deprecated))
    return out
