"""The per-cluster baseline: the same demand, as if every cluster autoscaled alone.

`bigfleet simulate SCENARIO --compare per-cluster` runs the scenario twice: once as BigFleet
(one fleet), once as each cluster's own autoscaler would (Karpenter or Cluster Autoscaler per
cluster). For the second run every cluster becomes its own scenario, run by the same engine,
simulated providers and cost model:

- **Fixed capacity** (bare-metal racks and reserved cloud instances, paid for whether used or
  not) is split into per-cluster shares by a stated rule: `peak` (in proportion to the cluster's
  peak demand for machines of that kind), `mean` (its time-weighted mean demand), or `quotas`
  (given counts). The split is over the whole pool of a *kind* (a provider's racks or reserved
  lines of one instance type, any zone): the kind's machines are apportioned by largest
  remainder, then each cluster's share is laid onto the kind's racks or lines (`lay_out`). So
  rounding happens once per kind, not once per rack. No cluster gets more of an owned kind
  than it could use at its peak, a need fitting several owned kinds counted once over them
  (`owned_counts`); what no cluster can use stays unallocated, and the per-cluster run pays
  for it idle (`unallocated`), so both runs own (and pay for) the same hardware.
- **Cloud capacity bought on demand** (on-demand and spot quota lines): by default
  (`cloud="split"`) each line is split like fixed capacity, per kind (provider, instance type,
  capacity type) by the clusters' demand, so both runs can buy the same cloud capacity in all:
  the clusters alone share the fleet's account and its quota. `cloud="each"` gives every
  cluster its own account with the whole of the fleet's quota (N clusters, N times the quota
  BigFleet has). With `--split quotas` the quota lines are whole per cluster (`each`).
- Each cluster then picks the cheapest fitting offering, drops idle machines after the same
  timeouts, preempts only inside itself, and shares nothing with other clusters.
- Decommissions and shard membership changes of the scenario are not replayed (they are
  fleet operations).
"""

from __future__ import annotations

import json
import math
import pathlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field, RootModel

from ..engine.supply import SupplyIndex
from ..labels import RACK
from ..models import CapacityNeed, CapacityType, ListFilter, Name
from ..needs import Need
from ..shard import Shard
from ..yamlfile import load_model
from .apportion import capped_split, lay_out, split_counts
from .scenario import BareMetalProviderSpec, CloudProviderSpec, Scenario, ScenarioError

Split = Literal["peak", "mean", "quotas"]
SPLITS: tuple[Split, ...] = ("peak", "mean", "quotas")
Cloud = Literal["split", "each"]
CLOUDS: tuple[Cloud, ...] = ("split", "each")


@dataclass(frozen=True)
class Unit:
    """A piece of capacity the baseline splits: a rack, a reserved quota line
    (`INSTANCE_TYPE/ZONE`) or, with the cloud split, a spot or on-demand quota line
    (`INSTANCE_TYPE/ZONE/CAPACITY_TYPE`)."""

    provider: str
    name: str
    count: int
    instance_type: str = ""
    capacity_type: str = ""

    @property
    def key(self) -> str:
        return f"{self.provider}/{self.name}"

    @property
    def owned(self) -> bool:
        """A rack or a reserved line: paid for whether used or not."""
        return not self.capacity_type

    @property
    def kind(self) -> str:
        """Units whose machines are interchangeable: one provider, one instance type. The zone
        is left out: a need confined to a zone counts only towards that zone's units, and the
        layout puts its share there when it can."""
        kind = f"{self.provider}/{self.instance_type}"
        return f"{kind}/{self.capacity_type}" if self.capacity_type else kind


def fixed_units(scenario: Scenario, cloud: Cloud = "each") -> list[Unit]:
    """The units the baseline splits: racks and reserved lines, and with `cloud="split"` the
    spot and on-demand quota lines too."""
    units: list[Unit] = []
    for spec in scenario.providers:
        if isinstance(spec, BareMetalProviderSpec):
            units += [Unit(spec.name, r.rack, r.count, r.instance_type) for r in spec.racks]
            continue
        for q in spec.quota:
            if q.capacity_type is CapacityType.RESERVED:
                units.append(
                    Unit(spec.name, f"{q.instance_type}/{q.zone}", q.count, q.instance_type)
                )
            elif cloud == "split":
                kind = q.capacity_type.value
                name = f"{q.instance_type}/{q.zone}/{kind}"
                units.append(Unit(spec.name, name, q.count, q.instance_type, kind))
    return units


