"""When a server's pod stopped holding its GPUs, from what the cluster says of it (pure: pod dicts)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

GONE = "pod-gone"  # no such pod any more: closed when it was seen gone
REPLACED = "pod-replaced"  # a pod of that name with another uid: the recorded one is gone
ENDED = "pod-ended"  # the pod's containers terminated: closed at their finishedAt


def parse_time(value: Any) -> datetime | None:
    """A Kubernetes timestamp ("2026-11-27T12:00:00Z") as aware UTC; None when absent or unreadable."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    if not isinstance(value, str) or not value:
        return None
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def finished_at(pod: Mapping[str, Any]) -> datetime | None:
    """The last finishedAt of the pod's containers when all have terminated (its end), else None."""
    status = pod.get("status") if isinstance(pod, Mapping) else None
    if not isinstance(status, Mapping):
        return None
    statuses = status.get("containerStatuses")
    if not isinstance(statuses, list) or not statuses:
        return None
    ends = []
    for c in statuses:
        state = c.get("state") if isinstance(c, Mapping) else None
        terminated = state.get("terminated") if isinstance(state, Mapping) else None
        if not isinstance(terminated, Mapping):
            return None  # one still runs or waits: the pod holds its GPUs
        ends.append(parse_time(terminated.get("finishedAt")))
    known = [t for t in ends if t is not None]
    return max(known) if known else None


def holding_end(pod: Mapping[str, Any] | None, uid: str | None, now: datetime) -> tuple[datetime, str] | None:
    """When the recorded pod (``uid``) stopped holding its GPUs, and why; None while it holds them.

    Gone: ``now`` (the time it is seen gone); another pod of the same name: ``now``; terminated
    (phase Succeeded/Failed, or every container terminated): its containers' finishedAt, else now."""
    if pod is None:
        return now, GONE
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
    if uid and meta.get("uid") and meta.get("uid") != uid:
        return now, REPLACED
    end = finished_at(pod)
    status = pod.get("status") if isinstance(pod.get("status"), Mapping) else {}
    if end is not None:
        return min(end, now), ENDED
    if status.get("phase") in ("Succeeded", "Failed"):
        return now, ENDED
    return None


def started_at(pod: Mapping[str, Any]) -> datetime | None:
    """When the pod's containers started running (the earliest ``startedAt``), else its ``startTime``."""
    status = pod.get("status") if isinstance(pod, Mapping) else None
    if not isinstance(status, Mapping):
        return None
    starts = []
    for c in status.get("containerStatuses") or ():
        state = c.get("state") if isinstance(c, Mapping) else None
        running = state.get("running") if isinstance(state, Mapping) else None
        if isinstance(running, Mapping):
            starts.append(parse_time(running.get("startedAt")))
    known = [t for t in starts if t is not None]
    return min(known) if known else parse_time(status.get("startTime"))


def gpu_annotations(pod: Mapping[str, Any], pool_key: str, gpus_key: str) -> tuple[str, int] | None:
    """(pool id, GPUs) that GPUSpawner wrote on a server's pod, or None."""
    meta = pod.get("metadata") if isinstance(pod, Mapping) else None
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    if not isinstance(annotations, Mapping):
        return None
    pool, gpus = annotations.get(pool_key), annotations.get(gpus_key)
    if not isinstance(pool, str) or not pool or not isinstance(gpus, str) or not gpus.isdigit() or int(gpus) < 1:
        return None
    return pool, int(gpus)
