"""Cron schedules of disruption budget windows (bigfleet/schedule.py), as a platform team reads
them: worked examples of when a window is open, the macros, names and the day-of-month OR
day-of-week rule, every malformed field named, and `active`/`last_start` checked against a
minute-by-minute scan of random expressions whose matching sets are worked out here, not by
the parser."""

import ast
import pathlib
import random
from calendar import timegm
from datetime import UTC, datetime

import pytest

import bigfleet.schedule
from bigfleet.schedule import Cron

MINUTE = 60
HOUR = 3600
DAY = 86400


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> int:
    """Unix seconds of a UTC wall-clock time."""
    return timegm((year, month, day, hour, minute, second))


# 2026-12-06 is a Sunday, so 2026-12-07 is a Monday and 2026-12-12 a Saturday.
SUN, MON, TUE, SAT = 6, 7, 8, 12


def test_business_hours_on_weekdays():
    cron = Cron.parse("0 9 * * mon-fri")
    eight_hours = 8 * HOUR
    assert cron.active(utc(2026, 12, TUE, 10), eight_hours)
    assert cron.active(utc(2026, 12, MON, 9), eight_hours)  # (open at its start)
    assert cron.active(utc(2026, 12, TUE, 16, 59, 59), eight_hours)
    assert not cron.active(utc(2026, 12, TUE, 17), eight_hours)  # (closed at its end)
    assert not cron.active(utc(2026, 12, TUE, 17, 30), eight_hours)
    assert not cron.active(utc(2026, 12, TUE, 8, 59), eight_hours)
    assert not cron.active(utc(2026, 12, SAT, 10), eight_hours)
    assert not cron.active(utc(2026, 12, SUN, 10), eight_hours)
    assert cron.last_start(utc(2026, 12, TUE, 16, 59), eight_hours) == utc(2026, 12, TUE, 9)
    assert cron.last_start(utc(2026, 12, SAT, 10), eight_hours) is None
    # A window as long as the weekend reaches back to Friday's start.
    assert cron.last_start(utc(2026, 12, SUN, 10), 3 * DAY) == utc(2026, 12, 4, 9)


def test_a_window_across_midnight():
    cron = Cron.parse("0 22 * * *")
    four_hours = 4 * HOUR
    assert cron.active(utc(2026, 12, 9, 1), four_hours)
    assert cron.active(utc(2026, 12, 9, 1, 59, 59), four_hours)
    assert not cron.active(utc(2026, 12, 9, 2), four_hours)
    assert not cron.active(utc(2026, 12, 9, 21, 59), four_hours)
    assert cron.last_start(utc(2026, 12, 9, 1), four_hours) == utc(2026, 12, 8, 22)
    # ... and across the end of a month and of a year.
    assert cron.last_start(utc(2027, 1, 1, 0, 30), four_hours) == utc(2026, 12, 31, 22)
    assert cron.last_start(utc(2026, 3, 1, 1), four_hours) == utc(2026, 2, 28, 22)


def test_every_fifteen_minutes():
    cron = Cron.parse("*/15 * * * *")
    assert [m for m in range(60) if cron.matches(utc(2026, 5, 4, 13, m))] == [0, 15, 30, 45]
    ten_minutes = 10 * MINUTE
    assert cron.active(utc(2026, 5, 4, 13, 39, 59), ten_minutes)
    assert not cron.active(utc(2026, 5, 4, 13, 40), ten_minutes)
    assert not cron.active(utc(2026, 5, 4, 13, 44, 59), ten_minutes)
    assert cron.active(utc(2026, 5, 4, 13, 45), ten_minutes)
    assert cron.last_start(utc(2026, 5, 4, 13, 44), HOUR) == utc(2026, 5, 4, 13, 30)
    assert cron.last_start(utc(2026, 5, 4, 0, 5), HOUR) == utc(2026, 5, 4, 0, 0)
    assert cron.last_start(utc(2026, 5, 4, 0, 0, 30), 15 * MINUTE) == utc(2026, 5, 4, 0, 0)


def test_steps_over_ranges_and_from_a_start():
    assert [m for m in range(60) if Cron.parse("10-30/10 * * * *").matches(m * MINUTE)] == [
        10,
        20,
        30,
    ]
    assert [m for m in range(60) if Cron.parse("50/5 * * * *").matches(m * MINUTE)] == [50, 55]
    assert [m for m in range(60) if Cron.parse("*/25 * * * *").matches(m * MINUTE)] == [0, 25, 50]
    assert [h for h in range(24) if Cron.parse("0 */6 * * *").matches(h * HOUR)] == [0, 6, 12, 18]
    assert Cron.parse("0 0 1 jan-dec/3 *").months == {1, 4, 7, 10}
    assert Cron.parse("0 0 1 */1 *").months == set(range(1, 13))


