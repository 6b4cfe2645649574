"""The pool-building steps of the ledger: a pool's contributing nodes and their sums, its taints.
Design notes: docs/capacity.md.
"""

from __future__ import annotations

import bisect
from collections import Counter
from typing import Iterable

from gpuspawner.capacity.labels import version_key
from gpuspawner.capacity.model import DriverGroup, FitCount, NodeView, Taint, driver_key, group_order
from gpuspawner.capacity.taintrule import is_passing_taint

__all__ = [
    "NodeTally",
    "PoolNodes",
    "bump",
    "check_count",
    "lowest",
    "pool_taints",
    "sorted_taints",
]

def pool_taints(taints: Iterable[Taint]) -> tuple[Taint, ...]:
    """The taints of a node that describe its pool: the passing ones (``taintrule.is_passing_taint``:
    a node's state, not its pool's; a spawn must not tolerate them) left out."""
    return tuple(t for t in taints if not is_passing_taint(t.key))


def sorted_taints(taints: Iterable[Taint]) -> tuple[Taint, ...]:
    """A pool's taints in the order its view lists them (key, value, effect)."""
    return tuple(sorted(taints, key=lambda t: (t.key, t.value or "", t.effect)))


def bump(counter: Counter, key: object, sign: int) -> None:
    """Add ``sign`` to ``counter[key]``, dropping the key when it reaches 0."""
    n = counter[key] + sign
    if n > 0:
        counter[key] = n
    else:
        del counter[key]


def lowest(versions: Iterable[str | None]) -> str | None:
    """The lowest dotted version, compared numerically (``12.9 < 12.10``); None when there is none.

    Ties keep the first seen.
    """
    best: str | None = None
    best_key: tuple[int, ...] | None = None
    for v in versions:
        if v is None:
            continue
        k = version_key(v)
        if best_key is None or k < best_key:
            best, best_key = v, k
    return best


def check_count(count: object) -> None:
    """Refuse a reservation of anything but a positive integer count of GPUs."""
    if isinstance(count, bool) or not isinstance(count, int) or count <= 0:
        raise ValueError(f"reservation count must be a positive integer, got {count!r}")


class NodeTally:
    """The contributing nodes of one pool, kept sorted by name, with running sums and histograms.

    ``bisect`` keeps insertion and removal at O(log n) plus a C-level memmove, so an event
    costs a few microseconds even in a pool of thousands of nodes, and a rebuild copies
    :attr:`views` instead of rescanning the pool.
    """

    __slots__ = ("names", "views", "total", "free", "frees", "by_free", "drivers", "cudas")

    def __init__(self) -> None:
        self.names: list[str] = []
        self.views: list[NodeView] = []
        self.total = 0
        self.free = 0
        self.frees: Counter = Counter()
        self.by_free: dict[int, list[str]] = {}  # free GPUs -> the nodes with as many, sorted
        self.drivers: Counter = Counter()
        self.cudas: Counter = Counter()

    def __len__(self) -> int:
        return len(self.names)

    def __contains__(self, name: object) -> bool:
        i = bisect.bisect_left(self.names, name)  # type: ignore[type-var]
        return i < len(self.names) and self.names[i] == name

    def add(self, view: NodeView) -> None:
        i = bisect.bisect_left(self.names, view.name)
        self.names.insert(i, view.name)
        self.views.insert(i, view)
        self._count(view, 1)
        bisect.insort(self.by_free.setdefault(view.free, []), view.name)

    def remove(self, name: str) -> NodeView:
        """Take node ``name`` out; KeyError when it is not in the pool."""
        i = bisect.bisect_left(self.names, name)
        if i == len(self.names) or self.names[i] != name:
            raise KeyError(name)
        del self.names[i]
        view = self.views.pop(i)
        self._count(view, -1)
        same = self.by_free[view.free]
        del same[bisect.bisect_left(same, name)]
        if not same:
            del self.by_free[view.free]
        return view

    def _count(self, view: NodeView, sign: int) -> None:
        self.total += sign * view.allocatable
        self.free += sign * view.free
        bump(self.frees, view.free, sign)
        if view.driver_version is not None:
            bump(self.drivers, view.driver_version, sign)
        if view.cuda_version is not None:
            bump(self.cudas, view.cuda_version, sign)

    def most_free(self) -> str | None:
        """The node with the most free GPUs (ties: the first by name), or None."""
        return self.by_free[max(self.by_free)][0] if self.by_free else None

    @property
    def max_free_per_node(self) -> int:
        return max(self.frees) if self.frees else 0

    @property
    def driver_version(self) -> str | None:
        """The lowest driver among the nodes."""
        return lowest(self.drivers)

    @property
    def cuda_version(self) -> str | None:
        """The lowest CUDA version among the nodes."""
        return lowest(self.cudas)


