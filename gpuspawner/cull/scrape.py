"""GPU activity without Prometheus: scrape the DCGM exporter pods directly.
Design notes: docs/culling.md.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from gpuspawner.cull.activity import ACTIVITY_METRICS, SeriesWindow, StepMaxima, plan_steps

__all__ = ["ScrapeSource", "parse_exposition"]

log = logging.getLogger(__name__)

SeriesKey = tuple[str, frozenset]  # (metric, frozenset of label items)


def parse_exposition(text: str) -> list[tuple[str, dict[str, str], float]]:
    """``(metric, labels, value)`` of the activity metrics in a text exposition.  Pure."""
    from prometheus_client.parser import text_string_to_metric_families

    out = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in ACTIVITY_METRICS:
                out.append((sample.name, dict(sample.labels), float(sample.value)))
    return out


def exporter_targets(pods: Iterable[dict[str, Any]], port: int) -> list[tuple[str, str]]:
    """``(pod name, URL)`` of each Running exporter pod with an IP.  Pure."""
    out = []
    for pod in pods:
        status = pod.get("status") or {}
        if status.get("phase") == "Running" and status.get("podIP") and not pod["metadata"].get("deletionTimestamp"):
            out.append((pod["metadata"]["name"], f"http://{status['podIP']}:{port}/metrics"))
    return out


class ScrapeSource:
    """Scrapes the exporters (``collect``) and answers windows from what it kept (``windows``)."""

    def __init__(self, list_exporters: Callable[[], Awaitable[list[dict]]], *, port: int = 9400,
                 step: float = 60.0, keep: float = 3600.0, timeout: float = 10.0, concurrency: int = 10,
                 clock: Callable[[], float] = time.time):
        self.list_exporters = list_exporters
        self.port = port
        self.step = step
        self.keep = keep
        self.timeout = timeout
        self.concurrency = concurrency
        self.clock = clock
        self.history: dict[SeriesKey, deque[tuple[float, float]]] = {}
        self._session = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _scrape(self, name: str, url: str, gate: asyncio.Semaphore) -> list | None:
        import aiohttp

        async with gate:
            try:
                async with self._session.get(url, timeout=aiohttp.ClientTimeout(total=self.timeout)) as r:
                    if r.status != 200:
                        raise RuntimeError(f"HTTP {r.status}")
                    text = await r.text()
            except (aiohttp.ClientError, asyncio.TimeoutError, RuntimeError) as e:
                log.warning("cannot scrape DCGM exporter %s at %s: %s", name, url, e or type(e).__name__)
                return None
        try:
            return parse_exposition(text)
        except ValueError as e:
            log.warning("DCGM exporter %s at %s: not the Prometheus text format: %s", name, url, e)
            return None

    async def collect(self) -> int:
        """One round: scrape every exporter; returns how many answered.  Raises what listing raises."""
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession()
        targets = exporter_targets(await self.list_exporters(), self.port)
        gate = asyncio.Semaphore(self.concurrency)
        results = await asyncio.gather(*(self._scrape(n, u, gate) for n, u in targets))
        now = self.clock()
        for samples in results:
            for metric, labels, value in samples or ():
                self.history.setdefault((metric, frozenset(labels.items())), deque()).append((now, value))
        self._prune(now)
        return sum(r is not None for r in results)

    def _prune(self, now: float) -> None:
        horizon = now - self.keep - 2 * self.step
        for key in list(self.history):
            samples = self.history[key]
            while samples and samples[0][0] < horizon:
                samples.popleft()
            if not samples:
                del self.history[key]

    async def windows(self, window: float, now: float) -> list[SeriesWindow]:
        step, n = plan_steps(window, self.step)
        start = now - n * step
        out = []
        for (metric, labels), samples in self.history.items():
            steps = StepMaxima(metric, start, step, n)
            for t, value in samples:
                steps.put(steps.step_of(t), t, value)
            out.append(steps.window(dict(labels)))
        return out