def test_daily_and_the_other_macros():
    daily = Cron.parse("@daily")
    assert daily == Cron.parse("0 0 * * *") == Cron.parse("@midnight") == Cron.parse("@DAILY")
    assert daily.active(utc(2026, 7, 14, 23, 59, 59), DAY)
    assert daily.last_start(utc(2026, 7, 14, 23, 59), DAY) == utc(2026, 7, 14)
    assert not daily.active(utc(2026, 7, 14, 6), 6 * HOUR)
    assert Cron.parse("@yearly") == Cron.parse("@annually") == Cron.parse("0 0 1 1 *")
    assert Cron.parse("@monthly") == Cron.parse("0 0 1 * *")
    assert Cron.parse("@weekly") == Cron.parse("0 0 * * 0")
    assert Cron.parse("@weekly").last_start(utc(2026, 12, SAT, 23), 7 * DAY) == utc(2026, 12, 6)
    assert Cron.parse("@hourly") == Cron.parse("0 * * * *")
    assert Cron.parse("  @hourly ") == Cron.parse("@hourly")


def test_day_of_month_or_day_of_week_when_both_are_restricted():
    either = Cron.parse("0 0 1 * mon")
    assert either.matches(utc(2026, 12, 1))  # the 1st, a Tuesday
    assert either.matches(utc(2026, 12, MON))
    assert not either.matches(utc(2026, 12, TUE))
    # Only one of them restricted: both must match (the other is every day).
    assert [d for d in range(1, 32) if Cron.parse("0 0 1 * *").matches(utc(2026, 12, d))] == [1]
    mondays = Cron.parse("0 0 * * mon")
    assert [d for d in range(1, 32) if mondays.matches(utc(2026, 12, d))] == [7, 14, 21, 28]
    # The month still has to match on either path.
    january = Cron.parse("0 0 1 jan mon")
    assert january.matches(utc(2026, 1, 1))  # a Thursday, the 1st
    assert january.matches(utc(2026, 1, 5))  # a Monday
    assert not january.matches(utc(2026, 2, 2))  # a Monday in February
    assert not january.matches(utc(2026, 3, 1))
    # A field that begins with `*` counts as unrestricted, as in Vixie cron and cronie (robfig
    # cron, which Karpenter uses, instead treats `*/2` as restricted).
    odd_days = Cron.parse("0 0 */2 * mon")
    assert not odd_days.matches(utc(2026, 12, 14))  # a Monday, but an even day
    assert not odd_days.matches(utc(2026, 12, 3))  # odd, but a Thursday
    assert odd_days.matches(utc(2026, 12, 21))  # odd and a Monday


@pytest.mark.parametrize("sunday", ["0", "7", "sun", "SUN", "Sun", "6-7", "sat-7", "5-7", "0,3"])
def test_sunday_is_0_and_7_and_sun(sunday: str):
    cron = Cron.parse(f"0 12 * * {sunday}")
    assert cron.matches(utc(2026, 12, SUN, 12))
    assert not cron.matches(utc(2026, 12, MON, 12))
    assert 7 not in cron.weekdays


def test_month_and_weekday_names_in_lists_and_ranges():
    summer = Cron.parse("0 0 1 JUN-aug *")
    assert summer == Cron.parse("0 0 1 6-8 *")
    assert [m for m in range(1, 13) if summer.matches(utc(2026, m, 1))] == [6, 7, 8]
    mwf = Cron.parse("30 8 * * mon,Wed,FRI")
    assert [d for d in range(MON, MON + 7) if mwf.matches(utc(2026, 12, d, 8, 30))] == [7, 9, 11]
    assert Cron.parse("0 0 * jan,jul *").months == {1, 7}


def test_boundaries():
    cron = Cron.parse("15 3 * * *")
    start = utc(2026, 4, 10, 3, 15)
    assert cron.active(start, HOUR)  # exactly at its start
    assert cron.active(start + HOUR - 0.001, HOUR)
    assert not cron.active(start + HOUR, HOUR)  # exactly at its end
    assert not cron.active(start - 0.001, HOUR)
    assert cron.active(start + 59, MINUTE)  # a minute-long window is the minute itself
    assert not cron.active(start + 60, MINUTE)
    assert cron.active(start + 0.5, 1)  # (shorter than a minute: from the minute's start)
    assert not cron.active(start + 1, 1)
    assert not cron.active(start, 0)
    assert not cron.active(start, -HOUR)
    assert cron.last_start(start, 0) is None


