"""Budget windows: rolling days and hours, the calendar month in UTC, their words."""

from datetime import timedelta

import pytest

from gpuspawner.usage.windows import Window
from tests.builders.usage import at


@pytest.mark.parametrize("text, length", [
    ("30d", timedelta(days=30)),
    ("1d", timedelta(days=1)),
    ("12h", timedelta(hours=12)),
    ("month", None),
], ids=["30-days", "1-day", "12-hours", "month"])
def test_parse(text, length):
    assert Window.parse(text).length == length


@pytest.mark.parametrize("bad", ["30", "0d", "-1d", "30 days", "1w", "", 30, None, "monthly", "d"],
                         ids=["no-unit", "zero", "negative", "words", "weeks", "empty", "number", "none", "monthly",
                              "no-count"])
def test_parse_refuses_with_what_to_write(bad):
    with pytest.raises(ValueError, match='"<N>d".*"month"'):
        Window.parse(bad)


@pytest.mark.parametrize("text, now, start", [
    ("30d", "2026-11-27 12:00", "2026-10-28 12:00"),
    ("12h", "2026-11-27 12:00", "2026-11-27 00:00"),
    ("month", "2026-11-27 12:00", "2026-11-01 00:00"),
    ("month", "2026-12-01 00:00", "2026-12-01 00:00"),
], ids=["rolling-days", "rolling-hours", "month", "month-first-instant"])
def test_start(text, now, start):
    assert Window.parse(text).start(at(now)) == at(start)


@pytest.mark.parametrize("now, reset", [
    ("2026-11-27 12:00", "2026-12-01 00:00"),
    ("2026-12-31 23:59", "2027-01-01 00:00"),
], ids=["next-month", "new-year"])
def test_month_resets_on_the_first_in_utc(now, reset):
    assert Window.parse("month").next_reset(at(now)) == at(reset)


def test_rolling_window_never_resets():
    assert Window.parse("30d").next_reset(at("2026-11-27 12:00")) is None


@pytest.mark.parametrize("text, words", [
    ("30d", "in the last 30 days"), ("1d", "in the last day"), ("12h", "in the last 12 hours"),
    ("month", "this month (UTC)"),
], ids=["days", "one-day", "hours", "month"])
def test_describe(text, words):
    assert Window.parse(text).describe() == words
