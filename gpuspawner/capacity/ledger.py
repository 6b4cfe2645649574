"""Incremental GPU accounting: nodes, pods and reservations in, pools out.
Design notes: docs/capacity.md.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable, Iterable

from gpuspawner.capacity.config import DeclaredPool
from gpuspawner.capacity.held_pods import HeldPods
from gpuspawner.capacity.labels import NodeGpu, NodeRecord, product_label_for
from gpuspawner.capacity.model import (
    DriverGroup,
    FitCount,
    NodeView,
    Pin,
    PoolView,
    ScaleUp,
    Taint,
    driver_key,
    group_order,
    with_groups,
)
from gpuspawner.capacity import node_resources
from gpuspawner.capacity.pod_requests import PodRecord
from gpuspawner.capacity.sharing import NOT_SHARED, Sharing, node_sharing
from gpuspawner.capacity.pool_totals import (
    TRANSIENT_TAINT_PREFIXES,
    NodeTally,
    Reserving,
    bump,
    check_count,
    pool_taints,
    sorted_taints,
)

__all__ = ["Reservation", "Ledger", "TRANSIENT_TAINT_PREFIXES"]

@dataclass(frozen=True, slots=True)
class Reservation:
    owner: str  # "<namespace>/<pod name>"
    pool_id: str
    resource: str | None
    node: str | None  # None when the pool had no contributing node
    count: int
    expires_at: float
    # CPU, memory, ephemeral storage, pods the spawn's pod will request (counted on its node too)
    request: tuple[int, ...] | None = None


class Ledger(Reserving):
    """The pure, incremental accounting behind :class:`CapacityCache`."""

    def __init__(self, declared: Iterable[DeclaredPool] = ()) -> None:
        # told the node whenever what its pods request changes (the DRA ledger's fit counts)
        self.on_requested: Callable[[str], None] | None = None
        self._declared: dict[str, DeclaredPool] = {p.id: p for p in declared}
        self._nodes: dict[str, NodeRecord] = {}
        self._pods: dict[str, PodRecord] = {}
        # node -> resource -> GPUs held by counted pods (kept for nodes not
        # (yet) known too: a pod event may arrive before its node's)
        self._used: dict[str, dict[str, int]] = {}
        self._resv: dict[str, Reservation] = {}
        self._resv_on: dict[str, dict[str, int]] = {}  # node -> resource -> reserved
        self._members: dict[str, dict[str, NodeGpu]] = {}  # pool -> node -> its GPU entry
        # pool -> how many member nodes carry each taint / defining label / memory
        # size / pin / sharing, kept as nodes join and leave so a rebuild never rescans them
        self._tallies: dict[str, tuple[Counter, Counter, Counter, Counter, Counter]] = {}
        # node -> resource -> (pool, allocatable, free), contributing nodes only
        self._contrib: dict[str, dict[str, tuple[str, int, int]]] = {}
        self._views: dict[str, PoolView] = {}
        # pool -> its contributing nodes' views, sorted by node name, with
        # their sums and histograms: a change replaces one entry, and a
        # rebuild copies the list instead of rescanning the pool
        self._pviews: dict[str, _PoolNodes] = {}
        # the server requests whose fit is counted (track()); per node, what its counted pods and
        # reservations request (CPU, memory, ephemeral storage, pods); the pods without GPUs
        # that hold room on a node, as plain tuples (node, cpu, memory, ephemeral)
        self._reqs: tuple[tuple[int, ...], ...] = ()
        self._reqs_given: object = None  # the last object track() was handed (the same: no change)
        self._requested: dict[str, list[int]] = {}
        self._base_pods = HeldPods()
        # pool -> how many contributing nodes have each allocatable base (for PoolView.largest)
        self._bases: dict[str, Counter] = {}
        self._dirty: set[str] = set(self._declared)
        self.generation = 0
        self._pools: tuple[PoolView, ...] = ()
        self._by_id: dict[str, PoolView] = {}
        self._built = -1

    # -- reading ---------------------------------------------------------

    @property
    def node_count(self) -> int:
        return len(self._nodes)

    @property
    def pod_count(self) -> int:
        """GPU pods (pods without GPUs are kept as :meth:`base_pod_count` only)."""
        return len(self._pods)

    @property
    def base_pod_count(self) -> int:
        """Bound pods without GPUs, kept for what they request of their node."""
        return len(self._base_pods)

    def node_names(self) -> set[str]:
        return set(self._nodes)

    def pod_keys(self) -> set[str]:
        """The GPU pods' keys (pods without GPUs are kept by key hash only)."""
        return set(self._pods)

    def reservations(self) -> dict[str, Reservation]:
        return dict(self._resv)

    def pools(self) -> tuple[PoolView, ...]:
        """All known pools, sorted by id; rebuilt only for pools changed since the last call."""
        if not self._dirty:  # nothing a pool shows changed: the same tuple (readers memoize on it)
            self._built = self.generation
            return self._pools
        for pid in self._dirty:
            view = self._build(pid)
            if view is None:
                self._views.pop(pid, None)
            else:
                self._views[pid] = view
        self._dirty.clear()
        self._pools = tuple(self._views[k] for k in sorted(self._views))
        self._by_id = dict(self._views)
        self._built = self.generation
        return self._pools

    def pools_by_id(self) -> dict[str, PoolView]:
        self.pools()
        return self._by_id

    def track(self, requests: Iterable[tuple[int, ...]]) -> bool:
        """Count the fit of these server requests (CPU millicores, memory, ephemeral storage bytes,
        pods) on every node from now on (``DriverGroup.fits``); False when they are already
        counted. A change recounts every node once."""
        if requests is self._reqs_given:
            return False
        self._reqs_given = requests
        reqs = tuple(sorted({tuple(r) for r in requests}))
        if reqs == self._reqs:
            return False
        self._reqs = reqs
        self._contrib.clear()
        self._pviews.clear()
        self._bases.clear()
        self._dirty.update(self._views)
        self._dirty.update(self._members)
        for name in self._nodes:
            self._refresh(name, force=True)
        self.generation += 1
        return True

    # -- nodes -------------------------------------------------------------

    def upsert_node(self, rec: NodeRecord) -> bool:
        old = self._nodes.get(rec.name)
        if old == rec:
            return False
        if old is not None:
            self._leave_pools(old)
        self._nodes[rec.name] = rec
        for g in rec.gpus:
            self._members.setdefault(g.pool_id, {})[rec.name] = g
            self._tally(g.pool_id, rec, g, 1)
            self._dirty.add(g.pool_id)
        # force: a changed record (driver labels, ...) changes its views even
        # when the numbers stay the same
        self._refresh(rec.name, force=True)
        self.generation += 1
        return True

    def remove_node(self, name: str) -> bool:
        old = self._nodes.pop(name, None)
        if old is None:
            return False
        self._leave_pools(old)
        self._refresh(name)
        self.generation += 1
        return True

    def retain_nodes(self, keep: set[str]) -> int:
        """Drop every node not in ``keep`` (after a re-list); returns how many."""
        gone = [n for n in self._nodes if n not in keep]
        for n in gone:
            self.remove_node(n)
        return len(gone)

    def _leave_pools(self, rec: NodeRecord) -> None:
        for g in rec.gpus:
            members = self._members.get(g.pool_id)
            if members is not None and members.pop(rec.name, None) is not None:
                self._tally(g.pool_id, rec, g, -1)
                if not members:
                    del self._members[g.pool_id]
                    del self._tallies[g.pool_id]
            self._dirty.add(g.pool_id)

    def _tally(self, pid: str, rec: NodeRecord, g: NodeGpu, sign: int) -> None:
        taints, defining, memory, pins, sharing = self._tallies.setdefault(
            pid, (Counter(), Counter(), Counter(), Counter(), Counter())
        )
        bump(sharing, g.sharing, sign)
        for t in pool_taints(rec.taints):
            bump(taints, t, sign)
        for kv in g.defining_labels:
            bump(defining, kv, sign)
        bump(pins, Pin(g.defining_labels, g.absent_labels), sign)
        if g.memory_mib is not None:
            bump(memory, g.memory_mib, sign)

    # -- pods ----------------------------------------------------------------

    def upsert_base_pod(self, key: str, rec: tuple[str, int, int, int]) -> bool:
        """A pod without GPUs that holds CPU, memory and a pod slot on node ``rec[0]``
        (``pod_requests.base_record``)."""
        if key in self._pods:
            self.remove_pod(key)
        old = self._base_pods.get(key)
        if old == rec:
            return False
        if old is not None:
            self._hold(old[0], (*old[1:], 1), -1)
        self._base_pods.put(key, rec)
        self._hold(rec[0], (*rec[1:], 1), 1)
        if self._dirty:  # a fit changed: a pool changed (most CPU pods' events change none)
            self.generation += 1
        return True

    @property
    def tracked(self) -> tuple[tuple[int, ...], ...]:
        """The server requests whose fit is counted (:meth:`track`), sorted."""
        return self._reqs

    def requested_on(self, node: str) -> tuple[int, ...]:
        """What the pods bound to ``node`` request of it (CPU, memory, ephemeral storage, pods),
        whatever its GPUs: the DRA ledger counts its nodes' fit with it."""
        return tuple(self._requested.get(node, (0, 0, 0, 0)))

    def _hold(self, node: str, base: tuple[int, ...], sign: int) -> None:
        """Move what is requested on ``node`` by ``base`` (CPU, memory, ephemeral storage, pods)."""
        held = self._requested.get(node)
        if held is None:
            held = self._requested[node] = [0, 0, 0, 0]
        for i, v in enumerate(base):
            held[i] += sign * v
        if not any(held):
            del self._requested[node]
        if self._reqs:
            self._refresh(node)
        if self.on_requested is not None:
            self.on_requested(node)

    def upsert_pod(self, rec: PodRecord) -> bool:
        old_base = self._base_pods.pop(rec.key)
        if old_base is not None:
            self._hold(old_base[0], (*old_base[1:], 1), -1)
        old = self._pods.get(rec.key)
        changed = old != rec
        if changed:
            if old is not None:
                self._unapply(old)
            self._pods[rec.key] = rec
            self._apply(rec)
        if rec.node is not None and rec.key in self._resv:
            # the watch shows the pod bound: it now counts as used
            self._drop_reservation(rec.key)
            changed = True
        if changed:
            self.generation += 1
        return changed

    def remove_pod(self, key: str) -> bool:
        old = self._pods.pop(key, None)
        changed = False
        base = self._base_pods.pop(key)
        if base is not None:
            self._hold(base[0], (*base[1:], 1), -1)
            changed = bool(self._dirty)
        if old is not None:
            self._unapply(old)
            changed = True
        if key in self._resv:
            self._drop_reservation(key)
            changed = True
        if changed:
            self.generation += 1
        return changed

    def retain_pods(self, keep: set[str]) -> int:
        gone = [k for k in self._pods if k not in keep]
        for k in gone:
            self.remove_pod(k)
        held = self._base_pods.retain(keep)
        for node, *base in held:
            self._hold(node, (*base, 1), -1)
        if held and self._dirty:
            self.generation += 1
        return len(gone) + len(held)

    def _apply(self, rec: PodRecord, sign: int = 1) -> None:
        if rec.node is None:
            return
        held = self._requested.get(rec.node)
        if held is None:
            held = self._requested[rec.node] = [0, 0, 0, 0]
        for i, v in enumerate((*rec.base, 1)):
            held[i] += sign * v
        if not any(held):
            del self._requested[rec.node]
        used = self._used.setdefault(rec.node, {})
        for resource, n in rec.usage:
            v = used.get(resource, 0) + sign * n
            if v:
                used[resource] = v
            else:
                used.pop(resource, None)
        if not used:
            del self._used[rec.node]
        self._refresh(rec.node)

    def _unapply(self, rec: PodRecord) -> None:
        self._apply(rec, -1)

    # -- reservations ----------------------------------------------------------

    def reserve(self, owner: str, pool_id: str, count: int, expires_at: float,
                request: tuple[int, ...] | None = None) -> Reservation | None:
        """Count ``count`` GPUs of ``pool_id`` for ``owner`` at once.

        Placed on the pool's contributing node with the most free GPUs (ties:
        node name), as the spawn is most likely to land there.  Returns None
        (and holds nothing) when the pod is already bound: it is counted as used.
        """
        check_count(count)
        pod = self._pods.get(owner)
        if pod is not None and pod.node is not None:
            return None
        if owner in self._resv:
            self._drop_reservation(owner)
        members = self._members.get(pool_id)
        resource: str | None = next(iter(members.values())).resource if members else None
        if resource is None and pool_id in self._declared:
            resource = self._declared[pool_id].resource
        pv = self._pviews.get(pool_id)
        node = pv.most_free() if pv is not None else None
        if node is not None and request is not None and pv is not None and self._reqs:
            # the node with the most free GPUs among those the server fits on, if any
            node = pv.most_free_fitting(self._reqs.index(request) if request in self._reqs else -1) or node
        r = Reservation(owner, pool_id, resource, node, count, expires_at, request)
        self._resv[owner] = r
        if node is not None and resource is not None:
            on = self._resv_on.setdefault(node, {})
            on[resource] = on.get(resource, 0) + count
            if request is not None:
                self._hold(node, request, 1)
            self._refresh(node)
        self._dirty.add(pool_id)
        self.generation += 1
        return r

    def _drop_reservation(self, owner: str) -> None:
        r = self._resv.pop(owner)
        self._dirty.add(r.pool_id)
        if r.node is None or r.resource is None:
            return
        if r.request is not None:
            self._hold(r.node, r.request, -1)
        on = self._resv_on.get(r.node, {})
        left = on.get(r.resource, 0) - r.count
        if left > 0:
            on[r.resource] = left
        else:
            on.pop(r.resource, None)
            if not on:
                self._resv_on.pop(r.node, None)
        self._refresh(r.node)

    # -- per-node accounting -----------------------------------------------------

    def _refresh(self, name: str, force: bool = False) -> None:
        """Recompute one node's contribution and move pool sums by the difference."""
        rec = self._nodes.get(name)
        new: dict[str, tuple[str, int, int, int, int, tuple[int, ...]]] = {}
        if rec is not None and rec.contributes:
            used = self._used.get(name, {})
            resv = self._resv_on.get(name, {})
            fits = holds = 0
            if self._reqs and rec.base:
                space = node_resources.room(rec.base, self._requested.get(name, (0, 0, 0, 0)))
                for i, req in enumerate(self._reqs):
                    if node_resources.fits(req, space):
                        fits |= 1 << i
                    if node_resources.fits(req, rec.base):
                        holds |= 1 << i
            for g in rec.gpus:
                free = g.allocatable - used.get(g.resource, 0) - resv.get(g.resource, 0)
                new[g.resource] = (g.pool_id, g.allocatable, free if free > 0 else 0, fits, holds, rec.base)
        old = self._contrib.get(name, {})
        if new == old and not force:
            return
        for resource, (pid, *_, base) in old.items():
            self._pviews[pid].remove(name)
            if not self._pviews[pid].names:
                del self._pviews[pid]
            bump(self._bases[pid], base, -1)
            if not self._bases[pid]:
                del self._bases[pid]
            self._dirty.add(pid)
        for resource, (pid, alloc, free, fits, holds, base) in new.items():
            assert rec is not None
            view = NodeView(
                name=name,
                allocatable=alloc,
                free=free,
                driver_version=rec.driver_version,
                cuda_version=rec.cuda_version,
                compute_capability=rec.compute_capability,
                labels=rec.labels,
                fits=fits,
                holds=holds,
            )
            pv = self._pviews.get(pid)
            if pv is None:
                pv = self._pviews[pid] = _PoolNodes(len(self._reqs))
            pv.add(view)
            bump(self._bases.setdefault(pid, Counter()), base, 1)
            self._dirty.add(pid)
        if new:
            self._contrib[name] = new
        else:
            self._contrib.pop(name, None)

    def _build(self, pid: str) -> PoolView | None:
        members = self._members.get(pid, {})
        declared = self._declared.get(pid)
        if not members and declared is None:
            return None
        taints: set[Taint] = set(declared.taints) if declared else set()
        memory: int | None = None
        defining_t: tuple[tuple[str, str], ...] = ()
        pins: tuple[Pin, ...] = ()
        sharing = declared_sharing(declared) if declared is not None else NOT_SHARED
        if members:
            t_taints, t_defining, t_memory, t_pins, t_sharing = self._tallies[pid]
            taints.update(t_taints)
            memory = min(t_memory) if t_memory else None
            # the sharing most of its nodes have (a pool's nodes share one device-plugin config)
            sharing = max(sorted(t_sharing), key=t_sharing.__getitem__)
        pv = self._pviews.get(pid)
        if members:
            # every member shares resource, product and group (they make the id)
            name0, g0 = next(iter(members.items()))
            rec0 = self._nodes[name0]
            resource, product = g0.resource, g0.product
            group_label, group = rec0.node_group_label, rec0.node_group
            # the labels every member carries, in the order group label, product label
            defining_t = tuple(kv for kv in g0.defining_labels if t_defining[kv] == len(members))
            # the distinct ways the members are pinned (one, unless their labels differ)
            pins = tuple(sorted(t_pins))
        else:
            assert declared is not None
            resource, product = declared.resource, declared.product
            group_label, group = declared.node_group_label, declared.node_group
        if declared is not None:
            memory = memory if memory is not None else declared.memory_mib
            if not defining_t:
                defining_t = tuple(
                    (k, declared.labels[k])
                    for k in (declared.node_group_label, product_label_for(declared.resource))
                    if k is not None and k in declared.labels
                )
        driver = pv.driver_version if pv else None
        cuda = pv.cuda_version if pv else None
        scale_up = None
        groups = pv.driver_groups() if pv else ()
        if declared is not None:
            driver = driver or declared.driver_version
            cuda = cuda or declared.cuda_version
            # the autoscaler's max counts every node of the group, Ready or not
            if len(members) < declared.max_nodes:
                scale_up = ScaleUp(declared.max_nodes, declared.gpus_per_node, declared.minutes)
        view = PoolView(
            id=pid,
            resource=resource,
            product=product,
            memory_mib=memory,
            node_group_label=group_label,
            node_group=group,
            nodes=len(pv) if pv else 0,
            total=pv.total if pv else 0,
            free=pv.free if pv else 0,
            max_free_per_node=pv.max_free_per_node if pv else 0,
            driver_version=driver,
            cuda_version=cuda,
            scale_up=scale_up,
            defining_labels=defining_t,
            pins=pins,
            taints=sorted_taints(taints),
            node_views=tuple(pv.views) if pv else (),
            sharing=sharing.strategy,
            replicas=sharing.replicas,
            requests=self._reqs,
            largest=_largest(self._bases.get(pid)),
        )
        return with_groups(view, groups)


def declared_sharing(declared: DeclaredPool) -> Sharing:
    """The sharing of a declared pool with no node yet, read from the labels its nodes will carry."""
    return node_sharing(declared.resource, declared.labels, declared.gpus_per_node)


class _PoolNodes(NodeTally):
    """A pool's :class:`NodeTally`, its nodes also summed per driver group
    (:class:`DriverGroup`), so the groups a view needs are rebuilt from a handful of
    tallies, never from the nodes."""

    __slots__ = ("groups", "nreq")

    def __init__(self, nreq: int = 0) -> None:
        super().__init__()
        self.groups: dict[tuple, _GroupTally] = {}
        self.nreq = nreq

    def add(self, view: NodeView) -> None:
        super().add(view)
        key = driver_key(view)
        tally = self.groups.get(key)
        if tally is None:
            tally = self.groups[key] = _GroupTally(self.nreq)
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


class _GroupTally:
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


def _largest(bases: Counter | None) -> tuple[int, ...] | None:
    """The largest allocatable per dimension among a pool's contributing nodes (few distinct shapes)."""
    if not bases:
        return None
    return tuple(max(b[i] for b in bases) for i in range(4))
