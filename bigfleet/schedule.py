"""Cron schedules for disruption budget windows (bigfleet/disruption.py): standard 5 fields,
minute hour day-of-month month day-of-week, in UTC. Pure and deterministic (it runs inside the
shard workflow): the caller gives the time.

Syntax: `*`, numbers, ranges `a-b`, steps `*/n`, `a-b/n` and `a/n`, comma lists of those;
month names jan..dec and weekday names sun..sat (any case); Sunday is 0 or 7; the macros
`@yearly` (`@annually`), `@monthly`, `@weekly`, `@daily` (`@midnight`) and `@hourly`. As in
cron, when day-of-month and day-of-week are both restricted a day matching either matches.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

MAX_LENGTH = 200
MAX_WINDOW_SECONDS = 366 * 86400.0
MONTHS = {m: i for i, m in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split(), 1)}
WEEKDAYS = {d: i for i, d in enumerate("sun mon tue wed thu fri sat".split())}
MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# (name, lowest, highest, names) of each field, in order.
FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day-of-month", 1, 31, {}),
    ("month", 1, 12, MONTHS),
    ("day-of-week", 0, 7, WEEKDAYS),
)


def _value(text: str, field: str, lo: int, hi: int, names: dict[str, int]) -> int:
    word = text.lower()
    if word in names:
        return names[word]
    if not (text.isascii() and text.isdigit()):  # (not '²', which int() refuses)
        raise ValueError(f"schedule: {field}: {text!r} is not a number")
    value = int(text)
    if not lo <= value <= hi:
        raise ValueError(f"schedule: {field}: {value} is not in {lo}-{hi}")
    return value


def _field(text: str, field: str, lo: int, hi: int, names: dict[str, int]) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        base, slash, step_text = part.partition("/")
        if not base:
            raise ValueError(f"schedule: {field}: {text!r} has an empty part")
        step = 1
        if slash:
            if not (step_text.isascii() and step_text.isdigit()) or int(step_text) == 0:
                raise ValueError(f"schedule: {field}: step {step_text!r} is not a number over 0")
            step = int(step_text)
        if base == "*":
            first, last = lo, hi
        elif "-" in base:
            a, _, b = base.partition("-")
            first, last = _value(a, field, lo, hi, names), _value(b, field, lo, hi, names)
            if first > last:
                raise ValueError(f"schedule: {field}: range {base} runs backwards")
        else:
            first = _value(base, field, lo, hi, names)
            last = hi if slash else first
        values.update(range(first, last + 1, step))
    return frozenset(values)


@dataclass(frozen=True)
class Cron:
    minutes: tuple[int, ...]  # (descending, as the backward search reads them)
    hours: tuple[int, ...]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # (0 is Sunday; 7 is read as 0)
    either_day: bool  # day-of-month and day-of-week both restricted: either matches

    @classmethod
    def parse(cls, expr: str) -> Cron:
        if not isinstance(expr, str) or not expr.strip():
            raise ValueError("schedule: empty")
        if len(expr) > MAX_LENGTH:
            raise ValueError(f"schedule: longer than {MAX_LENGTH} characters")
        text = expr.strip()
        if text.startswith("@"):
            if text.lower() not in MACROS:
                raise ValueError(f"schedule: unknown macro {text[:20]!r}")
            text = MACROS[text.lower()]
        parts = text.split()
        if len(parts) != 5:
            raise ValueError(
                f"schedule: {len(parts)} fields; minute hour day-of-month month day-of-week"
            )
        sets = [_field(p, *spec) for p, spec in zip(parts, FIELDS, strict=True)]
        minutes, hours, days, months, weekdays = sets
        return cls(
            minutes=tuple(sorted(minutes, reverse=True)),
            hours=tuple(sorted(hours, reverse=True)),
            days=days,
            months=months,
            weekdays=frozenset(d % 7 for d in weekdays),
            either_day=not parts[2].startswith("*") and not parts[4].startswith("*"),
        )

    def day(self, d: date) -> bool:
        """Whether the schedule fires on day `d` at all."""
        if d.month not in self.months:
            return False
        by_date = d.day in self.days
        by_weekday = (d.weekday() + 1) % 7 in self.weekdays
        return by_date or by_weekday if self.either_day else by_date and by_weekday

    def matches(self, minute_start_unix: int) -> bool:
        """Whether the schedule fires at the minute beginning at this unix time."""
        t = datetime.fromtimestamp(minute_start_unix, UTC)
        return t.minute in self.minutes and t.hour in self.hours and self.day(t.date())

    def last_start(self, now: float, within_seconds: float) -> float | None:
        """The latest time t <= now the schedule fired with now - t < `within_seconds` (at
        most a year back), or None."""
        within = min(within_seconds, MAX_WINDOW_SECONDS)
        if not within > 0:
            return None
        at = datetime.fromtimestamp(int(now // 60) * 60, UTC)
        today = at.date()
        for back in range(int(within // 86400) + 2):
            d = today - timedelta(days=back)
            midnight = datetime(d.year, d.month, d.day, tzinfo=UTC).timestamp()
            if now - (midnight + 86400) >= within:
                return None  # (this day ended before the window: so did every earlier one)
            if not self.day(d):
                continue
            for hour in self.hours:
                if back == 0 and hour > at.hour:
                    continue
                for minute in self.minutes:
                    t = midnight + hour * 3600 + minute * 60
                    if t > now:
                        continue
                    return t if now - t < within else None
        return None

    def active(self, now: float, duration_seconds: float) -> bool:
        """Whether a window of `duration_seconds` from a time the schedule fired is open now
        (open at its start, closed at its end)."""
        return self.last_start(now, duration_seconds) is not None
