"""The DRA source of the ``Ledger``: slices, claims, classes and nodes in, what each node gives its pools out.
Design notes: docs/dra.md.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

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
from gpuspawner.capacity.ledger import Ledger, Supply
from gpuspawner.capacity.model import DraFacts, PoolView, Taint, pool_id
from gpuspawner.capacity.sharing import MIG, NONE
from gpuspawner.capacity.pool_totals import PoolNodes, bump, lowest, pool_taints, sorted_taints

__all__ = ["DraAccounts", "product_label"]

RPool = tuple[str, str]  # (driver, resource pool name)


def product_label(device: DraDevice) -> str | None:
    """The product a pool shows: ``productName``, with the MIG profile when there is one."""
    if device.profile:
        return f"{device.product or 'unknown'} MIG {device.profile}"
    return device.product


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


class DraAccounts:
    """DRA GPUs: the devices of complete slice generations, each once, in pools by node group,
    product and DeviceClass; taken by allocated claims; counted into :attr:`ledger`."""

    def __init__(self) -> None:
        self.ledger = Ledger(self)
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

    def has_pool(self, pid: str) -> bool:
        pool = self._pools.get(pid)
        return pool is not None and bool(pool.devs)

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
        if rec.allocated and rec.owner is not None and self.ledger.bound(rec.owner):
            changed = True  # the scheduler allocated the pod's claim: its devices now count as taken
        if changed:
            self.ledger.generation += 1
        return changed

    def remove_claim(self, key: str) -> bool:
        old = self._claims.pop(key, None)
        if old is None:
            return False
        self._take(old.devices, -1)
        self.ledger.generation += 1
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

    # -- what the ledger asks ------------------------------------------------

    def reservable(self, owner: str, pid: str) -> tuple[bool, str | None]:
        """Always: a claim is allocated after its pod is created, and names a class, not a resource."""
        return True, None

    def pool_view(self, pid: str, nodes: PoolNodes, requests: tuple[tuple[int, ...], ...],
                  largest: tuple[int, ...] | None) -> PoolView | None:
        pool = self._pools.get(pid)
        if pool is None or not pool.devs:
            self._pools.pop(pid, None)
            return None
        return _view(pid, pool, nodes, requests, largest)

    # -- placing devices -----------------------------------------------------

    def _resolve_many(self, rpools: Iterable[RPool]) -> None:
        todo = list(rpools)
        for rp in todo:
            self._resolve(rp)
        if todo:  # a node with no DRA devices changes no pool
            self.ledger.generation += 1

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

    # -- per-node accounting ----------------------------------------------------

    def _refresh(self, pid: str, node: str) -> None:
        """Tell the ledger what ``node`` gives pool ``pid`` now."""
        pool = self._pools.get(pid)
        if pool is None:
            return
        rec = self._nodes.get(node)
        devs = pool.devs.get(node)
        supply = None
        if rec is not None and rec.contributes and devs:
            supply = Supply(
                allocatable=len(devs),
                untaken=sum(1 for k in devs if not self._taken.get(k)),
                driver_version=lowest(d.driver_version for d in devs.values() if d.driver_version),
                cuda_version=lowest(d.cuda_version for d in devs.values() if d.cuda_version),
                compute_capability=lowest(d.compute_capability for d in devs.values() if d.compute_capability),
                labels=((HOSTNAME_LABEL, rec.hostname),) if rec.hostname else (),
                base=rec.base,
            )
        self.ledger.put(pid, node, supply, touch=True)


def _retain(table: dict, keep: set[str], remove) -> int:
    gone = [k for k in table if k not in keep]
    for k in gone:
        remove(k)
    return len(gone)


def _view(pid: str, pool: _Pool, nodes: PoolNodes, reqs: tuple[tuple[int, ...], ...] = (),
          largest: tuple[int, ...] | None = None) -> PoolView:
    defining = ((pool.group_label, pool.group),) if pool.group_label and pool.group else ()
    return PoolView(
        id=pid,
        resource=pool.facts.device_class,
        product=pool.product,
        memory_mib=min(pool.memory) if pool.memory else None,
        node_group_label=pool.group_label,
        node_group=pool.group,
        nodes=len(nodes),
        total=nodes.total,
        free=nodes.free,
        max_free_per_node=nodes.max_free_per_node,
        driver_version=nodes.driver_version,
        cuda_version=nodes.cuda_version,
        scale_up=None,
        defining_labels=defining,
        taints=sorted_taints(pool.taints),
        node_views=tuple(nodes.views),
        dra=pool.facts,
        # a claim takes a whole device (or MIG slice); a class's sharing config sets how the
        # processes of its pod share it, never several claims on one device
        sharing=MIG if pool.facts.profile else (pool.facts.sharing or NONE),
        requests=reqs,
        largest=largest,
    )
