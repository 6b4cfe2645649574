"""Incremental accounting of DRA GPUs: slices, claims, classes and nodes in; pools out.
Design notes: docs/dra.md.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable

from gpuspawner.capacity.dra_objects import (
    HOSTNAME_LABEL,
    ClaimRecord,
    ClassRecord,
    DevKey,
    DraDevice,
    DraNode,
    SliceRecord,
    choose_class,
)
from gpuspawner.capacity.model import DraFacts, NodeView, PoolView, Taint, pool_id
from gpuspawner.capacity.sharing import MIG, NONE
from gpuspawner.capacity.node_resources import fits as fits_in
from gpuspawner.capacity.node_resources import room
from gpuspawner.capacity.pool_totals import NodeTally, Reserving, bump, check_count, lowest, pool_taints, sorted_taints

__all__ = ["DraLedger", "DraReservation", "product_label"]

RPool = tuple[str, str]  # (driver, resource pool name)


def product_label(device: DraDevice) -> str | None:
    """The product a pool shows: ``productName``, with the MIG profile when there is one."""
    if device.profile:
        return f"{device.product or 'unknown'} MIG {device.profile}"
    return device.product


@dataclass(frozen=True, slots=True)
class DraReservation:
    owner: str  # "<namespace>/<pod name>"
    pool_id: str
    node: str | None
    count: int
    expires_at: float


@dataclass(slots=True)
class _Member:
    """One device in a DRA pool."""

    key: DevKey
    node: str
    device: DraDevice


@dataclass(slots=True)
class _Pool:
    facts: DraFacts
    product: str | None
    group_label: str | None
    group: str | None
    devs: dict[str, dict[DevKey, DraDevice]] = field(default_factory=dict)  # node -> its devices here
    node_taints: dict[str, tuple[Taint, ...]] = field(default_factory=dict)  # as counted when it joined
    taints: Counter = field(default_factory=Counter)  # over member nodes
    memory: Counter = field(default_factory=Counter)  # over devices
    nodes: NodeTally = field(default_factory=NodeTally)  # contributing nodes


class DraLedger(Reserving):
    """The pure, incremental DRA accounting behind :class:`CapacityCache`."""

    def __init__(self) -> None:
        self._nodes: dict[str, DraNode] = {}
        self._slices: dict[str, SliceRecord] = {}
        self._rpool_slices: dict[RPool, set[str]] = {}
        self._node_rpools: dict[str, set[RPool]] = {}  # node -> resource pools with slices on it
        self._classes: dict[str, ClassRecord] = {}
        self._sorted_classes: tuple[ClassRecord, ...] = ()
        self._claims: dict[str, ClaimRecord] = {}
        self._taken: Counter = Counter()  # DevKey -> number of allocated claims naming it
        self._members: dict[RPool, list[_Member]] = {}  # what each resource pool contributes
        self._where: dict[DevKey, tuple[str, str]] = {}  # device -> (its DRA pool id, its node)
        self._incomplete: set[RPool] = set()
        self._pools: dict[str, _Pool] = {}
        self._resv: dict[str, DraReservation] = {}
        self._resv_on: Counter = Counter()  # (pool id, node) -> reserved devices
        self._dirty: set[str] = set()
        self._views: dict[str, PoolView] = {}
        self._built = -1
        self._out: tuple[PoolView, ...] = ()
        self.generation = 0
        # told (pool id, node, joined) whenever a node starts or stops contributing to a pool
        self.on_member: Callable[[str, str, bool], None] | None = None
        # the server requests whose fit is counted per node (Ledger.track), and what the pods on a
        # node request of it (Ledger.requested_on: the pods informer feeds the device-plugin ledger)
        self._reqs: tuple[tuple[int, ...], ...] = ()
        self._requested_on: Callable[[str], tuple[int, ...]] | None = None

    # -- reading -------------------------------------------------------------

    @property
    def slice_count(self) -> int:
        return len(self._slices)

    @property
    def claim_count(self) -> int:
        return len(self._claims)

    @property
    def class_count(self) -> int:
        return len(self._classes)

    def incomplete_pools(self) -> tuple[RPool, ...]:
        """Resource pools not used because a slice of their newest generation is missing."""
        return tuple(sorted(self._incomplete))

    def reservations(self) -> dict[str, DraReservation]:
        return dict(self._resv)

    def has_pool(self, pid: str) -> bool:
        pool = self._pools.get(pid)
        return pool is not None and bool(pool.devs)

    def pools(self) -> tuple[PoolView, ...]:
        """The DRA pools, sorted by id; rebuilt only for pools changed since the last call."""
        if self._built == self.generation and not self._dirty:
            return self._out
        for pid in self._dirty:
            pool = self._pools.get(pid)
            if pool is None or not pool.devs:
                self._pools.pop(pid, None)
                self._views.pop(pid, None)
            else:
                self._views[pid] = _view(pid, pool, self._reqs, self._largest(pool))
        self._dirty.clear()
        self._out = tuple(self._views[k] for k in sorted(self._views))
        self._built = self.generation
        return self._out

    # -- inputs --------------------------------------------------------------

    def upsert_node(self, rec: DraNode) -> bool:
        if self._nodes.get(rec.name) == rec:
            return False
        self._nodes[rec.name] = rec
        self._resolve_many(self._node_rpools.get(rec.name, ()))
        return True

    def remove_node(self, name: str) -> bool:
        if self._nodes.pop(name, None) is None:
            return False
        self._resolve_many(self._node_rpools.get(name, ()))
        return True

    def upsert_slice(self, rec: SliceRecord) -> bool:
        old = self._slices.get(rec.name)
        if old == rec:
            return False
        touched = {(rec.driver, rec.pool)}
        if old is not None:
            touched.add(self._forget_slice(old))
        self._slices[rec.name] = rec
        self._rpool_slices.setdefault((rec.driver, rec.pool), set()).add(rec.name)
        if rec.node is not None:
            self._node_rpools.setdefault(rec.node, set()).add((rec.driver, rec.pool))
        self._resolve_many(touched)
        return True

    def remove_slice(self, name: str) -> bool:
        old = self._slices.get(name)
        if old is None:
            return False
        self._resolve_many({self._forget_slice(old)})
        return True

    def _forget_slice(self, rec: SliceRecord) -> RPool:
        del self._slices[rec.name]
        rp = (rec.driver, rec.pool)
        names = self._rpool_slices.get(rp, set())
        names.discard(rec.name)
        if not names:
            self._rpool_slices.pop(rp, None)
        if rec.node is not None and not any(
            self._slices[n].node == rec.node for n in self._rpool_slices.get(rp, ())
        ):
            on = self._node_rpools.get(rec.node, set())
            on.discard(rp)
            if not on:
                self._node_rpools.pop(rec.node, None)
        return rp

    def upsert_class(self, rec: ClassRecord) -> bool:
        if self._classes.get(rec.name) == rec:
            return False
        self._classes[rec.name] = rec
        self._classes_changed()
        return True

    def remove_class(self, name: str) -> bool:
        if self._classes.pop(name, None) is None:
            return False
        self._classes_changed()
        return True

    def _classes_changed(self) -> None:
        # a class decides which pool (and so which id) a device is in: re-place every device
        self._sorted_classes = tuple(c for _, c in sorted(self._classes.items()) if c.readable)
        self._resolve_many(set(self._rpool_slices) | set(self._members))

    def upsert_claim(self, rec: ClaimRecord) -> bool:
        old = self._claims.get(rec.key)
        changed = old != rec
        if changed:
            self._claims[rec.key] = rec
            self._take(old.devices if old else (), -1)
            self._take(rec.devices, 1)
        if rec.allocated and rec.owner is not None and rec.owner in self._resv:
            # the scheduler allocated the pod's claim: its devices now count as taken
            self._drop_reservation(rec.owner)
            changed = True
        if changed:
            self.generation += 1
        return changed

    def remove_claim(self, key: str) -> bool:
        old = self._claims.pop(key, None)
        if old is None:
            return False
        self._take(old.devices, -1)
        self.generation += 1
        return True

    def _take(self, devices: Iterable[DevKey], sign: int) -> None:
        touched: set[tuple[str, str]] = set()
        for key in devices:
            bump(self._taken, key, sign)
            where = self._where.get(key)
            if where is not None:
                touched.add(where)
        for pid, node in touched:
            self._refresh(pid, node)

    # retain_*: drop what a re-list no longer shows; each returns how many went

    def retain_nodes(self, keep: set[str]) -> int:
        return _retain(self._nodes, keep, self.remove_node)

    def retain_slices(self, keep: set[str]) -> int:
        return _retain(self._slices, keep, self.remove_slice)

    def retain_claims(self, keep: set[str]) -> int:
        return _retain(self._claims, keep, self.remove_claim)

    def retain_classes(self, keep: set[str]) -> int:
        return _retain(self._classes, keep, self.remove_class)

    # -- reservations --------------------------------------------------------

    def reserve(self, owner: str, pid: str, count: int, expires_at: float) -> DraReservation:
        """Count ``count`` devices of DRA pool ``pid`` as taken for the pod ``owner`` now, on the
        pool's contributing node with the most free devices (ties: node name)."""
        check_count(count)
        if owner in self._resv:
            self._drop_reservation(owner)
        pool = self._pools.get(pid)
        node = pool.nodes.most_free() if pool is not None else None
        r = DraReservation(owner, pid, node, count, expires_at)
        self._resv[owner] = r
        if node is not None:
            self._resv_on[(pid, node)] += count
            self._refresh(pid, node)
        self.generation += 1
        return r

    def _drop_reservation(self, owner: str) -> None:
        r = self._resv.pop(owner)
        if r.node is not None:
            bump(self._resv_on, (r.pool_id, r.node), -r.count)
            if r.pool_id in self._pools:
                self._refresh(r.pool_id, r.node)

    # -- placing devices -----------------------------------------------------

    def _resolve_many(self, rpools: Iterable[RPool]) -> None:
        todo = list(rpools)
        for rp in todo:
            self._resolve(rp)
        if todo:  # a node with no DRA devices changes no pool
            self.generation += 1

    def _resolve(self, rp: RPool) -> None:
        """Replace what resource pool ``rp`` contributes with what its slices say now."""
        touched: set[tuple[str, str] | None] = set()
        for m in self._members.pop(rp, ()):
            touched.add(self._unplace(m))
        members = self._usable_members(rp)
        if members:
            self._members[rp] = members
        for m in members:
            touched.add(self._place(m))
        for where in touched:
            if where is not None:
                self._refresh(*where)

    def _current_slices(self, rp: RPool) -> list[SliceRecord] | None:
        """The slices of ``rp``'s newest generation, or None while that generation is incomplete."""
        slices = [self._slices[n] for n in self._rpool_slices.get(rp, ())]
        if not slices:
            self._incomplete.discard(rp)
            return []
        newest = max(s.generation for s in slices)
        current = [s for s in slices if s.generation == newest]
        names = [d.name for s in current for d in s.devices]
        complete = all(s.count == len(current) for s in current) and len(names) == len(set(names))
        if complete:
            self._incomplete.discard(rp)
            return current
        self._incomplete.add(rp)
        return None

    def _usable_members(self, rp: RPool) -> list[_Member]:
        current = self._current_slices(rp)
        out: list[_Member] = []
        for s in current or ():
            node = self._nodes.get(s.node) if s.node is not None else None
            if node is None or node.device_plugin:
                continue  # not node-local, node not seen yet, or GPUs published twice
            for d in s.devices:
                if d.usable:
                    out.append(_Member(DevKey(s.driver, s.pool, d.name), node.name, d))
        return out

    def _place(self, m: _Member) -> tuple[str, str] | None:
        cls = choose_class(self._sorted_classes, m.key.driver, m.device)
        if cls is None:
            return None  # no DeviceClass a claim could name takes it (doctor: dra-no-deviceclass)
        node = self._nodes[m.node]
        product = product_label(m.device)
        pid = pool_id(node.group, product, cls.name)
        pool = self._pools.get(pid)
        if pool is None:
            facts = DraFacts(m.key.driver, cls.name, m.device.product, m.device.profile, m.device.device_type,
                             cls.sharing)
            pool = self._pools[pid] = _Pool(facts, product, node.group_label, node.group)
        devs = pool.devs.get(m.node)
        if devs is None:
            devs = pool.devs[m.node] = {}
            kept = pool_taints(node.taints)
            pool.node_taints[m.node] = kept
            for t in kept:
                bump(pool.taints, t, 1)
        devs[m.key] = m.device
        if m.device.memory_mib is not None:
            bump(pool.memory, m.device.memory_mib, 1)
        self._where[m.key] = (pid, m.node)
        return pid, m.node

    def _unplace(self, m: _Member) -> tuple[str, str] | None:
        where = self._where.pop(m.key, None)
        if where is None:
            return None
        pid, node = where
        pool = self._pools[pid]
        devs = pool.devs[node]
        del devs[m.key]
        if m.device.memory_mib is not None:
            bump(pool.memory, m.device.memory_mib, -1)
        if not devs:
            del pool.devs[node]
            for t in pool.node_taints.pop(node):
                bump(pool.taints, t, -1)
        return pid, node

    # -- CPU, memory and pod fit ---------------------------------------------------

    def count_fit(self, requests: Iterable[tuple[int, ...]],
                  requested_on: Callable[[str], tuple[int, ...]]) -> bool:
        """Count, per pool, the nodes where each server request fits beside what their pods already
        request (``requested_on``), as :meth:`Ledger.track` does for device-plugin pools; False
        when nothing changed. A change recounts every node once."""
        reqs = tuple(sorted({tuple(r) for r in requests}))
        if reqs == self._reqs and requested_on == self._requested_on:
            return False
        self._reqs, self._requested_on = reqs, requested_on
        for pid, pool in self._pools.items():
            for node in list(pool.devs):
                self._refresh(pid, node)
        self.generation += 1
        return True

    def requests_changed(self, node: str) -> None:
        """What the pods on ``node`` request changed: recount its fit in the pools it is in (a pool
        changes only when a fit did, so most CPU pods' events change none)."""
        if not self._reqs:
            return
        changed = False
        for pid, pool in self._pools.items():
            if node not in pool.devs:
                continue
            was_dirty = pid in self._dirty
            before = _view_of(pool.nodes, node)
            self._refresh(pid, node)
            if _view_of(pool.nodes, node) != before:
                changed = True
            elif not was_dirty:
                self._dirty.discard(pid)
        if changed:
            self.generation += 1

    def _fit_bits(self, rec: DraNode) -> tuple[int, int]:
        """Bit i of ``fits``: the i-th tracked request fits on the node now; of ``holds``: at all."""
        if not self._reqs or not rec.base or self._requested_on is None:
            return 0, 0
        space = room(rec.base, self._requested_on(rec.name))
        fits = holds = 0
        for i, req in enumerate(self._reqs):
            if fits_in(req, space):
                fits |= 1 << i
            if fits_in(req, rec.base):
                holds |= 1 << i
        return fits, holds

    def _largest(self, pool: _Pool) -> tuple[int, ...] | None:
        bases = [self._nodes[v.name].base for v in pool.nodes.views if v.name in self._nodes]
        bases = [b for b in bases if b]
        return tuple(max(b[i] for b in bases) for i in range(4)) if bases else None

    # -- per-node accounting ----------------------------------------------------

    def _refresh(self, pid: str, node: str) -> None:
        """Recompute what ``node`` contributes to pool ``pid`` and move the pool's sums."""
        pool = self._pools.get(pid)
        if pool is None:
            return
        self._dirty.add(pid)
        was = node in pool.nodes
        if was:
            pool.nodes.remove(node)
        rec = self._nodes.get(node)
        devs = pool.devs.get(node)
        if rec is None or not rec.contributes or not devs:
            if was and self.on_member is not None:
                self.on_member(pid, node, False)
            return
        free = sum(1 for k in devs if not self._taken.get(k)) - self._resv_on.get((pid, node), 0)
        fits, holds = self._fit_bits(rec)
        view = NodeView(
            name=node,
            allocatable=len(devs),
            free=max(free, 0),
            driver_version=lowest(d.driver_version for d in devs.values() if d.driver_version),
            cuda_version=lowest(d.cuda_version for d in devs.values() if d.cuda_version),
            compute_capability=lowest(d.compute_capability for d in devs.values() if d.compute_capability),
            labels=((HOSTNAME_LABEL, rec.hostname),) if rec.hostname else (),
            fits=fits,
            holds=holds,
        )
        pool.nodes.add(view)
        if not was and self.on_member is not None:
            self.on_member(pid, node, True)


