"""The PVC and PV protection controllers: storage in use is not deleted under a pod.
Design notes: docs/simulated-cluster.md.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from . import storage_api
from testcluster.node.controller import MERGE, TERMINAL, Tasks, code_of, informer
from testcluster.node.work_queue import WorkQueue

__all__ = ["VolumeProtectionController"]

log = logging.getLogger(__name__)


def pod_uses_claim(pod: dict[str, Any], claim: str) -> bool:
    """``podUsesPVC``: a scheduled pod, not terminated, with a volume of that claim."""
    spec = pod.get("spec") or {}
    if not spec.get("nodeName") or (pod.get("status") or {}).get("phase") in TERMINAL:
        return False
    return any((v.get("persistentVolumeClaim") or {}).get("claimName") == claim for v in spec.get("volumes") or [])


class VolumeProtectionController:
    """Removes the protection finalizers once claims and volumes are no longer in use."""

    def __init__(self, store) -> None:
        self.store = store
        self.queue: WorkQueue[tuple[str, str | None, str]] = WorkQueue()  # (plural, namespace, name)
        self._stopping = asyncio.Event()
        self._tasks = Tasks()

    async def start(self) -> None:
        synced = [asyncio.Event() for _ in range(3)]
        for i, plural in enumerate(("persistentvolumeclaims", "persistentvolumes")):
            self._tasks.start(informer(self.store, plural, lambda items, p=plural: [self._add(p, o) for o in items],
                                       lambda kind, o, p=plural: kind != "DELETED" and self._add(p, o),
                                       self._stopping, synced[i]), f"protection-{plural}")
        self._tasks.start(informer(self.store, "pods", lambda items: None, self._pod_event, self._stopping,
                                   synced[2]), "protection-pods")
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in synced)), 60)
        self._tasks.start(self._work(), "protection-worker")

    async def stop(self) -> None:
        self._stopping.set()
        self.queue.close()
        await self._tasks.stop()

    def _add(self, plural: str, obj: dict) -> None:
        meta = obj["metadata"]
        if meta.get("deletionTimestamp"):
            self.queue.add((plural, meta.get("namespace"), meta["name"]))

    def _pod_event(self, kind: str, pod: dict) -> None:
        """A pod gone or terminated may free the claims it used."""
        if kind != "DELETED" and (pod.get("status") or {}).get("phase") not in TERMINAL:
            return
        ns = pod["metadata"].get("namespace") or "default"
        for v in (pod.get("spec") or {}).get("volumes") or []:
            claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
            if claim:
                self.queue.add(("persistentvolumeclaims", ns, claim))

    async def _work(self) -> None:
        while not self._stopping.is_set():
            key = await self.queue.get()
            try:
                self.sync(*key)
            except Exception as e:
                if code_of(e) not in (404, 409):
                    log.exception("volume protection: %s failed", key)
                self.queue.add_rate_limited(key)
            else:
                self.queue.forget(key)
            await asyncio.sleep(0)

    def sync(self, plural: str, namespace: str | None, name: str) -> None:
        try:
            obj = self.store.get(plural, name, namespace)
        except Exception as e:
            if code_of(e) == 404:
                return
            raise
        finalizer = storage_api.PVC_PROTECTION if plural == "persistentvolumeclaims" else storage_api.PV_PROTECTION
        finalizers = obj["metadata"].get("finalizers") or []
        if not obj["metadata"].get("deletionTimestamp") or finalizer not in finalizers:
            return
        if plural == "persistentvolumeclaims":
            if any(pod_uses_claim(p, name) for p in self.store.list_page("pods", namespace)[1]):
                return
        elif (obj.get("status") or {}).get("phase") == "Bound":
            return
        rest = [f for f in finalizers if f != finalizer]
        self.store.patch(plural, name, {"metadata": {"finalizers": rest or None,
                                                     "resourceVersion": obj["metadata"]["resourceVersion"]}},
                         MERGE, namespace)
