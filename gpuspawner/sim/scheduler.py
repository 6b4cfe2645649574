"""The simulated kube-scheduler.  Design notes: docs/simulated-cluster.md."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Callable

from . import plugins, storage_api, volume_binding
from testcluster.node.controller import DEFAULT_SCHEDULER, MERGE, TERMINAL, EventRecorder, Tasks, code_of, informer, now_rfc3339, pod_key
from .dra.plugin import PLUGIN, Cycle, DynamicResources, FilterStage, SchedulerError
from testcluster.node.pod_resources import QuantityError, pod_requests

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------
# scheduler
# ---------------------------------------------------------------------------

def _scheduling_relevant(pod: dict) -> tuple:
    """What ``isPodUpdated`` compares: the pod less status and bookkeeping metadata; plus the
    generated claims' names (the queue's ``UpdatePodGeneratedResourceClaim`` event)."""
    meta = pod.get("metadata") or {}
    return (pod.get("spec"), meta.get("labels"), meta.get("annotations"),
            (pod.get("status") or {}).get("resourceClaimStatuses"))


class Scheduler:
    """Binds pending pods to nodes by the rules of ``gpuspawner.sim.scheduling``."""

    INITIAL_BACKOFF = 1.0
    MAX_BACKOFF = 10.0
    FLUSH_UNSCHEDULABLE = 300.0
    BIND_TIMEOUT = 600.0  # VolumeBindingArgs.bindTimeoutSeconds
    BIND_POLL = 0.1  # the real binder polls every second

    def __init__(self, store, *, style: plugins.MessageStyle = plugins.MessageStyle(),
                 clock: Callable[[], float] = time.monotonic):
        self.store = store
        self.style = style
        self.clock = clock
        self.recorder = EventRecorder(store, DEFAULT_SCHEDULER, events_api=True)
        self.nodes: dict[str, plugins.NodeInfo] = {}
        self._placed: dict[str, tuple[str, dict[str, int]]] = {}  # pod key -> (node, requests)
        self._pending: dict[str, dict] = {}  # pod key -> pod awaiting a node
        self._active: set[str] = set()
        self._unschedulable: dict[str, float] = {}  # key -> when parked
        self._attempts: dict[str, int] = {}
        self._not_before: dict[str, float] = {}
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._tasks = Tasks()
        self.synced = asyncio.Event()
        self._nodes_synced = asyncio.Event()
        self._pods_synced = asyncio.Event()
        self.bound_count = 0
        # claims, slices or classes changing may help a parked pod (EventsToRegister)
        self.dra = DynamicResources(store, self._move_all_to_active)
        self._binding: set[str] = set()  # assumed pods whose volumes are being bound (PreBind)
        self._bind_tasks: set[asyncio.Task] = set()

    # -- cache ------------------------------------------------------------

    def _node_list(self, items: list[dict]) -> None:
        keep = {}
        for n in items:
            name = n["metadata"]["name"]
            info = self.nodes.get(name) or plugins.NodeInfo(n)
            info.node = n
            keep[name] = info
        self.nodes = keep
        self._move_all_to_active()

    def _node_event(self, kind: str, node: dict) -> None:
        name = node["metadata"]["name"]
        if kind == "DELETED":
            self.nodes.pop(name, None)
        else:
            info = self.nodes.get(name)
            if info is None:
                self.nodes[name] = plugins.NodeInfo(node)
            else:
                info.node = node
        self._move_all_to_active()

    def _forget(self, key: str) -> None:
        placed = self._placed.pop(key, None)
        if placed:
            info = self.nodes.get(placed[0])
            if info:
                info.remove_pod(key, placed[1])
        self._pending.pop(key, None)
        self._active.discard(key)
        self._unschedulable.pop(key, None)
        self._attempts.pop(key, None)
        self._not_before.pop(key, None)

    def _pod_seen(self, pod: dict) -> bool:
        """Update the cache with one pod; True when capacity was freed."""
        key = pod_key(pod)
        spec = pod.get("spec") or {}
        phase = (pod.get("status") or {}).get("phase")
        node = spec.get("nodeName")
        if phase in TERMINAL:
            freed = key in self._placed
            self._forget(key)
            return freed
        if node:
            self._pending.pop(key, None)
            self._active.discard(key)
            self._unschedulable.pop(key, None)
            if key not in self._placed:
                reqs = pod_requests(pod)
                self._placed[key] = (node, reqs)
                info = self.nodes.get(node)
                if info is None:
                    # a pod bound to a node not (yet) known: account when it appears
                    info = self.nodes[node] = plugins.NodeInfo({"metadata": {"name": node}, "status": {}})
                info.add_pod(key, reqs)
            return False
        if (spec.get("schedulerName") or DEFAULT_SCHEDULER) != DEFAULT_SCHEDULER or key in self._binding:
            return False
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            self._forget(key)
            return False
        if spec.get("schedulingGates"):
            self._pending[key] = pod
            return False
        old = self._pending.get(key)
        self._pending[key] = pod
        if old is None or key not in self._unschedulable:
            self._active.add(key)
        elif _scheduling_relevant(old) != _scheduling_relevant(pod):
            # an update to a parked pod may make it schedulable (the queue's
            # PodUpdate); status-only updates, e.g. our own condition, do not
            self._unschedulable.pop(key, None)
            self._active.add(key)
        return False

    def _pod_list(self, items: list[dict]) -> None:
        seen = set()
        for p in items:
            seen.add(pod_key(p))
            self._pod_seen(p)
        for key in list(self._placed) + list(self._pending):
            if key not in seen:
                self._forget(key)
        self._wake.set()

    def _pod_event(self, kind: str, pod: dict) -> None:
        if kind == "DELETED":
            key = pod_key(pod)
            freed = key in self._placed
            self._forget(key)
            if freed:
                self._move_all_to_active()
        elif self._pod_seen(pod):
            self._move_all_to_active()
        self._wake.set()

    def _move_all_to_active(self) -> None:
        for key in list(self._unschedulable):
            self._unschedulable.pop(key)
            self._active.add(key)
        self._wake.set()

    # -- lifecycle --------------------------------------------------------

    async def start(self) -> None:
        self._tasks.start(informer(self.store, "nodes", self._node_list, self._node_event,
                                   self._stopping, self._nodes_synced), "scheduler-nodes")
        for i, watch in enumerate(self.dra.informers(self._stopping)):
            self._tasks.start(watch, f"scheduler-dra-{i}")
        self._tasks.start(self._pods_after_nodes(), "scheduler-pods")
        for plural in ("persistentvolumeclaims", "persistentvolumes", "storageclasses"):
            # VolumeBinding's EventsToRegister: any change may make a parked pod schedulable
            self._tasks.start(informer(self.store, plural, lambda items: self._move_all_to_active(),
                                       lambda kind, obj: self._move_all_to_active(), self._stopping),
                              f"scheduler-{plural}")
        self._tasks.start(self._run(), "scheduler-loop")
        await asyncio.wait_for(self.synced.wait(), 60)

    async def _pods_after_nodes(self) -> None:
        await self._nodes_synced.wait()
        for synced in self.dra.synced:
            await synced.wait()
        await informer(self.store, "pods", self._pod_list, self._pod_event, self._stopping, self._pods_synced)

    async def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        for task in list(self._bind_tasks):
            task.cancel()
        await self._tasks.stop()

    # -- the loop ---------------------------------------------------------

    async def _run(self) -> None:
        await self._pods_synced.wait()
        self.synced.set()
        last_flush = self.clock()
        while not self._stopping.is_set():
            now = self.clock()
            if now - last_flush >= self.FLUSH_UNSCHEDULABLE:
                last_flush = now
                for key, since in list(self._unschedulable.items()):
                    if now - since >= self.FLUSH_UNSCHEDULABLE:
                        self._unschedulable.pop(key)
                        self._active.add(key)
            ready = [k for k in self._active if self._not_before.get(k, 0) <= now and k in self._pending]
            self._active.intersection_update(self._pending)
            if not ready:
                waits = [self._not_before[k] - now for k in self._active if k in self._not_before]
                timeout = min(waits + [self.FLUSH_UNSCHEDULABLE])
                self._wake.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), max(0.01, timeout))
                continue
            # PrioritySort: higher priority first, then older pods
            ready.sort(key=lambda k: (-int((self._pending[k].get("spec") or {}).get("priority") or 0),
                                      (self._pending[k].get("metadata") or {}).get("creationTimestamp") or "",
                                      k))
            for i, key in enumerate(ready):
                if self._stopping.is_set():
                    return
                self._active.discard(key)
                pod = self._pending.get(key)
                if pod is None:
                    continue
                try:
                    self.schedule_one(pod)
                except Exception:  # one bad pod must not stop the scheduler
                    log.exception("scheduling %s failed", key)
                if i % 50 == 49:
                    await asyncio.sleep(0)
            await asyncio.sleep(0)

    def schedule_one(self, pod: dict) -> str | None:
        """One scheduling cycle for one pod; returns the node it was bound to."""
        key = pod_key(pod)
        if self.dra.pre_enqueue(pod):
            # PreEnqueue: the pod waits for its claims without an attempt (no event)
            self._unschedulable[key] = self.clock()
            return None
        try:
            reqs = pod_requests(pod)
        except QuantityError as e:
            self._fail(pod, f"invalid resource request: {e}")
            return None
        # skip placeholders for nodes known only from a bound pod
        nodes = [i for i in self.nodes.values() if i.node.get("spec") or i.node.get("status")]
        volumes = volume_binding.prefilter(pod, self._storage_view(pod))
        dra = FilterStage.pre_filter(self.dra, pod)
        try:
            feasible, statuses, pre_msg = plugins.evaluate(pod, nodes, reqs, self.style, volumes, dra=dra,
                                                           dra_backed=self.dra.backed_resources())
        except SchedulerError as e:
            self._fail(pod, str(e), reason="SchedulerError")
            return None
        chosen = plugins.pick_node(reqs, feasible)
        if chosen is None:
            self._fail(pod, plugins.fit_error_message(len(nodes), statuses, pod, self.style, pre_msg,
                                                      dra.post_filter()))
            return None
        cycle = dra.cycle
        assert cycle is not None  # a PreFilter rejection leaves no feasible node
        self.dra.reserve(cycle, chosen.name)
        decisions = volumes.decisions(chosen.node) if volumes is not None and volumes.to_bind else None
        if decisions is not None:
            # Reserve, then PreBind (bind the volumes, then the claims) and Bind in the background,
            # as the binding cycle does
            self._assume(key, chosen.name, reqs)
            self._binding.add(key)
            task = asyncio.create_task(self._bind_volumes_then_pod(pod, chosen.name, reqs, cycle, *decisions),
                                       name=f"bind-{key}")
            self._bind_tasks.add(task)
            task.add_done_callback(self._bind_tasks.discard)
        else:
            error = self._bind_claims(pod, cycle, chosen.name)
            if error is not None:  # the attempt fails, the pod is retried
                self._fail(pod, error, reason="SchedulerError")
                return None
            self._bind(pod, chosen.name, reqs)
        self._pending.pop(key, None)
        self._attempts.pop(key, None)
        self._not_before.pop(key, None)
        return chosen.name

    def _fail(self, pod: dict, message: str, reason: str = "Unschedulable") -> None:
        key = pod_key(pod)
        n = self._attempts.get(key, 0) + 1
        self._attempts[key] = n
        self._not_before[key] = self.clock() + min(self.INITIAL_BACKOFF * 2 ** (n - 1), self.MAX_BACKOFF)
        self._unschedulable[key] = self.clock()
        meta = pod["metadata"]
        try:
            current = self.store.get("pods", meta["name"], namespace=meta.get("namespace"))
        except Exception as e:
            if code_of(e) == 404:
                self._forget(key)
                return
            raise
        cond = {"type": "PodScheduled", "status": "False", "reason": reason, "message": message,
                "lastProbeTime": None}
        conds = list((current.get("status") or {}).get("conditions") or [])
        old = next((c for c in conds if c.get("type") == "PodScheduled"), None)
        if old is None or old.get("status") != "False" or old.get("message") != message \
                or old.get("reason") != reason:
            cond["lastTransitionTime"] = now_rfc3339()
            conds = [c for c in conds if c.get("type") != "PodScheduled"] + [cond]
            self.store.patch("pods", meta["name"], {"status": {"conditions": conds, "phase": "Pending"}},
                             MERGE, namespace=meta.get("namespace"), subresource="status")
        self.recorder.emit(current, "Warning", "FailedScheduling", message, action="Scheduling")

    def _assume(self, key: str, node: str, reqs: dict[str, int]) -> None:
        # the scheduler cache's AssumePod: the next cycle does not offer the same last GPU
        self._placed[key] = (node, reqs)
        self.nodes[node].add_pod(key, reqs)

    def _bind(self, pod: dict, node: str, reqs: dict[str, int]) -> None:
        """POST pods/binding, as the DefaultBinder plugin does: nodeName set, PodScheduled=True."""
        meta = pod["metadata"]
        ns = meta.get("namespace")
        key = pod_key(pod)
        self._assume(key, node, reqs)
        try:
            self.store.bind(meta["name"], node, namespace=ns)
        except Exception as e:
            # deleted or bound by someone else meanwhile (409/404), or its namespace is being
            # deleted (403, NamespaceLifecycle): forget the assumption
            self._forget(key)
            if code_of(e) in (403, 404, 409):
                return
            raise
        current = self.store.get("pods", meta["name"], namespace=ns)
        self.bound_count += 1
        self.recorder.emit(current, "Normal", "Scheduled",
                           f"Successfully assigned {ns}/{meta['name']} to {node}", action="Binding")

    # -- volumes (VolumeBinding's listers, Reserve and PreBind) ------------

    def _storage_view(self, pod: dict) -> volume_binding.StorageView:
        """The claims of the pod's namespace, the volumes and the classes, read as listers read them."""
        if not volume_binding.claim_names(pod):
            return volume_binding.StorageView({}, {}, {})
        ns = (pod.get("metadata") or {}).get("namespace") or "default"
        claims = {c["metadata"]["name"]: c for c in self.store.list_page("persistentvolumeclaims", ns)[1]}
        volumes = {v["metadata"]["name"]: v for v in self.store.list_page("persistentvolumes")[1]}
        classes = {c["metadata"]["name"]: c for c in self.store.list_page("storageclasses")[1]}
        return volume_binding.StorageView(claims, volumes, classes)

    async def _bind_volumes_then_pod(self, pod: dict, node: str, reqs: dict[str, int], cycle: Cycle,
                                     static: list, provision: list) -> None:
        """The binding cycle of a pod with volumes to bind: VolumeBinding's PreBind
        (``BindPodVolumes``: pre-bind the chosen volumes, ask for provisioning on ``node`` with
        ``volume.kubernetes.io/selected-node``, wait until the PV controller has bound every
        claim), then DynamicResources' PreBind, then Bind.  A failure sends the pod back with a
        FailedScheduling event."""
        key = pod_key(pod)
        try:
            error = await self._bind_volumes(pod, node, static, provision)
        except Exception as e:  # an API error while binding: the scheduling attempt fails
            error = f"binding volumes: {getattr(e, 'message', e)}"
        self._binding.discard(key)
        if error is not None:
            self.dra.unreserve(cycle)
            error = f'running PreBind plugin "VolumeBinding": {error}'
        else:
            error = self._bind_claims(pod, cycle, node)
        if error is None:
            self._bind(pod, node, reqs)
            return
        # forgetting an assumed pod counts as an assigned pod's deletion for the others
        # (handleBindingCycleError in schedule_one.go), not for the pod itself
        self._forget(key)
        self._move_all_to_active()
        self._pending[key] = pod
        # a PreBind error is no rejection: reason SchedulerError (handleSchedulingFailure)
        self._fail(pod, error, reason="SchedulerError")

    def _bind_claims(self, pod: dict, cycle: Cycle, node: str) -> str | None:
        """DynamicResources' PreBind; the failure message when a claim changed under us."""
        try:
            self.dra.pre_bind(cycle, node)
        except Exception as e:
            return f'running PreBind plugin "{PLUGIN}": {e}'
        return None

    async def _bind_volumes(self, pod: dict, node: str, static: list, provision: list) -> str | None:
        ns = pod["metadata"].get("namespace") or "default"
        for pv, pvc in static:
            ref = {"kind": "PersistentVolumeClaim", "namespace": ns, "name": pvc["metadata"]["name"],
                   "uid": pvc["metadata"]["uid"], "apiVersion": "v1",
                   "resourceVersion": pvc["metadata"]["resourceVersion"]}
            self.store.patch("persistentvolumes", pv["metadata"]["name"],
                             {"metadata": {"annotations": {storage_api.ANN_BOUND_BY_CONTROLLER: "yes"}},
                              "spec": {"claimRef": ref}}, MERGE)
        for pvc in provision:
            self.store.patch("persistentvolumeclaims", pvc["metadata"]["name"],
                             {"metadata": {"annotations": {storage_api.ANN_SELECTED_NODE: node}}}, MERGE, ns)
        claims = [pvc["metadata"]["name"] for _, pvc in static] + [p["metadata"]["name"] for p in provision]
        deadline = self.clock() + self.BIND_TIMEOUT
        while self.clock() < deadline and not self._stopping.is_set():
            done = self._claims_bound(pod, node, ns, claims, {p["metadata"]["name"] for p in provision})
            if done is True:
                return None
            if isinstance(done, str):
                return f"binding volumes: {done}"
            await asyncio.sleep(self.BIND_POLL)
        return "binding volumes: context deadline exceeded"

    def _claims_bound(self, pod: dict, node: str, ns: str, claims: list[str], provisioned: set[str]) -> bool | str:
        """``checkBindings``: True when all are bound, a message when binding must be retried."""
        try:
            self.store.get("pods", pod["metadata"]["name"], ns)
        except Exception as e:
            if code_of(e) == 404:
                return f'pod does not exist any more: pods "{pod["metadata"]["name"]}" not found'
            raise
        for name in claims:
            pvc = self.store.get("persistentvolumeclaims", name, ns)
            ann = pvc["metadata"].get("annotations") or {}
            if name in provisioned and ann.get(storage_api.ANN_SELECTED_NODE) != node:
                return f'provisioning failed for PVC "{name}"'
            if not (pvc["spec"].get("volumeName") and storage_api.ANN_BIND_COMPLETED in ann):
                return False
        return True
