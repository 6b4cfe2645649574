"""What every simulated controller shares: time stamps, Events, informers, a task group.
Design notes: docs/simulated-nodes.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from datetime import datetime, timezone
from typing import Any, Callable, Coroutine, TypeVar

from .work_queue import WorkQueue

log = logging.getLogger(__name__)

MERGE = "application/merge-patch+json"
DEFAULT_SCHEDULER = "default-scheduler"
TERMINAL = ("Succeeded", "Failed")


def now_rfc3339(ts: float | None = None) -> str:
    return datetime.fromtimestamp(time.time() if ts is None else ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro(ts: float | None = None) -> str:
    return datetime.fromtimestamp(time.time() if ts is None else ts, timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ")


def pod_key(pod: dict[str, Any]) -> str:
    m = pod.get("metadata") or {}
    return f"{m.get('namespace') or 'default'}/{m.get('name')}"


def code_of(exc: BaseException) -> int | None:
    return getattr(exc, "code", None)


def get_or_none(store, plural: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
    """The stored object, or None when it does not exist (404); any other error is raised."""
    try:
        return store.get(plural, name, namespace)
    except Exception as e:
        if code_of(e) == 404:
            return None
        raise


K = TypeVar("K")


async def worker(queue: WorkQueue[K], sync: Callable[[K], None], stopping: asyncio.Event,
                 label: str, logger: logging.Logger = log) -> None:
    """Take keys from ``queue`` and ``sync`` each until ``stopping`` is set.

    As client-go controllers' ``processNextWorkItem`` does: a key whose sync failed is
    retried later (``AddRateLimited``), one that succeeded is forgotten by the rate limiter
    (``Forget``).  A 404 or 409 (the object went away, another writer got there first) is
    the ordinary race of controllers and is retried without a log line; anything else is
    logged as ``<label>: syncing <key> failed`` with its traceback.
    """
    while not stopping.is_set():
        key = await queue.get()
        try:
            sync(key)
        except Exception as e:
            if code_of(e) not in (404, 409):
                logger.exception("%s: syncing %s failed", label, key)
            queue.add_rate_limited(key)
        else:
            queue.forget(key)
        await asyncio.sleep(0)


# ---------------------------------------------------------------------------
# events
# ---------------------------------------------------------------------------

class EventRecorder:
    """Writes core/v1 Events into the store, aggregating repeats like client-go.

    ``component`` is ``source.component`` and ``reportingComponent``;
    ``host`` (the kubelet's node) is ``source.host`` and the reporting
    instance.  ``events_api=True`` adds what the events.k8s.io/v1 API
    (which kube-scheduler uses) shows through core/v1: ``eventTime``,
    ``action``, ``series``.
    """

    CACHE_SIZE = 4096

    def __init__(self, store, component: str, host: str | None = None, *, events_api: bool = False,
                 clock: Callable[[], float] = time.time):
        self.store = store
        self.component = component
        self.host = host
        self.events_api = events_api
        self.clock = clock
        self.instance = host or f"{component}-{socket.gethostname()}"
        self._seen: dict[tuple, tuple[str, str]] = {}  # aggregation key -> (namespace, event name)

    def emit(self, obj: dict[str, Any], type_: str, reason: str, message: str, *, action: str | None = None,
             field_path: str | None = None, host: str | None = None) -> None:
        meta = obj.get("metadata") or {}
        ns = meta.get("namespace") or "default"
        host = host or self.host
        involved = {
            "apiVersion": obj.get("apiVersion") or "v1",
            "kind": obj.get("kind") or "Pod",
            "name": meta.get("name"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        }
        if meta.get("namespace"):
            # a cluster-scoped object's reference has no namespace; its events live in "default"
            involved["namespace"] = meta["namespace"]
        if field_path:
            involved["fieldPath"] = field_path
        key = (self.component, host, involved["kind"], involved.get("namespace"), involved["name"], involved["uid"],
               field_path, type_, reason, message)
        ts = self.clock()
        seen = self._seen.get(key)
        if seen is not None:
            try:
                ev = self.store.get("events", seen[1], namespace=seen[0])
            except Exception as e:  # the event was deleted (TTL, user): start a new one
                if code_of(e) != 404:
                    raise
            else:
                ev["count"] = int(ev.get("count") or 1) + 1
                ev["lastTimestamp"] = now_rfc3339(ts)
                if self.events_api:
                    ev["series"] = {"count": ev["count"], "lastObservedTime": now_micro(ts)}
                self.store.replace("events", seen[1], ev, namespace=seen[0])
                return
        name = f"{involved['name']}.{time.time_ns():x}"
        ev = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": ns},
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": type_,
            "source": {"component": self.component, **({"host": host} if host else {})},
            "firstTimestamp": now_rfc3339(ts),
            "lastTimestamp": now_rfc3339(ts),
            "count": 1,
            "reportingComponent": self.component,
            "reportingInstance": host or self.instance,
        }
        if self.events_api:
            ev["eventTime"] = now_micro(ts)
            ev["action"] = action or reason
        try:
            self.store.create("events", ev, namespace=ns)
        except Exception as e:
            # client-go's recorder drops an event the server refuses (a terminating or
            # missing namespace: "Server rejected event ... will not retry")
            if code_of(e) in (403, 404):
                log.debug("event %s/%s %s rejected: %s", ns, name, reason, e)
                return
            raise
        self._seen[key] = (ns, name)
        if len(self._seen) > self.CACHE_SIZE:
            # client-go keeps an LRU of 4096 (maxLruCacheEntries); drop the oldest
            del self._seen[next(iter(self._seen))]


# ---------------------------------------------------------------------------
# list + watch helper
# ---------------------------------------------------------------------------

async def informer(store, plural: str, on_list: Callable[[list[dict]], None],
                   on_event: Callable[[str, dict], None], stopping: asyncio.Event,
                   synced: asyncio.Event | None = None) -> None:
    """List, then watch from the list's resourceVersion; re-list after 410 Gone.

    Handlers must not modify the objects they are given: the initial list
    is the store's own objects when the store offers ``list_page`` (no copy
    of 150,000 pods at start-up); otherwise ``list``'s copies.
    """
    while not stopping.is_set():
        list_page = getattr(store, "list_page", None)
        if list_page is not None:
            meta, items = list_page(plural)
        else:
            listed = store.list(plural)
            meta, items = listed.get("metadata") or {}, listed.get("items") or []
        on_list(list(items))
        if synced is not None:
            synced.set()
        rv = (meta or {}).get("resourceVersion")
        try:
            watcher = store.watch(plural, resource_version=rv)
        except Exception as e:
            if code_of(e) == 410:
                continue
            raise
        try:
            async for ev in watcher:
                if ev.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                    on_event(ev["type"], ev["object"])
                elif ev.get("type") == "ERROR":
                    break
        except Exception as e:
            if code_of(e) != 410:
                raise
        finally:
            with contextlib.suppress(Exception):
                watcher.close()
        await asyncio.sleep(0)



class Tasks:
    """A controller's background tasks: started by name, all cancelled and awaited by ``stop()``."""

    def __init__(self) -> None:
        self._tasks: list[asyncio.Task] = []

    def start(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task:
        task = asyncio.create_task(coro, name=name)
        self._tasks.append(task)
        return task

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
