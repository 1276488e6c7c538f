"""What a shard offers the coordinator in its 30-second report (design §9): bounded samples of its
idle, speculative and lowest-priority configured machines, built from the inventory's columns.

A report carries one machine record per profile and ids for the rest (`reports.ShardReport`);
making a pydantic record per offered machine every 30 s was most of a simulated week's time.
Here the rows are picked with numpy, ids are formatted once per change, and a record is made
only for each profile's first row. A quiet shard offers the same rows round after round: the
samples are rebuilt only when the inventory or the claims on it changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .engine.claims import CONFIGURED_SLOT, ClusterClaims
from .engine.rows import RowPicker
from .inventory import CODE, Inventory
from .models import Machine, MachineState
from .reports import OfferGroup, PreemptibleGroup

S = MachineState
# At most this many idle (and as many speculative) machines in a report, whatever the sample.
TOTAL = 512


class Offers:
    """A shard's offer samples as `ShardReport` fields, remembered between reports: the rows
    are re-picked only when the inventory changed (`Inventory.version`) or a cluster's claims
    did (a new `ClusterClaims`: the engine keeps one per cluster until its needs or machines
    change), and the fields re-made only when the rows picked differ. Consecutive reports then
    share their offer groups: a report is read, never changed, once made."""

    def __init__(self) -> None:
        self._picked: tuple[Inventory | None, int, int, list[ClusterClaims]] = (None, -1, -1, [])
        self._rows: tuple[list[int], list[int], list[tuple[int, int, str]]] = ([], [], [])
        self._fields: dict[str, list[Any]] = {}

    def fields(
        self, inventory: Inventory, claims: Mapping[str, ClusterClaims], sample: int
    ) -> dict[str, list[Any]]:
        """`profiles`, `idle`, `speculative`, `preemptible`: up to `sample` machines of each
        profile idle and speculative, and the `sample` configured machines whose claiming
        need has the lowest priority, lowest first."""
        if sample <= 0:
            return {}
        held = list(claims.values())
        inv, version, size, before = self._picked
        if (
            inv is inventory
            and version == inventory.version
            and size == sample
            and len(before) == len(held)
            and all(a is b for a, b in zip(before, held, strict=True))
        ):
            return self._fields
        self._picked = (inventory, inventory.version, sample, held)
        rows = (
            _sample(inventory, S.IDLE, sample),
            _sample(inventory, S.SPECULATIVE, sample),
            _lowest_held(inventory, held, sample),
        )
        if rows != self._rows or not self._fields:
            self._rows = rows
            self._fields = _offer_fields(inventory, *rows)
        return self._fields


def _sample(inventory: Inventory, state: MachineState, per_profile: int) -> list[int]:
    """Up to `per_profile` rows in `state` of each profile, `TOTAL` in all: a shortfall for a
    rare profile still finds it offered when a common one has thousands free."""
    rows = np.flatnonzero(inventory.state[: inventory.rows_used] == CODE[state])
    out: list[int] = []
    profiles = inventory.profile[rows]
    for p in np.unique(profiles).tolist():
        out += rows[profiles == p][:per_profile].tolist()
        if len(out) >= TOTAL:
            return out[:TOTAL]
    return out


def _lowest_held(
    inventory: Inventory, claims: Sequence[ClusterClaims], sample: int
) -> list[tuple[int, int, str]]:
    """Up to `sample` configured machines as (row, priority, cluster), by the priority of the
    need that claims them now, lowest first."""
    held = sorted(
        (c for cc in claims for cs in cc.claims.values() for c in cs if c.slot == CONFIGURED_SLOT),
        key=lambda c: (c.need.priority, c.need.order, c.profile),
    )
    picker = RowPicker(inventory, free=[], configured=[(c.need.cluster, c.profile) for c in held])
    lowest: list[tuple[int, int, str]] = []
    for c in held:
        if len(lowest) >= sample:
            break
        for r in picker.configured(c.need.cluster, c.profile, c.offset, c.count).tolist():
            lowest.append((r, c.need.priority, c.need.cluster))
    return lowest[:sample]


def _offer_fields(
    inventory: Inventory,
    idle: Sequence[int],
    speculative: Sequence[int],
    preemptible: Sequence[tuple[int, int, str]],
) -> dict[str, list[Any]]:
    """The report's fields for these rows, as `ShardReport.of` makes them from the rows' machine
    records: profiles numbered in the order met (preemptible, idle, speculative), each one's
    record that of its first row; `preemptible` holds (row, priority, cluster)."""
    templates: dict[int, int] = {}
    profiles: list[Machine] = []
    id_of = inventory.machine_id

    def index(row: int, pid: int) -> int:
        i = templates.get(pid)
        if i is None:
            i = templates[pid] = len(profiles)
            profiles.append(inventory.machine(row))
        return i

    def pids(rows: Sequence[int]) -> list[int]:
        return inventory.profile[list(rows)].tolist() if len(rows) else []

    held: dict[tuple[int, int, str], list[str]] = {}
    for (row, priority, cluster), pid in zip(
        preemptible, pids([p[0] for p in preemptible]), strict=True
    ):
        held.setdefault((index(row, pid), priority, cluster), []).append(id_of(row))

    def groups(rows: Sequence[int]) -> list[OfferGroup]:
        out: dict[int, list[str]] = {}
        for row, pid in zip(rows, pids(rows), strict=True):
            out.setdefault(index(row, pid), []).append(id_of(row))
        return [OfferGroup(profile=i, ids=ids) for i, ids in out.items()]

    return {
        "idle": groups(idle),
        "speculative": groups(speculative),
        "preemptible": [
            PreemptibleGroup(profile=i, ids=ids, priority=priority, cluster=cluster)
            for (i, priority, cluster), ids in held.items()
        ],
        "profiles": profiles,
    }
