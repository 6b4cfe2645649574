"""The device-plugin source of the ``Ledger``: nodes and pods in, what each node gives its pools out.
Design notes: docs/capacity.md.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable

from gpuspawner.capacity import steps
from gpuspawner.capacity.config import DeclaredPool
from gpuspawner.capacity.held_pods import HeldPods
from gpuspawner.capacity.labels import NodeGpu, NodeRecord, product_label_for
from gpuspawner.capacity.ledger import Ledger, Supply
from gpuspawner.capacity.model import Pin, PoolView, ScaleUp, Taint, with_groups
from gpuspawner.capacity.pod_requests import PodRecord
from gpuspawner.capacity.pool_totals import PoolNodes, bump, pool_taints, sorted_taints
from gpuspawner.capacity.sharing import NOT_SHARED, Sharing, node_sharing

__all__ = ["PluginAccounts", "declared_sharing"]


class PluginAccounts:
    """Device-plugin GPUs (extended resources): nodes' GPU records and pods' requests, counted into
    :attr:`ledger`, with the declared pools the autoscaler can create from zero nodes."""

    def __init__(self, declared: Iterable[DeclaredPool] = ()) -> None:
        self.ledger = Ledger(self)
        self._declared: dict[str, DeclaredPool] = {p.id: p for p in declared}
        self._nodes: dict[str, NodeRecord] = {}
        self._pods: dict[str, PodRecord] = {}
        # node -> resource -> GPUs held by counted pods (kept for nodes not
        # (yet) known too: a pod event may arrive before its node's)
        self._used: dict[str, dict[str, int]] = {}
        self._members: dict[str, dict[str, NodeGpu]] = {}  # pool -> node -> its GPU entry
        # pool -> how many member nodes carry each taint / defining label / memory
        # size / pin / sharing, kept as nodes join and leave so a rebuild never rescans them
        self._tallies: dict[str, tuple[Counter, Counter, Counter, Counter, Counter]] = {}
        # the pods without GPUs that hold room on a node, as plain tuples (node, cpu, memory, ephemeral)
        self._base_pods = HeldPods()
        for pid in self._declared:
            self.ledger.touch(pid)

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
            self.ledger.touch(g.pool_id)
        # touch: a changed record (driver labels, ...) changes its pools' views even
        # when the numbers stay the same
        self._refresh(rec.name, touch=True)
        self.ledger.generation += 1
        return True

    def remove_node(self, name: str) -> bool:
        old = self._nodes.pop(name, None)
        if old is None:
            return False
        self._leave_pools(old)
        self._refresh(name)
        self.ledger.generation += 1
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
            self.ledger.touch(g.pool_id)

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
            self.ledger.hold(old[0], (*old[1:], 1), -1)
        self._base_pods.put(key, rec)
        self.ledger.hold(rec[0], (*rec[1:], 1), 1)
        if self.ledger.changed:  # a fit changed: a pool changed (most CPU pods' events change none)
            self.ledger.generation += 1
        return True

    def upsert_pod(self, rec: PodRecord) -> bool:
        old_base = self._base_pods.pop(rec.key)
        if old_base is not None:
            self.ledger.hold(old_base[0], (*old_base[1:], 1), -1)
        old = self._pods.get(rec.key)
        changed = old != rec
        if changed:
            if old is not None:
                self._apply(old, -1)
            self._pods[rec.key] = rec
            self._apply(rec)
        if rec.node is not None and self.ledger.bound(rec.key):
            changed = True  # the watch shows the pod bound: it now counts as used
        if changed:
            self.ledger.generation += 1
        return changed

    def remove_pod(self, key: str) -> bool:
        old = self._pods.pop(key, None)
        changed = False
        base = self._base_pods.pop(key)
        if base is not None:
            self.ledger.hold(base[0], (*base[1:], 1), -1)
            changed = self.ledger.changed
        if old is not None:
            self._apply(old, -1)
            changed = True
        if self.ledger.bound(key):
            changed = True
        if changed:
            self.ledger.generation += 1
        return changed

    def retain_pods(self, keep: set[str]) -> int:
        return steps.run(self.retain_pods_steps(keep))

    def retain_pods_steps(self, keep: set[str]) -> steps.Steps[int]:
        """Drop every pod not in ``keep`` (after a re-list), in steps; returns how many."""
        gone = []
        for k in steps.paced(list(self._pods)):
            if k is None:
                yield
            elif k not in keep:
                gone.append(k)
        for k in steps.paced(gone, 50):  # a pod's removal recounts its node
            if k is None:
                yield
            else:
                self.remove_pod(k)
        held = yield from self._base_pods.retain_steps(keep)
        for rec in steps.paced(held, 100):
            if rec is None:
                yield
            else:
                node, *base = rec
                self.ledger.hold(node, (*base, 1), -1)
        if held and self.ledger.changed:
            self.ledger.generation += 1
        return len(gone) + len(held)

    def _apply(self, rec: PodRecord, sign: int = 1) -> None:
        if rec.node is None:
            return
        used = self._used.setdefault(rec.node, {})
        for resource, n in rec.usage:
            v = used.get(resource, 0) + sign * n
            if v:
                used[resource] = v
            else:
                used.pop(resource, None)
        if not used:
            del self._used[rec.node]
        self.ledger.hold(rec.node, (*rec.base, 1), sign, tell=False, refit=False)
        self._refresh(rec.node)

    def _refresh(self, name: str, touch: bool = False) -> None:
        """Tell the ledger what node ``name`` gives each of its pools now."""
        rec = self._nodes.get(name)
        supplies: dict[str, Supply] = {}
        if rec is not None and rec.contributes:
            used = self._used.get(name, {})
            for g in rec.gpus:
                supplies[g.pool_id] = Supply(
                    g.allocatable, g.allocatable - used.get(g.resource, 0), rec.driver_version,
                    rec.cuda_version, rec.compute_capability, rec.labels, rec.base,
                )
        self.ledger.put_node(name, supplies, touch=touch)

    # -- what the ledger asks ----------------------------------------------------

    def reservable(self, owner: str, pid: str) -> tuple[bool, str | None]:
        """A bound pod counts as used (no reservation); the GPUs are the pool's resource."""
        pod = self._pods.get(owner)
        if pod is not None and pod.node is not None:
            return False, None
        members = self._members.get(pid)
        resource: str | None = next(iter(members.values())).resource if members else None
        if resource is None and pid in self._declared:
            resource = self._declared[pid].resource
        return True, resource

    def pool_view(self, pid: str, pv: PoolNodes, requests: tuple[tuple[int, ...], ...],
                  largest: tuple[int, ...] | None) -> PoolView | None:
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
        driver, cuda = pv.driver_version, pv.cuda_version
        scale_up = None
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
            nodes=len(pv),
            total=pv.total,
            free=pv.free,
            max_free_per_node=pv.max_free_per_node,
            driver_version=driver,
            cuda_version=cuda,
            scale_up=scale_up,
            defining_labels=defining_t,
            pins=pins,
            taints=sorted_taints(taints),
            node_views=tuple(pv.views),
            sharing=sharing.strategy,
            replicas=sharing.replicas,
            requests=requests,
            largest=largest,
        )
        return with_groups(view, pv.driver_groups())


def declared_sharing(declared: DeclaredPool) -> Sharing:
    """The sharing of a declared pool with no node yet, read from the labels its nodes will carry."""
    return node_sharing(declared.resource, declared.labels, declared.gpus_per_node)
