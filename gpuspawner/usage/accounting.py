"""GPU-hours from holdings, the verdict on a launch, and when spent GPU-hours come back."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from gpuspawner.usage.budgets import BudgetRule
from gpuspawner.usage.weights import hourly_rate
from gpuspawner.usage.windows import Window

HOUR = 3600.0


@dataclass(frozen=True)
class Holding:
    """One GPU server's holding: ``gpus`` units of ``resource`` (each ``share`` of a GPU, weighted
    ``weight``) from ``start`` until ``stop`` (None: still held). Times are aware UTC."""

    user: str
    server: str
    pool: str
    product: str | None
    resource: str
    gpus: int
    share: float
    weight: float
    start: datetime
    stop: datetime | None = None
    id: int | None = None

    @property
    def rate(self) -> float:
        """Weighted GPU-hours per hour."""
        return hourly_rate(self.gpus, self.share, self.weight)

    def end(self, now: datetime) -> datetime:
        return self.stop if self.stop is not None else max(now, self.start)

    def hours(self, since: datetime | None, until: datetime) -> float:
        """Weighted GPU-hours between ``since`` (None: from the start) and ``until``."""
        lo = self.start if since is None else max(self.start, since)
        hi = min(self.end(until), until)
        if hi <= lo:
            return 0.0
        return self.rate * (hi - lo).total_seconds() / HOUR


def used(holdings: Iterable[Holding], since: datetime | None, now: datetime) -> float:
    """Weighted GPU-hours of ``holdings`` between ``since`` and ``now`` (open ones count until now)."""
    return sum(h.hours(since, now) for h in holdings)


def _rolling_return(holdings: list[Holding], length: timedelta, now: datetime, target: float) -> datetime | None:
    """The first time t >= now at which the usage in [t - length, t] is at most ``target``, with the
    open holdings taken as stopped now (a running server is a separate matter). Usage only falls
    as the window moves on, piecewise linearly: between the holdings' starts and ends."""
    if target < 0:
        return None
    clipped = [(h.start, h.end(now), h.rate) for h in holdings if h.rate > 0 and h.end(now) > h.start]

    def usage(x: datetime) -> float:  # x: the window's start
        return sum(r * max(0.0, (e - max(s, x)).total_seconds()) for s, e, r in clipped) / HOUR

    x0 = now - length
    if usage(x0) <= target:
        return now
    points = sorted({p for s, e, _ in clipped for p in (s, e) if p > x0})
    prev = x0
    for point in points:
        if usage(point) <= target + 1e-12:
            # linear between prev and point: the slope is the rate of the holdings running there
            mid = prev + (point - prev) / 2
            slope = sum(r for s, e, r in clipped if s <= mid < e) / HOUR
            over = usage(prev) - target
            x = point if slope <= 0 else prev + timedelta(seconds=over / slope)
            return min(x, point) + length
        prev = point
    return None


def ceil_minute(t: datetime) -> datetime:
    """``t`` rounded up to the next whole minute (a retry time a user can read and act on)."""
    floor = t.replace(second=0, microsecond=0)
    return floor if floor == t else floor + timedelta(minutes=1)


@dataclass(frozen=True)
class Verdict:
    """A user's budget now, and whether a launch that needs ``need`` GPU-hours may start."""

    allowed: bool
    used: float
    budget: float | None
    window: Window | None
    need: float
    retry_at: datetime | None = None
    back: float | None = None  # GPU-hours that come back by retry_at

    @property
    def remaining(self) -> float | None:
        return None if self.budget is None else max(0.0, self.budget - self.used)

    def message(self) -> str:
        """What a refused user reads, e.g. "You have used 19.6 of your 20 GPU-hours in the last 30 days;
        1.2 GPU-hours come back on 2 December at 14:00 UTC"."""
        if self.budget is None or self.window is None:
            return f"You have used {fmt_hours(self.used)} GPU-hours {self.window.describe() if self.window else ''}.".replace(" .", ".")
        text = (f"You have used {fmt_hours(self.used)} of your {fmt_hours(self.budget)} GPU-hours "
                f"{self.window.describe()}")
        if self.retry_at is not None:
            back = fmt_hours(self.back) if self.back is not None else "enough"
            verb = "comes" if back == "1" else "come"
            text += f"; {back} GPU-hour{'' if back == '1' else 's'} {verb} back on {fmt_time(self.retry_at)}"
        elif self.budget < self.need or self.budget == 0:
            text += ("; this budget is too small for this server: choose fewer GPUs or a cheaper pool, "
                     "or ask an administrator for a larger budget")
        else:
            text += "; ask an administrator for a larger budget"
        return text + "."


#: the window usage is shown over for a user no budget applies to
DEFAULT_WINDOW = Window.parse("30d")


def verdict(holdings: Iterable[Holding], rule: BudgetRule | None, now: datetime, need: float,
            shown: Window = DEFAULT_WINDOW) -> Verdict:
    """Whether a launch needing ``need`` weighted GPU-hours fits ``rule`` (None: no budget, always
    fits; usage is then counted over ``shown``). It fits when something is left and at least
    ``need``; else ``retry_at`` says when enough comes back (None: it never will, the budget is
    smaller than ``need``)."""
    holdings = list(holdings)
    if rule is None:
        return Verdict(True, used(holdings, shown.start(now), now), None, shown, need)
    window = rule.window
    since = window.start(now)
    spent = used(holdings, since, now)
    remaining = rule.gpu_hours - spent
    ok = remaining > 0 and remaining >= need
    if ok:
        return Verdict(True, spent, rule.gpu_hours, window, need)
    target = rule.gpu_hours - need
    if need == 0:
        target = rule.gpu_hours - 1e-9  # something must be left
    retry: datetime | None
    if window.length is not None:
        inside = [h for h in holdings if h.end(now) > since]
        retry = _rolling_return(inside, window.length, now, target)
        if retry is not None:
            retry = ceil_minute(retry)
    else:
        retry = window.next_reset(now) if rule.gpu_hours > 0 and target >= 0 else None
    back = None
    if retry is not None:
        if window.length is not None:
            later = [h for h in holdings if h.end(now) > since]
            frozen = [Holding(**{**h.__dict__, "stop": h.end(now)}) for h in later]
            back = max(0.0, spent - used(frozen, retry - window.length, retry))
        else:
            back = spent
    return Verdict(False, spent, rule.gpu_hours, window, need, retry, back)


def runs_out_at(used_now: float, budget: float, running_rate: float, now: datetime) -> datetime | None:
    """When servers using ``running_rate`` GPU-hours an hour spend what is left (None: never; ignores
    what the window gives back meanwhile, so it is the earliest it can be)."""
    if running_rate <= 0:
        return None
    left = max(0.0, budget - used_now)
    return now + timedelta(hours=left / running_rate)


def fmt_hours(value: float | None) -> str:
    """GPU-hours as a user reads them: 19.6, 20, 0.01 (two decimals at most, no trailing zeros)."""
    if value is None or not math.isfinite(value):
        return "?"
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def fmt_time(t: datetime) -> str:
    """"2 December at 14:00 UTC"."""
    t = t.astimezone(timezone.utc)
    return f"{t.day} {t.strftime('%B')} at {t.strftime('%H:%M')} UTC"
