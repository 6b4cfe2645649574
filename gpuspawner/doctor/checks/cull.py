"""GPU nodes whose GPU activity the culler cannot see: finding ``cull-no-gpu-metrics``.  Pure.
Design notes: docs/troubleshooting.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuspawner.cull.coverage import nodes_without_exporter, nodes_without_series
from gpuspawner.doctor.findings import Finding, ObjectRef

__all__ = ["ACTIVITY_SERIES_QUERY", "CullSetup", "check_cull_coverage"]

#: The Prometheus query whose label sets say which nodes report GPU activity.
ACTIVITY_SERIES_QUERY = "count by (Hostname) (DCGM_FI_PROF_GR_ENGINE_ACTIVE or DCGM_FI_DEV_GPU_UTIL)"



@dataclass(frozen=True)
class CullSetup:
    """Culling is configured: where the culler reads GPU activity, and what that source said."""
    prometheus_url: str | None = None  # None: the culler scrapes the exporters directly
    series: tuple[Mapping[str, str], ...] | None = None  # ACTIVITY_SERIES_QUERY's label sets


_NOTHING_CULLED = "nothing on this node is ever culled: "


def _no_exporter(node: str) -> Finding:
    return Finding(
        "cull-no-gpu-metrics",
        "warning",
        f"GPU node {node} runs no Ready DCGM exporter pod (label app=nvidia-dcgm-exporter), so the culler "
        f"sees no GPU activity there and keeps every server on it: {_NOTHING_CULLED}deploy the DCGM exporter.",
        "Deploy NVIDIA's DCGM exporter on every GPU node (the GPU Operator does: check "
        f"`kubectl get pods -n gpu-operator -l app=nvidia-dcgm-exporter -o wide` and that node {node} "
        "is not labelled nvidia.com/gpu.deploy.dcgm-exporter=false).",
        (ObjectRef("Node", node),),
        {"missing": "exporter"},
    )


def _no_series(node: str, prometheus_url: str) -> Finding:
    return Finding(
        "cull-no-gpu-metrics",
        "warning",
        f"Prometheus ({prometheus_url}) has no GPU activity series (DCGM_FI_PROF_GR_ENGINE_ACTIVE or "
        f"DCGM_FI_DEV_GPU_UTIL) with Hostname={node}: {_NOTHING_CULLED}scrape its DCGM exporter.",
        "Add a scrape job for the exporter pods (docs/culling.md, 'Where GPU activity comes from'), "
        "then check the target is up in Prometheus' /targets page; or run the culler without "
        "--prometheus-url to scrape the exporters directly.",
        (ObjectRef("Node", node),),
        {"missing": "series", "prometheus_url": prometheus_url},
    )


def check_cull_coverage(nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]] | None,
                        series: Sequence[Mapping[str, str]] | None = None,
                        prometheus_url: str | None = None) -> list[Finding]:
    """``cull-no-gpu-metrics`` per NVIDIA GPU node the culler cannot see.  ``pods`` None: not
    listed (the exporter view is skipped); ``series``: the label sets of
    :data:`ACTIVITY_SERIES_QUERY`'s answer from ``prometheus_url`` (None: no Prometheus)."""
    no_exporter = set(nodes_without_exporter(nodes, pods)) if pods is not None else set()
    out = [_no_exporter(n) for n in sorted(no_exporter)]
    if series is not None and prometheus_url:
        out += [_no_series(n, prometheus_url) for n in nodes_without_series(nodes, series)
                if n not in no_exporter]
    return out
