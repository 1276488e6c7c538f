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

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from . import labels as L
from .cost import OWNED
from .held import NONE16
from .inventory import CODE, GONE, Inventory
from .models import CapacityType, MachineState
from .needs import Need
from .profiles import ProfileTable

if TYPE_CHECKING:
    from .engine.claims import ClusterClaims
    from .engine.supply import SupplyIndex

S = MachineState

# The simulation's priority bands (bigfleet/simulation/measures.py `BANDS`, `band`; a test
# holds them equal). Copied, not imported: the core does not import the simulator.
BANDS = ("<100000", "100000-499999", "500000-899999", ">=900000")
_EDGES = (100_000, 500_000, 900_000)
UNCLAIMED = "unclaimed"  # held by a cluster for none of its needs
UNASSIGNED = "unassigned"  # held by no cluster (idle, speculative, deleting, failed)
BAND_LABELS = (*BANDS, UNCLAIMED, UNASSIGNED)
CAPACITY_TYPES = tuple(c.value for c in CapacityType)

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


def band(priority: int) -> str:
    """The priority band of a need (the simulation's `band`)."""
    return BANDS[bisect_right(_EDGES, priority)]


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
    n_profiles = len(table)
    if n_profiles == 0:
        return Spend()
    supply = supply if supply is not None else SupplyIndex(inv)
    n = len(state) if state is not None else inv.rows_used
    st = (state if state is not None else inv.state)[:n]
    cl = (cluster if cluster is not None else inv.cluster)[:n]
    pf = inv.profile[:n]
    profiles = table.profiles
    price = np.asarray(table.price, dtype=np.float64)
    ct_of = _capacity_types(table)
    owned = np.isin(ct_of, [CAPACITY_TYPES.index(c.value) for c in OWNED])
    billed = _BILLED[st, owned.view(np.uint8)[pf]]
    slot = _SLOT[st]
    held = billed & (slot >= 0) & (cl != NONE16)
    book = _Book(inv, price, ct_of)

    # Unassigned: billed, held by no cluster.
    loose = np.bincount(pf[billed & ~held], minlength=n_profiles)
    book.add_profiles(-1, BAND_LABELS.index(UNASSIGNED), loose)

    # Held: machines per (cluster, profile, slot), then the claims on them.
    held_rows = np.flatnonzero(held)
    key = (cl[held_rows].astype(np.int64) * n_profiles + pf[held_rows]) * _NSLOTS
    key += slot[held_rows]
    groups, count = _grouped(key, len(inv.clusters.names) * n_profiles * _NSLOTS)
    g_cluster = groups // (n_profiles * _NSLOTS)
    g_profile = (groups // _NSLOTS) % n_profiles
    g_slot = groups % _NSLOTS
    flat = _flatten(inv, claims or {}, n_profiles)
    taken = np.zeros(len(groups), dtype=np.int64)
    running: dict[str, int] = defaultdict(int)  # elastic machines running per need key
    need_of: dict[str, Need] = {}
    if flat.size and len(groups):
        c_key = (flat[0] * n_profiles + flat[1]) * _NSLOTS + flat[2]
        at = np.minimum(np.searchsorted(groups, c_key), len(groups) - 1)
        live = groups[at] == c_key
        # Within a group, higher priorities first (then the claims' own order).
        order = np.lexsort((np.arange(flat.shape[1]), -flat[3], at))
        order = order[live[order]]
        g = at[order]
        want = flat[4][order]
        got = np.clip(count[g] - _ahead(g, want), 0, want)
        np.add.at(taken, g, got)
        pids = flat[1][order]
        book.add(g_cluster[g], _bands(flat[3][order]), pids, got)
        keep = (got > 0) & ~owned[pids] & np.isin(flat[2][order], _RUNNING)
        per_need = np.bincount(flat[5][order][keep], weights=got[keep], minlength=len(flat.needs))
        for k in np.flatnonzero(per_need).tolist():
            need = flat.needs[k]
            running[need.key] += int(per_need[k])
            need_of[need.key] = need
    left = count - taken
    # On their way, moved by the cycle at `assigned_at` (its assignments, newer than its
    # claims): at the priority the engine gave them (`holder_priority`).
    coming = (left > 0) & np.isin(g_slot, _COMING)
    if assigned_at is not None and coming.any():
        rows = held_rows[inv.since[held_rows] >= int(assigned_at)]
        g = np.searchsorted(groups, _key_of(rows, cl, pf, slot, n_profiles))
        rows, g = rows[coming[g]], g[coming[g]]
        order = np.argsort(g, kind="stable")
        rows, g = rows[order], g[order]
        fits = _ahead(g, np.ones(len(g), dtype=np.int64)) < left[g]
        rows, g = rows[fits], g[fits]
        prio = inv.holder_priority[rows].astype(np.int64)
        book.add(g_cluster[g], _bands(prio), g_profile[g], np.ones(len(g), dtype=np.int64))
        np.subtract.at(left, g, 1)
        mine = ~owned[g_profile[g]] & np.isin(g_slot[g], _RUNNING)
        if mine.any():
            by_cluster: dict[str, list[Need]] = defaultdict(list)
            for need in sorted(needs, key=Need.sort_key):  # (highest priority first)
                by_cluster[need.cluster].append(need)
            trio = np.stack([g_cluster[g][mine], g_profile[g][mine], prio[mine]])
            kinds, n_kind = np.unique(trio, axis=1, return_counts=True)
            for (c, pid, p), k in zip(kinds.T.tolist(), n_kind.tolist(), strict=True):
                holder = _holder(by_cluster.get(inv.clusters.names[c], []), pid, p, supply)
                if holder is not None:
                    running[holder.key] += k
                    need_of[holder.key] = holder
    # The rest: held for no need.
    rest = left > 0
    book.add(
        g_cluster[rest],
        np.full(int(rest.sum()), BAND_LABELS.index(UNCLAIMED)),
        g_profile[rest],
        left[rest],
    )

    unused = (st == CODE[S.IDLE]) | (st == CODE[S.SPECULATIVE])
    idle = np.bincount(pf[unused], minlength=n_profiles)
    idle_owned: dict[str, int] = {}
    for pid in np.flatnonzero(owned).tolist():
        name = profiles[pid].short_name
        idle_owned[name] = idle_owned.get(name, 0) + int(idle[pid])
    spare = np.where(owned, idle, 0)
    pairs = _pairs([need_of[k] for k in running], list(running.values()), spare, supply)
    return Spend(book.result(), idle_owned, pairs)


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


def _bands(priorities: np.ndarray) -> np.ndarray:
    return np.searchsorted(np.array(_EDGES), priorities, side="right")


class _Book:
    """Dollars per (cluster code, band index, capacity type index), added up by column."""

    def __init__(self, inv: Inventory, price: np.ndarray, ct_of: np.ndarray) -> None:
        self.inv = inv
        self.price = price
        self.ct_of = ct_of
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, clusters: np.ndarray, bands: np.ndarray, pids: np.ndarray, n: np.ndarray):
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

    def add_one(self, cluster: int, band_index: int, pid: int, n: int) -> None:
        self.add(np.array([cluster]), np.array([band_index]), np.array([pid]), np.array([n]))

    def add_profiles(self, cluster: int, band_index: int, per_profile: np.ndarray) -> None:
        pids = np.flatnonzero(per_profile)
        self.add(np.full(len(pids), cluster), np.full(len(pids), band_index), pids,
                 per_profile[pids])  # fmt: skip

    def result(self) -> dict[tuple[str, str, str], float]:
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


