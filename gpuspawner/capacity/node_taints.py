"""Every node's cordon and NoSchedule/NoExecute taints, counted per distinct set on node events.
Design notes: docs/capacity.md, "Taints".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from gpuspawner.capacity.labels import node_taints
from gpuspawner.capacity.pool_totals import bump
from gpuspawner.capacity.taintrule import NodeTaints, node_taints_of

__all__ = ["NodeTaintCounts", "node_filter_taints"]


def node_filter_taints(obj: Mapping[str, Any]) -> NodeTaints | None:
    """What kube-scheduler's NodeUnschedulable and TaintToleration filters read of a Node object;
    None when neither can turn a pod away from it (or the object is not a Node)."""
    spec = obj.get("spec") if isinstance(obj, Mapping) else None
    if not isinstance(spec, Mapping):
        return None
    return node_taints_of(spec.get("unschedulable") is True, node_taints(spec))


class NodeTaintCounts:
    """For every node of the cluster (GPU or not: the scheduler's messages count them all), which
    :class:`NodeTaints` it has; per distinct record, how many nodes. Kept on each node event (a dict
    lookup and a counter move), read as a summary of a handful of rows, never a walk over nodes."""

    def __init__(self) -> None:
        self._of: dict[str, NodeTaints] = {}  # only nodes a filter can turn a pod away from
        self._counts: Counter = Counter()
        self._shared: dict[NodeTaints, NodeTaints] = {}  # one record per distinct set
        self._summary: tuple[tuple[NodeTaints, int], ...] | None = ()

    def put(self, name: str, facts: NodeTaints | None) -> None:
        """What node ``name`` carries now (None: nothing a filter reads)."""
        old = self._of.get(name)
        if facts is not None:
            facts = self._shared.setdefault(facts, facts)
        if old == facts:
            return
        if old is not None:
            bump(self._counts, old, -1)
            if old not in self._counts:
                del self._shared[old]
            del self._of[name]
        if facts is not None:
            self._of[name] = facts
            self._counts[facts] += 1
        self._summary = None

    def remove(self, name: str) -> None:
        """Node ``name`` is gone."""
        self.put(name, None)

    def retain(self, keep: set[str]) -> int:
        """Forget every node not in ``keep`` (after a re-list); returns how many."""
        gone = [n for n in self._of if n not in keep]
        for n in gone:
            self.put(n, None)
        return len(gone)

    def summary(self) -> tuple[tuple[NodeTaints, int], ...]:
        """Each distinct :class:`NodeTaints` with how many nodes have it, in a fixed order; the same
        tuple until a node's taints or cordon change."""
        if self._summary is None:
            self._summary = tuple(sorted(self._counts.items(), key=lambda kv: (
                kv[0].unschedulable, tuple((t.key, t.value or "", t.effect) for t in kv[0].taints))))
        return self._summary
