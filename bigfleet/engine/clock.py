"""The phase clock: milliseconds per part of a decision cycle, for `bigfleet bench engine
--phases`."""

from __future__ import annotations

import time
from collections import defaultdict


class PhaseClock:
    """Milliseconds spent per part of a decision cycle, summed until `take`: what
    `bigfleet bench engine --phases` prints. Off unless `on` is set (a workflow never sets it:
    the clock is read only when on), so an engine pays one attribute test per part."""

    def __init__(self) -> None:
        self.on = False
        self.spent: dict[str, float] = defaultdict(float)
        self._last = 0.0

    def start(self) -> None:
        if self.on:
            self._last = time.perf_counter()

    def lap(self, part: str) -> None:
        """Counts the time since `start` or the last lap toward `part`."""
        if self.on:
            now = time.perf_counter()
            self.spent[part] += (now - self._last) * 1000
            self._last = now

    def take(self) -> dict[str, float]:
        """The times counted so far, per part, and a fresh start."""
        spent, self.spent = dict(self.spent), defaultdict(float)
        return spent
