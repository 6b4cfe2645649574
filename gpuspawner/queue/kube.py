"""The hub's view of Kueue in the servers' namespace: LocalQueues, Workloads and queue positions.
Design notes: docs/kueue.md.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from gpuspawner.kube import objects
from gpuspawner.queue.rules import JOB_UID_LABEL
from gpuspawner.queue.status import Position, QueueState, position_of, workload_state

log = logging.getLogger("gpuspawner.queue")

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
VISIBILITY = "visibility.kueue.x-k8s.io/v1beta2"
# deploy/rbac.yaml's Role for the hub in the servers' namespace: (API group, resource, verbs)
KUEUE_ROLE_NAME = "gpuspawner-kueue-reader"
KUEUE_ROLE_RULES = (
    (GROUP, "localqueues", ("get", "list", "watch")),
    (GROUP, "workloads", ("get", "list", "watch")),
    ("visibility.kueue.x-k8s.io", "localqueues/pendingworkloads", ("get",)),
)
# how long the reason Kueue stopped a server is remembered after its Workload is gone
EVICTION_MEMORY = 3600.0
STOP_TIMEOUT = 5.0  # seconds stop() waits for its cancelled tasks

ApiFactory = Callable[[], Awaitable[Any]]


def pending_path(namespace: str, queue: str) -> str:
    return f"/apis/{VISIBILITY}/namespaces/{namespace}/localqueues/{queue}/pendingworkloads"


class KueueView:
    """LocalQueues, Workloads (by their pod's UID) and positions in one namespace, refreshed in the
    background; ``error`` says why the last refresh failed (None: the figures are current)."""

    _shared: dict[tuple[Any, str], KueueView] = {}

    def __init__(self, namespace: str, api_factory: ApiFactory, interval: float = 2.0, watch: bool = True):
        self.namespace = namespace
        self.interval = interval
        self.watch = watch
        self._api_factory = api_factory
        self._client: Any = None
        self.local_queues: dict[str, Mapping[str, Any]] = {}
        self.workloads: dict[str, Mapping[str, Any]] = {}  # pod UID -> Workload
        self.positions: dict[str, Position] = {}  # Workload name -> place in its LocalQueue
        self.stopped: dict[str, tuple[float, QueueState]] = {}  # pod UID -> why Kueue stopped it
        self.error: str | None = "not read yet"
        self.refreshed = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._watch_task: asyncio.Task | None = None
        self._wake = asyncio.Event()

    @classmethod
    def shared(cls, namespace: str, api_factory: ApiFactory | None = None, interval: float = 2.0) -> KueueView:
        loop = asyncio.get_running_loop()
        view = cls._shared.get((loop, namespace))
        if view is None:
            view = cls(namespace, api_factory or _default_client, interval)
            view.start()
            cls._shared[(loop, namespace)] = view
        return view

    @classmethod
    def find(cls) -> KueueView | None:
        """The running loop's first view (the servers' namespace), if a spawner has started one."""
        loop = asyncio.get_running_loop()
        return next((v for (lp, _), v in cls._shared.items() if lp is loop), None)

    @classmethod
    async def reset_shared(cls) -> None:
        views, cls._shared = list(cls._shared.values()), {}
        for v in views:
            await v.stop()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"gpuspawner-kueue-{self.namespace}")
        if self.watch and self._watch_task is None:
            self._watch_task = asyncio.create_task(self._watch_workloads(), name=f"gpuspawner-kueue-watch-{self.namespace}")

    async def stop(self) -> None:
        tasks = [t for t in (self._task, self._watch_task) if t is not None]
        self._task = self._watch_task = None
        for task in tasks:
            task.cancel()
        if tasks:
            # a watch whose connection does not close on cancel must not hold up the hub's shutdown
            _, stuck = await asyncio.wait(tasks, timeout=STOP_TIMEOUT)
            for task in stuck:
                log.warning("Kueue view of %s: a task did not stop within %g s after cancel", self.namespace,
                            STOP_TIMEOUT)
        for task in tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                log.info("Kueue view of %s: a task ended with %r", self.namespace, task.exception())

    def poke(self) -> None:
        """Refresh now (a spawn created its pod, or stopped)."""
        self._wake.set()

    async def _run(self) -> None:
        while True:
            try:
                await self.refresh()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                if self.error is None or not self.error.startswith(type(e).__name__):
                    log.warning("Reading Kueue's queues in %s failed: %s: %s", self.namespace, type(e).__name__, e)
                self.error = f"{type(e).__name__}: {e}"
            self.refreshed.set()
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), self.interval)
            except asyncio.TimeoutError:
                pass

    async def _watch_workloads(self) -> None:
        """Follow the Workloads of the namespace; a failed watch is started again after ``interval``."""
        from kubernetes_asyncio import client, watch

        while True:
            try:
                api = client.CustomObjectsApi(await self._api())
                async with watch.Watch().stream(api.list_namespaced_custom_object, GROUP, VERSION, self.namespace,
                                                "workloads", timeout_seconds=300) as stream:
                    async for event in stream:
                        if isinstance(event, Mapping):
                            self.observe(event.get("type"), event.get("object"))
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.info("Watching Kueue's Workloads in %s stopped (%s: %s); watching again", self.namespace,
                         type(e).__name__, e)
            await asyncio.sleep(self.interval)

    def observe(self, kind: Any, wl: Any) -> None:
        """One watch event of a Workload: keep its state, and why Kueue stopped its pod."""
        uid = objects.labels(wl).get(JOB_UID_LABEL)
        if not isinstance(uid, str):
            return
        queue = objects.section(wl, "spec").get("queueName") or "its queue"
        state = workload_state(wl, queue)
        if state.stopped:
            self.stopped[uid] = (time.monotonic(), state)
        if kind == "DELETED":
            self.workloads.pop(uid, None)
        elif kind in ("ADDED", "MODIFIED"):
            self.workloads[uid] = wl

    async def _api(self) -> Any:
        if self._client is None:
            self._client = await self._api_factory()
        return self._client

    async def _get(self, path: str) -> Mapping[str, Any]:
        client = await self._api()
        data = await client.call_api(path, "GET", response_types_map={200: "object"}, auth_settings=["BearerToken"],
                                     _return_http_data_only=True, _request_timeout=10)
        return data if isinstance(data, Mapping) else {}

    async def refresh(self) -> None:
        base = f"/apis/{GROUP}/{VERSION}/namespaces/{self.namespace}"
        queues = {objects.name(q): q for q in objects.items((await self._get(f"{base}/localqueues")).get("items"))}
        workloads: dict[str, Mapping[str, Any]] = {}
        for wl in objects.items((await self._get(f"{base}/workloads")).get("items")):
            uid = objects.labels(wl).get(JOB_UID_LABEL)
            if isinstance(uid, str):
                workloads[uid] = wl
        positions: dict[str, Position] = {}
        for name, lq in queues.items():
            pending = objects.section(lq, "status").get("pendingWorkloads")
            if name is None or not isinstance(pending, int) or pending <= 0:
                continue
            listed = objects.items((await self._get(pending_path(self.namespace, name))).get("items"))
            for entry in listed:
                wl_name = objects.name(entry)
                pos = position_of(listed, wl_name) if wl_name else None
                if pos is not None:
                    positions[wl_name] = pos
        for wl in workloads.values():
            self.observe("LISTED", wl)
        now = time.monotonic()
        self.stopped = {k: v for k, v in self.stopped.items() if now - v[0] < EVICTION_MEMORY}
        self.local_queues = {k: v for k, v in queues.items() if k is not None}
        self.workloads, self.positions, self.error = workloads, positions, None

    # -- what the hub asks --------------------------------------------------

    def queue_counts(self, queue: str) -> tuple[int, int] | None:
        """(pending, admitted) Workloads of LocalQueue ``queue`` (its status), None when unknown."""
        lq = self.local_queues.get(queue)
        if lq is None:
            return None
        status = objects.section(lq, "status")
        counts = [status.get("pendingWorkloads", 0), status.get("admittedWorkloads", 0)]
        if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts):
            return None
        return counts[0], counts[1]

    def state_of(self, pod_uid: str, queue: str, resource: str = "nvidia.com/gpu") -> QueueState | None:
        """The state of the server whose pod has ``pod_uid`` (None: Kueue has no Workload for it yet)."""
        wl = self.workloads.get(pod_uid)
        if wl is None:
            return None
        return workload_state(wl, queue, self.positions.get(objects.name(wl) or ""), resource)

    def stop_reason(self, pod_uid: str) -> QueueState | None:
        """Why Kueue stopped the server of ``pod_uid`` (preempted, evicted), if it did lately."""
        found = self.stopped.get(pod_uid)
        return found[1] if found is not None else None


async def _default_client() -> Any:
    """KubeSpawner's shared API client (as the capacity cache uses it)."""
    from gpuspawner.capacity.cache import _default_api

    api = await _default_api()
    return api.api_client
