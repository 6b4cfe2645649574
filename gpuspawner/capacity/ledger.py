"""The one GPU accounting mechanism: what each node gives each pool, reservations and server fits in; ``PoolView``s out.
Two sources feed it (``plugin_accounts``, ``dra_accounts``); design notes: docs/capacity.md.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable, Iterable, Protocol

from gpuspawner.capacity import node_resources
from gpuspawner.capacity.model import NodeView, PoolView
from gpuspawner.capacity.pool_totals import PoolNodes, bump, check_count

__all__ = ["Ledger", "PoolSource", "Reservation", "Supply"]

Requests = tuple[tuple[int, ...], ...]


@dataclass(frozen=True, slots=True)
class Reservation:
    owner: str  # "<namespace>/<pod name>"
    pool_id: str
    resource: str | None  # None for a DRA pool (a claim names its class, not a resource)
    node: str | None  # None when the pool had no contributing node
    count: int
    expires_at: float
    # CPU, memory, ephemeral storage, pods the spawn's pod will request (counted on its node too)
    request: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class Supply:
    """What one node gives one pool before reservations: its GPUs, those no pod or claim holds, and
    the facts its view shows (lowest driver, CUDA and compute capability; labels; allocatable base)."""

    allocatable: int
    untaken: int
    driver_version: str | None
    cuda_version: str | None
    compute_capability: str | None
    labels: tuple[tuple[str, str], ...]
    base: tuple[int, ...] | None


class PoolSource(Protocol):
    """What a source tells the ledger beyond its supplies: a pool's view, and whether (and with
    which resource) a pool's GPUs may be reserved for a pod."""

    def pool_view(self, pid: str, nodes: PoolNodes, requests: Requests,
                  largest: tuple[int, ...] | None) -> PoolView | None: ...

    def reservable(self, owner: str, pid: str) -> tuple[bool, str | None]: ...


_NO_NODES = PoolNodes()


