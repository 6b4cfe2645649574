"""The time the GPU-hour books are kept in: UTC now, behind one seam that tests can move."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone


def _system_now() -> datetime:
    return datetime.now(timezone.utc)


_source: Callable[[], datetime] = _system_now


def now() -> datetime:
    """The current time, timezone-aware UTC."""
    value = _source()
    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)


def set_source(source: Callable[[], datetime] | None) -> None:
    """Read the time from ``source`` (a callable returning a datetime); None: the system clock."""
    global _source
    _source = source if source is not None else _system_now


def utc(value: datetime) -> datetime:
    """``value`` as aware UTC (a naive value is taken to be UTC, as databases hand them back)."""
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)
