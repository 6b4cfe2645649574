"""The simulated namespace controller: what happens after ``kubectl delete namespace``.
Design notes: docs/simulated-cluster.md.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable

from testcluster.node.controller import Tasks, code_of, informer
from .deletion import BACKGROUND
from .resources import RESOURCES, ResourceInfo
from .strategy import parse_rfc3339

__all__ = ["NamespaceController", "deletion_conditions"]

log = logging.getLogger(__name__)

FINALIZER = "kubernetes"  # v1.FinalizerKubernetes
FINALIZER_ESTIMATE_SECONDS = 15  # finalizerEstimateSeconds

_TYPES = ("NamespaceDeletionDiscoveryFailure", "NamespaceDeletionGroupVersionParsingFailure",
          "NamespaceDeletionContentFailure", "NamespaceContentRemaining", "NamespaceFinalizersRemaining")
_OK = {
    "NamespaceDeletionDiscoveryFailure": ("ResourcesDiscovered", "All resources successfully discovered"),
    "NamespaceDeletionGroupVersionParsingFailure": ("ParsedGroupVersions", "All legacy kube types successfully parsed"),
    "NamespaceDeletionContentFailure": ("ContentDeleted",
                                        "All content successfully deleted, may be waiting on finalization"),
    "NamespaceContentRemaining": ("ContentRemoved", "All content successfully removed"),
    "NamespaceFinalizersRemaining": ("ContentHasNoFinalizers", "All content-preserving finalizers finished"),
}


def _gvr(info: ResourceInfo) -> str:
    """``schema.GroupVersionResource.String()``."""
    return f"{info.group}/{info.version}, Resource={info.plural}"


def deletion_conditions(remaining: dict[str, int], finalizers: dict[str, int],
                        errors: list[str]) -> dict[str, tuple[str, str, str]]:
    """The five conditions as ``type -> (status, reason, message)`` (``namespaceConditionUpdater``).

    ``remaining`` counts the objects left per ``resource.group`` (core: ``pods.``).
    """
    out = {t: ("False", *_OK[t]) for t in _TYPES}
    left = sorted(f"{r} has {n} resource instances" for r, n in remaining.items() if n)
    if left:
        out["NamespaceContentRemaining"] = ("True", "SomeResourcesRemain",
                                            f"Some resources are remaining: {', '.join(left)}")
    held = sorted(f"{f} in {n} resource instances" for f, n in finalizers.items() if n)
    if held:
        out["NamespaceFinalizersRemaining"] = ("True", "SomeFinalizersRemain",
                                               "Some content in the namespace has finalizers remaining: "
                                               + ", ".join(held))
    if errors:
        out["NamespaceDeletionContentFailure"] = ("True", "ContentDeletionFailed",
                                                  f"Failed to delete all resource types, {len(errors)} remaining: "
                                                  + ", ".join(sorted(errors)))
    return out


def updated_conditions(current: list[dict[str, Any]], wanted: dict[str, tuple[str, str, str]],
                       now: str) -> list[dict[str, Any]] | None:
    """``updateConditions``: the new list, or None when nothing changed; the transition
    time moves only when the status does."""
    out = [dict(c) for c in current]
    changed = False
    for ctype in _TYPES:
        status, reason, message = wanted[ctype]
        old = next((c for c in out if c.get("type") == ctype), None)
        if old is None:
            out.append({"type": ctype, "status": status, "lastTransitionTime": now, "reason": reason,
                        "message": message})
            changed = True
        elif (old.get("status"), old.get("reason"), old.get("message")) != (status, reason, message):
            if old.get("status") != status:
                old["lastTransitionTime"] = now
            old.update(status=status, reason=reason, message=message)
            changed = True
    return out if changed else None


class NamespaceController:
    """Empties and removes namespaces that are being deleted."""

    def __init__(self, store, *, clock: Callable[[], float] = time.time, max_wait: float = 1.0) -> None:
        from testcluster.node.work_queue import WorkQueue

        self.store = store
        self.clock = clock
        self.max_wait = max_wait
        self.queue: WorkQueue[str] = WorkQueue()
        self._stopping = asyncio.Event()
        self._tasks = Tasks()
        self.synced = asyncio.Event()

    # -- events --
    def _list(self, items: list[dict]) -> None:
        for ns in items:
            self._event("ADDED", ns)

    def _event(self, kind: str, ns: dict) -> None:
        if kind != "DELETED" and (ns.get("metadata") or {}).get("deletionTimestamp"):
            self.queue.add(ns["metadata"]["name"])

    async def start(self) -> None:
        self._tasks.start(informer(self.store, "namespaces", self._list, self._event, self._stopping, self.synced),
                          "namespace-informer")
        self._tasks.start(self._work(), "namespace-controller")
        await asyncio.wait_for(self.synced.wait(), 60)

    async def stop(self) -> None:
        self._stopping.set()
        self.queue.close()
        await self._tasks.stop()

    async def _work(self) -> None:
        while not self._stopping.is_set():
            name = await self.queue.get()
            try:
                again = self.sync(name)
            except Exception as e:  # a conflict or a bug: retry this namespace later
                if code_of(e) not in (404, 409):
                    log.exception("namespace controller: syncing %s failed", name)
                self.queue.add_rate_limited(name)
                continue
            self.queue.forget(name)
            if again is not None:
                self.queue.add_after(name, min(again, self.max_wait))
            await asyncio.sleep(0)

    # -- one sync (namespacedResourcesDeleter.Delete) --
    def sync(self, name: str) -> float | None:
        """One pass over a deleted namespace; returns seconds until the next, or None when done."""
        try:
            ns = self.store.get("namespaces", name)
        except Exception as e:
            if code_of(e) == 404:
                return None
            raise
        if not ns["metadata"].get("deletionTimestamp"):
            return None
        if (ns.get("status") or {}).get("phase") != "Terminating":
            ns = self.store.replace("namespaces", name,
                                    {"metadata": {"resourceVersion": ns["metadata"]["resourceVersion"]},
                                     "status": dict(ns.get("status") or {}, phase="Terminating")},
                                    subresource="status")
        if not (ns.get("spec") or {}).get("finalizers"):
            self._delete_namespace(ns)
            return None
        estimate, remaining, finalizers, errors = self._delete_all_content(ns)
        conditions = updated_conditions((ns.get("status") or {}).get("conditions") or [],
                                        deletion_conditions(remaining, finalizers, errors), self.store.now())
        if conditions is not None:
            ns = self.store.replace("namespaces", name,
                                    {"metadata": {"resourceVersion": ns["metadata"]["resourceVersion"]},
                                     "status": dict(ns.get("status") or {}, conditions=conditions)},
                                    subresource="status")
        if errors:
            # the real controller retries with the queue's back-off
            return self.max_wait
        if estimate > 0:
            return estimate / 2 + 1
        kept = [f for f in (ns.get("spec") or {}).get("finalizers") or [] if f != FINALIZER]
        ns = self.store.finalize_namespace(name, {"metadata": {"name": name,
                                                               "resourceVersion": ns["metadata"]["resourceVersion"]},
                                                  "spec": {"finalizers": sorted(set(kept))}})
        if not (ns.get("spec") or {}).get("finalizers"):
            self._delete_namespace(ns)
        return None

    def _delete_namespace(self, ns: dict) -> None:
        try:
            self.store.delete("namespaces", ns["metadata"]["name"], preconditions={"uid": ns["metadata"]["uid"]})
        except Exception as e:
            if code_of(e) != 404:
                raise

    def _delete_all_content(self, ns: dict) -> tuple[float, dict[str, int], dict[str, int], list[str]]:
        name = ns["metadata"]["name"]
        deleted_at = parse_rfc3339(ns["metadata"]["deletionTimestamp"])
        estimate = 0.0
        remaining: dict[str, int] = {}
        finalizers: dict[str, int] = {}
        errors: list[str] = []
        for info in sorted((i for i in RESOURCES.values() if i.namespaced), key=lambda i: (i.group, i.plural)):
            est = self._pod_estimate(name) if (info.group, info.plural) == ("", "pods") else 0
            if self.clock() - deleted_at >= est:
                est = 0
            for obj in self.store.list(info.plural, name)["items"]:
                try:
                    self.store.delete(info.plural, obj["metadata"]["name"], name, propagation_policy=BACKGROUND)
                except Exception as e:
                    if code_of(e) != 404:
                        raise
            left = self.store.list(info.plural, name)["items"]
            if not left:
                continue
            held: dict[str, int] = {}
            for obj in left:
                for f in obj["metadata"].get("finalizers") or []:
                    held[f] = held.get(f, 0) + 1
            if not est and held:
                est = FINALIZER_ESTIMATE_SECONDS
            if not est:
                errors.append(f"unexpected items still remain in namespace: {name} for gvr: {_gvr(info)}")
            remaining[f"{info.plural}.{info.group}"] = len(left)
            for f, n in held.items():
                finalizers[f] = finalizers.get(f, 0) + n
            estimate = max(estimate, est)
        return estimate, remaining, finalizers, errors

    def _pod_estimate(self, namespace: str) -> int:
        """``estimateGracefulTerminationForPods``: the longest grace period of its non-terminal pods."""
        longest = 0
        for pod in self.store.list("pods", namespace)["items"]:
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            longest = max(longest, int((pod.get("spec") or {}).get("terminationGracePeriodSeconds") or 0))
        return longest
