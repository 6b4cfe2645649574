"""What a queued server's Kueue Workload says, in plain words for the person waiting.
Design notes: docs/kueue.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuspawner.kube import objects

# kinds of state (QueueState.kind)
PENDING = "pending"
RESERVED = "reserved"  # quota reserved, admission checks still running
ADMITTED = "admitted"
PREEMPTED = "preempted"
EVICTED = "evicted"
PODS_READY_TIMEOUT = "pods_ready_timeout"
DEACTIVATED = "deactivated"
EXCEEDS_MAX_QUOTA = "exceeds_max_quota"
NO_MATCHING_FLAVOR = "no_matching_flavor"
QUEUE_INACTIVE = "queue_inactive"
FINISHED = "finished"

# the flavor assigner's words for a request no waiting can fit
_NEVER_FITS = re.compile(r"> maximum capacity")
_NO_FLAVOR = re.compile(r"doesn't match node affinity|untolerated taint|flavor \S+ not found|unavailable in ClusterQueue")
_CAN_WAIT = re.compile(r"insufficient unused quota")

_PREEMPTED_WHY = {
    "InClusterQueue": "a server with higher priority in the same queue needed its GPU quota",
    "InCohortReclamation": "another queue took back the GPU quota this server had borrowed",
    "InCohortReclaimWhileBorrowing": "another queue took back the GPU quota this server had borrowed",
    "InCohortFairSharing": "Kueue's fair sharing gave its GPU quota to another queue",
}


@dataclass(frozen=True)
class Position:
    """The server's place in its LocalQueue (1 = next), of ``of`` pending there."""

    position: int
    of: int


@dataclass(frozen=True)
class QueueState:
    """``message`` for the progress page; ``fatal``: waiting cannot end in a running server (the spawn
    should end with ``message``); ``stopped``: Kueue took the server's place away (its pod is deleted)."""

    kind: str
    message: str
    fatal: bool = False
    stopped: bool = False
    flavor: str | None = None


def priority_name(workload: Any) -> str | None:
    ref = objects.section(objects.section(workload, "spec"), "priorityClassRef")
    name = ref.get("name")
    return name if isinstance(name, str) and name else None


def admitted_flavor(workload: Any, resource: str = "nvidia.com/gpu") -> str | None:
    """The flavor Kueue reserved ``resource`` in (else the first flavor it names)."""
    admission = objects.section(objects.section(workload, "status"), "admission")
    found = None
    for podset in objects.items(admission.get("podSetAssignments")):
        flavors = objects.section(podset, "flavors")
        if isinstance(flavors.get(resource), str):
            return flavors[resource]
        found = found or next((v for v in flavors.values() if isinstance(v, str)), None)
    return found


def _true(workload: Any, kind: str) -> Mapping[str, Any] | None:
    cond = objects.condition(workload, kind)
    return cond if cond is not None and cond.get("status") == "True" else None


def _text(cond: Mapping[str, Any] | None, key: str) -> str:
    value = cond.get(key) if cond is not None else None
    return value if isinstance(value, str) else ""


def workload_state(workload: Any, queue: str, position: Position | None = None,
                   resource: str = "nvidia.com/gpu") -> QueueState:
    """The state of a queued server from its Workload (and its place in ``queue``, when known)."""
    spec = objects.section(workload, "spec")
    if spec.get("active") is False:
        return QueueState(DEACTIVATED, f"Deactivated: Kueue will not admit this server in {queue} again "
                          f"({_deactivation(workload)}). Stop it and start it again, or ask an admin about "
                          "the queue.", fatal=True)
    if _true(workload, "Finished"):
        return QueueState(FINISHED, f"The server's place in {queue} has ended.", stopped=True)
    evicted = _true(workload, "Evicted")
    if evicted:
        return _eviction(workload, evicted, queue)
    flavor = admitted_flavor(workload, resource)
    if _true(workload, "Admitted"):
        where = f" in flavor {flavor}" if flavor else ""
        return QueueState(ADMITTED, f"Admitted: quota reserved{where}", flavor=flavor)
    if _true(workload, "QuotaReserved"):
        where = f" in flavor {flavor}" if flavor else ""
        return QueueState(RESERVED, f"Quota reserved{where}; waiting for Kueue's admission checks", flavor=flavor)
    return _pending(workload, queue, position)


