"""The timestamps a cluster snapshot carries, and how a load without ``keep_timestamps`` resets them.
Design notes: docs/simulated-nodes.md.
"""

from __future__ import annotations

from typing import Any

__all__ = ["restamp", "fill_node_conditions"]

_CONDITION_TIMES = ("lastTransitionTime", "lastProbeTime", "lastHeartbeatTime", "lastUpdateTime")


def _set(d: Any, keys: tuple[str, ...], now: str) -> None:
    if not isinstance(d, dict):
        return
    for k in keys:
        if d.get(k):
            d[k] = now


def _conditions(status: Any, now: str) -> None:
    if isinstance(status, dict):
        for c in status.get("conditions") or []:
            _set(c, _CONDITION_TIMES, now)


def _container_states(status: dict[str, Any], now: str) -> None:
    for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        for cs in status.get(key) or []:
            if not isinstance(cs, dict):
                continue
            for state_key in ("state", "lastState"):
                state = cs.get(state_key)
                if isinstance(state, dict):
                    _set(state.get("running"), ("startedAt",), now)
                    _set(state.get("terminated"), ("startedAt", "finishedAt"), now)


def restamp(plural: str, obj: dict[str, Any], now: str) -> None:
    """Set the kind's known timestamps of ``obj`` to ``now`` (RFC 3339, seconds)."""
    status = obj.get("status")
    if plural == "pods" and isinstance(status, dict):
        _set(status, ("startTime",), now)
        _conditions(status, now)
        _container_states(status, now)
    elif plural == "nodes":
        _conditions(status, now)
        for t in (obj.get("spec") or {}).get("taints") or []:
            _set(t, ("timeAdded",), now)
    elif plural == "events":
        _set(obj, ("firstTimestamp", "lastTimestamp"), now)
        if obj.get("eventTime"):
            obj["eventTime"] = now[:-1] + ".000000Z"
        if isinstance(obj.get("series"), dict) and obj["series"].get("lastObservedTime"):
            obj["series"]["lastObservedTime"] = now[:-1] + ".000000Z"
    elif plural in ("namespaces", "persistentvolumeclaims"):
        _conditions(status, now)


def fill_node_conditions(node: dict[str, Any], now: str) -> None:
    """A node condition without times (a hand-written file) gets the load time, as a kubelet's
    first status post would stamp it."""
    for c in (node.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict):
            c.setdefault("lastHeartbeatTime", now)
            c.setdefault("lastTransitionTime", now)
