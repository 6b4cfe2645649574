"""GPU activity from a Prometheus server's HTTP API (``gpuspawner cull --prometheus-url``).
Design notes: docs/culling.md.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Mapping
from typing import Any

from gpuspawner.cull.activity import (ACTIVITY_METRICS, BadSample, SeriesWindow, SourceError, StepMaxima, plan_steps,
                                      show)

__all__ = ["MAX_ANSWER_BYTES", "PrometheusSource", "windows_from_matrix"]

#: the largest answer read, so that a runaway answer cannot exhaust the culler's memory: a 1 h window
#: at one point a minute is about 2 KB per series, so this holds some 30,000 GPUs; longer windows
#: need a larger ``--metrics-step`` (fewer points per series)
MAX_ANSWER_BYTES = 64 * 1024 * 1024


def _promql_duration(seconds: float) -> str:
    return f"{max(int(round(seconds * 1000)), 1)}ms"


def _labels(metric: str, i: int, series: Any) -> dict[str, str]:
    """A series' labels; a series that cannot be told apart from the others spoils the whole answer."""
    labels = series.get("metric") if isinstance(series, Mapping) else None
    if not isinstance(labels, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                  for k, v in labels.items()):
        raise SourceError(f"Prometheus answered a malformed series for {metric} (result[{i}]: "
                          f"{show(series, 80)}): its labels must be a map of strings")
    return {k: v for k, v in labels.items() if k != "__name__"}


def _time(raw: Any) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
        raise BadSample(f"time {show(raw)} is not a number")
    try:
        t = float(raw)
    except (ValueError, OverflowError):
        raise BadSample(f"time {show(raw)} is not a number") from None
    if not math.isfinite(t):
        raise BadSample(f"time {show(raw)} is not a finite number")
    return t


def _series_window(metric: str, labels: dict[str, str], values: Any, start: float, step: float, n: int
                   ) -> SeriesWindow:
    steps = StepMaxima(metric, start, step, n)
    if not isinstance(values, list):
        steps.reject(f"values {show(values)} is not a list of [time, value] points")
        return steps.window(labels)
    for point in values:
        if not isinstance(point, list) or len(point) != 2:
            steps.reject(f"point {show(point)} is not [time, value]")
            continue
        try:
            t = _time(point[0])
        except BadSample as e:
            steps.reject(str(e))
            continue
        x = (t - start) / step
        steps.put(round(x) if math.isfinite(x) and abs(x) < 1e15 else -1, point[0], point[1])
    return steps.window(labels)


def windows_from_matrix(metric: str, doc: Any, start: float, step: float, n: int) -> list[SeriesWindow]:
    """The ``SeriesWindow`` of each series in a ``query_range`` answer.  Pure.

    An answer that is not the API's (an error, another result type, a series without readable
    labels) is a ``SourceError``; a series with bad points or samples is an unusable window."""
    if not isinstance(doc, Mapping) or doc.get("status") != "success":
        error = doc.get("error") if isinstance(doc, Mapping) else None
        raise SourceError(f"Prometheus answered an error: {show(error or doc, 300)}")
    data = doc.get("data")
    kind = data.get("resultType") if isinstance(data, Mapping) else None
    if kind != "matrix" or not isinstance(data.get("result"), list):
        raise SourceError(f"Prometheus answered no matrix for {metric} (resultType {show(kind)}, "
                          f"data {show(data, 80)})")
    return [_series_window(metric, _labels(metric, i, series), series.get("values"), start, step, n)
            for i, series in enumerate(data["result"])]


class PrometheusSource:
    """Reads the DCGM activity metrics' windows from Prometheus."""

    def __init__(self, url: str, *, step: float = 60.0, timeout: float = 30.0,
                 max_bytes: int = MAX_ANSWER_BYTES):
        self.url = url.rstrip("/")
        self.step = step
        self.timeout = timeout
        self.max_bytes = max_bytes
        self._session = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _read(self, r: Any) -> bytes:
        body = bytearray()
        async for chunk in r.content.iter_chunked(1 << 16):
            body += chunk
            if len(body) > self.max_bytes:
                raise SourceError(f"Prometheus at {self.url} answered more than {self.max_bytes >> 20} MiB: "
                                  "raise --metrics-step or shorten the idle timeout")
        return bytes(body)

    async def _get(self, params: dict[str, str], path: str = "query_range") -> Any:
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession()
        try:
            async with self._session.get(f"{self.url}/api/v1/{path}", params=params,
                                         timeout=aiohttp.ClientTimeout(total=self.timeout)) as r:
                status, body = r.status, await self._read(r)
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            raise SourceError(f"cannot query Prometheus at {self.url}: {e or type(e).__name__}") from None
        if status != 200:  # Prometheus answers errors (400, 422, 503) with a JSON body saying why
            raise SourceError(f"Prometheus at {self.url} answered HTTP {status}: "
                              f"{body[:200].decode('utf-8', 'replace')!r}")
        try:
            return json.loads(body)
        except (ValueError, RecursionError) as e:  # RecursionError: nesting deeper than the parser goes
            raise SourceError(f"Prometheus at {self.url} answered something that is not JSON: "
                              f"{str(e)[:100] or type(e).__name__}") from None

    async def instant(self, query: str) -> Any:
        """The answer of one instant query (``GET /api/v1/query``), parsed; ``SourceError`` as ``windows``."""
        return await self._get({"query": query}, "query")

    async def windows(self, window: float, now: float) -> list[SeriesWindow]:
        """Every activity series over the ``window`` seconds before ``now`` (epoch seconds)."""
        step, n = plan_steps(window, self.step)
        start = now - n * step
        out: list[SeriesWindow] = []
        for metric in ACTIVITY_METRICS:
            params = {"query": f"max_over_time({metric}[{_promql_duration(step)}])",
                      "start": f"{start:.3f}", "end": f"{now:.3f}", "step": f"{step:.3f}"}
            out += windows_from_matrix(metric, await self._get(params), start, step, n)
        return out
