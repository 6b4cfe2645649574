"""The hub's running servers as the culler sees them.  Pure.  Design notes: docs/culling.md."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.capacity.pod_requests import pod_usage
from gpuspawner.kube.times import parse_time
from gpuspawner.spawn.pending_verdicts import GPUS_ANNOTATION, POOL_ANNOTATION

__all__ = ["Server", "gpu_count", "pod_index", "servers_from_users"]

USERNAME_ANNOTATION = "hub.jupyter.org/username"
SERVERNAME_ANNOTATION = "hub.jupyter.org/servername"
SINGLEUSER_SELECTOR = "component=singleuser-server"
_IS_GPU = CapacityConfig().is_gpu_resource


@dataclass(frozen=True)
class Server:
    user: str
    name: str  # "" for the default server
    groups: frozenset[str] | None  # None: not visible to the culler's token
    profile: str | None
    pool: str | None
    gpus: int  # 0: a CPU-only server
    started: datetime | None
    last_activity: datetime | None
    ready: bool
    pending: str | None
    pod: tuple[str, str] | None  # (namespace, name)

    @property
    def label(self) -> str:
        return f"{self.user}/{self.name}"


def gpu_count(pod: Mapping[str, Any]) -> int:
    """The GPUs a server's pod holds: GPUSpawner's annotation, else its GPU limits."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    try:
        return max(int(annotations[GPUS_ANNOTATION]), 0)
    except (KeyError, TypeError, ValueError):
        pass
    try:
        return sum(pod_usage(pod.get("spec") or {}, _IS_GPU).values())
    except ValueError:
        return 0


def pod_index(pods: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], Mapping[str, Any]]:
    """(user name, server name) -> the live pod KubeSpawner made for it."""
    index: dict[tuple[str, str], Mapping[str, Any]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        user = annotations.get(USERNAME_ANNOTATION)
        if not user or meta.get("deletionTimestamp"):
            continue
        index[(user, annotations.get(SERVERNAME_ANNOTATION) or "")] = pod
    return index


def _int(value: Any) -> int:
    try:
        return max(int(value), 0)
    except (TypeError, ValueError):
        return 0


def _server(user: Mapping[str, Any], name: str, model: Mapping[str, Any],
            pod: Mapping[str, Any] | None) -> Server:
    options = model.get("user_options") if isinstance(model.get("user_options"), Mapping) else {}
    state = model.get("state") if isinstance(model.get("state"), Mapping) else {}
    groups = user.get("groups")
    where: tuple[str, str] | None = None
    if state.get("pod_name") and state.get("namespace"):
        where = (str(state["namespace"]), str(state["pod_name"]))
    pool = options.get("gpu_pool") if isinstance(options.get("gpu_pool"), str) else None
    gpus = _int(options.get("gpus")) if pool else 0
    if pod is not None:
        meta = pod.get("metadata") or {}
        where = where or (meta.get("namespace") or "default", meta.get("name") or "")
        pool = (meta.get("annotations") or {}).get(POOL_ANNOTATION) or pool
        gpus = gpu_count(pod)
    profile = options.get("profile") if isinstance(options.get("profile"), str) else None
    return Server(
        user=str(user.get("name") or ""), name=name,
        groups=frozenset(groups) if isinstance(groups, list) else None,
        profile=profile, pool=pool, gpus=gpus,
        started=parse_time(model.get("started")), last_activity=parse_time(model.get("last_activity")),
        ready=bool(model.get("ready")), pending=model.get("pending") or None, pod=where,
    )


def servers_from_users(users: Iterable[Mapping[str, Any]],
                       pods: Mapping[tuple[str, str], Mapping[str, Any]] | None = None) -> list[Server]:
    """Every server in the users' ``servers`` maps, with its pod when ``pods`` has it."""
    out = []
    for user in users:
        servers = user.get("servers")
        if not isinstance(servers, Mapping):
            continue
        for name, model in servers.items():
            if isinstance(model, Mapping):
                out.append(_server(user, str(name), model, (pods or {}).get((str(user.get("name")), str(name)))))
    return out