@dataclass
class Demand:
    """What the split reads off the demand. Per cluster: per unit, its peak (or mean) demand
    for machines of the unit (`units`); per kind, its peak (or mean) demand for machines of the
    kind (`kinds`: the needs that fit at least one of the kind's units, each counted once);
    and whether it has a need confined to one rack (`same_rack`)."""

    units: dict[str, list[float]]
    kinds: dict[str, dict[str, float]]
    same_rack: set[str]
    # Per cluster, per set of kinds (indexes into the kinds in order of first unit): its demand
    # (by the rule) for machines of needs that fit exactly the kinds of that set, each need
    # counted once: a need fitting two pools is one entry, not one in each.
    groups: dict[str, dict[frozenset[int], float]] = field(default_factory=dict)
    # The same at the peak, whatever the rule (a cluster's owned share is capped by its peak).
    group_peaks: dict[str, dict[frozenset[int], float]] = field(default_factory=dict)
    kind_peaks: dict[str, dict[str, float]] = field(default_factory=dict)


def demand_weights(scenario: Scenario, units: list[Unit], rule: Split) -> dict[str, list[float]]:
    """Per cluster, per unit: its peak or time-weighted mean demand for machines of the unit
    (the sum of the counts of its needs that the unit's machines can serve)."""
    return demand_of(scenario, units, rule).units


def demand_of(scenario: Scenario, units: list[Unit], rule: Split) -> Demand:
    """Per cluster: its peak or time-weighted mean demand per unit and per kind (see `Demand`)."""
    from .run import Simulation  # the run module imports this one

    # Weights from the demand as the trace gives it (a closed loop's depends on the fleet).
    open_loop = scenario.model_copy(deep=True)
    for c in open_loop.clusters:
        if c.workload is not None:
            c.workload.closed_loop = False
    sim = Simulation(open_loop)
    index = _unit_index(sim, units)
    supply = SupplyIndex(index.inventory)
    fits: dict[str, list[int]] = {}

    def units_of(cluster: str, i: int, need: CapacityNeed) -> list[int]:
        signature = need.model_dump_json(exclude={"count"})
        if signature not in fits:
            pids = supply.matching(Need(cluster, i, 0, need, signature))
            fits[signature] = sorted({index.unit_of[p] for p in pids if p in index.unit_of})
        return fits[signature]

    kinds = list(dict.fromkeys(u.kind for u in units))
    kind_of = [kinds.index(u.kind) for u in units]
    width = len(units) + len(kinds)  # one level per unit, then one per kind
    events = [(t, c, needs) for t, _, c, needs in sorted(sim._timeline)]
    weights = {c.name: [0.0] * width for c in scenario.clusters}
    peaks = {c.name: [0.0] * width for c in scenario.clusters}
    groups: dict[str, dict[frozenset[int], float]] = {c: {} for c in weights}
    group_peaks: dict[str, dict[frozenset[int], float]] = {c: {} for c in weights}
    same_rack: set[str] = set()
    last: dict[str, tuple[float, list[float], dict[frozenset[int], float]]] = {}
    end = scenario.duration_seconds
    for t, cluster, needs in [*events, *((end, c, None) for c in weights)]:
        if cluster in last and rule == "mean":
            since, level, by_group = last[cluster]
            for u, v in enumerate(level):
                weights[cluster][u] += v * (min(t, end) - since) / end
            for g, v in by_group.items():
                groups[cluster][g] = groups[cluster].get(g, 0.0) + v * (min(t, end) - since) / end
        if needs is None:
            continue
        level = [0.0] * width
        by_group = {}
        for i, need in enumerate(needs):
            fit = units_of(cluster, i, need)
            for u in fit:
                level[u] += need.count
            fits_kinds = frozenset(kind_of[u] for u in fit)
            for k in fits_kinds:
                level[len(units) + k] += need.count
            if fits_kinds and need.count > 0:
                by_group[fits_kinds] = by_group.get(fits_kinds, 0.0) + need.count
            if need.same == RACK and need.count > 0:
                same_rack.add(cluster)
        peaks[cluster] = [max(a, b) for a, b in zip(peaks[cluster], level, strict=True)]
        for g, v in by_group.items():
            group_peaks[cluster][g] = max(group_peaks[cluster].get(g, 0.0), v)
        last[cluster] = (min(t, end), level, by_group)
    if rule == "peak":
        weights, groups = peaks, group_peaks
    return Demand(
        units={c: w[: len(units)] for c, w in weights.items()},
        kinds={c: dict(zip(kinds, w[len(units) :], strict=True)) for c, w in weights.items()},
        same_rack=same_rack,
        groups=groups,
        group_peaks=group_peaks,
        kind_peaks={c: dict(zip(kinds, w[len(units) :], strict=True)) for c, w in peaks.items()},
    )


@dataclass
class _UnitIndex:
    inventory: Any
    unit_of: dict[int, int]


