"""What a simulation observed: actions, preemptions, shortfalls, cost, readiness over time."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..inventory import CODE
from ..models import (
    Action,
    CapacityType,
    ClusterCapacityNeeds,
    Machine,
    MachineState,
)
from ..transitions import Corrective
from .measures import BANDS, Asks, WaitBook, band, moved_within_cluster

if TYPE_CHECKING:
    from ..engine import Decision
    from ..inventory import Inventory
    from ..providers.simulated.provider import SimulatedProvider
    from ..shard import Shard
    from .executor import InFlight

S = MachineState
# Cloud machines cost money while the provider runs them; owned capacity (bare metal, reserved
# instances) is paid for the whole time it is owned, in every state, at its amortised price.
BILLED = (S.CREATING, S.IDLE, S.CONFIGURING, S.CONFIGURED, S.DRAINING, S.DELETING)
OWNED_TYPES = frozenset({CapacityType.BARE_METAL, CapacityType.RESERVED})
OWNED_BILLED = tuple(S)
CAPACITY_TYPES = [c.value for c in CapacityType]
__all__ = ["BANDS", "CAPACITY_TYPES", "Recorder", "band"]


@dataclass
class NeedTrack:
    cluster: str
    index: int
    priority: int
    count: int
    demand_since: float
    ready_at: float | None = None
    satisfied: int = 0
    samples: list[tuple[float, int]] = field(default_factory=list)
    asks: Asks = field(init=False)

    def __post_init__(self) -> None:
        self.asks = Asks(self.priority)


class Recorder:
    def __init__(self) -> None:
        self.actions: list[dict[str, Any]] = []
        self.preemptions: list[dict[str, Any]] = []
        self.shortfalls: dict[tuple[str, int, str], dict[str, Any]] = {}
        self.errors: list[tuple[float, str]] = []
        self.failures: list[dict[str, Any]] = []
        self.held_back: Counter[str] = Counter()  # machine-cycles, by reason
        self.rate_limits: Counter[str] = Counter()
        self.cost: dict[str, float] = dict.fromkeys(CAPACITY_TYPES, 0.0)
        self.idle_machine_hours = 0.0
        # Elastic machine-hours run in one shard while free owned machines in another would
        # stand in for them (`stranded`), and the count at the coordinator's last round.
        self.stranded_machine_hours = 0.0
        self.beside = 0
        self.needs: dict[tuple[str, int], NeedTrack] = {}
        self.rejected_rollups: list[str] = []
        self.book = WaitBook()
        self._shapes: dict[str, list[tuple[int, int]]] = {}
        # Per shard: (needs version, the engine's claims) at the last cycle, and the cost rate of
        # an inventory version (nothing changes between most events).
        self._seen: dict[int, tuple[int, tuple[tuple[str, Any], ...]]] = {}
        self._rates: dict[int, tuple[int, dict[str, float], float]] = {}
        self.in_cluster: list[dict[str, Any]] = []
        # Machines the engine moved for cost: toward cheaper capacity (`Decision.consolidations`)
        # and for the fleet's bill (`Decision.cost_moves`: backfill displaced from owned
        # capacity, elastic machines given back), summed over the run's cycles.
        self.consolidations = 0
        self.cost_moves = 0
        self.series: dict[str, Any] = {
            "t": [],
            "demand_by_band": {b: [] for b in BANDS},
            "served_by_band": {b: [] for b in BANDS},
            "cost_per_hour_by_capacity_type": {c: [] for c in CAPACITY_TYPES},
            "machines_owned": [],
            "machines_busy": [],
        }

    # ---- inputs -----------------------------------------------------------------------------

    def rollup(self, now: float, rollup: ClusterCapacityNeeds) -> None:
        # Operators re-send an unchanged roll-up every cycle: that must cost (almost) nothing.
        shape = [(n.priority, n.count) for n in rollup.needs]
        if self._shapes.get(rollup.cluster) == shape:
            return
        self._shapes[rollup.cluster] = shape
        for i, need in enumerate(rollup.needs):
            track = self.needs.get((rollup.cluster, i))
            if track is None or track.priority != need.priority:
                if track is not None:  # another need now: the old one's open asks are withdrawn
                    track.asks.withdraw(0, self.book)
                track = self.needs[(rollup.cluster, i)] = NeedTrack(
                    rollup.cluster, i, need.priority, need.count, now
                )
                track.asks.want(need.count, now, self.book)
                continue
            if need.count > track.count:
                track.demand_since = now
                if track.ready_at is not None and track.satisfied < need.count:
                    track.ready_at = None
            short = need.count - track.satisfied
            if need.count > track.count:
                track.asks.want(max(short, len(track.asks.open)), now, self.book)
            else:
                track.asks.withdraw(short, self.book)
            track.count = need.count
        for (cluster, i), track in self.needs.items():
            if cluster == rollup.cluster and i >= len(rollup.needs):
                track.count = 0
                track.asks.withdraw(0, self.book)

    # ---- what happened ----------------------------------------------------------------------

    def action(self, now: float, action: Action, shard: Shard, provider: SimulatedProvider) -> None:
        inv = shard.inventory
        ids = action.machine_ids if action.kind == "create" else [action.machine_id]
        for mid in ids:
            row = inv.row(mid)
            profile = inv.profile_of(row)
            entry = {
                "t": now,
                "kind": action.kind,
                "machine": mid,
                "cluster": getattr(action, "cluster", None),
                "provider": provider.name,
                "capacity_type": profile.capacity_type.value,
                "grace_seconds": getattr(action, "grace_seconds", None),
                "reason": _reason(action),
                "shard": shard.id,
            }
            notice = shard.notices.get(mid) if action.kind == "drain" else None
            if notice is not None and notice.deadline_unix:
                # How far ahead of the machine's end the shard acted (its replacement's start),
                # and what the work on it said an interruption costs (seed: $ of lost work).
                entry["ahead_seconds"] = max(0.0, notice.deadline_unix - now)
                entry["penalty"] = float(inv.holder_interruption[row])
            self.actions.append(entry)

    def settled(self, now: float, machine: Machine, flight: InFlight) -> None:
        if machine.state is S.CONFIGURED and flight.need and flight.cluster:
            index = int(flight.need.rsplit("#", 1)[1])
            track = self.needs.get((flight.cluster, index))
            if track is not None:
                track.asks.answer_one(now, self.book)

    def failed(self, now: float, machine: Machine, path: Corrective) -> None:
        self.failures.append(
            {
                "t": now,
                "machine": machine.id,
                "failed_from": machine.failed_from.value if machine.failed_from else None,
                "error": machine.last_error,
                "corrective": path.value,
            }
        )

    def error(self, now: float, message: str) -> None:
        self.errors.append((now, message))

    def rate_limited(self, provider: str) -> None:
        self.rate_limits[provider] += 1

    def cycle(self, now: float, shard: Shard, decision: Decision, sample: bool) -> None:
        self.consolidations += sum(decision.consolidations.values())
        for bounds in shard.disruption.clusters.values():  # (what budgets and marks held back)
            self.held_back.update(bounds.held)
        # `cost_moves` is newer than `consolidations`: an engine without it moves nothing for it.
        self.cost_moves += sum(getattr(decision, "cost_moves", {}).values())
        for p in decision.preemptions:
            self.preemptions.append(
                {
                    "t": now,
                    "machine": p.machine_id,
                    "victim": p.victim_cluster,
                    "victim_priority": p.victim_priority,
                    "preemptor": p.preemptor_cluster,
                    "preemptor_priority": p.preemptor_priority,
                    "grace_seconds": p.grace_seconds,
                }
            )
        for s in decision.shortfalls:
            # (A held repair is one entry however its counts change: they are in its words.)
            key = (s.cluster, s.priority, "repair held" if s.repair_held else s.profile)
            seen = self.shortfalls.setdefault(
                key,
                {
                    "cluster": s.cluster,
                    "priority": s.priority,
                    "profile": s.profile,
                    "first_t": now,
                    "max_count": 0,
                    "max_age": 0,
                    "escalated": False,
                    "repair_held": s.repair_held,
                },
            )
            seen["last_t"] = now
            seen["max_count"] = max(seen["max_count"], s.count)
            seen["max_age"] = max(seen["max_age"], s.age)
            seen["escalated"] = seen["escalated"] or s.escalated
        # Nothing moved and no roll-up changed since the last cycle: the claims are the same.
        # `ready(need)` reads only the engine's per-cluster claims, which the engine replaces
        # (never changes) when they change: same needs and the very same claims, same answers.
        claims = tuple(shard.engine.claims.items())
        last = self._seen.get(shard.id)
        if (
            not sample
            and last is not None
            and last[0] == shard.needs.version
            and len(last[1]) == len(claims)
            and all(a[0] == b[0] and a[1] is b[1] for a, b in zip(last[1], claims, strict=True))
        ):
            return
        self._seen[shard.id] = (shard.needs.version, claims)
        by_cluster: dict[str, list[tuple[NeedTrack, int]]] = {}
        for need in shard.needs:
            track = self.needs.get((need.cluster, need.index))
            if track is not None:
                by_cluster.setdefault(need.cluster, []).append((track, shard.engine.ready(need)))
        for cluster, tracks in by_cluster.items():
            self._moved_within(now, cluster, tracks)
            for track, satisfied in tracks:
                track.satisfied = satisfied
                track.asks.want(max(0, track.count - satisfied), now, self.book)
                if track.ready_at is None and track.count > 0 and satisfied >= track.count:
                    track.ready_at = now
                if sample:
                    track.samples.append((now, satisfied))

    def _moved_within(self, now: float, cluster: str, tracks: list[tuple[NeedTrack, int]]) -> None:
        moved, lost, gained = moved_within_cluster(
            [(t.priority, t.count, t.satisfied) for t, _ in tracks],
            [(t.count, sat) for t, sat in tracks],
        )
        if moved:
            self.in_cluster.append(
                {"t": now, "cluster": cluster, "machines": moved, "lost": lost, "gained": gained}
            )

    def after_cycle(self, now: float, shards: list[Shard], seconds: float, sample: bool) -> None:
        """Once a cycle, after every shard decided: the demand integrals over the cycle to come
        and, every `sample_seconds`, one point of each time series."""
        for track in self.needs.values():
            self.book.integrate(track.priority, track.count, track.satisfied, seconds)
        if not sample:
            return
        series = self.series
        series["t"].append(now)
        demand = dict.fromkeys(BANDS, 0)
        served = dict.fromkeys(BANDS, 0)
        for track in self.needs.values():
            demand[band(track.priority)] += track.count
            served[band(track.priority)] += min(track.count, track.satisfied)
        for b in BANDS:
            series["demand_by_band"][b].append(demand[b])
            series["served_by_band"][b].append(served[b])
        rate = dict.fromkeys(CAPACITY_TYPES, 0.0)
        owned = busy = 0
        for shard in shards:
            inv = shard.inventory
            busy += int(inv.counts[CODE[S.CONFIGURED]].sum())
            for p, held in enumerate(_billed(inv)):
                if held:
                    profile = inv.profiles.profiles[p]
                    rate[profile.capacity_type.value] += held * profile.price_per_hour
                    owned += int(held)
        for c in CAPACITY_TYPES:
            series["cost_per_hour_by_capacity_type"][c].append(round(float(rate[c]), 4))
        series["machines_owned"].append(owned)
        series["machines_busy"].append(busy)

    def open_asks(self, now: float) -> dict[str, list[float]]:
        """Per band, the wait so far of every ask still open at `now`."""
        out: dict[str, list[float]] = {}
        for track in self.needs.values():
            if track.asks.open:
                out.setdefault(band(track.priority), []).extend(now - t for t in track.asks.open)
        return out

    def bill(self, shard: Shard, seconds: float) -> None:
        """Integrate cost over `seconds` of the shard's current fleet."""
        inv = shard.inventory
        cached = self._rates.get(shard.id)
        if cached is None or cached[0] != inv.version:
            rate = dict.fromkeys(CAPACITY_TYPES, 0.0)
            billed = _billed(inv)
            for p, profile in enumerate(inv.profiles.profiles):
                if billed[p]:
                    rate[profile.capacity_type.value] += float(billed[p] * profile.price_per_hour)
            idle = float(inv.counts[CODE[S.IDLE]].sum())
            cached = self._rates[shard.id] = (inv.version, rate, idle)
        hours = seconds / 3600.0
        for capacity_type, per_hour in cached[1].items():
            self.cost[capacity_type] += per_hour * hours
        self.idle_machine_hours += cached[2] * hours

    def stranded(self, shards: list[Shard], seconds: float) -> None:
        """Integrate over `seconds` the elastic machines one shard runs while free owned
        machines in another would stand in for them for less, as the coordinator counts them
        for its gauge from the shards' last reports (`pooling/stranded.py`: the needs'
        requirements weighed; a lower bound, from bounded samples), set each round by the
        simulator's coordinator (`beside`). Zero on one shard (issue 45)."""
        if len(shards) < 2 or seconds <= 0:
            return
        self.stranded_machine_hours += self.beside * seconds / 3600.0


