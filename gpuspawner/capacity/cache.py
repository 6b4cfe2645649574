"""The shared informer cache: list, then watch Nodes and Pods cluster-wide.
Design notes: docs/capacity.md.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import random
import time
import weakref
from typing import Any, Awaitable, Callable, ClassVar, Iterable

from gpuspawner.capacity import gc_policy
from gpuspawner.capacity import health, steps
from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.capacity.device_plugin_source import DevicePluginSource
from gpuspawner.capacity.dra_source import DRA_KINDS, DraSource
from gpuspawner.capacity.list_response import ITEM, iter_list
from gpuspawner.capacity.model import CapacitySnapshot
from gpuspawner.kube.api_errors import dra_missing_rules_message, missing_rules_message, status_of

log = logging.getLogger(__name__)

__all__ = ["CapacityCache", "missing_rules_message"]

ApiFactory = Callable[[], Any]

_SHORT_WATCH = 1.0  # seconds; client-go reflector's "very short watch" threshold
_MIN_WATCH_BASE = 5.0  # seconds; the shortest base of a watch's timeoutSeconds (_watch_seconds)
#: the longest full collections wait for the first sync's freeze (a sync that never ends)
_FULL_COLLECTIONS_DEFERRED_AT_MOST = 900.0
_SLICE_SECONDS = 0.002  # synchronous work between two yields while applying a list page


class _Gone(Exception):
    """410: the resourceVersion is too old; a re-list is needed."""


class _Forbidden(Exception):
    pass


class _Stuck(Exception):
    pass


class _Relist(Exception):
    """A watch delivered after a stall without a fresh list since: list before trusting it."""


class _HttpError(Exception):
    def __init__(self, status: int, message: str, retry_after: float | None = None) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.retry_after = retry_after


def _retry_after(resp: Any) -> float | None:
    # 429 (max-in-flight / API priority and fairness) and 503 carry Retry-After
    # in seconds (k8s.io/apiserver/pkg/server/filters); client-go waits for it
    headers = getattr(resp, "headers", None) or {}
    try:
        value = float(headers.get("Retry-After", ""))
    except (TypeError, ValueError):
        return None
    return value if value >= 0 else None


async def _raise_for_status(resp: Any) -> None:
    if resp.status == 200:
        return
    body = await resp.read()
    resp.release()
    msg = status_of(resp.status, body).message
    if resp.status == 410:
        raise _Gone(msg)
    if resp.status == 403:
        raise _Forbidden(msg)
    raise _HttpError(resp.status, msg, _retry_after(resp))


class _Informer:
    """List-then-watch of one kind; feeds ``apply``/``remove``/``retain`` callbacks."""

    def __init__(
        self,
        cache: "CapacityCache",
        kind: str,
        method: str,
        api: Callable[[], Awaitable[Any]] | None = None,
        rules_message: Callable[[list[str]], str] = missing_rules_message,
    ) -> None:
        self.cache = cache
        self.kind = kind
        self.method = method
        self._api = api or cache._get_api
        self._rules_message = rules_message
        self.resource_version: str | None = None
        self.synced = False
        self.forbidden = False
        self.last_contact: float | None = None
        self.listed_at: float | None = None  # when the last complete list began (recheck)
        # the watch clock: when the watch last delivered (an event or a bookmark), or the first
        # list ended; a later list moves it only after request failures (an outage, not a stall)
        self.quiet_since: float | None = None
        self.stalled = False  # latched: silent past the window; a fresh list, then a delivery, clears it
        self._relisted = False  # a list has completed since the silence began
        self._list_ended: float | None = None
        self._failing = False  # the last request failed (connection, HTTP error): silence explained
        self.failures = 0  # consecutive
        self.error: str | None = None
        self.lists = 0
        self.relists = 0
        self.watches = 0
        self.watch_restarts = 0
        self.stuck = 0
        self.events = 0

    # -- state -------------------------------------------------------------

    def _contact(self) -> None:
        self.last_contact = self.cache._clock()

    def _ok(self) -> None:
        if self.failures or self.error:
            if not self.stalled:  # a stalled informer recovers when its watch delivers (_delivered)
                log.info("capacity %s informer recovered", self.kind)
            self.cache._answered()
        self.failures = 0
        self.error = None
        self.forbidden = False

    # -- the watch clock (stall detection) -------------------------------------

    def silence(self, now: float) -> float:
        """Seconds since the watch last delivered (or the figures were first listed)."""
        return max(0.0, now - (self.quiet_since if self.quiet_since is not None else self.cache._started))

    def note_silence(self, now: float) -> bool:
        """Latch a stall when the watch has been silent past the window with no request failing
        (a failure explains the silence and is reported as such); True while stalled."""
        if not self.stalled and self.synced and not self._failing and self.silence(now) > self.cache._stale_after:
            self._stall(f"the watch delivered nothing (no event, no bookmark) for more than "
                        f"{self.cache._stale_after:g} s")
        return self.stalled

    def _stall(self, why: str, *, relist: bool = False) -> None:
        """Latch the stall. A list that ended after the last delivery (a re-check's, while the
        watch was already silent) is the fresh list a recovery needs, unless ``relist`` asks for
        another (a watch found stuck is restarted after a list of its own)."""
        if not self.stalled:
            log.warning("capacity %s: %s; its figures are not trusted until it is listed afresh and a watch "
                        "delivers again", self.kind, why)
        self.stalled = True
        self._relisted = (not relist and self._list_ended is not None and self.quiet_since is not None
                          and self._list_ended > self.quiet_since)

    def trusted(self, now: float) -> bool:
        """Not stalled, and heard from within the window."""
        return not self.note_silence(now) and self.silence(now) <= self.cache._stale_after

    def _listed(self, now: float) -> None:
        """A complete list: the clock starts (first list) or restarts after failures; after a
        stall it only counts as the fresh list a recovery needs."""
        self.note_silence(now)
        self._list_ended = now
        if self.stalled:
            self._relisted = True
        elif self.quiet_since is None or self._failing:
            self.quiet_since = now
        self._failing = False

    def _delivered(self) -> None:
        now = self.cache._clock()
        self.note_silence(now)
        if self.stalled:
            if not self._relisted:
                raise _Relist(f"the hub's watch of {self.kind} delivers again after a stall")
            self.stalled = self._relisted = False
            log.info("capacity %s: listed afresh and its watch delivers again; its figures are trusted", self.kind)
        self.quiet_since = now
        self._failing = False

    def health(self) -> dict[str, Any]:
        now = self.cache._clock()
        return {
            "synced": self.synced,
            "age_seconds": round(self.silence(now), 3),
            "stalled": self.note_silence(now),
            "resource_version": self.resource_version,
            "consecutive_failures": self.failures,
            "error": self.error,
            "forbidden": self.forbidden,
            "lists": self.lists,
            "relists": self.relists,
            "watches": self.watches,
            "watch_restarts": self.watch_restarts,
            "stuck_watches": self.stuck,
            "events": self.events,
        }

    # -- the loop ------------------------------------------------------------

    async def run(self) -> None:
        need_list = True
        while True:
            wait: float | None = None  # a Retry-After from the server
            try:
                now = self.cache._clock()
                if not need_list and self.synced and (
                    (self.note_silence(now) and not self._relisted)  # a stall: a fresh list first
                    or (not self.stalled and self.silence(now) > self.cache._stale_after)  # back after a long outage
                ):
                    self.relists += 1
                    need_list = True
                if need_list:
                    await self._list()
                    need_list = False
                began = self.cache._clock()
                events = await self._watch()
                # a normal close (timeoutSeconds): resume from resource_version
                self.watch_restarts += 1
                if events or self.cache._clock() - began >= _SHORT_WATCH:
                    # the server ended the watch at its deadline: it speaks on it, as with a
                    # bookmark, which it sends a quiet watch only once the resourceVersion moves
                    # on; the next watch resumes from this one's resourceVersion, so nothing
                    # is missed (one too old is answered 410 Gone, and re-listed)
                    self._delivered()
                    self._ok()
                    continue
                # client-go treats a watch that ends at once without events as
                # an error ("very short watch"), so a server that keeps
                # closing streams is not hammered in a tight loop
                self.error = "the Kubernetes API server keeps closing the hub's watch at once, without events"
                log.warning("capacity %s: %s", self.kind, self.error)
            except asyncio.CancelledError:
                raise
            except _Gone as e:
                # client-go: "too old resource version" -> re-list at once
                log.info("capacity %s: %s; re-listing", self.kind, e)
                self.resource_version = None
                self.relists += 1
                need_list = True
                continue
            except _Relist as e:
                log.info("capacity %s: %s; re-listing first", self.kind, e)
                need_list = True
                continue
            except _Forbidden as e:
                self._failing = True
                self.forbidden = True
                self.error = self._rules_message([self.kind]) + f" (API server: {e})"
                if self.failures == 0:
                    log.warning("capacity: %s", self.error)
            except _Stuck as e:
                self.stuck += 1
                self.watch_restarts += 1
                self.error = str(e)
                self._stall(str(e), relist=True)
                log.warning("capacity %s: %s; re-listing and restarting the watch", self.kind, e)
            except Exception as e:  # network errors, 5xx, bad JSON: back off and retry
                self._failing = True
                self.error = health.describe_failure(e, timeout=self.cache._request_timeout)
                wait = getattr(e, "retry_after", None)
                log.warning(
                    "capacity %s %s failed (%d in a row): %s [%s]",
                    self.kind,
                    "list" if need_list else "watch",
                    self.failures + 1,
                    self.error,
                    f"{type(e).__name__}: {e}",  # for the admin: what the client raised
                )
            self.failures += 1
            self.cache._changed_health()
            delay = self.cache._backoff(self.failures)
            if wait is not None:  # the server said when to come back; never beyond the cap
                delay = min(max(delay, wait), self.cache._backoff_cap)
            await self.cache._back_off(delay)

    async def _call(self, **params: Any) -> Any:
        api = await self._api()
        return await getattr(api, self.method)(_preload_content=False, **params)

    async def _list(self) -> None:
        cache = self.cache
        began_list = cache._clock()
        seen: set[str] = set()
        token: str | None = None
        rv: str | None = None
        self.lists += 1
        while True:
            params: dict[str, Any] = {"limit": cache._page_size, "_request_timeout": cache._request_timeout}
            if token:
                params["_continue"] = token
            resp = await self._call(**params)
            try:
                await _raise_for_status(resp)
                body = await resp.read()
            finally:
                resp.release()
            self._contact()
            meta = await self._apply_page(body, seen)
            body = None
            rv = meta.get("resourceVersion") or rv
            token = meta.get("continue") or None
            await asyncio.sleep(0)
            if not token:
                break
        removed = await self._retain(seen)
        if removed:
            log.info("capacity %s re-list dropped %d vanished objects", self.kind, removed)
        self.resource_version = rv
        self.listed_at = began_list
        self._listed(cache._clock())
        self._ok()
        if not self.synced:
            self.synced = True
            log.info("capacity %s informer synced at resourceVersion %s", self.kind, rv)
            cache._first_sync_done()
        cache._changed_health()

    async def _apply_page(self, body: bytes, seen: set[str]) -> dict:
        """Parse one list page item by item and apply the items (their keys go to ``seen``);
        returns the list's metadata.

        One page at a time (the other informer's waits for the lock), so that the two
        informers' work never adds up in one turn of the loop; a yield whenever a stretch of
        work exceeds the slice budget, so the hub's loop never stalls long (<= 25 ms); no
        cyclic collection while the page's objects live (``gc_policy.paused``): they die with
        the page, so none is promoted and they trigger no full collection.
        """
        meta: dict = {}
        async with self.cache._page_lock:
            with gc_policy.paused():
                began = time.perf_counter()
                # item by item (list_response): json.loads of a whole page would hold the loop ~10 ms
                for field, value in iter_list(body):
                    if field is ITEM:
                        key = self._apply(value)
                        if key is not None:
                            seen.add(key)
                    elif field == "metadata" and isinstance(value, dict):
                        meta = value
                    if time.perf_counter() - began > _SLICE_SECONDS:
                        await asyncio.sleep(0)
                        began = time.perf_counter()
                value = None
        return meta

    async def _watch(self) -> int:
        """One watch request; returns the number of events after a normal close."""
        cache = self.cache
        seen = 0
        timeout = cache._watch_seconds()
        try:
            resp = await self._call(
                watch=True,
                allow_watch_bookmarks=True,
                resource_version=self.resource_version,
                timeout_seconds=timeout,
                _request_timeout=cache._watch_request_timeout(),
            )
        except asyncio.TimeoutError:
            # no response headers within stall_timeout (aiohttp sock_read)
            raise _Stuck(
                f"the Kubernetes API server left the hub's watch of {self.kind} unanswered "
                f"for more than {cache._stall_timeout:g} s"
            ) from None
        try:
            await _raise_for_status(resp)
            self.watches += 1
            self._contact()
            if self.failures:
                cache._answered()  # the server answers again: the others retry now too
            # the server answers again; the failure count (and so the backoff)
            # is only reset once the stream proves itself with an event
            self.error = None
            self.forbidden = False
            cache._changed_health()
            buf = b""
            while True:
                try:
                    # aiohttp's sock_read timeout (= stall_timeout) bounds the
                    # silence between two chunks; it raises in this task, so
                    # cancelling the informer needs no helper task
                    chunk = await resp.content.readany()
                except asyncio.TimeoutError:
                    raise _Stuck(
                        f"the hub's watch of {self.kind} stayed silent for more than {cache._stall_timeout:g} s "
                        "(no events, no bookmarks)"
                    ) from None
                if not chunk:
                    return seen
                self._contact()
                buf += chunk
                if b"\n" not in buf:
                    continue
                lines = buf.split(b"\n")
                buf = lines.pop()
                # the events that arrived while the loop was busy come in one chunk: applied in
                # slices, like a list page's items, so that a burst never holds the loop
                began = time.perf_counter()
                for line in lines:
                    if line.strip():
                        self._event(json.loads(line))
                        if not seen:
                            self._ok()
                        seen += 1
                        if time.perf_counter() - began > _SLICE_SECONDS:
                            await asyncio.sleep(0)
                            began = time.perf_counter()
        finally:
            resp.release()

    def _event(self, ev: dict) -> None:
        kind = ev.get("type")
        obj = ev.get("object") or {}
        # any event, an ERROR (410 Gone) too, shows the watch alive; raises _Relist after a stall
        # without a fresh list
        self._delivered()
        if kind == "ERROR":
            code = obj.get("code")
            msg = obj.get("message") or obj.get("reason") or "watch error"
            if code == 410:
                raise _Gone(msg)
            if code == 403:
                raise _Forbidden(msg)
            raise _HttpError(int(code or 500), msg)
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if kind in ("ADDED", "MODIFIED"):
            self._apply(obj)
        elif kind == "DELETED":
            self._remove(obj)
        elif kind != "BOOKMARK":
            log.debug("capacity %s: ignoring watch event type %r", self.kind, kind)
            return
        self.events += 1
        if rv:
            self.resource_version = rv

    # -- the sources that count this kind --------------------------------------

    def _readers(self) -> tuple[Any, ...]:
        return tuple(s for s in self.cache._sources if self.kind in s.reads)

    def _apply(self, obj: dict) -> str | None:
        key = None
        for source in self._readers():
            got = source.apply(self.kind, obj)
            key = key or got
        return key

    def _remove(self, obj: dict) -> None:
        for source in self._readers():
            source.remove(self.kind, obj)

    async def _retain(self, seen: set[str]) -> int:
        """Drop what a re-list no longer saw, yielding to the loop between slices of the work; the
        count is the owning source's."""
        removed = 0
        for source in self._readers():
            n = await steps.drive(source.retain_steps(self.kind, seen), _SLICE_SECONDS)
            if self.kind in source.kinds:
                removed = n
        return removed


class CapacityCache:
    """Live GPU capacity of the cluster, shared by every spawner of the hub.

    Use :meth:`shared`; the constructor is public for tests and benchmarks,
    which inject the API and time (``clock``, ``sleep``, ``rand``).
    """

    _shared: ClassVar["weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, CapacityCache]"] = (
        weakref.WeakKeyDictionary()
    )

    def __init__(
        self,
        config: CapacityConfig,
        *,
        api_factory: ApiFactory | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rand: Callable[[], float] = random.random,
        page_size: int = 250,
        watch_timeout: float = 300.0,
        stall_timeout: float | None = None,
        request_timeout: float = 60.0,
        backoff_base: float = 0.8,
        backoff_cap: float = 30.0,
        stale_after: float | None = None,
        dra_rediscover_after: float = 600.0,
        gc_freeze: bool = False,
        recheck_interval: float = 30.0,
    ) -> None:
        if not isinstance(config, CapacityConfig):
            raise TypeError(f"CapacityCache needs a CapacityConfig, got {type(config).__name__}")
        if stall_timeout is None:
            stall_timeout = config.stall_timeout
        if page_size < 1 or watch_timeout <= 0 or stall_timeout <= 0 or backoff_base <= 0 or backoff_cap <= 0:
            raise ValueError("page_size, watch_timeout, stall_timeout and the backoff times must be positive")
        self.config = config
        self._api_factory = api_factory
        self._owns_api = True  # its own client (``_default_api``) or the factory's: closed on stop
        self._api: Any = None
        self._api_lock = asyncio.Lock()
        self._clock = clock
        self._sleep = sleep
        self._rand = rand
        self._page_size = page_size
        self._watch_timeout = watch_timeout
        self._stall_timeout = stall_timeout
        self._request_timeout = request_timeout
        self._backoff_base = backoff_base
        self._backoff_cap = backoff_cap
        # figures are stale once nothing was heard for as long as a watch may stay silent
        self._stale_after = stale_after if stale_after is not None else stall_timeout
        self._recheck_interval = recheck_interval
        self._recheck_at: float | None = None
        self.rechecks = 0
        self._plugin = DevicePluginSource(config, any_node_images=lambda: self._dra.may_serve)
        self._ledger = self._plugin.ledger
        # per pool, which contributing nodes hold each image (GET /hub/api/gpus "images", warm nodes)
        self.node_images = self._plugin.images
        self._started = clock()
        self._informers = {
            kind: _Informer(self, kind, method) for kind, method in DevicePluginSource.kinds.items()
        }
        self._dra = DraSource(
            config,
            lambda kind, method: _Informer(self, kind, method, self._get_resource_api, dra_missing_rules_message),
            self._get_resource_api,
            self._back_off,
            self._backoff,
            on_change=self._changed_health,
            rediscover_after=dra_rediscover_after,
            request_timeout=request_timeout,
        )
        self._sources = (self._plugin, self._dra)  # the informers feed each source the kinds it reads
        self._dra.ledger.on_member = self.node_images.dra_member  # a DRA pool's nodes, as they join and leave
        # a pod's CPU, memory and pod slot move the fit of its node in the DRA pools too
        self._ledger.on_requested = self._dra.ledger.refit
        self._tasks: list[asyncio.Task] = []
        self._settled = asyncio.Event()
        self._snapshot: CapacitySnapshot | None = None
        self._snapshot_key: tuple | None = None
        self._merged: tuple[tuple, tuple, tuple, dict] | None = None  # (plugin, dra, merged, by id)
        self._held: tuple[float, tuple, dict, int] | None = None  # snapshot(max_age): (when, pools, by id, generation)
        self._gc_freeze = gc_freeze
        self._gc_allow: asyncio.TimerHandle | None = None  # full collections deferred until then
        self._page_lock = asyncio.Lock()  # list pages are applied one at a time (_Informer._apply_page)
        self._back = asyncio.Event()  # set (and replaced) when the API server answers after failures

    # -- lifecycle -----------------------------------------------------------

    @classmethod
    def shared(cls, config: CapacityConfig, *, api_factory: ApiFactory | None = None,
               gc_freeze: bool = False) -> "CapacityCache":
        """The process's cache for the running loop; the first call creates and starts it
        (``gc_freeze``: see :meth:`_first_sync_done`)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError("CapacityCache.shared() must be called from a running event loop") from None
        cache = cls._shared.get(loop)
        if cache is None:
            cache = cls(config, api_factory=api_factory, gc_freeze=gc_freeze)
            cache.start()
            cls._shared[loop] = cache
        elif cache.config != config:
            log.warning("CapacityCache.shared(): a different config was passed and ignored; the first one wins")
        return cache

    @classmethod
    def current(cls) -> "CapacityCache | None":
        """The running loop's shared cache; None when there is none yet, or no running loop."""
        try:
            return cls._shared.get(asyncio.get_running_loop())
        except RuntimeError:
            return None

    @classmethod
    async def reset_shared(cls) -> None:
        """Tests: stop the running loop's shared cache and forget every shared cache."""
        mine = cls.current()
        cls._shared.clear()
        if mine is not None:
            await mine.stop()

    def start(self) -> None:
        if self._tasks:
            return
        if self._gc_freeze:
            # the hub is up by now (the first view, spawn or API request starts the cache): what
            # it holds is long-lived, and a full collection during the sync must not walk it
            gc_policy.freeze("the GPU capacity cache starts")
            # and none until the sync's own freeze: at 150,000 pods a full pass over what the
            # informers have read so far is a stall of 80 ms (allowed again after a while anyway,
            # should the sync never end)
            gc_policy.defer_full()
            self._gc_allow = asyncio.get_running_loop().call_later(_FULL_COLLECTIONS_DEFERRED_AT_MOST,
                                                                   self._allow_full_collections)
        for inf in self._informers.values():
            self._tasks.append(asyncio.create_task(inf.run(), name=f"gpuspawner-capacity-{inf.kind}"))
        self._tasks.append(asyncio.create_task(self._run_dra(), name="gpuspawner-capacity-dra"))

    async def _run_dra(self) -> None:
        """Discover ``resource.k8s.io/v1``; once served, run the DRA informers (dra_source.py)."""
        await self._dra.discover()
        await asyncio.gather(*(inf.run() for inf in self._dra.informers.values()))

    def _allow_full_collections(self) -> None:
        if self._gc_allow is not None:
            self._gc_allow.cancel()
            self._gc_allow = None
            gc_policy.allow_full()

    async def stop(self) -> None:
        self._allow_full_collections()
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        for t in tasks:
            try:
                await t
            except asyncio.CancelledError:
                pass
            except Exception:  # pragma: no cover - run() only ends by cancellation
                log.exception("capacity informer ended with an error")
        api, self._api = self._api, None
        if api is not None and self._owns_api:
            client = getattr(api, "api_client", None)
            if client is not None:
                await client.close()

    async def _get_resource_api(self) -> Any:
        """The ``resource.k8s.io/v1`` API on the same client (and so the same credentials)."""
        api = await self._get_api()
        if all(hasattr(api, m) for m in ("get_api_resources", *DRA_KINDS.values())):
            return api  # an API object that serves every group itself
        from kubernetes_asyncio.client import ResourceV1Api

        return ResourceV1Api(api.api_client)

    async def _get_api(self) -> Any:
        if self._api is not None:
            return self._api
        async with self._api_lock:
            if self._api is None:
                factory = self._api_factory or _default_api
                api = factory()
                if inspect.isawaitable(api):
                    api = await api
                self._api = api
        return self._api

    # -- reading ---------------------------------------------------------------

    @property
    def synced(self) -> bool:
        return all(i.synced for i in self._informers.values())

    def _error(self, age: float | None = None) -> str | None:
        """Why the figures cannot be trusted now, in plain words; None while they can."""
        forbidden = [k for k, i in self._informers.items() if i.forbidden]
        if forbidden:
            return missing_rules_message(forbidden)
        failing = health.combine({k: i.error or "" for k, i in self._informers.items()})
        if failing:
            return failing
        if not self.synced:
            return health.syncing_message()
        stalled = self._stalled()
        if stalled:
            return health.stalled_message(stalled, self._stale_after)
        age = self._age() if age is None else age
        if age > self._stale_after:
            return health.silent_message(self._stale_after)
        return None

    def _age(self) -> float:
        """Seconds since the quietest watch last delivered (the figures' age)."""
        now = self._clock()
        return max(i.silence(now) for i in self._informers.values())

    def _stalled(self) -> list[str]:
        now = self._clock()
        return [k for k, i in self._informers.items() if i.note_silence(now)]

    def _healthy(self, age: float) -> bool:
        return self._error(age) is None

    def _first_sync_done(self) -> None:
        """When both informers have listed for the first time, with ``gc_freeze``: move what
        the process holds (the hub's objects, the ledger's records) out of the cyclic
        collector's reach (:func:`gc_policy.freeze`), so its full passes stay short. (``start``
        froze what the hub held before the cache started.)"""
        if self._gc_freeze and self.synced:
            self._gc_freeze = False  # once per cache
            gc_policy.freeze("the GPU capacity cache has read the cluster")
            self._allow_full_collections()

    def _changed_health(self) -> None:
        # a first snapshot waits for DRA to settle too (absent, listed or forbidden), so the spawn
        # page does not open without the DRA pools; device-plugin trouble settles it at once
        if (self.synced and self._dra.settled()) or any(i.forbidden for i in self._informers.values()):
            self._settled.set()

    async def wait_synced(self, timeout: float) -> bool:
        """Wait until both informers have listed once; False on timeout or when forbidden."""
        if not self.synced:
            try:
                await asyncio.wait_for(self._settled.wait(), timeout)
            except asyncio.TimeoutError:
                pass
        return self.synced

    def snapshot(self, max_age: float = 0.0, renew: bool = False) -> CapacitySnapshot:
        """The pools as of now.  No I/O; the pools are rebuilt only after a change.

        ``max_age`` > 0: the pools of an earlier call are good enough if they were counted at
        most that many seconds ago (the spawn page, which many users load while the counts
        change many times a second on a big cluster); ``renew``: count them anew now and hold
        those. The health, age and error are always current. A spawn asks with 0, for the
        counts as of now."""
        now = self._clock()
        held = self._held  # what the last call with a max_age counted (fresh calls leave it be)
        if max_age > 0 and not renew and held is not None and now - held[0] <= max_age:
            _, pools, by_id, generation = held
        else:
            for source in self._sources:
                source.ledger.expire(now)
            pools, by_id = self._pools()
            generation = sum(source.ledger.generation for source in self._sources)
            if max_age > 0:
                self._held = (now, pools, by_id, generation)
        age = self._age()
        return CapacitySnapshot(
            pools=pools,
            synced=self.synced,
            age_seconds=age,
            generation=generation,
            healthy=self._healthy(age),
            error=self._error(age),
            pools_by_id=by_id,
            node_taints=self._plugin.taints.summary(),
        )

    def track_requests(self, requests: Iterable[tuple[int, ...]]) -> bool:
        """Count from now on, per pool, where servers asking these of a node (CPU millicores, memory
        and ephemeral storage bytes, pods) fit (``Ledger.track``, and the DRA ledger's
        ``track`` with what the pods on each node request); a change drops the counts a page
        holds, so the next view shows them."""
        changed = self._ledger.track(requests)
        changed = self._dra.ledger.track(self._ledger.tracked, self._ledger.requested_on) or changed
        if changed:
            self._held = None
        return changed

    def held_age(self) -> float | None:
        """Seconds since the counts ``snapshot(max_age)`` serves were taken (None: none held yet)."""
        return None if self._held is None else self._clock() - self._held[0]

    def _pools(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Device-plugin pools and DRA pools side by side, sorted by id (merged once per change)."""
        plugin = self._plugin.pools()
        dra = self._dra.pools() if self._dra_healthy() else ()
        if not dra:
            return plugin, self._ledger.pools_by_id()
        memo = self._merged
        if memo is None or memo[0] is not plugin or memo[1] is not dra:
            merged = tuple(sorted(plugin + dra, key=lambda p: p.id))
            memo = self._merged = (plugin, dra, merged, {p.id: p for p in merged})
        return memo[2], memo[3]

    def _dra_healthy(self) -> bool:
        """DRA pools are served only while the DRA informers are current, as ``healthy`` asks of the
        node and pod informers: listed, not failing or forbidden, heard from within ``stale_after``
        (a broken DRA watch takes the DRA pools off the page rather than offer stale counts)."""
        if not self._dra.synced:
            return False
        now = self._clock()
        return all(not i.error and not i.forbidden and i.trusted(now) for i in self._dra.informers.values())

    def reserve(self, owner: str, pool_id: str, count: int, request: tuple[int, ...] | None = None) -> None:
        """Count ``count`` GPUs of ``pool_id`` for the pod ``owner`` ("<namespace>/<name>") at once
        (and ``request``, its CPU, memory, ephemeral storage and pod slot, on the same node)."""
        if not isinstance(owner, str) or "/" not in owner:
            raise ValueError(f"reservation owner must be '<namespace>/<pod name>', got {owner!r}")
        expires = self._clock() + self.config.reservation_ttl
        if self._dra.accounts.has_pool(pool_id):
            self._dra.ledger.reserve(owner, pool_id, count, expires)
        else:
            self._ledger.reserve(owner, pool_id, count, expires, request)

    def release(self, owner: str) -> None:
        for source in self._sources:
            source.ledger.release(owner)

    def recheck(self) -> float:
        """Re-list nodes and pods now, because something (the scheduler) contradicts the counts.

        Returns a token for :meth:`rechecked_since`.  Requests within
        ``recheck_interval`` of the last one share it, so many pending pods
        cost one re-list.  The informers' tasks are restarted: a task parked
        in a watch is cancelled there, and a new one lists from scratch (the
        list's ``retain`` drops what vanished, as after ``410 Gone``)."""
        now = self._clock()
        if self._recheck_at is not None and now - self._recheck_at < self._recheck_interval:
            return self._recheck_at
        self._recheck_at = now
        self.rechecks += 1
        log.info("capacity: re-listing nodes and pods (the scheduler disagrees with the counts)")
        if self._tasks:
            # the node and pod informers only: the DRA task (discovery, DRA informers) goes on
            names = {f"gpuspawner-capacity-{kind}" for kind in self._informers}
            kept = [t for t in self._tasks if t.get_name() not in names]
            for t in self._tasks:
                if t.get_name() in names:
                    t.cancel()
            self._tasks = [
                asyncio.create_task(inf.run(), name=f"gpuspawner-capacity-{inf.kind}")
                for inf in self._informers.values()
            ] + kept
        return now

    def rechecked_since(self, token: float) -> bool:
        """Whether both informers completed a list that began at or after ``token`` (from :meth:`recheck`)."""
        return all(i.listed_at is not None and i.listed_at >= token for i in self._informers.values())

    @property
    def health(self) -> dict[str, Any]:
        age = self._age()
        informers = {k: i.health() for k, i in self._informers.items()}
        return {
            "synced": self.synced,
            "age_seconds": round(age, 3),
            "healthy": self._healthy(age),
            "error": self._error(age),
            "rechecks": self.rechecks,
            "relists": sum(i.relists for i in self._informers.values()),
            "watch_restarts": sum(i.watch_restarts for i in self._informers.values()),
            "consecutive_failures": max(i.failures for i in self._informers.values()),
            "gpu_nodes": self._plugin.accounts.node_count,
            "gpu_pods": self._plugin.accounts.pod_count,
            "reservations": len(self._ledger.reservations()),
            "generation": self._ledger.generation,
            "informers": informers,
            "dra": {**self._dra.health(), "healthy": self._dra_healthy()},
        }

    # -- timing ----------------------------------------------------------------

    def _answered(self) -> None:
        """An informer got an answer after failures: the API server is back, so every informer
        (and DRA discovery) waiting out a backoff retries now rather than up to ``backoff_cap``
        later (otherwise the last of five informers comes back many seconds after the first)."""
        back, self._back = self._back, asyncio.Event()
        back.set()

    async def _back_off(self, delay: float) -> None:
        """Sleep ``delay`` (the injected ``sleep``), cut short when the API server answers again."""
        back = self._back
        nap = asyncio.ensure_future(self._sleep(delay))
        woken = asyncio.ensure_future(back.wait())
        try:
            await asyncio.wait({nap, woken}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (nap, woken):
                t.cancel()

    def _backoff(self, failures: int) -> float:
        """Full jitter: uniform in [0, min(cap, base * 2**(failures-1)))."""
        ceiling = min(self._backoff_cap, self._backoff_base * (2 ** min(failures - 1, 30)))
        return self._rand() * ceiling

    def _watch_seconds(self) -> int:
        """One watch's ``timeoutSeconds``: client-go's jitter, ``base * (1 + rand)``, spreading
        reconnects, where the base is ``watch_timeout`` or a quarter of the stall window, whichever
        is shorter (never under 5 s). kube-apiserver's watch cache sends a watcher a bookmark
        about once a minute and 2 s before its deadline, and only once the resource's
        resourceVersion has moved past the watcher's (``k8s.io/apiserver``
        ``pkg/storage/cacher/cache_watcher.go``, ``nextBookmarkTime`` and ``processEvents``): a
        resource nobody changes (DeviceClasses; ResourceClaims on a cluster that uses few) gets
        no bookmark at all, and the server's end of the watch at its deadline is the only word on
        it. With watches this short, a healthy server is heard from within half the stall window,
        so a quiet watch is never taken for a stalled one (a re-list), nor is one whose minute
        bookmark a server under load dispatches late."""
        base = min(self._watch_timeout, max(_MIN_WATCH_BASE, self._stall_timeout / 4))
        return max(1, int(base * (1 + self._rand())))

    def _watch_request_timeout(self) -> Any:
        import aiohttp

        # no total: a watch lives for timeoutSeconds; silence before the
        # response headers is bounded by sock_read, silence after them by the
        # stall check in _watch
        return aiohttp.ClientTimeout(
            total=None,
            connect=self._request_timeout,
            sock_connect=self._request_timeout,
            sock_read=self._stall_timeout,
        )


async def _default_api(*, host: str | None = None, ssl_ca_cert: str | None = None,
                       verify_ssl: bool | None = None, config_file: str | None = None) -> Any:
    """The cache's own client: the in-cluster configuration (the pod's ServiceAccount), else the
    kubeconfig (``config_file``, else ``$KUBECONFIG``, ``~/.kube/config``), with KubeSpawner's ``k8s_api_host``,
    ``k8s_api_ssl_ca_cert`` and ``k8s_api_verify_server`` when the hub sets them.

    Never the client's process-wide default configuration: a hub config that builds a
    ``kubernetes_asyncio`` model object while it loads (Zero to JupyterHub's builds a
    ``V1Container``) installs a blank one there, with no host.  And never KubeSpawner's shared
    client, which would keep whatever configuration it was first made with.  Reading the
    in-cluster files blocks on file I/O, so it runs in a thread.
    """
    from kubernetes_asyncio import config as kube_config
    from kubernetes_asyncio.client import ApiClient, Configuration, CoreV1Api

    conf = Configuration()
    try:
        await asyncio.to_thread(kube_config.load_incluster_config, client_configuration=conf)
    except kube_config.ConfigException as in_cluster:
        try:
            await kube_config.load_kube_config(config_file=config_file, client_configuration=conf,
                                               persist_config=False)
        except (kube_config.ConfigException, OSError) as e:
            raise RuntimeError(
                f"no Kubernetes configuration: not in a cluster ({in_cluster}) and no usable kubeconfig ({e})"
            ) from None
    if host:
        conf.host = host
    if ssl_ca_cert:
        conf.ssl_ca_cert = ssl_ca_cert
    if verify_ssl is not None:
        conf.verify_ssl = verify_ssl
    return CoreV1Api(ApiClient(configuration=conf))
