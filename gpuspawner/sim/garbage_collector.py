"""The simulated garbage collector: dependents follow their owners (``metadata.ownerReferences``).
Design notes: docs/simulated-cluster.md.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from testcluster.node.controller import MERGE, EventRecorder, Tasks, code_of, informer
from .deletion import BACKGROUND, FINALIZER_FOREGROUND, FINALIZER_ORPHAN, FOREGROUND, ORPHAN
from .resources import RESOURCES, ResourceInfo
from testcluster.node.work_queue import WorkQueue

__all__ = ["GarbageCollector", "resolve_owner_kind"]

log = logging.getLogger(__name__)

COMPONENT = "garbage-collector-controller"


def resolve_owner_kind(api_version: str, kind: str) -> ResourceInfo | None:
    """The served resource an ownerReference names, or None (the REST mapping fails)."""
    for info in RESOURCES.values():
        if info.kind == kind and info.api_version == api_version:
            return info
    return None


@dataclass
class _Node:
    """One object in the graph (``graph.go`` node); virtual until the informer has seen it."""

    uid: str
    info: ResourceInfo | None
    namespace: str | None
    name: str
    owners: list[dict[str, Any]] = field(default_factory=list)
    dependents: set[str] = field(default_factory=set)
    observed: bool = False
    being_deleted: bool = False
    deleting_dependents: bool = False
    finalizers: frozenset[str] = frozenset()


class _Unresolvable(Exception):
    """An owner reference the collector cannot look up: the dependent is kept."""


class GarbageCollector:
    """Deletes dependents whose owners are gone; runs foreground and orphan deletions."""

    def __init__(self, store) -> None:
        self.store = store
        self.nodes: dict[str, _Node] = {}
        # every object seen, by uid: an owner outside the graph is still known by its coordinates
        self.identities: dict[str, tuple[ResourceInfo, str | None, str]] = {}
        self.attempt_to_delete: WorkQueue[str] = WorkQueue()
        self.attempt_to_orphan: WorkQueue[str] = WorkQueue()
        self.recorder = EventRecorder(store, COMPONENT)
        self._stopping = asyncio.Event()
        self._tasks = Tasks()
        self.synced = asyncio.Event()

    # -- lifecycle --
    async def start(self) -> None:
        synced = []
        for plural in sorted(RESOURCES):
            done = asyncio.Event()
            synced.append(done)
            self._tasks.start(informer(self.store, plural, self._lister(plural), self._handler(plural),
                                       self._stopping, done), f"gc-{plural}")
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in synced)), 60)
        self.synced.set()
        self._tasks.start(self._worker(self.attempt_to_delete, self.attempt_to_delete_item), "gc-delete")
        self._tasks.start(self._worker(self.attempt_to_orphan, self.attempt_to_orphan_item), "gc-orphan")

    async def stop(self) -> None:
        self._stopping.set()
        self.attempt_to_delete.close()
        self.attempt_to_orphan.close()
        await self._tasks.stop()

    def _lister(self, plural: str):
        info = RESOURCES[plural]
        return lambda items: [self.observe(info, o) for o in items]

    def _handler(self, plural: str):
        info = RESOURCES[plural]

        def on_event(kind: str, obj: dict) -> None:
            if kind == "DELETED":
                self.observe_deleted(obj)
            else:
                self.observe(info, obj)
        return on_event

    async def _worker(self, queue: WorkQueue[str], process) -> None:
        while not self._stopping.is_set():
            uid = await queue.get()
            try:
                process(uid)
            except _Unresolvable:
                queue.forget(uid)
            except Exception as e:
                if code_of(e) not in (404, 409):
                    log.exception("garbage collector: processing %s failed", uid)
                queue.add_rate_limited(uid)
            else:
                queue.forget(uid)
            await asyncio.sleep(0)

    # -- the graph (graph_builder.go processGraphChanges) --
    def observe(self, info: ResourceInfo, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        uid = meta.get("uid")
        if not uid:
            return
        self.identities[uid] = (info, meta.get("namespace"), meta.get("name", ""))
        owners = list(meta.get("ownerReferences") or [])
        finalizers = frozenset(meta.get("finalizers") or ())
        being_deleted = bool(meta.get("deletionTimestamp"))
        node = self.nodes.get(uid)
        if node is None:
            gc_finalizer = being_deleted and finalizers & {FINALIZER_ORPHAN, FINALIZER_FOREGROUND}
            if not owners and not gc_finalizer:
                return  # takes no part in garbage collection (yet)
            node = _Node(uid, info, meta.get("namespace"), meta.get("name", ""), owners, observed=True,
                         being_deleted=being_deleted,
                         deleting_dependents=being_deleted and FINALIZER_FOREGROUND in finalizers)
            self.nodes[uid] = node
            self._add_dependent_to_owners(node, owners)
            self._process_transitions(None, node, being_deleted, finalizers)
            return
        if not node.observed:
            self._observe_virtual(node, info, meta)
        old_refs = {r.get("uid"): r for r in node.owners}
        new_refs = {r.get("uid"): r for r in owners}
        if old_refs != new_refs:
            self._add_unblocked_owners(old_refs, new_refs)
            node.owners = owners
            self._add_dependent_to_owners(node, [r for u, r in new_refs.items() if u not in old_refs])
            for u in old_refs.keys() - new_refs.keys():
                owner = self.nodes.get(u)
                if owner is not None:
                    owner.dependents.discard(uid)
        old_state = (node.being_deleted, node.finalizers)
        self._process_transitions(old_state, node, being_deleted, finalizers)

    def _observe_virtual(self, node: _Node, info: ResourceInfo, meta: dict[str, Any]) -> None:
        """A virtual node seen for real: dependents that named it in another namespace are wrong."""
        node.observed, node.info = True, info
        node.namespace, node.name = meta.get("namespace"), meta.get("name", "")
        if not node.namespace:
            return
        for dep_uid in list(node.dependents):
            dep = self.nodes.get(dep_uid)
            if dep is not None and dep.namespace != node.namespace:
                self._report_invalid_namespace(dep, node.uid)
                self.attempt_to_delete.add(dep_uid)

    def _process_transitions(self, old: tuple[bool, frozenset[str]] | None, node: _Node,
                             being_deleted: bool, finalizers: frozenset[str]) -> None:
        def starts(f: str) -> bool:
            if not being_deleted or f not in finalizers:
                return False
            return old is None or not old[0] or f not in old[1]

        node.finalizers = finalizers
        node.being_deleted = node.being_deleted or being_deleted
        if starts(FINALIZER_ORPHAN):
            self.attempt_to_orphan.add(node.uid)
            return
        if starts(FINALIZER_FOREGROUND):
            node.deleting_dependents = True
            for dep in node.dependents:
                self.attempt_to_delete.add(dep)
            self.attempt_to_delete.add(node.uid)

    def _add_dependent_to_owners(self, node: _Node, refs: list[dict[str, Any]]) -> None:
        for ref in refs:
            owner_uid = ref.get("uid")
            if not owner_uid:
                continue
            owner = self.nodes.get(owner_uid)
            if owner is None and owner_uid in self.identities:
                info, ns, name = self.identities[owner_uid]
                owner = self.nodes[owner_uid] = _Node(owner_uid, info, ns, name, observed=True)
            if owner is None:
                info = resolve_owner_kind(str(ref.get("apiVersion") or ""), str(ref.get("kind") or ""))
                ns = node.namespace if info is not None and info.namespaced else None
                owner = _Node(owner_uid, info, ns, str(ref.get("name") or ""))
                self.nodes[owner_uid] = owner
                # is the owner there at all? (a virtual node is checked against the API)
                self.attempt_to_delete.add(owner_uid)
            elif owner.observed and owner.namespace and owner.namespace != node.namespace:
                self._report_invalid_namespace(node, owner_uid)
                self.attempt_to_delete.add(node.uid)
            owner.dependents.add(node.uid)

    def _add_unblocked_owners(self, old: dict[str, dict], new: dict[str, dict]) -> None:
        """A blocking reference removed or unblocked may let a foreground owner go."""
        for uid, ref in old.items():
            still = new.get(uid)
            if ref.get("blockOwnerDeletion") and (still is None or not still.get("blockOwnerDeletion")):
                if uid in self.nodes:
                    self.attempt_to_delete.add(uid)

    def observe_deleted(self, obj: dict[str, Any]) -> None:
        uid = (obj.get("metadata") or {}).get("uid") or ""
        self.identities.pop(uid, None)
        node = self.nodes.get(uid)
        if node is not None:
            self._remove(node)

    def _remove(self, node: _Node) -> None:
        self.nodes.pop(node.uid, None)
        for ref in node.owners:
            owner = self.nodes.get(ref.get("uid") or "")
            if owner is not None:
                owner.dependents.discard(node.uid)
        for dep in node.dependents:
            self.attempt_to_delete.add(dep)
        for ref in node.owners:
            owner = self.nodes.get(ref.get("uid") or "")
            if owner is not None and owner.deleting_dependents:
                self.attempt_to_delete.add(owner.uid)

    def _report_invalid_namespace(self, dep: _Node, owner_uid: str) -> None:
        ref = next((r for r in dep.owners if r.get("uid") == owner_uid), None)
        if ref is None or dep.info is None:
            return
        identity = (f"[{ref.get('apiVersion')}/{ref.get('kind')}, namespace: {dep.namespace or ''}, "
                    f"name: {ref.get('name')}, uid: {owner_uid}]")
        obj = {"apiVersion": dep.info.api_version, "kind": dep.info.kind,
               "metadata": {"name": dep.name, "namespace": dep.namespace, "uid": dep.uid}}
        self.recorder.emit(obj, "Warning", "OwnerRefInvalidNamespace",
                           f'ownerRef {identity} does not exist in namespace "{dep.namespace or ""}"')

    # -- the API side (garbagecollector.go) --
    def _get(self, info: ResourceInfo | None, namespace: str | None, name: str) -> dict[str, Any] | None:
        if info is None:
            raise _Unresolvable(name)
        try:
            return self.store.get(info.plural, name, namespace if info.namespaced else None)
        except Exception as e:
            if code_of(e) == 404:
                return None
            raise

    def attempt_to_delete_item(self, uid: str) -> None:
        """``attemptToDeleteItem``: delete the object when none of its owners is left."""
        node = self.nodes.get(uid)
        if node is None or (node.being_deleted and not node.deleting_dependents):
            return
        latest = self._get(node.info, node.namespace, node.name)
        if latest is None or latest["metadata"].get("uid") != uid:
            self._remove(node)  # a virtual delete event
            return
        if node.deleting_dependents:
            self._process_deleting_dependents(node)
            return
        refs = latest["metadata"].get("ownerReferences") or []
        if not refs:
            return
        solid, dangling, waiting = self._classify(node, refs)
        if solid:
            gone = {r.get("uid") for r in dangling + waiting}
            if gone:
                self._patch_owner_refs(node, lambda r: None if r.get("uid") in gone else r)
            return
        if waiting and node.dependents:
            if any(self.nodes[d].deleting_dependents for d in node.dependents if d in self.nodes):
                self._patch_owner_refs(node, lambda r: dict(r, blockOwnerDeletion=False)
                                       if r.get("blockOwnerDeletion") else r)
            self._delete(node, FOREGROUND)
            return
        finalizers = latest["metadata"].get("finalizers") or []
        policy = ORPHAN if FINALIZER_ORPHAN in finalizers else (
            FOREGROUND if FINALIZER_FOREGROUND in finalizers else BACKGROUND)
        self._delete(node, policy)

    def _classify(self, node: _Node, refs: list[dict[str, Any]]) -> tuple[list, list, list]:
        """``classifyReferences``: solid (alive), dangling (gone), waiting (foreground-deleting)."""
        solid, dangling, waiting = [], [], []
        for ref in refs:
            info = resolve_owner_kind(str(ref.get("apiVersion") or ""), str(ref.get("kind") or ""))
            if info is None or (info.namespaced and not node.namespace):
                raise _Unresolvable(str(ref))
            owner = self._get(info, node.namespace, str(ref.get("name") or ""))
            if owner is None or owner["metadata"].get("uid") != ref.get("uid"):
                dangling.append(ref)
            elif owner["metadata"].get("deletionTimestamp") and \
                    FINALIZER_FOREGROUND in (owner["metadata"].get("finalizers") or []):
                waiting.append(ref)
            else:
                solid.append(ref)
        return solid, dangling, waiting

    def _process_deleting_dependents(self, node: _Node) -> None:
        blocking = [d for d in node.dependents if d in self.nodes and any(
            r.get("uid") == node.uid and r.get("blockOwnerDeletion") for r in self.nodes[d].owners)]
        if not blocking:
            self._remove_finalizer(node, FINALIZER_FOREGROUND)
            return
        for d in blocking:
            if not self.nodes[d].deleting_dependents:
                self.attempt_to_delete.add(d)

    def attempt_to_orphan_item(self, uid: str) -> None:
        """``attemptToOrphanWorker``: drop the references to the owner, then its ``orphan`` finalizer."""
        node = self.nodes.get(uid)
        if node is None:
            return
        for dep_uid in list(node.dependents):
            dep = self.nodes.get(dep_uid)
            if dep is not None:
                self._patch_owner_refs(dep, lambda r: None if r.get("uid") == uid else r)
        self._remove_finalizer(node, FINALIZER_ORPHAN)

    def _delete(self, node: _Node, policy: str) -> None:
        assert node.info is not None
        try:
            self.store.delete(node.info.plural, node.name, node.namespace, preconditions={"uid": node.uid},
                              propagation_policy=policy)
        except Exception as e:
            if code_of(e) != 404:
                raise
            self._remove(node)

    def _patch_owner_refs(self, node: _Node, change) -> None:
        latest = self._get(node.info, node.namespace, node.name)
        if latest is None or latest["metadata"].get("uid") != node.uid:
            return
        refs = latest["metadata"].get("ownerReferences") or []
        new = [r2 for r2 in (change(r) for r in refs) if r2 is not None]
        if new == refs:
            return
        assert node.info is not None
        self.store.patch(node.info.plural, node.name,
                         {"metadata": {"ownerReferences": new or None,
                                       "resourceVersion": latest["metadata"]["resourceVersion"]}},
                         MERGE, node.namespace)

    def _remove_finalizer(self, node: _Node, finalizer: str) -> None:
        latest = self._get(node.info, node.namespace, node.name)
        if latest is None or latest["metadata"].get("uid") != node.uid:
            return
        finalizers = latest["metadata"].get("finalizers") or []
        if finalizer not in finalizers:
            return
        rest = [f for f in finalizers if f != finalizer]
        assert node.info is not None
        self.store.patch(node.info.plural, node.name,
                         {"metadata": {"finalizers": rest or None,
                                       "resourceVersion": latest["metadata"]["resourceVersion"]}},
                         MERGE, node.namespace)
