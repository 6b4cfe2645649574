"""An informer over HTTP: list (paged), then watch from the list's resourceVersion; relist after
410 Gone or a broken stream, telling the handler what changed meanwhile.  Keeps the objects by key.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from .client import ApiError, Client, Resource

log = logging.getLogger(__name__)

Handler = Callable[[str, dict], None]


def key_of(obj: dict[str, Any]) -> str:
    m = obj.get("metadata") or {}
    return f"{m.get('namespace')}/{m.get('name')}" if m.get("namespace") else str(m.get("name"))


class Informer:
    """``items``: key (``ns/name`` or ``name``) -> the object as last seen."""

    def __init__(self, client: Client, res: Resource, *, on_event: Handler | None = None,
                 on_list: Callable[[list[dict]], None] | None = None, field_selector: str | None = None,
                 label_selector: str | None = None, keep: Callable[[dict], bool] | None = None):
        self.client = client
        self.res = res
        self.on_event = on_event
        self.on_list = on_list
        self.field_selector = field_selector
        self.label_selector = label_selector
        self.keep = keep or (lambda obj: True)
        self.items: dict[str, dict[str, Any]] = {}
        self.synced = asyncio.Event()
        self.errors = 0

    def get(self, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return self.items.get(f"{namespace}/{name}" if namespace and self.res.namespaced else name)

    def put(self, obj: dict[str, Any]) -> None:
        """An object read by other means (a GET), newer than what the watch showed so far."""
        if self.keep(obj):
            self.items[key_of(obj)] = obj

    async def run(self) -> None:
        backoff = 0.2
        while True:
            try:
                rv = await self._relist()
                backoff = 0.2
                while True:
                    rv = await self._watch(rv)
            except asyncio.CancelledError:
                raise
            except ApiError as e:
                if e.code != 410:
                    self.errors += 1
                    log.warning("%s: %s", self.res.plural, e)
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 5.0)
            except Exception as e:  # a refused or broken connection: list again after a pause
                self.errors += 1
                log.debug("%s watch: %r", self.res.plural, e)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    async def _relist(self) -> str:
        rv, items = await self.client.list(self.res, field_selector=self.field_selector,
                                           label_selector=self.label_selector)
        fresh = {key_of(o): o for o in items if self.keep(o)}
        first = not self.synced.is_set()
        old, self.items = self.items, fresh
        if self.on_list is not None and first:
            self.on_list(list(fresh.values()))
        elif self.on_event is not None:
            for k, o in old.items():
                if k not in fresh:
                    self.on_event("DELETED", o)
            for o in fresh.values():
                self.on_event("MODIFIED", o)
        self.synced.set()
        return rv

    async def _watch(self, rv: str) -> str:
        async for ev in self.client.watch(self.res, rv, field_selector=self.field_selector,
                                          label_selector=self.label_selector):
            obj = ev.get("object") or {}
            rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
            kind = ev.get("type")
            if kind == "BOOKMARK":
                continue
            k = key_of(obj)
            if kind == "DELETED" or not self.keep(obj):
                gone = self.items.pop(k, None)
                if gone is not None and self.on_event is not None:
                    self.on_event("DELETED", obj)
                continue
            self.items[k] = obj
            if self.on_event is not None:
                self.on_event(kind or "MODIFIED", obj)
        return rv
