"""Which server pods no server of the hub owns: the reaper's rule (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = ["USER_ANNOTATION", "SERVER_ANNOTATION", "Orphan", "server_of", "orphans"]

# KubeSpawner writes the user's and the server's names, unescaped, as annotations on every pod it
# creates (kubespawner/spawner.py ``_build_common_annotations``; no servername for the default server)
USER_ANNOTATION = "hub.jupyter.org/username"
SERVER_ANNOTATION = "hub.jupyter.org/servername"


@dataclass(frozen=True)
class Orphan:
    """A server pod that no server of the hub owns."""

    namespace: str
    name: str
    uid: str
    user: str
    server: str  # "" for the default server
    age_seconds: float


def server_of(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """The (user, server name) a server pod was created for, from its annotations; None when the
    pod does not say (not a KubeSpawner server pod)."""
    meta = pod.get("metadata") if isinstance(pod, Mapping) else None
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    if not isinstance(annotations, Mapping):
        return None
    user = annotations.get(USER_ANNOTATION)
    server = annotations.get(SERVER_ANNOTATION, "")
    if not isinstance(user, str) or not user or not isinstance(server, str):
        return None
    return user, server


def _created(meta: Mapping[str, Any]) -> float | None:
    stamp = meta.get("creationTimestamp")
    if not isinstance(stamp, str):
        return None
    try:  # RFC 3339 as the API server writes it: 2026-11-27T01:02:03Z
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def orphans(pods: Iterable[Mapping[str, Any]], owned: set[tuple[str, str]], now: float,
            grace: float) -> list[Orphan]:
    """The pods among ``pods`` (server pods, core/v1 Pod dicts) whose (user, server) is not in
    ``owned``, that are not being deleted already, and were created at least ``grace`` seconds
    before ``now`` (epoch seconds), so a pod whose spawn is just being recorded is left alone.
    A pod without a readable creation time or name is left alone too."""
    found = []
    for pod in pods:
        whose = server_of(pod)
        meta = pod.get("metadata") or {}
        if whose is None or whose in owned or meta.get("deletionTimestamp"):
            continue
        created = _created(meta)
        name, namespace = meta.get("name"), meta.get("namespace")
        if created is None or not isinstance(name, str) or not isinstance(namespace, str):
            continue
        age = now - created
        if age < grace:
            continue
        found.append(Orphan(namespace, name, str(meta.get("uid") or ""), whose[0], whose[1], age))
    return found