def _retain(table: dict, keep: set[str], remove) -> int:
    gone = [k for k in table if k not in keep]
    for k in gone:
        remove(k)
    return len(gone)


def _view_of(nodes: NodeTally, name: str) -> NodeView | None:
    i = bisect.bisect_left(nodes.names, name)
    return nodes.views[i] if i < len(nodes.names) and nodes.names[i] == name else None


def _view(pid: str, pool: _Pool, reqs: tuple[tuple[int, ...], ...] = (),
          largest: tuple[int, ...] | None = None) -> PoolView:
    defining = ((pool.group_label, pool.group),) if pool.group_label and pool.group else ()
    return PoolView(
        id=pid,
        resource=pool.facts.device_class,
        product=pool.product,
        memory_mib=min(pool.memory) if pool.memory else None,
        node_group_label=pool.group_label,
        node_group=pool.group,
        nodes=len(pool.nodes),
        total=pool.nodes.total,
        free=pool.nodes.free,
        max_free_per_node=pool.nodes.max_free_per_node,
        driver_version=pool.nodes.driver_version,
        cuda_version=pool.nodes.cuda_version,
        scale_up=None,
        defining_labels=defining,
        taints=sorted_taints(pool.taints),
        node_views=tuple(pool.nodes.views),
        dra=pool.facts,
        # a claim takes a whole device (or MIG slice); a class's sharing config sets how the
        # processes of its pod share it, never several claims on one device
        sharing=MIG if pool.facts.profile else (pool.facts.sharing or NONE),
        requests=reqs,
        largest=largest,
    )
