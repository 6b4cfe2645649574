"""Builders of the Kubernetes objects the capacity tests feed in (wire-format dicts)."""

from __future__ import annotations

from typing import Any

GFD_A100 = {
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
    "nvidia.com/gpu.memory": "81920",
    "nvidia.com/cuda.driver-version.full": "570.172.08",
    "nvidia.com/cuda.runtime-version.full": "12.8",
    "nvidia.com/gpu.compute.major": "8",
    "nvidia.com/gpu.compute.minor": "0",
}


def node(
    name: str,
    allocatable: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    *,
    ready: bool | None = True,
    unschedulable: bool = False,
    taints: list[dict] | None = None,
) -> dict:
    status: dict[str, Any] = {"allocatable": {"cpu": "32", "memory": "256Gi", **(allocatable or {})}}
    if ready is not None:
        status["conditions"] = [
            {"type": "MemoryPressure", "status": "False"},
            {"type": "Ready", "status": "True" if ready else "False"},
        ]
    spec: dict[str, Any] = {}
    if unschedulable:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = taints
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": spec,
        "status": status,
    }


def container(name: str = "c", requests: dict | None = None, limits: dict | None = None, **extra) -> dict:
    res: dict[str, Any] = {}
    if requests is not None:
        res["requests"] = requests
    if limits is not None:
        res["limits"] = limits
    return {"name": name, "image": "busybox", "resources": res, **extra}


def pod(
    name: str,
    gpus: int | dict[str, int] = 1,
    node_name: str | None = None,
    *,
    namespace: str = "jhub",
    phase: str = "Running",
    resource: str = "nvidia.com/gpu",
    containers: list[dict] | None = None,
    init_containers: list[dict] | None = None,
) -> dict:
    if containers is None:
        want = gpus if isinstance(gpus, dict) else ({resource: str(gpus)} if gpus else {})
        containers = [container("notebook", limits={"cpu": "1", **want})]
    spec: dict[str, Any] = {"containers": containers}
    if init_containers:
        spec["initContainers"] = init_containers
    if node_name:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
        "status": {"phase": phase},
    }