def _unit_index(sim: Any, units: list[Unit]) -> _UnitIndex:
    """One inventory holding every machine of the scenario, and each profile's unit."""
    shard = Shard(0, sim.policy)
    position = {u.key: i for i, u in enumerate(units)}
    for provider in sim.providers.values():
        shard.adopt(provider.list(ListFilter()), 0.0)
    inv = shard.inventory
    unit_of: dict[int, int] = {}
    for pid, profile in enumerate(inv.profiles.profiles):
        if profile.capacity_type is CapacityType.BARE_METAL:
            key = f"{profile.provider}/{profile.label(RACK)}"
        elif profile.capacity_type is CapacityType.RESERVED:
            key = f"{profile.provider}/{profile.instance_type}/{profile.zone}"
        else:
            key = (
                f"{profile.provider}/{profile.instance_type}/{profile.zone}/"
                f"{profile.capacity_type.value}"
            )
        if key in position:
            unit_of[pid] = position[key]
    return _UnitIndex(inv, unit_of)


def shares(
    scenario: Scenario,
    rule: Split,
    quotas: Mapping[str, Mapping[str, int]] | None = None,
    cloud: Cloud = "split",
) -> dict[str, dict[str, int]]:
    """Each cluster's share of every unit: cluster -> unit key -> machines (a quota line not
    named: the whole line, its own account's).

    Per kind (`Unit.kind`): the kind's machines are apportioned over the clusters by largest
    remainder of their demand for the kind (`split_counts`), then laid onto the kind's units
    (`lay_out`)."""
    clusters = [c.name for c in scenario.clusters]
    if rule == "quotas":
        return _given(fixed_units(scenario), clusters, quotas or {})
    units = fixed_units(scenario, cloud)
    out: dict[str, dict[str, int]] = {c: {u.key: 0 for u in units} for c in clusters}
    if not units:
        return out
    demand = demand_of(scenario, units, rule)
    kinds = list(dict.fromkeys(u.kind for u in units))
    totals = {k: sum(u.count for u in units if u.kind == k) for k in kinds}
    owned = owned_counts(clusters, kinds, totals, demand, {u.kind for u in units if u.owned})
    for kind in kinds:
        members = [u for u, unit in enumerate(units) if unit.kind == kind]
        total = totals[kind]
        counts = owned.get(kind) or split_counts(total, [demand.kinds[c][kind] for c in clusters])
        usable = {c: [u for u in members if demand.units[c][u] > 0] or members for c in clusters}
        placed = lay_out(
            [units[u].count for u in members],
            [
                (
                    n,
                    [members.index(u) for u in usable[c]],
                    c in demand.same_rack,
                )
                for c, n in zip(clusters, counts, strict=True)
            ],
        )
        for c, parts in zip(clusters, placed, strict=True):
            for u, n in zip(members, parts, strict=True):
                out[c][units[u].key] = n
    return out


def owned_counts(
    clusters: list[str],
    kinds: list[str],
    totals: Mapping[str, int],
    demand: Demand,
    owned: set[str],
) -> dict[str, list[int]]:
    """Per owned kind (racks, reserved lines), each cluster's machines of it: never more than
    the cluster could use at its peak, a need that fits several kinds counted once over them,
    and what no cluster can use left unallocated (the per-cluster run still pays for it).

    Each kind (in order) is split over the clusters in proportion to the rule's demand for it,
    a need that fits several owned kinds weighing on each by the kind's share of their
    machines; each cluster is capped by what is left of its peak demand for the kind
    (`capped_split`), and what it takes comes off the needs it serves. A second pass offers
    what is left of each kind to the clusters whose needs fitting it are still short."""
    index = {k: i for i, k in enumerate(kinds)}
    mine = frozenset(index[k] for k in owned)
    left: dict[str, dict[frozenset[int], float]] = {c: {} for c in clusters}
    weight: dict[str, dict[frozenset[int], float]] = {c: {} for c in clusters}
    for into, of in ((left, demand.group_peaks), (weight, demand.groups)):
        for c in clusters:
            for g, v in of.get(c, {}).items():
                if g & mine:
                    into[c][g & mine] = into[c].get(g & mine, 0.0) + v
    room = {k: totals[k] for k in kinds if k in owned}
    size = {index[k]: n for k, n in room.items()}
    out = {k: [0] * len(clusters) for k in room}
    for second in (False, True):
        for kind in room:
            k = index[kind]
            serves = [
                sorted((g for g in left[c] if k in g), key=lambda g: (len(g), sorted(g)))
                for c in clusters
            ]
            caps = [
                max(
                    0,
                    math.floor(
                        min(
                            sum(left[c][g] for g in gs),
                            demand.kind_peaks.get(c, {}).get(kind, 0.0) - out[kind][i],
                        )
                    ),
                )
                for i, (c, gs) in enumerate(zip(clusters, serves, strict=True))
            ]
            weights = [
                sum(left[c][g] for g in gs)
                if second
                else sum(weight[c].get(g, 0.0) * size[k] / sum(size[j] for j in g) for g in gs)
                for c, gs in zip(clusters, serves, strict=True)
            ]
            given = capped_split(room[kind], weights, caps)
            room[kind] -= sum(given)
            for i, (c, gs, n) in enumerate(zip(clusters, serves, given, strict=True)):
                out[kind][i] += n
                for g in gs:
                    took = min(float(n), left[c][g])
                    left[c][g] -= took
                    n -= int(took)
    return out


