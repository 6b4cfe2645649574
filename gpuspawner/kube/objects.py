"""Reading Kubernetes objects as the API sends them (plain JSON dicts).  Pure, stdlib only.
Design notes: docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from gpuspawner.kube.times import parse_time

__all__ = [
    "section",
    "items",
    "name",
    "labels",
    "condition",
    "created",
    "pod_priority",
    "pod_waits_for_scheduler",
    "scheduled_at",
    "waiting_containers",
]


def section(obj: Any, key: str) -> Mapping[str, Any]:
    """``obj[key]`` when both are mappings (``metadata``, ``spec``, ``status``...), else ``{}``."""
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def items(value: Any) -> list[Any]:
    """A list field (``conditions``, ``containerStatuses``...) as a list; ``[]`` when it is not one."""
    return list(value) if isinstance(value, (list, tuple)) else []


def name(obj: Any) -> str | None:
    """``metadata.name``, None when missing or empty."""
    value = section(obj, "metadata").get("name")
    return value if isinstance(value, str) and value else None


def labels(obj: Any) -> Mapping[str, Any]:
    """``metadata.labels``."""
    return section(section(obj, "metadata"), "labels")


def condition(obj: Any, kind: str) -> Mapping[str, Any] | None:
    """The first ``status.conditions`` entry of type ``kind`` (``Ready``, ``PodScheduled``...)."""
    for cond in items(section(obj, "status").get("conditions")):
        if isinstance(cond, Mapping) and cond.get("type") == kind:
            return cond
    return None


def created(obj: Any) -> datetime | None:
    """``metadata.creationTimestamp`` (RFC 3339, whole seconds), None when missing or unreadable."""
    return parse_time(section(obj, "metadata").get("creationTimestamp"))


def pod_priority(pod: Any) -> int:
    """``spec.priority``: the admission plugin copies the PriorityClass's value there; unset is 0."""
    value = section(pod, "spec").get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def pod_waits_for_scheduler(pod: Any) -> bool:
    """Whether the pod is in the scheduler's queue: ``Pending``, no node yet, not being deleted."""
    return (
        section(pod, "status").get("phase") == "Pending"
        and not section(pod, "spec").get("nodeName")
        and not section(pod, "metadata").get("deletionTimestamp")
    )


def scheduled_at(pod: Any) -> datetime | None:
    """When the scheduler bound the pod: ``lastTransitionTime`` of ``PodScheduled=True``."""
    cond = condition(pod, "PodScheduled")
    if cond is None or cond.get("status") != "True":
        return None
    return parse_time(cond.get("lastTransitionTime"))


def waiting_containers(pod: Any) -> list[tuple[Mapping[str, Any], str, str]]:
    """``(container status, reason, message)`` of each container waiting with a reason, init
    containers first (the order the kubelet starts them); a missing message is ``""``."""
    out = []
    status = section(pod, "status")
    for cs in items(status.get("initContainerStatuses")) + items(status.get("containerStatuses")):
        waiting = section(section(cs, "state"), "waiting")
        reason, message = waiting.get("reason") or "", waiting.get("message") or ""
        if waiting and isinstance(reason, str) and isinstance(message, str):
            out.append((cs, reason, message))
    return out
