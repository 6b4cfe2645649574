"""What each simulated node's kubelet keeps about itself: its Lease and the schedulable events.
Design notes: docs/simulated-cluster.md.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

from testcluster.node.controller import EventRecorder, Tasks, code_of, informer, now_micro

__all__ = ["NodeLeases", "LEASE_NAMESPACE"]

LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION = 40
RENEW_INTERVAL = 10.0  # leaseDurationSeconds * 0.25
MAX_RENEWALS_PER_SECOND = 50


def lease_for(node: dict[str, Any], renew: str) -> dict[str, Any]:
    meta = node["metadata"]
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": meta["name"], "namespace": LEASE_NAMESPACE,
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": meta["name"],
                                              "uid": meta["uid"]}]},
            "spec": {"holderIdentity": meta["name"], "leaseDurationSeconds": LEASE_DURATION, "renewTime": renew}}


def _ready(node: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


class NodeLeases:
    """Keeps one Lease per node and records cordon/uncordon events."""

    def __init__(self, store, *, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.clock = clock
        self.recorder = EventRecorder(store, "kubelet")
        self.nodes: dict[str, dict[str, Any]] = {}
        self._unschedulable: dict[str, bool] = {}
        self._stopping = asyncio.Event()
        self._tasks = Tasks()

    async def start(self) -> None:
        synced = asyncio.Event()
        self._tasks.start(informer(self.store, "nodes", self._list, self._event, self._stopping, synced),
                          "node-leases")
        await asyncio.wait_for(synced.wait(), 60)
        self._tasks.start(self._renew_loop(), "node-lease-renewals")

    async def stop(self) -> None:
        self._stopping.set()
        await self._tasks.stop()

    def _list(self, items: list[dict]) -> None:
        for n in items:
            self.nodes[n["metadata"]["name"]] = n
            self._unschedulable[n["metadata"]["name"]] = bool((n.get("spec") or {}).get("unschedulable"))
            self._ensure(n)

    def _event(self, kind: str, node: dict) -> None:
        name = node["metadata"]["name"]
        if kind == "DELETED":
            self.nodes.pop(name, None)
            self._unschedulable.pop(name, None)
            return
        self.nodes[name] = node
        if kind == "ADDED":
            self._ensure(node)
        now = bool((node.get("spec") or {}).get("unschedulable"))
        if self._unschedulable.get(name, now) != now:
            state = "NodeNotSchedulable" if now else "NodeSchedulable"
            self.recorder.emit(node, "Normal", state, f"Node {name} status is now: {state}", host=name)
        self._unschedulable[name] = now

    def _ensure(self, node: dict) -> None:
        try:
            self.store.create("leases", lease_for(node, now_micro(self.clock())), LEASE_NAMESPACE)
        except Exception as e:
            if code_of(e) != 409:
                raise

    async def _renew_loop(self) -> None:
        while not self._stopping.is_set():
            names = [n for n, node in self.nodes.items() if _ready(node)]
            interval = max(RENEW_INTERVAL, len(names) / MAX_RENEWALS_PER_SECOND)
            pause = interval / max(len(names), 1)
            for name in names:
                if self._stopping.is_set():
                    return
                self.renew(name)
                await asyncio.sleep(pause)
            if not names:
                await asyncio.sleep(interval)

    def renew(self, name: str) -> None:
        try:
            lease = self.store.get("leases", name, LEASE_NAMESPACE)
        except Exception as e:
            if code_of(e) != 404:
                raise
            node = self.nodes.get(name)
            if node is not None:
                self._ensure(node)
            return
        lease["spec"]["renewTime"] = now_micro(self.clock())
        self.store.replace("leases", name, lease, LEASE_NAMESPACE)
