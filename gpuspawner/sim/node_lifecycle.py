"""The simulated node lifecycle controller and the taint rules it keeps.
Design notes: docs/simulated-cluster.md.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Mapping

from testcluster.node.controller import MERGE, Tasks, code_of, informer, now_rfc3339
from .plugins import NOT_READY_TAINT, UNREACHABLE_TAINT, UNSCHEDULABLE_TAINT

# ---------------------------------------------------------------------------
# node lifecycle taints (pkg/controller/nodelifecycle/node_lifecycle_controller.go)
# ---------------------------------------------------------------------------

def ready_status(node: Mapping[str, Any]) -> str:
    """The node's Ready condition status: "True", "False" or "Unknown" (absent counts as Unknown)."""
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") or "Unknown"
    return "Unknown"


_LIFECYCLE_KEYS = (NOT_READY_TAINT, UNREACHABLE_TAINT, UNSCHEDULABLE_TAINT)


def lifecycle_taints(node: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The node's taints as the node lifecycle controller keeps them.

    From the Ready condition: ``False`` -> ``not-ready``, ``Unknown`` ->
    ``unreachable``, each with NoSchedule (TaintNodesByCondition,
    ``nodeConditionToTaintKeyStatusMap``) and NoExecute (taint-based
    eviction, ``NotReadyTaintTemplate`` / ``UnreachableTaintTemplate``).
    ``spec.unschedulable`` -> ``node.kubernetes.io/unschedulable:NoSchedule``.
    Taints already there keep their order; new ones are appended, as the
    controller's patch appends them.
    """
    existing = list((node.get("spec") or {}).get("taints") or [])
    wanted: list[tuple[str, str]] = []
    status = ready_status(node)
    if status == "False":
        wanted += [(NOT_READY_TAINT, "NoSchedule"), (NOT_READY_TAINT, "NoExecute")]
    elif status != "True":
        wanted += [(UNREACHABLE_TAINT, "NoSchedule"), (UNREACHABLE_TAINT, "NoExecute")]
    if (node.get("spec") or {}).get("unschedulable"):
        wanted.append((UNSCHEDULABLE_TAINT, "NoSchedule"))
    kept = [t for t in existing
            if t.get("key") not in _LIFECYCLE_KEYS or (t.get("key"), t.get("effect")) in wanted]
    have = {(t.get("key"), t.get("effect")) for t in kept}
    added = [{"key": k, "effect": e} for k, e in wanted if (k, e) not in have]
    return kept + added


# ---------------------------------------------------------------------------
# node lifecycle controller
# ---------------------------------------------------------------------------

class NodeLifecycleController:
    """Keeps the condition taints of every node in step with its Ready condition.

    NoExecute eviction of running pods (the taint manager) is not modelled:
    pods stay on a NotReady node; new pods are kept off it by the NoSchedule
    taint, which the scheduler filters on as the real one does.
    """

    def __init__(self, store, clock: Callable[[], float] = time.time):
        self.store = store
        self.clock = clock
        self._stopping = asyncio.Event()
        self._tasks = Tasks()
        self.synced = asyncio.Event()

    def reconcile(self, node: dict) -> bool:
        """Patch the node's taints when they differ from what its state asks; True if patched."""
        want = [dict(t) for t in lifecycle_taints(node)]
        have = list((node.get("spec") or {}).get("taints") or [])
        if [(t.get("key"), t.get("value"), t.get("effect")) for t in want] == \
                [(t.get("key"), t.get("value"), t.get("effect")) for t in have]:
            return False
        stamp = now_rfc3339(self.clock())
        for t in want:
            if t.get("effect") == "NoExecute" and "timeAdded" not in t:
                t["timeAdded"] = stamp
        try:
            self.store.patch("nodes", node["metadata"]["name"], {"spec": {"taints": want or None}}, MERGE)
        except Exception as e:
            if code_of(e) != 404:
                raise
            return False
        return True

    def _list(self, items: list[dict]) -> None:
        for n in items:
            self.reconcile(n)

    def _event(self, kind: str, node: dict) -> None:
        if kind != "DELETED":
            self.reconcile(node)

    async def start(self) -> None:
        self._tasks.start(informer(self.store, "nodes", self._list, self._event, self._stopping, self.synced),
                          "node-lifecycle")
        await asyncio.wait_for(self.synced.wait(), 60)

    async def stop(self) -> None:
        self._stopping.set()
        await self._tasks.stop()
