"""Service objectives for `bigfleet plan` (`--slo`): what one priority band must get (a served
fraction, a p99 time to capacity), how far a run's summary is from it, and how an objective is
read from the command line."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from .measures import BANDS, band


class ObjectiveError(ValueError):
    """An --slo that cannot be read; the message says which and why."""


@dataclass(frozen=True)
class Objective:
    """What one priority band must get: a served fraction and a p99 time to capacity."""

    band: str
    served: float | None = None
    p99_seconds: float | None = None

    def miss(self, summary: dict[str, Any]) -> float:
        """How far the run is from the objective: the served fraction short of it plus the
        p99 over it as a fraction of it (0: met; no answered or waiting ask at all: 1)."""
        got = summary["bands"].get(self.band)
        if got is None:
            return 0.0
        short = 0.0
        if self.served is not None:
            short += max(0.0, self.served - (got["served_fraction"] or 0.0))
        if self.p99_seconds is not None:
            p99 = got["p99_s"]
            short += (
                1.0 if p99 is None else max(0.0, p99 - self.p99_seconds) / max(self.p99_seconds, 1)
            )
        return short

    def margin(self, summary: dict[str, Any]) -> float:
        """How far inside the objective the run is (>= 0: met; < 0: missed): the served
        fraction over it, and the p99 under it as a fraction of it, whichever is smaller
        (no ask in the band: infinite; a p99 objective with nothing answered: -1)."""
        got = summary["bands"].get(self.band)
        if got is None:
            return math.inf
        slack = math.inf
        if self.served is not None:
            slack = (got["served_fraction"] or 0.0) - self.served
        if self.p99_seconds is not None:
            p99 = got["p99_s"]
            late = -1.0 if p99 is None else (self.p99_seconds - p99) / max(self.p99_seconds, 1)
            slack = min(slack, late)
        return slack

    def met(self, summary: dict[str, Any]) -> bool:
        """The run's summary meets the objective (a band nobody asked in meets any)."""
        got = summary["bands"].get(self.band)
        if got is None:  # nothing asked for in this band
            return True
        if self.served is not None and (got["served_fraction"] or 0.0) < self.served:
            return False
        return self.p99_seconds is None or (
            got["p99_s"] is not None and got["p99_s"] <= self.p99_seconds
        )


def parse_objective(text: str) -> Objective:
    """`BAND:served=0.99,p99=600` where BAND is a band name (`>=900000`) or a priority
    (`900000`: its band)."""
    where, _, terms = text.partition(":")
    if where in BANDS:
        name = where
    elif re.fullmatch(r"-?\d+", where):
        name = band(int(where))
    else:
        raise ObjectiveError(
            f"--slo {text!r}: the band {where!r} is neither a priority nor one of "
            + ", ".join(BANDS)
        )
    values: dict[str, float] = {}
    for term in filter(None, terms.split(",")):
        key, _, value = term.partition("=")
        if key not in ("served", "p99"):
            raise ObjectiveError(f"--slo {text!r}: unknown objective {key!r} (served, p99)")
        try:
            values[key] = float(value)
        except ValueError:
            raise ObjectiveError(f"--slo {text!r}: {key} must be a number, not {value!r}") from None
        if not math.isfinite(values[key]) or values[key] < 0:
            raise ObjectiveError(f"--slo {text!r}: {key} must be a finite number >= 0")
    if "served" in values and values["served"] > 1:
        raise ObjectiveError(f"--slo {text!r}: served is a fraction between 0 and 1")
    if not values:
        raise ObjectiveError(f"--slo {text!r}: give served=FRACTION and/or p99=SECONDS")
    return Objective(name, values.get("served"), values.get("p99"))
