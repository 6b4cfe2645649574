"""Shared test builders: the objects tests assemble their cases from.

* DRA: nodes, NVIDIA ResourceSlices, DeviceClasses, claims and templates (shapes of resource.k8s.io/v1);
* the hub: user and server models (``jupyterhub/apihandlers/base.py``), KubeSpawner's server pods,
  NVIDIA dcgm-exporter's series labels.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from gpuspawner.sim.dra import nvidia

# --- DRA ------------------------------------------------------------------------------------------

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


# --- the hub, server pods, DCGM series ------------------------------------------------------------

NOW = datetime(2026, 11, 23, 12, 0, 0, tzinfo=timezone.utc)


def ago(seconds: float) -> str:
    """An RFC 3339 time ``seconds`` before ``NOW``, as the hub writes it."""
    return (NOW - timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def server_model(*, last_activity: float | None = 7200, started: float | None = 7200, ready: bool = True,
                 pending: str | None = None, user_options: dict | None = None,
                 state: dict | None = None) -> dict[str, Any]:
    """A server model; times are seconds before ``NOW``."""
    model = {"name": "", "ready": ready, "pending": pending, "stopped": False,
             "last_activity": ago(last_activity) if last_activity is not None else None,
             "started": ago(started) if started is not None else None,
             "user_options": user_options if user_options is not None else {}}
    if state is not None:
        model["state"] = state
    return model


def hub_user(name: str, servers: dict[str, dict], groups: list[str] | None = None) -> dict[str, Any]:
    user: dict[str, Any] = {"kind": "user", "name": name, "servers": servers}
    if groups is not None:
        user["groups"] = groups
    return user


def server_pod(user: str, server: str = "", *, name: str | None = None, namespace: str = "jupyterhub",
               gpus: int | None = 1, pool: str | None = "gpu-a100:nvidia-a100-sxm4-40gb:nvidia.com/gpu",
               limits: dict | None = None) -> dict[str, Any]:
    """A pod as KubeSpawner + GPUSpawner make it (annotations, labels, limits)."""
    annotations = {"hub.jupyter.org/username": user}
    if server:
        annotations["hub.jupyter.org/servername"] = server
    if gpus is not None:
        annotations["gpuspawner.io/gpus"] = str(gpus)
    if pool is not None:
        annotations["gpuspawner.io/pool"] = pool
    return {"metadata": {"name": name or f"jupyter-{user}" + (f"--{server}" if server else ""),
                         "namespace": namespace, "annotations": annotations,
                         "labels": {"component": "singleuser-server"}},
            "spec": {"containers": [{"name": "notebook", "resources": {"limits": limits or {}}}]}}


def dcgm_labels(pod: str | None, *, namespace: str = "jupyterhub", uuid: str = "GPU-0", gpu: str = "0",
                host: str = "node-1", mig: str | None = None, exported: bool = False) -> dict[str, str]:
    """The labels of one DCGM exporter series (``exported_*`` as Prometheus renames them)."""
    labels = {"gpu": gpu, "UUID": uuid, "device": f"nvidia{gpu}", "modelName": "NVIDIA A100-SXM4-40GB",
              "Hostname": host}
    if mig is not None:
        labels.update(GPU_I_PROFILE="1g.10gb", GPU_I_ID=mig)
    if pod is not None:
        prefix = "exported_" if exported else ""
        labels.update({f"{prefix}pod": pod, f"{prefix}namespace": namespace, f"{prefix}container": "notebook"})
        if exported:
            labels.update(pod="nvidia-dcgm-exporter-x1y2z", namespace="gpu-operator")
    return labels
