"""What a shard's machines cost, live (issue 31): dollars per hour by cluster, priority band and
capacity type, owned machines left idle, and elastic machines running where an idle owned one
would do. Pure: numpy over the inventory's columns, no Temporal (the workflow exports it).

**Billed.** A machine counts at its profile's `price_per_hour`. Elastic machines (spot,
on-demand) count while the provider runs them: CREATING, IDLE, CONFIGURING, CONFIGURED,
DRAINING and DELETING (as the simulator bills them, `simulation/recorder.py` `BILLED`). Owned
capacity (bare metal, reserved: `cost.OWNED`) is paid for whether used or not, so it counts in
every state.

**Whose.** A machine a cluster holds (CONFIGURED, CONFIGURING, CREATING, DRAINING with a
cluster) counts for that cluster; every other billed machine counts under cluster `""` and
band `unassigned`.

**Band.** A held machine's band is the priority band (`BANDS`, the simulation's) of the need
whose claim holds it: the engine's claims of its last cycle (`FastEngine.claims`), read per
(cluster, profile, state), higher priorities first, each claim up to the machines of its
profile and state the cluster holds now. The machines no claim covers:

- CONFIGURING or CREATING ones that the cycle's own assignments moved (measured right after
  the cycle, `assigned_at`: the claims came before them) count at the priority of the need
  the engine gave them to (`holder_priority`, which `FastEngine.apply` sets on every machine
  it assigns); for the pairing below they belong to the cluster's need of that priority
  they fit (else its highest-priority need they fit, `SupplyIndex.matching`);
- every other: CONFIGURED ones no need claims (excess Phase 3 drains), DRAINING ones,
  machines on their way no need claims (a consolidation's replacement not wanted any more),
  and all of them before the engine's first cycle, count as `unclaimed`.

**Idle owned.** Machines of owned capacity types that no cluster holds and that are doing
nothing: IDLE, and SPECULATIVE too (bare metal waits SPECULATIVE until it is first claimed, and
is paid for all the same), per profile's `short_name` (provider/instance-type/zone/
capacity-type: racks of one kind add up).

**Elastic while owned idle.** Elastic machines CONFIGURED or CONFIGURING for a need (as above)
that an idle owned machine fits too (the need's `SupplyIndex.matching`), paired one to one:
the largest number of (elastic machine, idle owned machine) pairs in which each idle owned
machine replaces one elastic machine of a need it fits (a bipartite matching, so never more
than either side). Above zero for long, the fleet pays for elastic capacity while capacity it
already paid for stands idle.

Machines outside the inventory (a transfer's drained machines waiting to be handed over, a
split's machines on their way) are left out: the shard that receives them counts them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from . import labels as L
from .cost import OWNED
from .held import NONE16
from .inventory import CODE, GONE, Inventory
from .models import MachineState
from .needs import Need
from .profiles import ProfileTable
from .spend_book import (
    BAND_LABELS,
    CAPACITY_TYPES,
    UNASSIGNED,
    UNCLAIMED,
    Book,
    Spend,
    bands,
)
from .spend_pairs import elastic_pairs

if TYPE_CHECKING:
    from .engine.claims import ClusterClaims
    from .engine.supply import SupplyIndex

S = MachineState

ELASTIC_BILLED = (S.CREATING, S.IDLE, S.CONFIGURING, S.CONFIGURED, S.DRAINING, S.DELETING)
# The states in which a cluster holds a machine, in the order `_SLOT` numbers them.
HELD = (S.CONFIGURED, S.CONFIGURING, S.CREATING, S.DRAINING)
_SLOT = np.full(256, -1, dtype=np.int64)
for _i, _s in enumerate(HELD):
    _SLOT[CODE[_s]] = _i
_NSLOTS = len(HELD)
_RUNNING = (0, 1)  # CONFIGURED, CONFIGURING: what the pairing counts
_COMING = (1, 2)  # CONFIGURING, CREATING: may be newer than the claims
# billed[state code, owned?]
_BILLED = np.zeros((256, 2), dtype=bool)
for _s in ELASTIC_BILLED:
    _BILLED[CODE[_s], 0] = True
_BILLED[:, 1] = True
_BILLED[GONE, :] = False

# The gauges a shard sets every cycle (docs/operations.md, "Metrics").
COST_GAUGE = "bigfleet_cost_dollars_per_hour"
IDLE_OWNED_GAUGE = "bigfleet_idle_owned_machines"
PAIRS_GAUGE = "bigfleet_elastic_while_owned_idle_machines"


def measure(
    inv: Inventory,
    needs: Iterable[Need],
    claims: Mapping[str, ClusterClaims] | None = None,
    supply: SupplyIndex | None = None,
    *,
    assigned_at: float | None = None,
    state: np.ndarray | None = None,
    cluster: np.ndarray | None = None,
) -> Spend:
    """The shard's `Spend` (the rules are in the module's docstring) from its inventory, its
    needs table and the engine's claims of its last cycle. `assigned_at`: the time of that
    cycle, when its assignments were applied after its claims were made (machines that moved
    then are newer than the claims); None: nothing is. `supply` answers which profiles a need
    fits (the engine's, whose answers are cached; else one made here). `state` and
    `cluster`: columns to read instead of the inventory's (shadow mode's `Baseline`: the
    fleet as the last listing showed it), one entry per inventory row from the first."""
    from .engine.supply import SupplyIndex

    table = inv.profiles
    if len(table) == 0:
        return Spend()
    supply = supply if supply is not None else SupplyIndex(inv)
    cols = _Columns.read(inv, state, cluster)
    book = Book(inv, np.asarray(table.price, dtype=np.float64), cols.ct_of)
    billed = _BILLED[cols.st, cols.owned.view(np.uint8)[cols.pf]]
    held = billed & (cols.slot >= 0) & (cols.cl != NONE16)
    # Unassigned: billed, held by no cluster.
    loose = np.bincount(cols.pf[billed & ~held], minlength=cols.n_profiles)
    book.add_profiles(-1, BAND_LABELS.index(UNASSIGNED), loose)
    cells = _Cells.of(inv, cols, np.flatnonzero(held))
    running = _Running()
    _book_claimed(book, cells, _flatten(inv, claims or {}, cols.n_profiles), cols, running)
    if assigned_at is not None:
        _book_assigned(book, cells, inv, cols, assigned_at, needs, supply, running)
    # The rest: held for no need.
    rest = cells.left > 0
    book.add(
        cells.cluster[rest],
        np.full(int(rest.sum()), BAND_LABELS.index(UNCLAIMED)),
        cells.profile[rest],
        cells.left[rest],
    )
    idle_owned, spare = _idle_owned(cols, table)
    pairs = elastic_pairs(
        list(running.need_of.values()), list(running.count.values()), spare, supply
    )
    return Spend(book.result(), idle_owned, pairs)


@dataclass
class _Columns:
    """The columns `measure` reads, one entry per inventory row (state code, cluster code,
    profile id, held slot: -1 when not held), and per profile its capacity type's index and
    whether it is owned."""

    st: np.ndarray
    cl: np.ndarray
    pf: np.ndarray
    slot: np.ndarray
    ct_of: np.ndarray
    owned: np.ndarray
    n_profiles: int

    @classmethod
    def read(cls, inv: Inventory, state: np.ndarray | None, cluster: np.ndarray | None) -> _Columns:
        n = len(state) if state is not None else inv.rows_used
        st = (state if state is not None else inv.state)[:n]
        cl = (cluster if cluster is not None else inv.cluster)[:n]
        ct_of = _capacity_types(inv.profiles)
        owned = np.isin(ct_of, [CAPACITY_TYPES.index(c.value) for c in OWNED])
        return cls(st, cl, inv.profile[:n], _SLOT[st], ct_of, owned, len(inv.profiles))


@dataclass
class _Cells:
    """Held machines per (cluster, profile, slot) cell: the held rows, the cells' keys
    ascending, the machines in each and the cell's parts, and the machines no claim or
    assignment has booked yet (`left`)."""

    rows: np.ndarray
    groups: np.ndarray
    count: np.ndarray
    cluster: np.ndarray
    profile: np.ndarray
    slot: np.ndarray
    left: np.ndarray

    @classmethod
    def of(cls, inv: Inventory, cols: _Columns, held_rows: np.ndarray) -> _Cells:
        n_profiles = cols.n_profiles
        key = _key_of(held_rows, cols.cl, cols.pf, cols.slot, n_profiles)
        groups, count = _grouped(key, len(inv.clusters.names) * n_profiles * _NSLOTS)
        return cls(
            held_rows,
            groups,
            count,
            groups // (n_profiles * _NSLOTS),
            (groups // _NSLOTS) % n_profiles,
            groups % _NSLOTS,
            count.copy(),
        )


@dataclass
class _Running:
    """Elastic machines running per need key (CONFIGURED or CONFIGURING), and each need."""

    count: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    need_of: dict[str, Need] = field(default_factory=dict)

    def add(self, need: Need, n: int) -> None:
        self.count[need.key] += n
        self.need_of[need.key] = need


def _book_claimed(
    book: Book, cells: _Cells, flat: _Flat, cols: _Columns, running: _Running
) -> None:
    """The claims' machines, each cell's claims higher priorities first (then in the claims'
    own order), each up to what the cell has left, at the claiming need's band."""
    groups = cells.groups
    if not (flat.size and len(groups)):
        return
    n_profiles = cols.n_profiles
    c_key = (flat[0] * n_profiles + flat[1]) * _NSLOTS + flat[2]
    at = np.minimum(np.searchsorted(groups, c_key), len(groups) - 1)
    live = groups[at] == c_key
    # Within a group, higher priorities first (then the claims' own order).
    order = np.lexsort((np.arange(flat.shape[1]), -flat[3], at))
    order = order[live[order]]
    g = at[order]
    want = flat[4][order]
    got = np.clip(cells.count[g] - _ahead(g, want), 0, want)
    taken = np.zeros(len(groups), dtype=np.int64)
    np.add.at(taken, g, got)
    cells.left = cells.count - taken
    pids = flat[1][order]
    book.add(cells.cluster[g], bands(flat[3][order]), pids, got)
    keep = (got > 0) & ~cols.owned[pids] & np.isin(flat[2][order], _RUNNING)
    per_need = np.bincount(flat[5][order][keep], weights=got[keep], minlength=len(flat.needs))
    for k in np.flatnonzero(per_need).tolist():
        running.add(flat.needs[k], int(per_need[k]))