class Ledger:
    """Pools of counted nodes, kept incrementally: a source puts what a node gives a pool
    (:class:`Supply`); the ledger takes off reservations, counts where each tracked server request
    fits, and rebuilds only the views of pools changed since the last :meth:`pools`."""

    def __init__(self, source: PoolSource) -> None:
        self.source = source
        self.generation = 0
        # told (pool id, node, joined) whenever a node starts or stops contributing to a pool
        self.on_member: Callable[[str, str, bool], None] | None = None
        # told the node whenever what its pods request changes (another ledger's fit counts)
        self.on_requested: Callable[[str], None] | None = None
        self._supply: dict[str, dict[str, Supply]] = {}  # node -> pool -> what it gives
        # (pool, node) -> what its view shows: (free, fits, holds, then the supply's facts, base last)
        self._counted: dict[tuple[str, str], tuple] = {}
        # pool -> its contributing nodes' views, sorted by node name, with their sums and driver
        # groups: a change replaces one entry, and a rebuild copies the list instead of rescanning
        self._nodes: dict[str, PoolNodes] = {}
        # pool -> how many contributing nodes have each allocatable base (for PoolView.largest)
        self._bases: dict[str, Counter] = {}
        self._resv: dict[str, Reservation] = {}
        self._resv_on: Counter = Counter()  # (pool, node) -> reserved GPUs
        # the server requests whose fit is counted (track()); per node, what its pods and
        # reservations request (CPU, memory, ephemeral storage, pods), or another ledger's figures
        self._reqs: Requests = ()
        self._reqs_given: object = None  # the last object track() was handed (the same: no change)
        self._requested: dict[str, list[int]] = {}
        self._requested_on: Callable[[str], tuple[int, ...]] | None = None
        self._dirty: set[str] = set()
        self._views: dict[str, PoolView] = {}
        self._pools: tuple[PoolView, ...] = ()
        self._by_id: dict[str, PoolView] = {}

    # -- reading -------------------------------------------------------------

    def pools(self) -> tuple[PoolView, ...]:
        """All pools, sorted by id; rebuilt only for pools changed since the last call."""
        if not self._dirty:  # nothing a pool shows changed: the same tuple (readers memoize on it)
            return self._pools
        for pid in self._dirty:
            view = self.source.pool_view(pid, self._nodes.get(pid, _NO_NODES), self._reqs,
                                         _largest(self._bases.get(pid)))
            if view is None:
                self._views.pop(pid, None)
            else:
                self._views[pid] = view
        self._dirty.clear()
        self._pools = tuple(self._views[k] for k in sorted(self._views))
        self._by_id = dict(self._views)
        return self._pools

    def pools_by_id(self) -> dict[str, PoolView]:
        self.pools()
        return self._by_id

    def reservations(self) -> dict[str, Reservation]:
        return dict(self._resv)

    @property
    def changed(self) -> bool:
        """Whether a pool's view changed since the last :meth:`pools`."""
        return bool(self._dirty)

    @property
    def tracked(self) -> Requests:
        """The server requests whose fit is counted (:meth:`track`), sorted."""
        return self._reqs

    def requested_on(self, node: str) -> tuple[int, ...]:
        """What the pods bound to ``node`` and its reservations request of it (CPU, memory,
        ephemeral storage, pods), whatever its GPUs: another ledger counts its nodes' fit with it."""
        if self._requested_on is not None:
            return self._requested_on(node)
        return tuple(self._requested.get(node, (0, 0, 0, 0)))

    # -- what sources put ------------------------------------------------------

    def touch(self, pid: str) -> None:
        """Something pool ``pid`` shows besides its nodes' counts changed: rebuild its view."""
        self._dirty.add(pid)

    def put(self, pid: str, node: str, supply: Supply | None, touch: bool = False) -> bool:
        """What ``node`` gives pool ``pid`` now (None: nothing); ``touch``: rebuild the pool's view
        even when the counts stay the same. Whether the node's view changed."""
        per = self._supply.get(node)
        if supply is None:
            if per is not None and per.pop(pid, None) is not None and not per:
                del self._supply[node]
        else:
            if per is None:
                per = self._supply[node] = {}
            per[pid] = supply
        if touch:
            self._dirty.add(pid)
        return self._count(pid, node)

    def put_node(self, node: str, supplies: dict[str, Supply], touch: bool = False) -> None:
        """All that ``node`` gives, per pool, now (it leaves the pools not named)."""
        old = self._supply.get(node, {})
        for pid in [p for p in old if p not in supplies]:
            self.put(pid, node, None, touch=True)
        for pid, supply in supplies.items():
            self.put(pid, node, supply, touch=touch)

    def hold(self, node: str, base: Iterable[int], sign: int, tell: bool = True, refit: bool = True) -> None:
        """Move what is requested on ``node`` by ``base`` (CPU, memory, ephemeral storage, pods);
        ``tell``: let :attr:`on_requested` know; ``refit``: recount the node's fit now (else the
        source's next :meth:`put` does)."""
        held = self._requested.get(node)
        if held is None:
            held = self._requested[node] = [0, 0, 0, 0]
        for i, v in enumerate(base):
            held[i] += sign * v
        if not any(held):
            del self._requested[node]
        if refit and self._reqs:
            self.refit(node, count=False)
        if tell and self.on_requested is not None:
            self.on_requested(node)

    def refit(self, node: str, count: bool = True) -> None:
        """What the pods on ``node`` request changed: recount its fit in the pools it is in (a pool
        changes only when a fit did, so most CPU pods' events change none); ``count``: a change
        is a new generation."""
        if not self._reqs:
            return
        changed = False
        for pid in list(self._supply.get(node, ())):
            changed = self._count(pid, node) or changed
        if changed and count:
            self.generation += 1

    def track(self, requests: Iterable[tuple[int, ...]],
              requested_on: Callable[[str], tuple[int, ...]] | None = None) -> bool:
        """Count the fit of these server requests (CPU millicores, memory, ephemeral storage bytes,
        pods) on every node from now on (``DriverGroup.fits``), beside what its pods request (this
        ledger's own figures, or ``requested_on``'s); False when they are already counted. A
        change recounts every node once."""
        if requests is self._reqs_given and requested_on == self._requested_on:
            return False
        self._reqs_given = requests
        reqs = tuple(sorted({tuple(r) for r in requests}))
        if reqs == self._reqs and requested_on == self._requested_on:
            return False
        self._reqs, self._requested_on = reqs, requested_on
        self._dirty.update(self._views)  # every view shows the requests
        self._dirty.update(self._nodes)
        self._nodes.clear()  # their driver groups count one fit per request: rebuilt
        self._bases.clear()
        self._counted.clear()
        for node, per in self._supply.items():
            for pid in per:
                self._count(pid, node, notify=False)
        self.generation += 1
        return True

    # -- reservations ----------------------------------------------------------

    def reserve(self, owner: str, pid: str, count: int, expires_at: float,
                request: tuple[int, ...] | None = None) -> Reservation | None:
        """Count ``count`` GPUs of pool ``pid`` as taken for the pod ``owner`` at once.

        Placed on the pool's contributing node with the most free GPUs (ties: node name), among
        those the server fits on when its ``request`` is tracked, as the spawn is most likely to
        land there. None (and nothing held) when the source says the pod already counts."""
        check_count(count)
        may, resource = self.source.reservable(owner, pid)
        if not may:
            return None
        if owner in self._resv:
            self._drop(owner)
        nodes = self._nodes.get(pid)
        node = nodes.most_free() if nodes is not None else None
        if node is not None and request is not None and self._reqs:
            # the node with the most free GPUs among those the server fits on, if any
            node = nodes.most_free_fitting(self._reqs.index(request) if request in self._reqs else -1) or node
        r = Reservation(owner, pid, resource, node, count, expires_at, request)
        self._resv[owner] = r
        if node is not None:
            self._resv_on[(pid, node)] += count
            if request is not None:
                self.hold(node, request, 1)
            self._count(pid, node)
        self._dirty.add(pid)
        self.generation += 1
        return r

    def bound(self, owner: str) -> bool:
        """``owner``'s pod (or claim) now counts what it holds: its reservation ends. Whether it had one."""
        if owner not in self._resv:
            return False
        self._drop(owner)
        return True

    def release(self, owner: str) -> bool:
        """Give back what ``owner`` holds; False when it holds nothing."""
        if not self.bound(owner):
            return False
        self.generation += 1
        return True

    def expire(self, now: float) -> int:
        """Release reservations whose time is up; returns how many."""
        if not self._resv:
            return 0
        due = [o for o, r in self._resv.items() if r.expires_at <= now]
        for o in due:
            self._drop(o)
        if due:
            self.generation += 1
        return len(due)

    def _drop(self, owner: str) -> None:
        r = self._resv.pop(owner)
        self._dirty.add(r.pool_id)
        if r.node is None:
            return
        if r.request is not None:
            self.hold(r.node, r.request, -1)
        bump(self._resv_on, (r.pool_id, r.node), -r.count)
        self._count(r.pool_id, r.node)

    # -- counting one node in one pool -------------------------------------------

    def _fits(self, node: str, base: tuple[int, ...] | None) -> tuple[int, int]:
        """Bit i of ``fits``: the i-th tracked request fits on the node now; of ``holds``: at all."""
        if not self._reqs or not base:
            return 0, 0
        space = node_resources.room(base, self.requested_on(node))
        fits = holds = 0
        for i, req in enumerate(self._reqs):
            if node_resources.fits(req, space):
                fits |= 1 << i
            if node_resources.fits(req, base):
                holds |= 1 << i
        return fits, holds

    def _count(self, pid: str, node: str, notify: bool = True) -> bool:
        """Recount ``node``'s view in pool ``pid`` and move the pool's sums; whether it changed."""
        supply = self._supply.get(node, {}).get(pid)
        key = None
        if supply is not None:
            free = supply.untaken - self._resv_on.get((pid, node), 0)
            # what the view shows (a full node taking one more pod shows the same)
            key = (free if free > 0 else 0, *self._fits(node, supply.base), supply.allocatable, supply.driver_version,
                   supply.cuda_version, supply.compute_capability, supply.labels, supply.base)
        old = self._counted.get((pid, node))
        if key == old:
            return False
        nodes = self._nodes.get(pid)
        if old is not None and nodes is not None:
            nodes.remove(node)
            if not nodes.names:
                del self._nodes[pid]
            if old[-1]:
                bump(self._bases[pid], old[-1], -1)
                if not self._bases[pid]:
                    del self._bases[pid]
            del self._counted[(pid, node)]
        if key is not None:
            assert supply is not None
            view = NodeView(
                name=node,
                allocatable=supply.allocatable,
                free=key[0],
                driver_version=supply.driver_version,
                cuda_version=supply.cuda_version,
                compute_capability=supply.compute_capability,
                labels=supply.labels,
                fits=key[1],
                holds=key[2],
            )
            nodes = self._nodes.get(pid)
            if nodes is None:
                nodes = self._nodes[pid] = PoolNodes(len(self._reqs))
            nodes.add(view)
            if supply.base:
                bump(self._bases.setdefault(pid, Counter()), supply.base, 1)
            self._counted[(pid, node)] = key
        self._dirty.add(pid)
        if notify and self.on_member is not None and (old is None) != (key is None):
            self.on_member(pid, node, key is not None)
        return True


def _largest(bases: Counter | None) -> tuple[int, ...] | None:
    """The largest allocatable per dimension among a pool's contributing nodes (few distinct shapes)."""
    if not bases:
        return None
    return tuple(max(b[i] for b in bases) for i in range(4))
