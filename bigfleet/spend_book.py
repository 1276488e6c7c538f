"""The spend ledger and its record: dollars per hour booked under (cluster, priority band,
capacity type), the priority bands themselves, and `Spend`, one measurement with the views
`bigfleet status` and `bigfleet cluster` show. bigfleet/spend.py measures; this module adds up."""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .inventory import Inventory
from .models import CapacityType

# The simulation's priority bands (bigfleet/simulation/measures.py `BANDS`, `band`; a test
# holds them equal). Copied, not imported: the core does not import the simulator.
BANDS = ("<100000", "100000-499999", "500000-899999", ">=900000")
EDGES = (100_000, 500_000, 900_000)
UNCLAIMED = "unclaimed"  # held by a cluster for none of its needs
UNASSIGNED = "unassigned"  # held by no cluster (idle, speculative, deleting, failed)
BAND_LABELS = (*BANDS, UNCLAIMED, UNASSIGNED)
CAPACITY_TYPES = tuple(c.value for c in CapacityType)


def band(priority: int) -> str:
    """The priority band of a need (the simulation's `band`)."""
    return BANDS[bisect_right(EDGES, priority)]


def bands(priorities: np.ndarray) -> np.ndarray:
    """Each priority's band, as its index in `BAND_LABELS`."""
    return np.searchsorted(np.array(EDGES), priorities, side="right")


class Book:
    """Dollars per (cluster code, band index, capacity type index), added up by column."""

    def __init__(self, inv: Inventory, price: np.ndarray, ct_of: np.ndarray) -> None:
        self.inv = inv
        self.price = price
        self.ct_of = ct_of
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, clusters: np.ndarray, bands: np.ndarray, pids: np.ndarray, n: np.ndarray):
        """Books `n[i]` machines of profile `pids[i]` under (`clusters[i]`, `bands[i]`)."""
        if len(pids):
            pids = np.asarray(pids, dtype=np.int64)
            cost = np.asarray(n, dtype=np.float64) * self.price[pids]
            self.parts.append(
                (
                    np.asarray(clusters, np.int64),
                    np.asarray(bands, np.int64),
                    self.ct_of[pids],
                    cost,
                )
            )

    def add_profiles(self, cluster: int, band_index: int, per_profile: np.ndarray) -> None:
        """Books `per_profile[p]` machines of each profile p under one cluster and band."""
        pids = np.flatnonzero(per_profile)
        self.add(np.full(len(pids), cluster), np.full(len(pids), band_index), pids,
                 per_profile[pids])  # fmt: skip

    def result(self) -> dict[tuple[str, str, str], float]:
        """$/h per (cluster name, band label, capacity type), nonzero entries only."""
        if not self.parts:
            return {}
        c, b, t, v = (np.concatenate(col) for col in zip(*self.parts, strict=True))
        nb, nt = len(BAND_LABELS), len(CAPACITY_TYPES)
        key = ((c + 1) * nb + b) * nt + t
        keys, inverse = np.unique(key, return_inverse=True)
        sums = np.bincount(inverse, weights=v, minlength=len(keys))
        names = self.inv.clusters.names
        out: dict[tuple[str, str, str], float] = {}
        for k, total in zip(keys.tolist(), sums.tolist(), strict=True):
            if total == 0:
                continue
            ci, rest = divmod(k, nb * nt)
            bi, ti = divmod(rest, nt)
            out[(names[ci - 1] if ci else "", BAND_LABELS[bi], CAPACITY_TYPES[ti])] = total
        return out


@dataclass(frozen=True)
class Spend:
    """One measurement: $/h per (cluster, band, capacity type) (nonzero entries only), idle
    owned machines per profile short name (every owned profile, 0 included), and the pairs
    of elastic machines an idle owned machine could replace."""

    dollars_per_hour: dict[tuple[str, str, str], float] = field(default_factory=dict)
    idle_owned: dict[str, int] = field(default_factory=dict)
    elastic_while_owned_idle: int = 0

    def total(self) -> float:
        return sum(self.dollars_per_hour.values())

    def by_capacity_type(self, cluster: str | None = None) -> dict[str, float]:
        """$/h per capacity type (every one, 0 included), of one cluster or of all."""
        out = dict.fromkeys(CAPACITY_TYPES, 0.0)
        for (c, _, ct), v in self.dollars_per_hour.items():
            if cluster is None or c == cluster:
                out[ct] += v
        return out

    def by_band(self, cluster: str | None = None) -> dict[str, dict[str, float]]:
        """$/h per band, then per capacity type (nonzero only), of one cluster or of all."""
        out: dict[str, dict[str, float]] = {}
        for (c, b, ct), v in sorted(self.dollars_per_hour.items(), key=_band_order):
            if cluster is None or c == cluster:
                row = out.setdefault(b, {})
                row[ct] = row.get(ct, 0.0) + v
        return out

    def of_cluster(self, cluster: str) -> dict[str, Any]:
        """What `bigfleet cluster NAME` shows: the cluster's $/h, by band and capacity type."""
        mine = {k: v for k, v in self.dollars_per_hour.items() if k[0] == cluster}
        return {
            "dollars_per_hour": _money(sum(mine.values())),
            "by_band": _rounded(self.by_band(cluster)),
        }

    def summary(self) -> dict[str, Any]:
        """What `bigfleet status` shows: the shard's $/h in all, by capacity type and by band,
        idle owned machines (profiles with some) and the elastic-while-owned-idle pairs."""
        bands: dict[str, float] = {}
        for (_, b, _), v in sorted(self.dollars_per_hour.items(), key=_band_order):
            bands[b] = bands.get(b, 0.0) + v
        return {
            "dollars_per_hour": _money(self.total()),
            "by_capacity_type": {k: _money(v) for k, v in self.by_capacity_type().items()},
            "by_band": {k: _money(v) for k, v in bands.items()},
            "idle_owned_machines": {k: n for k, n in sorted(self.idle_owned.items()) if n},
            "elastic_while_owned_idle_machines": self.elastic_while_owned_idle,
        }


def _band_order(item: tuple[tuple[str, str, str], float]) -> tuple[int, str, str]:
    (c, b, ct), _ = item
    return (-BAND_LABELS.index(b) if b in BANDS else BAND_LABELS.index(b), c, ct)


def _money(v: float) -> float:
    return round(float(v), 4)


def _rounded(bands: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    return {b: {ct: _money(v) for ct, v in row.items()} for b, row in bands.items()}