def test_last_start_is_the_latest_start_within_the_window():
    cron = Cron.parse("0 6,18 * * *")
    now = utc(2026, 9, 1, 20)
    assert cron.last_start(now, 3 * HOUR) == utc(2026, 9, 1, 18)
    assert cron.last_start(now, 3 * DAY) == utc(2026, 9, 1, 18)  # (the latest, not the first)
    assert cron.last_start(utc(2026, 9, 1, 17, 59), 12 * HOUR) == utc(2026, 9, 1, 6)
    assert cron.last_start(utc(2026, 9, 1, 18), 12 * HOUR) == utc(2026, 9, 1, 18)
    assert cron.last_start(utc(2026, 9, 1, 17, 59), 11 * HOUR) is None
    # The start is exclusive at the far end: now - t must be under the window.
    assert cron.last_start(utc(2026, 9, 1, 12), 6 * HOUR) is None
    assert cron.last_start(utc(2026, 9, 1, 12), 6 * HOUR + 1) == utc(2026, 9, 1, 6)


def test_rare_schedules_and_the_366_day_cap():
    leap_day = Cron.parse("0 0 29 2 *")
    assert leap_day.last_start(utc(2028, 3, 1), 2 * DAY) == utc(2028, 2, 29)
    assert leap_day.last_start(utc(2028, 2, 28, 23, 59), 366 * DAY) is None  # (2027 has none)
    # Any longer window is read as 366 days.
    fired = utc(2024, 2, 29)
    ten_years = 10 * 366 * DAY
    assert leap_day.last_start(fired + 366 * DAY - MINUTE, ten_years) == fired
    assert leap_day.last_start(fired + 366 * DAY, ten_years) is None
    assert leap_day.last_start(utc(2027, 3, 1), ten_years) is None
    new_year = Cron.parse("@yearly")
    assert new_year.last_start(utc(2027, 12, 31, 23, 59), 400 * DAY) == utc(2027, 1, 1)
    never = Cron.parse("0 0 31 2 *")  # (parses, as in cron, and never fires)
    assert not never.active(utc(2026, 6, 1), 400 * DAY)


