"""GPU activity from a Prometheus server's HTTP API (``gpuspawner cull --prometheus-url``).

For each activity metric and window, one range query
(``GET /api/v1/query_range``, https://prometheus.io/docs/prometheus/latest/querying/api/)::

    max_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE[<step>])   start=now-n*step  end=now  step=<step>

whose point ``k`` is the highest sample in ``(start+(k-1)*step, start+k*step]``: exactly the
per-step maxima ``activity.window_from_points`` judges (the window is covered when every point,
the first one too, exists).  Series keep whatever labels the scrape gave them, ``exported_pod``
included.  Any failure (connection, HTTP status, ``"status": "error"``, a body that is not the
API's) is a ``SourceError``: the culler then keeps every GPU server and says why.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from gpuspawner.cull.activity import ACTIVITY_METRICS, SeriesWindow, SourceError, plan_steps, window_from_points

__all__ = ["PrometheusSource", "windows_from_matrix"]


def _promql_duration(seconds: float) -> str:
    return f"{max(int(round(seconds * 1000)), 1)}ms"


def windows_from_matrix(metric: str, doc: Any, start: float, step: float, n: int) -> list[SeriesWindow]:
    """The ``SeriesWindow`` of each series in a ``query_range`` answer.  Pure."""
    if not isinstance(doc, Mapping) or doc.get("status") != "success":
        error = doc.get("error") if isinstance(doc, Mapping) else None
        raise SourceError(f"Prometheus answered an error: {error or doc!r}"[:300])
    data = doc.get("data") or {}
    if data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
        raise SourceError(f"Prometheus answered no matrix for {metric} (resultType {data.get('resultType')!r})")
    out = []
    for series in data["result"]:
        labels = {str(k): str(v) for k, v in (series.get("metric") or {}).items() if k != "__name__"}
        points: list[float | None] = [None] * (n + 1)
        for t, v in series.get("values") or []:
            k = round((float(t) - start) / step)
            if 0 <= k <= n:
                try:
                    points[k] = float(v)
                except ValueError:
                    continue
        out.append(window_from_points(metric, labels, points, start, step))
    return out


class PrometheusSource:
    """Reads the DCGM activity metrics' windows from Prometheus."""

    def __init__(self, url: str, *, step: float = 60.0, timeout: float = 30.0):
        self.url = url.rstrip("/")
        self.step = step
        self.timeout = timeout
        self._session = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _get(self, params: dict[str, str]) -> Any:
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession()
        try:
            async with self._session.get(f"{self.url}/api/v1/query_range", params=params,
                                         timeout=aiohttp.ClientTimeout(total=self.timeout)) as r:
                if r.status >= 500 or r.status in (401, 403, 404):
                    raise SourceError(f"Prometheus at {self.url} answered HTTP {r.status}: {(await r.text())[:200]}")
                return await r.json(content_type=None)
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as e:
            raise SourceError(f"cannot query Prometheus at {self.url}: {e or type(e).__name__}") from None

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
