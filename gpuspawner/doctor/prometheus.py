"""What doctor reads from Prometheus when culling is configured: which nodes report GPU activity.
Design notes: docs/troubleshooting.md.
"""

from __future__ import annotations

import asyncio
from typing import Any

from gpuspawner.doctor.checks.cull import ACTIVITY_SERIES_QUERY
from gpuspawner.doctor.gather import GatherError

__all__ = ["activity_series", "series_from_vector"]


def series_from_vector(url: str, doc: Any) -> tuple[dict[str, str], ...]:
    """The label sets of an instant query's ``vector`` answer.  Pure."""
    if not isinstance(doc, dict) or doc.get("status") != "success":
        error = doc.get("error") if isinstance(doc, dict) else None
        raise GatherError(f"Prometheus at {url} answered an error: {error if error else repr(doc)}"[:300])
    data = doc.get("data") or {}
    if data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
        raise GatherError(f"Prometheus at {url} answered no vector (resultType {data.get('resultType')!r})")
    return tuple({str(k): str(v) for k, v in (s.get("metric") or {}).items()}
                 for s in data["result"] if isinstance(s, dict))


async def activity_series(url: str, timeout: float) -> tuple[dict[str, str], ...]:
    """Which nodes Prometheus has GPU activity series for (one label set per ``Hostname``)."""
    import aiohttp

    base = url.rstrip("/")
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{base}/api/v1/query", params={"query": ACTIVITY_SERIES_QUERY},
                                   timeout=aiohttp.ClientTimeout(total=timeout)) as r:
                if r.status >= 500 or r.status in (401, 403, 404):
                    raise GatherError(f"Prometheus at {base} answered HTTP {r.status}; check --prometheus-url")
                doc = await r.json(content_type=None)
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as e:
        raise GatherError(f"cannot query Prometheus at {base}: {str(e) or type(e).__name__}; "
                          "check --prometheus-url") from None
    return series_from_vector(base, doc)