def _pending(workload: Any, queue: str, position: Position | None) -> QueueState:
    reserved = objects.condition(workload, "QuotaReserved") or {}
    reason, detail = _text(reserved, "reason"), _text(reserved, "message")
    if reason == "Inadmissible":
        return QueueState(QUEUE_INACTIVE, f"Waiting: Kueue cannot queue this server in {queue} now ({detail}). "
                          "Ask an admin to check the queue, or stop the server and choose a pool without one.")
    if _NEVER_FITS.search(detail) and not _CAN_WAIT.search(detail):
        return QueueState(EXCEEDS_MAX_QUOTA, f"Never admissible in {queue}: this server asks for more GPUs than "
                          f"the queue's quota can ever give (Kueue: {detail}). Ask for fewer GPUs, or ask an admin "
                          "to raise the ClusterQueue's quota.", fatal=True)
    if _NO_FLAVOR.search(detail) and not _CAN_WAIT.search(detail):
        return QueueState(NO_MATCHING_FLAVOR, f"Never admissible in {queue}: none of the queue's GPU flavors fits "
                          f"this server (Kueue: {detail}). Choose another pool, or ask an admin to check the "
                          "queue's ResourceFlavors.", fatal=True)
    prio = priority_name(workload)
    suffix = f" (priority {prio})" if prio else ""
    if position is not None:
        return QueueState(PENDING, f"Queued in {queue}: position {position.position} of {position.of}{suffix}")
    return QueueState(PENDING, f"Queued in {queue}: waiting for GPU quota{suffix}")


def _eviction(workload: Any, evicted: Mapping[str, Any], queue: str) -> QueueState:
    reason, detail = _text(evicted, "reason"), _text(evicted, "message")
    if reason == "Preempted":
        preempted = _true(workload, "Preempted")
        why = _PREEMPTED_WHY.get(_text(preempted, "reason"), "a server with higher priority needed its GPU quota")
        return QueueState(PREEMPTED, f"Preempted in {queue}: {why}. Kueue stopped this server; start it again to "
                          "queue for a GPU.", fatal=True, stopped=True)
    if reason == "PodsReadyTimeout":
        return QueueState(PODS_READY_TIMEOUT, f"Evicted from {queue}: the server did not become ready within "
                          "Kueue's waitForPodsReady timeout (a large GPU image can take longer to pull). Start it "
                          "again; if this repeats, ask an admin to raise waitForPodsReady.timeout.",
                          fatal=True, stopped=True)
    if reason in ("ClusterQueueStopped", "LocalQueueStopped"):
        return QueueState(EVICTED, f"Evicted from {queue}: an admin stopped the queue. Start the server again "
                          "once the queue runs, or choose a pool without one.", fatal=True, stopped=True)
    if reason == "Deactivated":
        return QueueState(DEACTIVATED, f"Deactivated: Kueue will not admit this server in {queue} again "
                          f"({_deactivation(workload) or detail}). Stop it and start it again, or ask an admin "
                          "about the queue.", fatal=True, stopped=True)
    return QueueState(EVICTED, f"Evicted from {queue} by Kueue ({reason or 'no reason given'}: "
                      f"{detail or 'no message'}). Start the server again.", fatal=True, stopped=True)


def _deactivation(workload: Any) -> str:
    for kind in ("Requeued", "Evicted"):
        cond = objects.condition(workload, kind) or {}
        if _text(cond, "message"):
            return _text(cond, "message")
    return "an admin or a requeuing limit deactivated it"


def position_of(entries: Iterable[Any], workload_name: str) -> Position | None:
    """The server's place from the visibility API's ``pendingworkloads`` list of its LocalQueue
    (``positionInLocalQueue`` counts from 0)."""
    listed = [e for e in entries if isinstance(e, Mapping)]
    for e in listed:
        if objects.name(e) == workload_name:
            pos = e.get("positionInLocalQueue")
            if isinstance(pos, int) and not isinstance(pos, bool) and pos >= 0:
                return Position(pos + 1, max(len(listed), pos + 1))
    return None