def _pairs(needs: list[Need], running: list[int], spare: np.ndarray, supply: SupplyIndex) -> int:
    """The most (elastic machine, idle owned machine) pairs: `running[i]` elastic machines of
    `needs[i]`, `spare[p]` idle owned machines of profile p, an edge where need i fits p.
    Needs with the same fitting profiles, and profiles fitting the same needs, are merged
    first (it changes no maximum), so the flow runs on a small graph."""
    idle_pids = np.flatnonzero(spare)
    if not needs or not len(idle_pids):
        return 0
    fits = np.zeros((len(needs), len(idle_pids)), dtype=bool)
    idle_set = set(idle_pids.tolist())
    mask = np.zeros(len(spare), dtype=bool)
    for i, need in enumerate(needs):
        matching = supply.matching(need)
        if matching.isdisjoint(idle_set):
            continue
        mask[:] = False
        mask[list(matching)] = True
        fits[i] = mask[idle_pids]
    rows = fits.any(axis=1)
    if not rows.any():
        return 0
    fits, want = fits[rows], np.asarray(running, dtype=np.int64)[rows]
    cols, col_of = np.unique(fits.T, axis=0, return_inverse=True)
    have = np.bincount(col_of.ravel(), weights=spare[idle_pids], minlength=len(cols))
    left, row_of = np.unique(cols.T, axis=0, return_inverse=True)
    want = np.bincount(row_of.ravel(), weights=want, minlength=len(left))
    edges = [np.flatnonzero(r).tolist() for r in left]
    return _max_flow(want.astype(np.int64).tolist(), have.astype(np.int64).tolist(), edges)