class PoolNodes(NodeTally):
    """A pool's :class:`NodeTally`, its nodes also summed per driver group
    (:class:`DriverGroup`), so the groups a view needs are rebuilt from a handful of
    tallies, never from the nodes."""

    __slots__ = ("groups", "nreq")

    def __init__(self, nreq: int = 0) -> None:
        super().__init__()
        self.groups: dict[tuple, GroupTally] = {}
        self.nreq = nreq

    def add(self, view: NodeView) -> None:
        super().add(view)
        key = driver_key(view)
        tally = self.groups.get(key)
        if tally is None:
            tally = self.groups[key] = GroupTally(self.nreq)
        tally.count(view, 1)

    def remove(self, name: str) -> NodeView:
        view = super().remove(name)
        key = driver_key(view)
        tally = self.groups[key]
        tally.count(view, -1)
        if not tally.nodes:
            del self.groups[key]
        return view

    def driver_groups(self) -> tuple[DriverGroup, ...]:
        """The pool's driver groups, sorted as :func:`gpuspawner.capacity.model.driver_groups` sorts them."""
        return tuple(
            DriverGroup(*key, t.nodes, t.total, t.free, max(t.frees), max(t.allocs), t.fit_counts())
            for key, t in sorted(self.groups.items(), key=lambda kv: group_order(kv[0]))
        )

    def most_free_fitting(self, i: int) -> str | None:
        """The node with the most free GPUs among those server request ``i`` fits on now (ties:
        the first by name), or None. Walks the nodes: called once per spawn, never per view."""
        if i < 0:
            return None
        best: NodeView | None = None
        for view in self.views:
            if view.fits >> i & 1 and (best is None or view.free > best.free):
                best = view
        return best.name if best is not None else None


class GroupTally:
    """The running sums of one driver group: node count, GPUs, histograms for the maxima, and per
    tracked server request the nodes it fits on now, their free GPUs (with a histogram) and the
    nodes big enough for it at all."""

    __slots__ = ("nodes", "total", "free", "frees", "allocs", "fit_nodes", "fit_free", "fit_frees", "holding")

    def __init__(self, nreq: int = 0) -> None:
        self.nodes = self.total = self.free = 0
        self.frees: Counter = Counter()
        self.allocs: Counter = Counter()
        self.fit_nodes = [0] * nreq
        self.fit_free = [0] * nreq
        self.fit_frees = [Counter() for _ in range(nreq)]
        self.holding = [0] * nreq

    def count(self, view: NodeView, sign: int) -> None:
        self.nodes += sign
        self.total += sign * view.allocatable
        self.free += sign * view.free
        bump(self.frees, view.free, sign)
        bump(self.allocs, view.allocatable, sign)
        for i in range(len(self.fit_nodes)):
            if view.fits >> i & 1:
                self.fit_nodes[i] += sign
                self.fit_free[i] += sign * view.free
                bump(self.fit_frees[i], view.free, sign)
            if view.holds >> i & 1:
                self.holding[i] += sign

    def fit_counts(self) -> tuple[FitCount, ...]:
        return tuple(
            FitCount(self.fit_nodes[i], self.fit_free[i], max(self.fit_frees[i], default=0), self.holding[i])
            for i in range(len(self.fit_nodes))
        )