def _billed(inv: Inventory) -> np.ndarray:
    """Machines billed per profile: cloud ones while running, owned ones in every state."""
    running = sum(inv.counts[CODE[s]] for s in BILLED)
    held = sum(inv.counts[CODE[s]] for s in OWNED_BILLED)
    owned = np.fromiter(
        (p.capacity_type in OWNED_TYPES for p in inv.profiles.profiles),
        dtype=bool,
        count=len(inv.profiles.profiles),
    )
    n = len(owned)
    return np.where(owned, held[:n], running[:n]).astype(np.float64)


def _reason(action: Action) -> str | None:
    if action.kind == "drain":
        return action.reason.value
    if action.kind == "delete":
        return action.reason.value
    return None


def merge_recorders(recorders: list[Recorder]) -> Recorder:
    """Several runs' records as one (runs of the same length and cycle, different clusters):
    logs interleaved by time, sums summed, time series added point by point."""
    out = Recorder()
    if not recorders:
        return out
    for name in ("actions", "preemptions", "failures", "in_cluster"):
        merged = [e for r in recorders for e in getattr(r, name)]
        setattr(out, name, sorted(merged, key=lambda e: e["t"]))
    out.errors = sorted((e for r in recorders for e in r.errors), key=lambda e: e[0])
    out.rejected_rollups = [x for r in recorders for x in r.rejected_rollups]
    for r in recorders:
        out.shortfalls.update(r.shortfalls)
        out.needs.update(r.needs)
        out.rate_limits.update(r.rate_limits)
        out.held_back.update(r.held_back)
        out.idle_machine_hours += r.idle_machine_hours
        out.stranded_machine_hours += r.stranded_machine_hours
        out.consolidations += r.consolidations
        out.cost_moves += r.cost_moves
        for c, dollars in r.cost.items():
            out.cost[c] += dollars
        out.book.add(r.book)
    out.series = _sum_series([r.series for r in recorders])
    return out


def _sum_series(all_series: list[dict[str, Any]]) -> dict[str, Any]:
    first = all_series[0]

    def add(get: Any) -> list[float]:
        return [sum(values) for values in zip(*(get(s) for s in all_series), strict=True)]

    return {
        "t": list(first["t"]),
        **{
            group: {k: add(lambda s, g=group, k=k: s[g][k]) for k in first[group]}
            for group in ("demand_by_band", "served_by_band", "cost_per_hour_by_capacity_type")
        },
        "machines_owned": add(lambda s: s["machines_owned"]),
        "machines_busy": add(lambda s: s["machines_busy"]),
    }
