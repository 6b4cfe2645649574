"""The store-shaped view through which the simulated kubelet reads and writes, over the API.

The kubelet's workers (``testcluster.node.kubelet``) read objects synchronously and write pod
status, pod removals and Events.  Here reads come from informers' caches (and objects fetched
before a pod is handed over), and writes are queued: a pod's status writes coalesce (the last
one wins, as the kubelet's status manager sends the newest), its removal follows them in order
(``DELETE`` with grace period 0 and the pod's uid as precondition), and Events go out best effort.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Any, Callable

from .client import BY_PLURAL, KNOWN, ApiError, Client
from .informer import Informer

log = logging.getLogger(__name__)

PODS, EVENTS = KNOWN["Pod"], KNOWN["Event"]
MAX_EVENTS_QUEUED = 10_000


class NotFound(Exception):
    """What the store raises for an object it does not have (the kubelet checks ``code``)."""

    code = 404


class PodWrites:
    """Per pod, in order: status (coalesced), then removal; ``concurrency`` pods at a time."""

    def __init__(self, client: Client, concurrency: int = 16):
        self.client = client
        self._ops: dict[str, collections.deque] = {}
        self._busy: set[str] = set()
        self._ready: asyncio.Queue[str] = asyncio.Queue()
        self._idle = asyncio.Event()
        self._idle.set()
        self.concurrency = concurrency
        self.failures = 0
        self.last_error: str | None = None

    def status(self, ns: str, name: str, status: dict[str, Any]) -> None:
        q = self._ops.setdefault(f"{ns}/{name}", collections.deque())
        if q and q[-1][0] == "status":
            q[-1] = ("status", status)
        else:
            q.append(("status", status))
        self._wake(f"{ns}/{name}")

    def remove(self, ns: str, name: str, uid: str | None) -> None:
        self._ops.setdefault(f"{ns}/{name}", collections.deque()).append(("remove", uid))
        self._wake(f"{ns}/{name}")

    def _wake(self, key: str) -> None:
        self._idle.clear()
        if key not in self._busy:
            self._busy.add(key)
            self._ready.put_nowait(key)

    async def idle(self) -> None:
        """Wait until every queued write was sent."""
        await self._idle.wait()

    async def run(self) -> None:
        await asyncio.gather(*(self._worker() for _ in range(self.concurrency)))

    async def _worker(self) -> None:
        while True:
            key = await self._ready.get()
            ns, _, name = key.partition("/")
            q = self._ops.get(key)
            while q:
                op, arg = q.popleft()
                try:
                    if op == "status":
                        await self.client.patch(PODS, name, {"status": arg}, namespace=ns, subresource="status")
                    else:
                        opts = {"gracePeriodSeconds": 0}
                        if arg:
                            opts["preconditions"] = {"uid": arg}
                        await self.client.delete(PODS, name, namespace=ns, options=opts)
                except ApiError as e:
                    if e.code not in (404, 409):  # gone, or another incarnation: nothing to do
                        self.failures += 1
                        self.last_error = f"{op} {key}: {e}"
                        log.warning("pod %s of %s: %s", op, key, e)
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    self.failures += 1
                    self.last_error = f"{op} {key}: {e!r}"
                    log.warning("pod %s of %s: %r", op, key, e)
            self._ops.pop(key, None)
            self._busy.discard(key)
            if not self._busy:
                self._idle.set()


class EventWrites:
    """Events, best effort: created or (a repeat) patched; dropped when too many are queued."""

    def __init__(self, client: Client, concurrency: int = 4):
        self.client = client
        self.queue: asyncio.Queue[tuple[str, dict]] = asyncio.Queue()
        self.concurrency = concurrency
        self.dropped = 0

    def put(self, op: str, event: dict) -> None:
        if self.queue.qsize() >= MAX_EVENTS_QUEUED:
            self.dropped += 1
            return
        self.queue.put_nowait((op, event))

    async def run(self) -> None:
        await asyncio.gather(*(self._worker() for _ in range(self.concurrency)))

    async def _worker(self) -> None:
        while True:
            op, ev = await self.queue.get()
            ns = ev["metadata"]["namespace"]
            try:
                if op == "create":
                    await self.client.create(EVENTS, ev, namespace=ns)
                else:
                    await self.client.patch(EVENTS, ev["metadata"]["name"],
                                            {"count": ev.get("count"), "lastTimestamp": ev.get("lastTimestamp")},
                                            namespace=ns)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the kubelet's recorder drops what the server refuses
                self.dropped += 1
                log.debug("event %s/%s: %r", ns, ev["metadata"].get("name"), e)


class ApiStore:
    """What the kubelet calls on its ``store``: ``get``, ``list_page``, ``patch`` (pod status),
    ``finalize_delete`` (pods), ``create``/``replace`` (events)."""

    def __init__(self, caches: dict[str, Informer], pods: PodWrites, events: EventWrites,
                 pod_uid: Callable[[str], str | None]):
        self.caches = caches
        self.pods = pods
        self.events = events
        self.pod_uid = pod_uid  # "ns/name" -> the uid of the incarnation this node runs
        self.fetched: dict[str, dict[tuple[str | None, str], dict]] = {}  # plural -> objects got by GET
        self._events: collections.OrderedDict[tuple[str, str], dict] = collections.OrderedDict()

    def get(self, plural: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        if plural == "events":
            ev = self._events.get((namespace or "default", name))
        else:
            cache = self.caches.get(plural)
            ev = cache.get(name, namespace) if cache is not None else None
            if ev is None:
                ns = namespace if BY_PLURAL[plural].namespaced else None
                ev = self.fetched.get(plural, {}).get((ns, name))
        if ev is None:
            raise NotFound(f'{plural} "{name}" not found')
        return ev

    def list_page(self, plural: str) -> tuple[dict, list[dict]]:
        return {}, list(self.caches[plural].items.values())

    def patch(self, plural: str, name: str, body: dict, content_type: str, namespace: str | None = None,
              subresource: str | None = None) -> None:
        if plural != "pods" or subresource != "status" or set(body) != {"status"}:
            raise ValueError(f"the node agent writes only pod status, not {plural}/{subresource}")
        self.pods.status(namespace or "default", name, body["status"])

    def finalize_delete(self, plural: str, name: str, namespace: str | None = None) -> None:
        if plural != "pods":
            raise ValueError(f"the node agent removes only pods, not {plural}")
        ns = namespace or "default"
        self.pods.remove(ns, name, self.pod_uid(f"{ns}/{name}"))

    def create(self, plural: str, obj: dict, namespace: str | None = None) -> dict:
        if plural != "events":
            raise ValueError(f"the node agent creates only events, not {plural}")
        self._keep_event(obj)
        self.events.put("create", obj)
        return obj

    def replace(self, plural: str, name: str, obj: dict, namespace: str | None = None) -> dict:
        if plural != "events":
            raise ValueError(f"the node agent replaces only events, not {plural}")
        self._keep_event(obj)
        self.events.put("patch", obj)
        return obj

    def _keep_event(self, ev: dict) -> None:
        self._events[(ev["metadata"]["namespace"], ev["metadata"]["name"])] = ev
        if len(self._events) > 4096:  # as many as the recorder aggregates
            self._events.popitem(last=False)