def _book_assigned(
    book: Book,
    cells: _Cells,
    inv: Inventory,
    cols: _Columns,
    assigned_at: float,
    needs: Iterable[Need],
    supply: SupplyIndex,
    running: _Running,
) -> None:
    """Machines on their way, moved by the cycle at `assigned_at` (its assignments, newer
    than its claims), that no claim covered: at the priority the engine gave them
    (`holder_priority`); the elastic running ones count for the need they are for."""
    left = cells.left
    coming = (left > 0) & np.isin(cells.slot, _COMING)
    if not coming.any():
        return
    held_rows = cells.rows
    rows = held_rows[inv.since[held_rows] >= int(assigned_at)]
    g = np.searchsorted(cells.groups, _key_of(rows, cols.cl, cols.pf, cols.slot, cols.n_profiles))
    rows, g = rows[coming[g]], g[coming[g]]
    order = np.argsort(g, kind="stable")
    rows, g = rows[order], g[order]
    fits = _ahead(g, np.ones(len(g), dtype=np.int64)) < left[g]
    rows, g = rows[fits], g[fits]
    prio = inv.holder_priority[rows].astype(np.int64)
    book.add(cells.cluster[g], bands(prio), cells.profile[g], np.ones(len(g), dtype=np.int64))
    np.subtract.at(left, g, 1)
    mine = ~cols.owned[cells.profile[g]] & np.isin(cells.slot[g], _RUNNING)
    if not mine.any():
        return
    by_cluster: dict[str, list[Need]] = defaultdict(list)
    for need in sorted(needs, key=Need.sort_key):  # (highest priority first)
        by_cluster[need.cluster].append(need)
    trio = np.stack([cells.cluster[g][mine], cells.profile[g][mine], prio[mine]])
    kinds, n_kind = np.unique(trio, axis=1, return_counts=True)
    for (c, pid, p), k in zip(kinds.T.tolist(), n_kind.tolist(), strict=True):
        holder = _holder(by_cluster.get(inv.clusters.names[c], []), pid, p, supply)
        if holder is not None:
            running.add(holder, k)