def _max_flow(a: list[int], b: list[int], edges: list[list[int]]) -> int:
    """The most units from left nodes (a[i] each) to right nodes (b[j] each) along `edges`
    (i -> the js it may send to, without limit): augmenting paths, shortest first."""
    flow: dict[tuple[int, int], int] = {}
    users: list[set[int]] = [set() for _ in b]  # per right node, the lefts sending to it
    a, b = list(a), list(b)
    total = 0
    # A greedy start (scarcest right nodes first), then augmenting paths fix what it missed.
    for i in sorted(range(len(a)), key=lambda i: len(edges[i])):
        for j in edges[i]:
            n = min(a[i], b[j])
            if n > 0:
                flow[(i, j)] = flow.get((i, j), 0) + n
                users[j].add(i)
                a[i] -= n
                b[j] -= n
                total += n
    while True:
        # BFS over left nodes with units left, to a right node with room.
        parent: dict[tuple[str, int], tuple[str, int] | None] = {}
        queue = [("L", i) for i in range(len(a)) if a[i] > 0]
        for node in queue:
            parent[node] = None
        end = None
        for node in queue:
            side, k = node
            if side == "L":
                for j in edges[k]:
                    if ("R", j) not in parent:
                        parent[("R", j)] = node
                        if b[j] > 0:
                            end = ("R", j)
                            break
                        queue.append(("R", j))
            else:
                for i in sorted(users[k]):
                    if ("L", i) not in parent:
                        parent[("L", i)] = node
                        queue.append(("L", i))
            if end is not None:
                break
        if end is None:
            return total
        path = [end]
        while parent[path[-1]] is not None:
            path.append(parent[path[-1]])  # type: ignore[arg-type]
        path.reverse()
        n = min(a[path[0][1]], b[end[1]])
        for u, v in zip(path, path[1:], strict=False):
            if u[0] == "R":  # undo some of v's flow into u
                n = min(n, flow[(v[1], u[1])])
        for u, v in zip(path, path[1:], strict=False):
            if u[0] == "L":
                key = (u[1], v[1])
                flow[key] = flow.get(key, 0) + n
                users[v[1]].add(u[1])
            else:
                key = (v[1], u[1])
                flow[key] -= n
                if not flow[key]:
                    users[u[1]].discard(v[1])
        a[path[0][1]] -= n
        b[end[1]] -= n
        total += n


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