def unallocated(
    scenario: Scenario, split_of: Mapping[str, Mapping[str, int]]
) -> list[tuple[Unit, int, float, str]]:
    """The owned machines no cluster was given: (unit, machines, price an hour, capacity
    type) per unit with some. The per-cluster run pays for them all the same."""
    prices: dict[str, tuple[float, str]] = {}
    for spec in scenario.providers:
        if isinstance(spec, BareMetalProviderSpec):
            for r in spec.racks:
                prices[f"{spec.name}/{r.rack}"] = (float(r.price_per_hour), "bare-metal")
        else:
            for q in spec.quota:
                if q.capacity_type is CapacityType.RESERVED:
                    key = f"{spec.name}/{q.instance_type}/{q.zone}"
                    prices[key] = (float(q.price_per_hour), "reserved")
    out = []
    for unit in fixed_units(scenario):
        spare = unit.count - sum(parts.get(unit.key, 0) for parts in split_of.values())
        if spare > 0 and unit.key in prices:
            out.append((unit, spare, *prices[unit.key]))
    return out


def _given(
    units: list[Unit], clusters: list[str], quotas: Mapping[str, Mapping[str, int]]
) -> dict[str, dict[str, int]]:
    known = {u.key: u for u in units}
    problems = [f"quotas.{c}: no such cluster" for c in quotas if c not in clusters]
    for cluster, given in quotas.items():
        problems += [
            f"quotas.{cluster}.{key}: no such rack or reserved quota line (one of: "
            f"{', '.join(sorted(known)) or 'none'})"
            for key in given
            if key not in known
        ]
    for unit in units:
        total = sum(q.get(unit.key, 0) for q in quotas.values())
        if total != unit.count:
            problems.append(
                f"quotas: {unit.key} has {unit.count} machines; the clusters' quotas add up "
                f"to {total}"
            )
    if problems:
        raise ScenarioError("invalid quotas:\n  " + "\n  ".join(problems))
    return {c: {u.key: quotas.get(c, {}).get(u.key, 0) for u in units} for c in clusters}


Quotas = RootModel[dict[Name, dict[str, Annotated[int, Field(ge=0)]]]]


def load_quotas(path: str | pathlib.Path) -> dict[str, dict[str, int]]:
    """The `--split quotas` file: cluster -> {PROVIDER/RACK or PROVIDER/TYPE/ZONE: machines}."""
    return load_model(pathlib.Path(path), Quotas, "quotas file", ScenarioError).root


def cluster_scenario(scenario: Scenario, cluster: str, share: Mapping[str, int]) -> Scenario:
    """The scenario as `cluster`'s own autoscaler sees it: its share of the fixed capacity and
    of the cloud quota lines `share` names (the others whole: its own account's), the same
    prices, only its own demand."""
    raw = scenario.model_dump(mode="json", exclude_unset=True)
    providers = []
    for spec, dumped in zip(scenario.providers, raw["providers"], strict=True):
        if isinstance(spec, BareMetalProviderSpec):
            racks = [
                {**r, "count": share[f"{spec.name}/{r['rack']}"]}
                for r in dumped["racks"]
                if share.get(f"{spec.name}/{r['rack']}", 0) > 0
            ]
            if racks:
                providers.append({**dumped, "racks": racks})
        elif isinstance(spec, CloudProviderSpec):
            lines = [_quota_line(spec.name, q, share) for q in dumped["quota"]]
            providers.append({**dumped, "quota": lines})
    raw.update(
        providers=providers,
        clusters=[c for c in raw["clusters"] if c["name"] == cluster],
        shards=1,
        decommissions=[],
    )
    raw["name"] = f"{scenario.name}:{cluster}"
    return Scenario.model_validate_json(json.dumps(raw))


def _quota_line(provider: str, line: dict[str, Any], share: Mapping[str, int]) -> dict[str, Any]:
    key = f"{provider}/{line['instance_type']}/{line['zone']}"
    if line["capacity_type"] == CapacityType.RESERVED.value:
        return {**line, "count": share.get(key, 0)}
    elastic = f"{key}/{line['capacity_type']}"
    return {**line, "count": share[elastic]} if elastic in share else line
