"""The watch cache's history entries and the watchers that read them.

Source: ``k8s.io/apiserver/pkg/storage/cacher/{watch_cache,cache_watcher}.go``.
"""

from __future__ import annotations

import asyncio
import collections
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .resources import ResourceInfo
from .selectors import FieldSelector, LabelSelector
from .strategy import clone

if TYPE_CHECKING:
    from .store import Store


# --- history and watchers ---------------------------------------------------------


@dataclass(slots=True)
class Change:
    """One revision: what a watch cache keeps per event."""

    rev: int
    type: str  # ADDED | MODIFIED | DELETED
    plural: str
    key: str
    obj: dict[str, Any]  # the new state; for DELETED, the last state stamped with rev
    prev: dict[str, Any] | None  # the state before; None for ADDED


class Watcher:
    """An async iterator of watch events for one resource, namespace and selectors.

    Yields ``{"type": "ADDED"|"MODIFIED"|"DELETED"|"BOOKMARK", "object": {...}}``
    in revision order.  ``close()`` ends the iteration at once; events still
    queued are dropped (a consumer resumes from the last resourceVersion it
    saw, as after any watch that ends).  The queue is unbounded: the real
    cacher's termination of watchers that fall too far behind is not modelled.
    """

    def __init__(
        self,
        store: "Store",
        info: ResourceInfo,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
        allow_bookmarks: bool,
        copy_objects: bool = True,
    ) -> None:
        self._store = store
        self.info = info
        self.namespace = namespace
        self._labels = labels
        self._fields = fields
        self.allow_bookmarks = allow_bookmarks
        self._copy = copy_objects
        self._pending: collections.deque[tuple[str, dict[str, Any]]] = collections.deque()
        self._wakeup = asyncio.Event()
        self._closed = False
        # the newest revision this watcher has been shown (delivered or filtered out)
        self.resource_version = store.resource_version
        self.bookmark_interval: float = store.bookmark_interval
        self._next_bookmark = time.monotonic() + self.bookmark_interval
        self.deadline: float | None = None  # monotonic; set by a timeoutSeconds watch
        self._pre_deadline_sent = False

    # -- matching (cache_watcher.go convertToWatchEvent) --
    def matches(self, obj: dict[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        if not self._labels.empty and not self._labels.matches(meta.get("labels")):
            return False
        if not self._fields.empty and not self._fields.matches(obj):
            return False
        return True

    def _offer(self, ch: Change) -> None:
        if self._closed:
            return
        self.resource_version = ch.rev
        if ch.type == "ADDED":
            if self.matches(ch.obj):
                self._pending.append(("ADDED", ch.obj))
        elif ch.type == "DELETED":
            if self.matches(ch.obj):
                self._pending.append(("DELETED", ch.obj))
        else:
            cur = self.matches(ch.obj)
            prev = ch.prev is not None and self.matches(ch.prev)
            if cur and prev:
                self._pending.append(("MODIFIED", ch.obj))
            elif cur:
                self._pending.append(("ADDED", ch.obj))
            elif prev:
                # The old object, stamped with the revision of the change that
                # took it out of the selection (cache_watcher.go).
                assert ch.prev is not None
                gone = dict(ch.prev)
                gone["metadata"] = dict(ch.prev["metadata"], resourceVersion=str(ch.rev))
                self._pending.append(("DELETED", gone))
            else:
                return
        self._wakeup.set()

    def _queue_initial(self, obj: dict[str, Any]) -> None:
        self._pending.append(("ADDED", obj))

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._pending.clear()
            self._store._watchers.discard(self)
            self._wakeup.set()

    def __aiter__(self) -> "Watcher":
        return self

    def _bookmark(self) -> tuple[str, dict[str, Any]]:
        # A bookmark carries only the kind and metadata.resourceVersion
        # (watch.Bookmark events of the cacher); every event up to that
        # revision has been delivered already, since the queue is empty.
        rv = self._store.resource_version
        return "BOOKMARK", {
            "kind": self.info.kind,
            "apiVersion": self.info.api_version,
            "metadata": {"resourceVersion": str(rv)},
        }

    def set_bookmark_interval(self, seconds: float) -> None:
        """Send bookmarks every ``seconds`` from now (the store's interval by default)."""
        self.bookmark_interval = seconds
        self._next_bookmark = time.monotonic() + seconds
        self._wakeup.set()  # a watcher waiting for the old interval's bookmark waits for the new one

    def set_timeout(self, seconds: float) -> None:
        """Note the deadline of a ``timeoutSeconds`` watch (for the last bookmark)."""
        self.deadline = time.monotonic() + seconds
        # cache_watcher.go nextBookmarkTime: no pre-timeout bookmark when the
        # deadline is less than 2 s away.
        self._pre_deadline_sent = seconds < 2.0

    def _bookmark_due(self, now: float) -> float | None:
        """Seconds until the next bookmark, or None when none will come.

        cache_watcher.go nextBookmarkTime: about every minute, and 2 s before
        the watch's deadline so a client that times out resumes from "now".
        """
        if not self.allow_bookmarks:
            return None
        due = self._next_bookmark
        if self.deadline is not None and not self._pre_deadline_sent:
            due = min(due, self.deadline - 2.0)
        return max(0.0, due - now)

    async def next_raw(self, timeout: float | None = None) -> tuple[str, dict[str, Any]] | None:
        """The next event without copying, or None on close / when ``timeout`` passes."""
        loop_deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._closed:
                return None
            now = time.monotonic()
            if self._pending:
                return self._pending.popleft()
            wait = self._bookmark_due(now)
            if wait is not None and wait <= 0:
                if self.deadline is not None and self.deadline - 2.0 <= now:
                    self._pre_deadline_sent = True
                self._next_bookmark = now + self.bookmark_interval
                return self._bookmark()
            if loop_deadline is not None:
                left = loop_deadline - now
                if left <= 0:
                    return None
                wait = left if wait is None else min(wait, left)
            self._wakeup.clear()
            if self._pending or self._closed:
                continue
            if wait is None:
                await self._wakeup.wait()
            else:
                try:
                    await asyncio.wait_for(self._wakeup.wait(), wait)
                except asyncio.TimeoutError:
                    pass

    async def __anext__(self) -> dict[str, Any]:
        item = await self.next_raw()
        if item is None:
            raise StopAsyncIteration
        etype, obj = item
        return {"type": etype, "object": clone(obj) if self._copy else obj}

    @property
    def pending(self) -> int:
        return len(self._pending)


