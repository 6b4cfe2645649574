"""Times as the Kubernetes API writes them, and durations as admins type them.  Pure, stdlib only."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

__all__ = ["parse_time", "parse_duration", "format_duration"]


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 timestamp as the API writes it (``metav1.Time``: ``2026-11-22T00:14:50Z``;
    ``metav1.MicroTime`` adds microseconds), None if it is missing or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?$")


def parse_duration(text: str) -> float:
    """``"300"``, ``"300s"``, ``"5m"``, ``"2h"``, ``"1h30m"`` -> seconds.

    The ValueError says what is accepted, so a command can print it as it is."""
    value = (text or "").strip() if isinstance(text, str) else ""
    m = _DURATION.match(value)
    if not value or m is None or not any(m.groups()):
        raise ValueError(f"{text!r} is not a duration: use seconds (90, 90s), minutes (5m), hours (2h) "
                         "or a combination (1h30m)")
    h, mins, s = (float(g) if g else 0.0 for g in m.groups())
    return h * 3600 + mins * 60 + s


def format_duration(seconds: float) -> str:
    """A duration in the fewest words that stay exact enough: ``45s``, ``12m``, ``3h05m``."""
    s = int(max(seconds, 0))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"