def _idle_owned(cols: _Columns, table: ProfileTable) -> tuple[dict[str, int], np.ndarray]:
    """Unused (IDLE or SPECULATIVE) owned machines per profile short name (every owned
    profile, 0 included), and per profile id (0 for elastic profiles)."""
    unused = (cols.st == CODE[S.IDLE]) | (cols.st == CODE[S.SPECULATIVE])
    idle = np.bincount(cols.pf[unused], minlength=cols.n_profiles)
    idle_owned: dict[str, int] = {}
    for pid in np.flatnonzero(cols.owned).tolist():
        name = table.profiles[pid].short_name
        idle_owned[name] = idle_owned.get(name, 0) + int(idle[pid])
    return idle_owned, np.where(cols.owned, idle, 0)


def _capacity_types(table: ProfileTable) -> np.ndarray:
    """Each profile's capacity type as its index in `CAPACITY_TYPES` (the table keeps its
    labels coded: no loop over profiles)."""
    codes, values = table.label_codes(L.CAPACITY_TYPE)
    if len(codes) == len(table) and (codes >= 0).all():
        return np.array([CAPACITY_TYPES.index(v) for v in values], dtype=np.int64)[codes]
    return np.fromiter(
        (CAPACITY_TYPES.index(p.capacity_type.value) for p in table.profiles),
        np.int64,
        len(table),
    )


