"""Shared test builders: small Kubernetes objects the tests assemble their cases from."""

from __future__ import annotations

from typing import Any

from gpuspawner.sim.dra import nvidia

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
