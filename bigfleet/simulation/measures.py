"""What a capacity planner reads off a run, measured per unit of demand.

- **Time to capacity.** Every machine a need is short of is an *ask* with the time it was asked
  for: when the need grows, when a machine it held is lost (interrupted, preempted, taken by a
  higher band of its own cluster), or when the cycle finds it short for any other reason. An ask
  is answered, oldest first, by the next machine configured for the need; one still open at the
  end is reported as waiting, with its wait so far. An ask the need withdraws (its count drops)
  before it was answered is counted as withdrawn, not as a wait.
- **Served fraction.** Machine-seconds configured for a need (up to its count) over
  machine-seconds it asked for, integrated cycle by cycle.
- **Moves inside a cluster.** Machines are configured for a cluster, not a need: when a higher
  band of the cluster grows, it takes machines a lower band of the same cluster held (its pods
  are preempted by the cluster's own scheduler). A cycle in which one need of a cluster lost
  configured machines it still asked for while a higher-priority need of the same cluster gained
  some counts the smaller of the two as machines moved to the higher band.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

BANDS = ("<100000", "100000-499999", "500000-899999", ">=900000")


def band(priority: int) -> str:
    if priority >= 900_000:
        return ">=900000"
    if priority >= 500_000:
        return "500000-899999"
    if priority >= 100_000:
        return "100000-499999"
    return "<100000"


@dataclass
class Asks:
    """One need's open asks (times, oldest first) and what became of the answered ones."""

    priority: int
    open: deque[float] = field(default_factory=deque)

    def want(self, short: int, now: float, book: WaitBook) -> None:
        """The need is `short` machines: open asks at `now` up to it, or answer the oldest."""
        while len(self.open) < short:
            self.open.append(now)
        while len(self.open) > short:
            book.answered(self.priority, now - self.open.popleft())

    def withdraw(self, short: int, book: WaitBook) -> None:
        """The need asks for less: its newest open asks are withdrawn down to `short`."""
        while len(self.open) > max(0, short):
            self.open.pop()
            book.withdrawn[band(self.priority)] += 1

    def answer_one(self, now: float, book: WaitBook) -> None:
        """A machine was configured for the need: its oldest open ask is answered."""
        if self.open:
            book.answered(self.priority, now - self.open.popleft())


@dataclass
class WaitBook:
    """Answered waits per band, withdrawn asks per band, and the demand integrals."""

    waits: dict[str, list[float]] = field(default_factory=lambda: {b: [] for b in BANDS})
    withdrawn: dict[str, int] = field(default_factory=lambda: dict.fromkeys(BANDS, 0))
    asked_seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(BANDS, 0.0))
    served_seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(BANDS, 0.0))

    def add(self, other: WaitBook) -> None:
        for b in BANDS:
            self.waits[b] += other.waits[b]
            self.withdrawn[b] += other.withdrawn[b]
            self.asked_seconds[b] += other.asked_seconds[b]
            self.served_seconds[b] += other.served_seconds[b]

    def answered(self, priority: int, seconds: float) -> None:
        self.waits[band(priority)].append(seconds)

    def integrate(self, priority: int, count: int, satisfied: int, seconds: float) -> None:
        b = band(priority)
        self.asked_seconds[b] += count * seconds
        self.served_seconds[b] += min(count, satisfied) * seconds

    def by_band(self, still_open: dict[str, list[float]]) -> dict[str, dict[str, Any]]:
        """Per band: percentiles over every ask answered or still open (an open one counts
        with its wait so far, a lower bound), and the counts behind them."""
        out: dict[str, dict[str, Any]] = {}
        for b in BANDS:
            answered, waiting = self.waits[b], still_open.get(b, [])
            if not (answered or waiting or self.asked_seconds[b]):
                continue
            values = np.asarray(answered + waiting, dtype=np.float64)
            pct = (
                {
                    f"p{q}": round(float(np.percentile(values, q)), 1)
                    for q in (50, 90, 99)
                }
                if len(values)
                else {"p50": None, "p90": None, "p99": None}
            )
            asked = self.asked_seconds[b]
            out[b] = {
                **pct,
                "answered": len(answered),
                "waiting": len(waiting),
                "longest_wait": round(max(waiting), 1) if waiting else None,
                "withdrawn": self.withdrawn[b],
                "served_fraction": round(self.served_seconds[b] / asked, 4) if asked else None,
                "asked_machine_hours": round(asked / 3600.0, 2),
                "served_machine_hours": round(self.served_seconds[b] / 3600.0, 2),
            }
        return out


def moved_within_cluster(
    before: list[tuple[int, int, int]], after: list[tuple[int, int]]
) -> tuple[int, dict[int, int], dict[int, int]]:
    """One cluster's needs at the last cycle `(priority, count, satisfied)` and now
    `(count, satisfied)`, in the same order: machines the higher bands took from lower ones.

    A need *lost* machines it still asks for (`min(satisfied before, count now) - satisfied
    now`); a need *gained* machines. A gain is paired with a loss only when the gainer's
    priority is higher. Returns (moved, lost by priority, gained by priority)."""
    lost: dict[int, int] = {}
    gained: dict[int, int] = {}
    for (priority, _, sat_before), (count, sat) in zip(before, after, strict=True):
        if (drop := min(sat_before, count) - sat) > 0:
            lost[priority] = lost.get(priority, 0) + drop
        if (gain := sat - sat_before) > 0:
            gained[priority] = gained.get(priority, 0) + gain
    moved = 0
    gains = sorted(gained.items(), reverse=True)
    remaining = dict(gains)
    for lp, n in sorted(lost.items()):
        for gp, _ in gains:
            if gp <= lp or n == 0:
                continue
            take = min(n, remaining[gp])
            remaining[gp] -= take
            n -= take
            moved += take
    return moved, lost, gained
