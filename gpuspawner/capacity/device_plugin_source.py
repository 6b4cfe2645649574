"""The device-plugin source of the capacity cache: Nodes and Pods counted into the ``Ledger`` (``PluginAccounts``).
Design notes: docs/capacity.md.
"""

from __future__ import annotations

from typing import Any, Callable

from gpuspawner.capacity import steps
from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.capacity.labels import node_record
from gpuspawner.capacity.model import PoolView
from gpuspawner.capacity.node_taints import NodeTaintCounts, node_filter_taints
from gpuspawner.capacity.nodeimages import NodeImages, note_node
from gpuspawner.capacity.plugin_accounts import PluginAccounts
from gpuspawner.capacity.pod_requests import base_record, pod_key, pod_record

__all__ = ["PLUGIN_KINDS", "DevicePluginSource"]

# kind -> the CoreV1Api list method its informer calls
PLUGIN_KINDS: dict[str, str] = {
    "nodes": "list_node",
    "pods": "list_pod_for_all_namespaces",
}


class DevicePluginSource:
    """Accounting of device-plugin GPUs (extended resources) for one capacity cache."""

    #: the kinds whose informers this source owns (their list methods); it reads no other kind
    kinds = PLUGIN_KINDS
    reads: frozenset[str] = frozenset(PLUGIN_KINDS)

    def __init__(self, config: CapacityConfig, *, any_node_images: Callable[[], bool] = lambda: False) -> None:
        self.config = config
        self.accounts = PluginAccounts(config.declared_pools)
        self.ledger = self.accounts.ledger
        # which nodes hold which images, per pool; ``any_node_images()``: keep every node's, not
        # only GPU nodes' (while DRA pools, whose nodes come from ResourceSlices, may take any node)
        self.images = NodeImages()
        self._any_node_images = any_node_images
        # every node's cordon and hard taints, per distinct set (what the pending verdicts weigh
        # kube-scheduler's "node(s) had untolerated taint(s)" with)
        self.taints = NodeTaintCounts()

    def pools(self) -> tuple[PoolView, ...]:
        return self.ledger.pools()

    def apply(self, kind: str, obj: dict[str, Any]) -> str | None:
        """Record one listed or watched object; returns its key for the re-list's retain (every
        named node is kept, GPU or not: its taints count)."""
        if kind == "nodes":
            rec = node_record(obj, self.config)
            note_node(self.images, obj, rec, dra=self._any_node_images())
            name = (obj.get("metadata") or {}).get("name")
            if not isinstance(name, str) or not name:
                return None
            self.taints.put(name, node_filter_taints(obj))
            if rec is None:  # no GPUs (or unreadable): the node leaves the pools it was in
                self.accounts.remove_node(name)
                return name
            self.accounts.upsert_node(rec)
            return rec.name
        prec = pod_record(obj, self.config.is_gpu_resource)
        if prec is None:
            key = pod_key(obj)
            if key is None:
                return None
            # a pod without GPUs still holds CPU, memory and a pod slot on its node
            base = base_record(obj)
            if base is None:
                self.accounts.remove_pod(key)
                return None  # a re-list keeps the pods it saw
            self.accounts.upsert_base_pod(key, base)
            return key
        self.accounts.upsert_pod(prec)
        return prec.key

    def remove(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "nodes":
            name = (obj.get("metadata") or {}).get("name")
            if name:
                self.accounts.remove_node(name)
                self.images.remove(name)
                self.taints.remove(name)
        else:
            key = pod_key(obj)
            if key is not None:
                self.accounts.remove_pod(key)

    def retain(self, kind: str, keep: set[str]) -> int:
        return steps.run(self.retain_steps(kind, keep))

    def retain_steps(self, kind: str, keep: set[str]) -> steps.Steps[int]:
        """Drop what a re-list of ``kind`` no longer saw, in steps (a pod list is long); how many."""
        if kind == "nodes":
            self.images.retain(keep)
            self.taints.retain(keep)
            return self.accounts.retain_nodes(keep)
        return (yield from self.accounts.retain_pods_steps(keep))
