"""Leases and status heartbeats of every node, in bulk: one task, paced, bounded concurrency.

A kubelet renews its Lease every 10 s (a quarter of its 40 s duration) and posts its status at
least every 5 min (``nodeStatusReportFrequency``); the node lifecycle controller marks a node
Unknown when neither changed for its grace period (50 s).  Here one task does it for every
node, spread evenly over the period, at most ``max_rate`` requests a second (5,000 nodes then
renew every 25 s, within the grace period), at most ``concurrency`` at a time.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Any, Callable

from . import nodes as N
from .client import KNOWN, ApiError, Client

log = logging.getLogger(__name__)

LEASES, NODES = KNOWN["Lease"], KNOWN["Node"]
TICK = 0.1  # seconds between batches


class Heartbeats:
    """Renews the Lease and posts the status heartbeat of every node it is given."""

    def __init__(self, client: Client, *, lease_interval: float = 10.0, status_interval: float = 300.0,
                 max_rate: float = 200.0, concurrency: int = 16,
                 images: Callable[[str], list[dict]] | None = None):
        self.client = client
        self.lease_interval = lease_interval
        self.status_interval = status_interval
        self.max_rate = max_rate
        self.images = images or (lambda name: [])
        self.nodes: dict[str, dict[str, Any]] = {}   # name -> the registered Node (uid, conditions)
        self._posted: dict[str, float] = {}           # name -> monotonic time of the last status post
        self._dirty: set[str] = set()                 # status to post at the next turn (images changed)
        self._sem = asyncio.Semaphore(concurrency)
        self._inflight: set[asyncio.Task] = set()
        self._waiting: set[str] = set()               # nodes whose beat is queued or under way
        self.renewals = 0
        self.failures = 0
        self.last_error: str | None = None

    def period(self) -> float:
        """Seconds between two renewals of one node's lease."""
        return max(self.lease_interval, len(self.nodes) / self.max_rate)

    def add(self, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        self.nodes[name] = node
        self._posted.setdefault(name, time.monotonic())

    def remove(self, name: str) -> None:
        self.nodes.pop(name, None)
        self._posted.pop(name, None)
        self._dirty.discard(name)

    def mark_dirty(self, name: str) -> None:
        if name in self.nodes:
            self._dirty.add(name)

    async def run(self) -> None:
        order: list[str] = []
        i = 0
        while True:
            if i >= len(order):
                order, i = list(self.nodes), 0
                if not order:
                    await asyncio.sleep(TICK)
                    continue
            batch = max(1, math.ceil(len(order) * TICK / self.period()))
            now = time.monotonic()
            turn = order[i:i + batch]
            # a status to correct (the node lifecycle controller said Unknown) goes out now
            for name in [n for n in self._dirty if n not in turn][:batch]:
                self._dirty.discard(name)
                self._spawn(self._post(name, now))
            for name in turn:
                # a node whose last beat is still waiting (a slow API server) is not queued twice:
                # renewals slow down instead of piling up
                if name in self.nodes and name not in self._waiting:
                    self._waiting.add(name)
                    self._spawn(self._beat(name, now))
            i += batch
            await asyncio.sleep(TICK)

    async def stop(self) -> None:
        for t in list(self._inflight):
            t.cancel()
        await asyncio.gather(*self._inflight, return_exceptions=True)

    def _spawn(self, coro) -> None:
        t = asyncio.ensure_future(coro)
        self._inflight.add(t)
        t.add_done_callback(self._inflight.discard)

    async def _beat(self, name: str, now: float) -> None:
        try:
            await self._beat_now(name, now)
        finally:
            self._waiting.discard(name)

    async def _beat_now(self, name: str, now: float) -> None:
        async with self._sem:
            node = self.nodes.get(name)
            if node is None:
                return
            try:
                await self.renew(node)
                if name in self._dirty or now - self._posted.get(name, 0.0) >= self.status_interval:
                    await self.post_status(node)
                    self._posted[name] = now
            except ApiError as e:
                self.failures += 1
                self.last_error = f"{name}: {e}"
                if e.code == 404 and e.status.get("details", {}).get("kind") == "nodes":
                    self.remove(name)  # the Node was deleted: its kubelet would stop too
            except Exception as e:  # a refused connection: the next turn tries again
                self.failures += 1
                self.last_error = f"{name}: {e}"

    async def _post(self, name: str, now: float) -> None:
        async with self._sem:
            node = self.nodes.get(name)
            if node is None:
                return
            try:
                await self.post_status(node)
                self._posted[name] = now
            except Exception as e:  # the node's next turn posts it again
                self.failures += 1
                self.last_error = f"{name}: {e}"
                self._dirty.add(name)

    async def renew(self, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        try:
            await self.client.patch(LEASES, name, N.renewal(), namespace=N.LEASE_NAMESPACE)
        except ApiError as e:
            if e.code != 404:
                raise
            await self.client.create(LEASES, N.lease(node), namespace=N.LEASE_NAMESPACE)
        self.renewals += 1

    async def post_status(self, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        self._dirty.discard(name)
        patch = N.heartbeat(node)
        images = self.images(name)
        if images:
            patch["status"]["images"] = images[:N.MAX_IMAGES]
        node["status"]["conditions"] = patch["status"]["conditions"]
        await self.client.patch(NODES, name, patch, subresource="status")
