"""GPU-hours of holdings in a window, the launch verdict, the retry time and its words."""

from datetime import timedelta

import pytest

from gpuspawner.usage.accounting import fmt_hours, runs_out_at, used, verdict
from tests.builders.usage import NOW, at, holding, rule


@pytest.mark.parametrize("holdings, since, expected", [
    ([holding("2026-11-27 10:00", "2026-11-27 11:00")], None, 1.0),
    ([holding("2026-11-27 10:00", "2026-11-27 11:00", gpus=2, weight=2)], None, 4.0),
    ([holding("2026-11-27 10:00", "2026-11-27 11:00", gpus=7, share=1 / 7)], None, 1.0),
    ([holding("2026-11-27 11:30")], None, 0.5),
    ([holding("2026-10-01 00:00", "2026-10-02 00:00")], at("2026-10-28 12:00"), 0.0),
    ([holding("2026-10-28 00:00", "2026-10-29 00:00")], at("2026-10-28 12:00"), 12.0),
], ids=["one-gpu-hour", "weighted", "seven-slices-one-gpu", "open-counts-until-now", "outside-window",
        "clipped-at-window-start"])
def test_used(holdings, since, expected):
    assert used(holdings, since, NOW) == pytest.approx(expected)


def test_the_example_refusal():
    # 19.6 of 20 GPU-hours used; 1.2 of them were used on 2 November from 12:48 to 14:00, so they
    # leave the 30-day window on 2 December at 14:00, and the 1.6 GPU-hours the launch needs are free
    holdings = [holding("2026-11-02 12:48", "2026-11-02 14:00"), holding("2026-11-10 00:00", "2026-11-10 18:24")]
    v = verdict(holdings, rule(gpu_hours=20, window="30d"), NOW, need=1.6)
    assert not v.allowed
    assert v.retry_at == at("2026-12-02 14:00")
    assert v.message() == ("You have used 19.6 of your 20 GPU-hours in the last 30 days; "
                           "1.2 GPU-hours come back on 2 December at 14:00 UTC.")


@pytest.mark.parametrize("holdings, budget, window, need, allowed, retry", [
    # 2 GPUs from 10:00 to 12:00 (4 GPU-hours); 1 more needed: the first half hour must leave the window
    ([holding("2026-11-27 10:00", "2026-11-27 12:00", gpus=2)], 4, "1d", 1.0, False, "2026-11-28 10:30"),
    ([holding("2026-11-27 10:00", "2026-11-27 12:00", gpus=2)], 5, "1d", 1.0, True, None),
    ([holding("2026-11-27 10:00", "2026-11-27 12:00", gpus=2)], 4, "month", 1.0, False, "2026-12-01 00:00"),
    ([holding("2026-11-27 10:00", "2026-11-27 12:00")], 2, "1d", 0.0, False, "2026-11-28 10:01"),
    ([holding("2026-11-27 10:00", "2026-11-27 11:00")], 2, "1d", 0.0, True, None),
    ([], 0.5, "1d", 1.0, False, None),
    ([], 0, "month", 0.0, False, None),
    ([holding("2026-11-27 11:00")], 1, "1d", 0.1, False, "2026-11-28 11:06"),
], ids=["rolling-partial", "enough-left", "month-resets", "minimum-0-nothing-left", "minimum-0-something-left",
        "budget-below-need-never", "zero-budget-never", "open-holding-taken-as-stopped-now"])
def test_verdict(holdings, budget, window, need, allowed, retry):
    v = verdict(holdings, rule(gpu_hours=budget, window=window), NOW, need)
    assert v.allowed is allowed
    assert v.retry_at == (at(retry) if retry else None)


def test_no_budget_always_allowed_and_counts_the_shown_window():
    v = verdict([holding("2026-11-27 10:00", "2026-11-27 11:00")], None, NOW, 100)
    assert v.allowed and v.budget is None and v.remaining is None and v.used == 1.0


def test_never_coming_back_says_what_to_do():
    v = verdict([], rule(gpu_hours=0.5, window="30d"), NOW, need=1.0)
    assert "too small for this server" in v.message()


def test_runs_out_at():
    assert runs_out_at(1.0, 2.0, 2.0, NOW) == NOW + timedelta(minutes=30)
    assert runs_out_at(1.0, 2.0, 0.0, NOW) is None


@pytest.mark.parametrize("value, text", [(19.6, "19.6"), (20.0, "20"), (0.01, "0.01"), (0.004, "0"), (1.25, "1.25")],
                         ids=["one-decimal", "whole", "small", "rounds-to-zero", "two-decimals"])
def test_hours_as_users_read_them(value, text):
    assert fmt_hours(value) == text
