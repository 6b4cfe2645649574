"""Servers to stop because their user's GPU-hour budget is spent (``c.GPUSpawner.gpu_hour_stop_when_spent``).
Design notes: docs/culling.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

from gpuspawner.cull.policy import Action, Decision
from gpuspawner.cull.servers import Server

BUDGET = "budget"  # the reason label of a server stopped for its spent GPU-hour budget


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def spent(server: Server, usage: Mapping[str, Any] | None, now: datetime) -> Decision | None:
    """A decision to stop ``server`` when its user's answer says its budget ran out: nothing
    ``remaining`` (the hub's own reckoning, whatever the two clocks say), or ``stops_at`` passed
    by ``now``. A server without ``stops_at`` (stopping is off) is never stopped here."""
    if usage is None or server.gpus <= 0 or server.pending or not server.ready:
        return None
    remaining = usage.get("remaining")
    spent_now = isinstance(remaining, (int, float)) and not isinstance(remaining, bool) and remaining <= 0
    for entry in usage.get("servers") or ():
        if not isinstance(entry, Mapping) or entry.get("name", "") != server.name:
            continue
        stops_at = _time(entry.get("stops_at"))
        if stops_at is not None and (spent_now or stops_at <= now):
            return Decision(server, Action.CULL, BUDGET,
                            f"GPU-hour budget spent: {usage.get('gpu_hours')} of {usage.get('budget')} GPU-hours "
                            f"(window {usage.get('window')}); the hub stops servers whose budget is spent "
                            "(gpu_hour_stop_when_spent)")
    return None


def budget_users(servers: Iterable[Server]) -> list[str]:
    """The users whose GPU servers may have to stop for their budget (ready GPU servers), sorted."""
    return sorted({s.user for s in servers if s.gpus > 0 and s.ready and not s.pending})
