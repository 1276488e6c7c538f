"""Seconds as a person reads them, for the printed reports (the JSON keeps seconds)."""

from __future__ import annotations

MINUTE, HOUR, DAY = 60, 3600, 86400


def duration(seconds: float | None) -> str:
    """Two units at most, rounded to the smaller: "4.5 s" (one decimal below 10 s), "42 s",
    "12 min 5 s", "12 min", "10 h 35 min", "2 d 3 h"; "-" for None. A value that rounds up
    to the next unit is written in it (3 599.7 s is "1 h", not "60 min")."""
    if seconds is None:
        return "-"
    if seconds < 0:
        return "-" + duration(-seconds)
    if round(seconds, 1) < 10:
        return f"{round(seconds, 1):g} s"
    s = _whole(seconds)
    if s < MINUTE:
        return f"{s} s"
    if s < HOUR:
        return _two(*divmod(s, MINUTE), "min", "s")
    if (m := _whole(seconds / MINUTE)) < DAY // MINUTE:
        return _two(*divmod(m, 60), "h", "min")
    return _two(*divmod(_whole(seconds / HOUR), 24), "d", "h")


def _whole(v: float) -> int:
    return int(v + 0.5)  # half up, not to even: 90.5 s is "1 min 31 s"


def _two(big: int, small: int, big_unit: str, small_unit: str) -> str:
    return f"{big} {big_unit} {small} {small_unit}" if small else f"{big} {big_unit}"