def _key_of(
    rows: np.ndarray, cl: np.ndarray, pf: np.ndarray, slot: np.ndarray, n_profiles: int
) -> np.ndarray:
    return (cl[rows].astype(np.int64) * n_profiles + pf[rows]) * _NSLOTS + slot[rows]


# Up to this many (cluster, profile, slot) cells, rows are counted into a dense column (one
# pass, no sort); past it (tens of thousands of clusters), sorted.
DENSE_CELLS = 8_000_000


def _grouped(key: np.ndarray, cells: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct keys, ascending, and how many rows have each."""
    if cells <= DENSE_CELLS:
        counts = np.bincount(key, minlength=cells)
        groups = np.flatnonzero(counts)
        return groups, counts[groups]
    return np.unique(key, return_counts=True)


def _ahead(g: np.ndarray, n: np.ndarray) -> np.ndarray:
    """For entries sorted by group `g`, the sum of `n` before each one within its group."""
    if not len(g):
        return np.zeros(0, dtype=np.int64)
    ahead = np.cumsum(n) - n
    starts = np.r_[True, g[1:] != g[:-1]]
    first = np.maximum.accumulate(np.where(starts, np.arange(len(g)), 0))
    return ahead - ahead[first]


def _holder(needs: list[Need], pid: int, priority: int, supply: SupplyIndex) -> Need | None:
    """The need of a cluster (`needs`, highest priority first) a machine of profile `pid`
    given at `priority` is for: the first of that priority it fits, else the first it fits."""
    fits = [need for need in needs if pid in supply.matching(need)]
    return next((n for n in fits if n.priority == priority), fits[0] if fits else None)


class _Flat:
    """Every claim as columns: cluster code, profile, slot, priority, count, need index."""

    def __init__(self, rows: list[tuple[int, int, int, int, int, int]], needs: list[Need]):
        self.data = np.array(rows, dtype=np.int64).reshape(len(rows), 6).T
        self.needs = needs
        self.size = len(rows)
        self.shape = self.data.shape

    def __getitem__(self, i: int) -> np.ndarray:
        return self.data[i]


def _flatten(inv: Inventory, claims: Mapping[str, ClusterClaims], n_profiles: int) -> _Flat:
    rows: list[tuple[int, int, int, int, int, int]] = []
    needs: list[Need] = []
    for name, cc in claims.items():
        cidx = inv.clusters.get(name)
        if cidx is None:
            continue
        for cs in cc.claims.values():
            if not cs:
                continue
            needs.append(cs[0].need)
            k = len(needs) - 1
            rows += [
                (cidx, c.profile, c.slot, c.need.priority, c.count, k)
                for c in cs
                if c.count > 0 and c.slot < _NSLOTS and c.profile < n_profiles
            ]
    return _Flat(rows, needs)


def export(
    meter: Any, spend: Spend, previous: Iterable[tuple[str, str, str]] = ()
) -> set[tuple[str, str, str]]:
    """Set the shard's cost gauges on `meter` (the workflow's metric meter, its `shard`
    attribute already added): `bigfleet_cost_dollars_per_hour{cluster,priority_band,
    capacity_type}`, `bigfleet_idle_owned_machines{profile}` and
    `bigfleet_elastic_while_owned_idle_machines`. A (cluster, band, capacity type) exported
    before (`previous`) and gone now is set to 0, not left at its last value. Returns the
    keys exported, for the next call."""
    cost = meter.create_gauge_float(COST_GAUGE, "what the shard's machines cost, $ per hour")
    now = set(spend.dollars_per_hour)
    for key in sorted(set(previous) - now):
        cost.set(0.0, _cost_labels(key))
    for key, value in sorted(spend.dollars_per_hour.items()):
        cost.set(float(value), _cost_labels(key))
    idle = meter.create_gauge(IDLE_OWNED_GAUGE, "unused machines of owned capacity types")
    for name, n in sorted(spend.idle_owned.items()):
        idle.set(int(n), {"profile": name})
    meter.create_gauge(
        PAIRS_GAUGE, "elastic machines running where an idle owned machine would do"
    ).set(int(spend.elastic_while_owned_idle))
    return now


def _cost_labels(key: tuple[str, str, str]) -> dict[str, str]:
    cluster, band_name, capacity_type = key
    return {"cluster": cluster, "priority_band": band_name, "capacity_type": capacity_type}
