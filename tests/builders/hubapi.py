"""Shared test builders: the hub's user and server models, server pods, DCGM series.

Shapes follow what the real components send: JupyterHub's REST API models
(``jupyterhub/apihandlers/base.py``), KubeSpawner's pod annotations, NVIDIA
dcgm-exporter's labels.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

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
