"""Which GPU nodes give the culler no GPU activity: for ``gpuspawner doctor``.  Pure.
Design notes: docs/culling.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["EXPORTER_LABEL", "nvidia_gpu_nodes", "nodes_without_exporter", "nodes_without_series"]

EXPORTER_LABEL = ("app", "nvidia-dcgm-exporter")


def _positive(value: Any) -> bool:
    try:
        return int(str(value)) > 0
    except ValueError:
        return False


def nvidia_gpu_nodes(nodes: Iterable[Mapping[str, Any]]) -> list[str]:
    """Names of the nodes with NVIDIA GPU resources, sorted."""
    out = []
    for node in nodes:
        status = node.get("status") or {}
        alloc = status.get("allocatable") or status.get("capacity") or {}
        if any(r.startswith("nvidia.com/") and _positive(v) for r, v in alloc.items()):
            out.append((node.get("metadata") or {}).get("name") or "")
    return sorted(out)


def _ready(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def nodes_without_exporter(nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]],
                           label: tuple[str, str] = EXPORTER_LABEL) -> list[str]:
    """NVIDIA GPU nodes with no Running, Ready DCGM exporter pod."""
    key, value = label
    covered = {(p.get("spec") or {}).get("nodeName") for p in pods
               if ((p.get("metadata") or {}).get("labels") or {}).get(key) == value and _ready(p)}
    return [n for n in nvidia_gpu_nodes(nodes) if n not in covered]


def nodes_without_series(nodes: Iterable[Mapping[str, Any]], series: Iterable[Mapping[str, str]]) -> list[str]:
    """NVIDIA GPU nodes that no activity series (their label sets, e.g. from a Prometheus query) names."""
    named = {labels.get(k) for labels in series for k in ("Hostname", "hostname", "node")}
    return [n for n in nvidia_gpu_nodes(nodes) if n not in named]
