"""Cron windows of disruption budgets (bigfleet/schedule.py): worked examples a platform team
writes, every malformed field named, and a brute-force check of `active` minute by minute."""

import random
from calendar import timegm

import pytest

from bigfleet.schedule import Cron


def at(*when: int) -> int:
    """Unix seconds of a UTC (year, month, day, hour, minute)."""
    return timegm((*when, 0)) if len(when) == 5 else timegm((*when, 0, 0))


HOURS = 3600


def test_business_hours():
    cron = Cron.parse("0 9 * * mon-fri")
    assert cron.active(at(2026, 12, 8, 10, 0), 8 * HOURS)  # Tuesday 10:00
    assert cron.active(at(2026, 12, 8, 9, 0), 8 * HOURS)  # (open at its start)
    assert not cron.active(at(2026, 12, 8, 17, 0), 8 * HOURS)  # (closed at its end)
    assert not cron.active(at(2026, 12, 8, 17, 30), 8 * HOURS)
    assert not cron.active(at(2026, 12, 12, 10, 0), 8 * HOURS)  # Saturday
    assert cron.last_start(at(2026, 12, 8, 16, 59), 8 * HOURS) == at(2026, 12, 8, 9, 0)


def test_a_window_across_midnight():
    cron = Cron.parse("0 22 * * *")
    assert cron.active(at(2026, 12, 9, 1, 0), 4 * HOURS)
    assert not cron.active(at(2026, 12, 9, 2, 0), 4 * HOURS)


def test_steps_macros_and_names():
    assert Cron.parse("*/15 * * * *").last_start(at(2026, 1, 1, 10, 44), HOURS) == at(
        2026, 1, 1, 10, 30
    )
    assert Cron.parse("@daily").last_start(at(2026, 1, 5, 23, 59), 86400) == at(2026, 1, 5, 0, 0)
    assert Cron.parse("@hourly") == Cron.parse("0 * * * *")
    sundays = [Cron.parse(e) for e in ("0 0 * * 0", "0 0 * * 7", "0 0 * * SUN")]
    assert all(c.matches(at(2026, 12, 6, 0, 0)) for c in sundays)  # a Sunday
    assert Cron.parse("0 0 1 jan-mar/2 *").months == {1, 3}


def test_day_of_month_or_day_of_week_when_both_are_restricted():
    cron = Cron.parse("0 0 1 * mon")
    assert cron.matches(at(2026, 12, 1, 0, 0))  # the 1st, a Tuesday
    assert cron.matches(at(2026, 12, 7, 0, 0))  # a Monday
    assert not cron.matches(at(2026, 12, 8, 0, 0))
    only_mondays = Cron.parse("0 0 * * mon")
    assert not only_mondays.matches(at(2026, 12, 1, 0, 0))


@pytest.mark.parametrize(
    ("expr", "field"),
    [
        ("0 25 * * *", "hour"),
        ("60 * * * *", "minute"),
        ("0 0 0 * *", "day-of-month"),
        ("0 0 * 13 *", "month"),
        ("0 0 * * 8", "day-of-week"),
        ("*/0 * * * *", "minute"),
        ("0 5-2 * * *", "hour"),
        ("0 0 * * funday", "day-of-week"),
        ("0 0 * *", "fields"),
        ("", "empty"),
        ("@fortnightly", "macro"),
        ("0 0 1,,2 * *", "day-of-month"),
        ("0 " * 101, "longer"),
    ],
)
def test_a_malformed_schedule_names_its_field(expr: str, field: str):
    with pytest.raises(ValueError, match=f"schedule: .*{field}"):
        Cron.parse(expr)


def test_active_agrees_with_a_minute_by_minute_scan():
    rng = random.Random(33)
    parts = (
        ["*", "0", "*/15", "5-10", "30"],
        ["*", "9", "22", "*/6", "1-3"],
        ["*", "1", "15", "*/10"],
        ["*", "1", "6-8", "dec"],
        ["*", "mon-fri", "0", "6,0"],
    )
    start = at(2026, 1, 1, 0, 0)
    for _ in range(300):
        cron = Cron.parse(" ".join(rng.choice(p) for p in parts))
        now = start + rng.randrange(0, 366 * 86400)
        duration = rng.choice([60, 90, 3600, 5 * HOURS, 86400, 2 * 86400])
        first = (now - duration) // 60 * 60
        fired = [t for t in range(first, now + 1, 60) if t <= now and now - t < duration
                 and cron.matches(t)]  # fmt: skip
        assert cron.active(now, duration) == bool(fired)
        assert cron.last_start(now, duration) == (max(fired) if fired else None)
