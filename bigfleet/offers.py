"""What a shard offers the coordinator in its 30-second report (design §9): bounded samples of its
idle, speculative and lowest-priority configured machines, built from the inventory's columns.

A report carries one machine record per profile and ids for the rest (`reports.ShardReport`);
making a pydantic record per offered machine every 30 s was most of a simulated week's time.
Here the rows are picked with numpy, ids are formatted once per change, and a record is made
only for each profile's first row. A quiet shard offers the same rows round after round: the
samples are rebuilt only when the inventory or the claims on it changed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .cost import ELASTIC, effective_cost
from .engine.claims import CONFIGURED_SLOT, ClusterClaims
from .engine.fleet_cost import displace_floor
from .engine.moves import worth_moving
from .engine.rows import RowPicker
from .inventory import CODE, Inventory
from .models import Machine, MachineState
from .models.base import INT32_MIN
from .needs import Need
from .policy import Policy
from .reports import ELASTIC_GROUPS, ElasticGroup, OfferGroup, preemptible_groups

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
        self._rows: tuple[list[int], list[int], list[tuple[int, int, str, float]]] = ([], [], [])
        self._fields: dict[str, list[Any]] = {}
        self._reused = 0

    def fields(
        self,
        inventory: Inventory,
        claims: Mapping[str, ClusterClaims],
        sample: int,
        policy: Policy | None = None,
        settled: Callable[[Need], bool] = lambda need: False,
    ) -> dict[str, list[Any]]:
        """`profiles`, `idle`, `speculative`, `preemptible`: up to `sample` machines of each
        profile idle and speculative, and the `sample` configured machines whose claiming
        need has the lowest priority, lowest first; `elastic`, made anew each time (whether
        a need is `settled` changes with time alone)."""
        if sample <= 0:
            return {}
        held = list(claims.values())
        spend = elastic_groups(inventory, held, policy or Policy(), settled)
        return {**self._offers(inventory, held, sample), "elastic": spend}

    def _offers(
        self, inventory: Inventory, held: list[ClusterClaims], sample: int
    ) -> dict[str, list[Any]]:
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
        # The same rows name other machines once a row was reused (one machine left, another
        # came): the ids are then made again.
        if rows != self._rows or not self._fields or inventory.reused != self._reused:
            self._rows, self._reused = rows, inventory.reused
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


def elastic_groups(
    inventory: Inventory,
    claims: Sequence[ClusterClaims],
    policy: Policy,
    settled: Callable[[Need], bool],
    limit: int = ELASTIC_GROUPS,
) -> list[ElasticGroup]:
    """Per need and effective cost, the elastic machines (on-demand, spot) it holds configured
    or has coming up, the most spend first, at most `limit` groups: what idle owned capacity
    elsewhere would save this shard (issue 45). A need on 7 spot machines and 1 on-demand is
    two groups: a stand-in cheaper than on-demand but not than spot replaces one machine.
    Only needs the shard's consolidation would move onto a free owned machine (`worth_moving`
    a saving of their whole effective cost): another shard's machine moved for one that
    would not would sit idle here. Needs confined to one topology domain are left out (the
    coordinator moves whole domains for those, on their shortfall)."""
    profiles = inventory.profiles.profiles
    held: dict[tuple[str, float], tuple[Need, int, float]] = {}
    for cc in claims:
        for cs in cc.claims.values():
            for c in cs:
                p = profiles[c.profile]
                if p.capacity_type not in ELASTIC or c.need.spec.same or not c.count:
                    continue
                penalty = c.need.spec.interruption_penalty
                cost = effective_cost(p.price_per_hour, p.interruption_probability, penalty)
                need, count, _ = held.get((c.need.key, cost), (c.need, 0, cost))
                held[(c.need.key, cost)] = (need, count + c.count, cost)
    worth = [t for t in held.values() if worth_moving(t[0], policy, t[2])]
    ranked = sorted(worth, key=lambda t: (-t[1] * t[2], t[0].order))[:limit]
    return [
        ElasticGroup(
            cluster=need.cluster,
            priority=need.priority,
            requirements=list(need.requirements),
            count=count,
            cost_per_hour=cost,
            interruption_penalty=need.spec.interruption_penalty,
            displace_below=max(INT32_MIN, displace_floor(need, policy))
            if policy.fleet_cost
            else INT32_MIN,
            horizon_hours=policy.consolidation_horizon_hours,
            settled=settled(need),
        )
        for need, count, cost in ranked
    ]


def _lowest_held(
    inventory: Inventory, claims: Sequence[ClusterClaims], sample: int
) -> list[tuple[int, int, str, float]]:
    """Up to `sample` configured machines as (row, priority, cluster, reclamation penalty), by
    the priority of the need that claims them now, lowest first."""
    held = sorted(
        (c for cc in claims for cs in cc.claims.values() for c in cs if c.slot == CONFIGURED_SLOT),
        key=lambda c: (c.need.priority, c.need.order, c.profile),
    )
    picker = RowPicker(inventory, free=[], configured=[(c.need.cluster, c.profile) for c in held])
    lowest: list[tuple[int, int, str, float]] = []
    for c in held:
        if len(lowest) >= sample:
            break
        penalty = c.need.spec.reclamation_penalty
        for r in picker.configured(c.need.cluster, c.profile, c.offset, c.count).tolist():
            lowest.append((r, c.need.priority, c.need.cluster, penalty))
    return lowest[:sample]


def _offer_fields(
    inventory: Inventory,
    idle: Sequence[int],
    speculative: Sequence[int],
    preemptible: Sequence[tuple[int, int, str, float]],
) -> dict[str, list[Any]]:
    """The report's fields for these rows, as `ShardReport.of` makes them from the rows' machine
    records: profiles numbered in the order met (preemptible, idle, speculative), each one's
    record that of its first row; `preemptible` holds (row, priority, cluster, penalty)."""
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
    penalties: dict[tuple[int, int, str], float] = {}
    for (row, priority, cluster, penalty), pid in zip(
        preemptible, pids([p[0] for p in preemptible]), strict=True
    ):
        key = (index(row, pid), priority, cluster)
        held.setdefault(key, []).append(id_of(row))
        penalties[key] = max(penalties.get(key, 0.0), penalty)

    def groups(rows: Sequence[int]) -> list[OfferGroup]:
        out: dict[int, list[str]] = {}
        for row, pid in zip(rows, pids(rows), strict=True):
            out.setdefault(index(row, pid), []).append(id_of(row))
        return [OfferGroup(profile=i, ids=ids) for i, ids in out.items()]

    return {
        "idle": groups(idle),
        "speculative": groups(speculative),
        "preemptible": preemptible_groups(held, penalties),
        "profiles": profiles,
    }
