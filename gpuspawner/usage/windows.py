"""Budget windows: a rolling ``<N>d`` / ``<N>h`` or the calendar ``month`` in UTC."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

_ROLLING = re.compile(r"^([1-9][0-9]{0,4})([dh])$")
MONTH = "month"


@dataclass(frozen=True)
class Window:
    """One budget window; ``text`` is what the admin wrote (``"30d"``, ``"12h"``, ``"month"``)."""

    text: str
    length: timedelta | None  # None: the calendar month

    @classmethod
    def parse(cls, value: object) -> "Window":
        if not isinstance(value, str):
            raise ValueError(f'window must be "<N>d" (days), "<N>h" (hours) or "month", e.g. "30d", not {value!r}')
        text = value.strip()
        if text == MONTH:
            return cls(MONTH, None)
        m = _ROLLING.match(text)
        if not m:
            raise ValueError(
                f'window must be "<N>d" (days), "<N>h" (hours) or "month" (the calendar month in UTC), '
                f'e.g. "30d", not {value!r}'
            )
        n = int(m.group(1))
        return cls(text, timedelta(days=n) if m.group(2) == "d" else timedelta(hours=n))

    @property
    def rolling(self) -> bool:
        return self.length is not None

    def start(self, now: datetime) -> datetime:
        """Where the window that ends at ``now`` begins."""
        if self.length is not None:
            return now - self.length
        now = now.astimezone(timezone.utc)
        return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)

    def next_reset(self, now: datetime) -> datetime | None:
        """The start of the next calendar month (None for a rolling window, which never resets)."""
        if self.length is not None:
            return None
        first = self.start(now)
        return first.replace(year=first.year + 1, month=1) if first.month == 12 else first.replace(month=first.month + 1)

    def describe(self) -> str:
        """The window in a user's words: "in the last 30 days", "this month (UTC)"."""
        if self.length is None:
            return "this month (UTC)"
        n, unit = int(self.text[:-1]), self.text[-1]
        word = "day" if unit == "d" else "hour"
        return f"in the last {word}" if n == 1 else f"in the last {n} {word}s"
