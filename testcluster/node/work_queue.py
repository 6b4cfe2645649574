"""A controller's work queue: each key at most once, delayed adds, retries with back-off.
Design notes: docs/simulated-nodes.md.
"""

from __future__ import annotations

import asyncio
from typing import Generic, Hashable, TypeVar

__all__ = ["WorkQueue"]

K = TypeVar("K", bound=Hashable)


class WorkQueue(Generic[K]):
    """Keys to process, in the order first added; ``await get()`` waits for one."""

    def __init__(self, *, base_delay: float = 0.005, max_delay: float = 5.0) -> None:
        self._keys: dict[K, None] = {}
        self._wake = asyncio.Event()
        self._timers: dict[K, asyncio.TimerHandle] = {}
        self._failures: dict[K, int] = {}
        self.base_delay, self.max_delay = base_delay, max_delay

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, key: K) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        self._keys[key] = None
        self._wake.set()

    def add_after(self, key: K, delay: float) -> None:
        """Queue ``key`` in ``delay`` seconds (an earlier pending add wins)."""
        if delay <= 0:
            self.add(key)
            return
        if key in self._keys:
            return
        loop = asyncio.get_running_loop()
        old = self._timers.get(key)
        when = loop.time() + delay
        if old is not None and old.when() <= when:
            return
        if old is not None:
            old.cancel()
        self._timers[key] = loop.call_at(when, self._fire, key)

    def _fire(self, key: K) -> None:
        self._timers.pop(key, None)
        self._keys[key] = None
        self._wake.set()

    def add_rate_limited(self, key: K) -> None:
        """Retry ``key`` after a failure: 5 ms doubling per failure, at most ``max_delay``."""
        n = self._failures.get(key, 0)
        self._failures[key] = n + 1
        self.add_after(key, min(self.base_delay * 2 ** n, self.max_delay))

    def forget(self, key: K) -> None:
        self._failures.pop(key, None)

    async def get(self) -> K:
        while not self._keys:
            self._wake.clear()
            await self._wake.wait()
        key = next(iter(self._keys))
        del self._keys[key]
        return key

    def close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