def test_the_module_reads_no_clock_and_imports_only_the_standard_library():
    """It runs inside the shard workflow's sandbox: deterministic, no I/O, the caller's time."""
    tree = ast.parse(pathlib.Path(bigfleet.schedule.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported <= {"__future__", "dataclasses", "datetime"}
    called = {
        node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }
    assert not called & {"now", "utcnow", "today", "time", "monotonic", "perf_counter"}


@pytest.mark.parametrize(
    ("expr", "field"),
    [
        ("60 * * * *", "minute"),
        ("-1 * * * *", "minute"),
        ("*/0 * * * *", "minute"),
        ("5/0 * * * *", "minute"),
        ("30-10 * * * *", "minute"),
        ("1-2-3 * * * *", "minute"),
        ("*/ * * * *", "minute"),
        ("/5 * * * *", "minute"),
        ("x * * * *", "minute"),
        ("² * * * *", "minute"),
        ("0 25 * * *", "hour"),
        ("0 5-2 * * *", "hour"),
        ("0 */x * * *", "hour"),
        ("0 1.5 * * *", "hour"),
        ("0 ٣ * * *", "hour"),
        ("0 0 0 * *", "day-of-month"),
        ("0 0 32 * *", "day-of-month"),
        ("0 0 1,,2 * *", "day-of-month"),
        ("0 0 1, * *", "day-of-month"),
        ("0 0 mon * *", "day-of-month"),
        ("0 0 * 0 *", "month"),
        ("0 0 * 13 *", "month"),
        ("0 0 * dec-jan *", "month"),
        ("0 0 * january *", "month"),
        ("0 0 * sun *", "month"),
        ("0 0 * * 8", "day-of-week"),
        ("0 0 * * funday", "day-of-week"),
        ("0 0 * * fri-mon", "day-of-week"),
        ("0 0 * * mon/0", "day-of-week"),
        ("0 0 * * jan", "day-of-week"),
        ("0 0 * * ?", "day-of-week"),
    ],
)
def test_a_malformed_field_is_named(expr: str, field: str):
    with pytest.raises(ValueError, match=f"^schedule: {field}: ") as raised:
        Cron.parse(expr)
    assert "schedule: " + field in str(raised.value)


@pytest.mark.parametrize(
    ("expr", "says"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("0 0 * *", "4 fields; minute hour day-of-month month day-of-week"),
        ("0 0 * * * *", "6 fields; minute hour day-of-month month day-of-week"),
        ("0", "1 fields"),
        ("@fortnightly", "macro"),
        ("@daily 5", "macro"),
        ("0 " * 101, "longer than 200"),
    ],
)
def test_a_malformed_expression_says_why(expr: str, says: str):
    with pytest.raises(ValueError, match="^schedule: ") as raised:
        Cron.parse(expr)
    assert says in str(raised.value)


def test_an_expression_of_200_characters_is_long_enough():
    expr = "0 0 * * " + ",".join(["1"] * 96)
    assert len(expr) == 199
    assert Cron.parse(expr + " ").weekdays == {1}


# The brute-force check: random expressions built here with the values each field should
# allow, then `active`/`last_start` against a scan of every minute in the window.
NAMES = {
    3: ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"],
    4: ["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
}
RANGES = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]


def _random_field(rng: random.Random, index: int) -> tuple[str, set[int]]:
    lo, hi = RANGES[index]
    names = NAMES.get(index, [])
    offset = 1 if index == 3 else 0  # (jan is month 1; sun is weekday 0)

    def say(v: int) -> str:
        if names and rng.random() < 0.3 and v - offset < len(names):
            word = names[v - offset]
            return rng.choice([word, word.upper(), word.capitalize()])
        return str(v)

    if rng.random() < 0.3:
        return "*", set(range(lo, hi + 1))
    texts, values = [], set()
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        a, b = sorted(rng.randint(lo, hi) for _ in range(2))
        step = rng.choice([1, 2, 3, 5, 7, 15, 40])
        kind = rng.choice(["one", "range", "every", "range/step", "from/step"])
        if kind == "one":
            texts.append(say(a))
            values.add(a)
        elif kind == "range":
            texts.append(f"{say(a)}-{say(b)}")
            values.update(range(a, b + 1))
        elif kind == "every" and not texts:  # (`*` leads the field or stays out of it)
            texts.append(f"*/{step}")
            values.update(range(lo, hi + 1, step))
        elif kind == "range/step":
            texts.append(f"{say(a)}-{say(b)}/{step}")
            values.update(range(a, b + 1, step))
        else:
            texts.append(f"{say(a)}/{step}")
            values.update(range(a, hi + 1, step))
    return ",".join(texts), values


def _random_cron(rng: random.Random):
    fields = [_random_field(rng, i) for i in range(5)]
    expr = " ".join(text for text, _ in fields)
    minutes, hours, days, months, weekdays = (values for _, values in fields)
    weekdays = {d % 7 for d in weekdays}
    either = not fields[2][0].startswith("*") and not fields[4][0].startswith("*")

    def fires(t: int) -> bool:
        at = datetime.fromtimestamp(t, UTC)
        by_date = at.day in days
        by_weekday = at.isoweekday() % 7 in weekdays
        return (
            at.minute in minutes
            and at.hour in hours
            and at.month in months
            and ((by_date or by_weekday) if either else (by_date and by_weekday))
        )

    return expr, fires


def _fired(fires, now: float, duration: float) -> list[int]:
    """Every minute start t with t <= now < t + duration, one by one."""
    first = int((now - duration) // MINUTE) * MINUTE
    return [
        t
        for t in range(first, int(now // MINUTE) * MINUTE + 1, MINUTE)
        if t <= now < t + duration and fires(t)
    ]


def test_active_agrees_with_a_minute_by_minute_scan():
    rng = random.Random(20261206)
    start, end = utc(2026, 1, 1), utc(2029, 1, 1)  # (a leap year among them)
    durations = [60, 90, 15 * MINUTE, HOUR, 4 * HOUR, 8 * HOUR, DAY, 2 * DAY]
    checked = opened = 0
    for _ in range(300):
        expr, fires = _random_cron(rng)
        cron = Cron.parse(expr)
        now = rng.randrange(start, end, MINUTE) + rng.choice([0, 0, 0, 0.5, 30, 59.999])
        duration = rng.choice([*durations, rng.uniform(1, 2 * DAY)])
        moments = [now]
        for probe in range(5):  # (some minutes, to check `matches` as well)
            t = int(now // MINUTE) * MINUTE - probe * 7 * MINUTE
            assert cron.matches(t) == fires(t), (expr, t)
        fired = _fired(fires, now, duration)
        if fired:  # the window's first and last instants and the one just past it
            moments += [max(fired), max(fired) + duration - 0.001, max(fired) + duration]
        for moment in moments:
            fired = _fired(fires, moment, duration)
            assert cron.active(moment, duration) == bool(fired), (expr, moment, duration)
            assert cron.last_start(moment, duration) == (max(fired) if fired else None), (
                expr,
                moment,
                duration,
            )
            checked += 1
            opened += bool(fired)
    assert checked > 300 and 0.2 < opened / checked < 0.8  # (both open and closed, often)
