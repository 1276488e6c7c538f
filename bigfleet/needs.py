"""The needs table of design §8: every need of every cluster's latest roll-up, priority-sorted."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from sortedcontainers import SortedList

from .labels import PER_MACHINE_KEYS
from .models import (
    MAX_GENERATION,
    CapacityNeed,
    ClusterCapacityNeeds,
    NodeHealth,
    NodeSelectorRequirement,
    TopologySpread,
    from_wire,
)


@dataclass(frozen=True, slots=True)
class Need:
    """One need in the table. `arrival` orders needs of equal priority (earlier first)."""

    cluster: str
    index: int
    arrival: int
    spec: CapacityNeed
    signature: str = ""
    # The spread rules placement keeps to: the spec's, less those over a key whose every
    # value is one machine's (`labels.PER_MACHINE_KEYS`: they hold by themselves). None: all
    # of the spec's (a shard's run begun before, on replay: `NeedsTable.host_spread_holds`).
    binding: tuple[TopologySpread, ...] | None = None
    # Copies of hot fields: the cycle reads them for every need, every cycle.
    key: str = field(init=False)
    priority: int = field(init=False)
    count: int = field(init=False)
    order: tuple[int, int, str, int] = field(init=False)
    spread: tuple[TopologySpread, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", f"{self.cluster}#{self.index}")
        object.__setattr__(self, "priority", self.spec.priority)
        object.__setattr__(self, "count", self.spec.count)
        object.__setattr__(
            self, "order", (-self.spec.priority, self.arrival, self.cluster, self.index)
        )
        spread = tuple(self.spec.spread) if self.binding is None else self.binding
        object.__setattr__(self, "spread", spread)

    @property
    def requirements(self) -> tuple[NodeSelectorRequirement, ...]:
        return tuple(self.spec.requirements)

    def sort_key(self) -> tuple[int, int, str, int]:
        return self.order


def binding_spread(spec: CapacityNeed) -> tuple[TopologySpread, ...]:
    """The spread rules of `spec` that placement keeps to (`Need.binding`)."""
    return tuple(r for r in spec.spread if r.key not in PER_MACHINE_KEYS)


def _identity(need: CapacityNeed) -> str:
    """What makes a need 'the same need' across roll-ups: everything but its count."""
    return need.model_dump_json(exclude={"count"})


@dataclass(slots=True)
class _ClusterEntry:
    generation: int
    last_seen: float
    needs: list[Need]
    health: NodeHealth | None = None
    health_generation: int = 0


@dataclass
class NeedsTable:
    """Full-replacement semantics: a roll-up replaces all of its cluster's entries.

    A roll-up whose generation is not above the cluster's last one is stale: its needs and
    health are ignored, but it still proves the cluster's operator is alive, so it refreshes the
    cluster's last-seen time. A cluster silent for longer than `max_silence_seconds` ages out
    of the table (and its machines are reclaimed): an operator whose generations went backwards
    (a counter restarted) must not lose its cluster's machines for it.
    """

    max_silence_seconds: float = 300.0
    # False: a stale roll-up moves nothing, as before issue 30 (a shard's run begun before
    # then replays as it ran: workflows/shard.py sets it from workflow.patched).
    stale_keeps_alive: bool = True
    # True: a spread over `kubernetes.io/hostname` holds by itself; False: it binds as any
    # other key (no machine carries it, so the need got no machine), as in a shard's run begun
    # before (workflows/shard.py sets it from workflow.patched before the run reads needs).
    host_spread_holds: bool = True
    _sorted: SortedList = field(default_factory=lambda: SortedList(key=Need.sort_key))
    _clusters: dict[str, _ClusterEntry] = field(default_factory=dict)
    _arrivals: int = 0
    version: int = 0

    def apply(self, rollup: ClusterCapacityNeeds, now: float) -> bool:
        """Take a validated roll-up; False if it is stale (same or older generation): then
        only the cluster's last-seen time moves."""
        entry = self._clusters.get(rollup.cluster)
        if entry is not None and rollup.generation <= entry.generation:
            if self.stale_keeps_alive:
                entry.last_seen = max(entry.last_seen, now)
            return False
        if entry is not None and [n.spec for n in entry.needs] == rollup.needs:
            # The operator re-sent what it sent before: nothing for the cycle to redo.
            entry.generation = rollup.generation
            entry.last_seen = now
            if rollup.health is not None:
                entry.health = rollup.health
                entry.health_generation += 1
            return True
        previous: Mapping[str, int] = {}
        before: list[Need] = []
        if entry is not None:
            previous = {n.signature: n.arrival for n in entry.needs}
            before = entry.needs
        fresh: list[Need] = []
        for index, spec in enumerate(rollup.needs):
            ident = _identity(spec)
            arrival = previous.get(ident)
            if arrival is None:
                self._arrivals += 1
                arrival = self._arrivals
            old = before[index] if index < len(before) else None
            if old is not None and old.arrival == arrival and old.spec == spec:
                # The very need of last time: kept, so what the engine worked out from it
                # (claims cached per need) still holds.
                fresh.append(old)
            else:
                binding = binding_spread(spec) if self.host_spread_holds else None
                fresh.append(Need(rollup.cluster, index, arrival, spec, ident, binding))
        kept = {id(n) for n in fresh}
        for need in before:
            if id(need) not in kept:
                self._sorted.remove(need)
        had = {id(n) for n in before}
        self._sorted.update(n for n in fresh if id(n) not in had)
        health_gen = entry.health_generation if entry else 0
        if rollup.health is not None:
            health_gen += 1
        self._clusters[rollup.cluster] = _ClusterEntry(
            generation=rollup.generation,
            last_seen=now,
            needs=fresh,
            health=rollup.health or (entry.health if entry else None),
            health_generation=health_gen,
        )
        self.version += 1
        return True

    def submit(self, raw: Mapping[str, Any] | ClusterCapacityNeeds, now: float) -> bool:
        """Validate then apply. A malformed roll-up raises and leaves the table untouched."""
        rollup = (
            raw
            if isinstance(raw, ClusterCapacityNeeds)
            else from_wire(ClusterCapacityNeeds, raw)
        )
        return self.apply(rollup, now)

    def expire(self, now: float) -> list[str]:
        """Drop clusters that stopped sending; returns their names."""
        gone = [
            c for c, e in self._clusters.items() if now - e.last_seen > self.max_silence_seconds
        ]
        for cluster in gone:
            for need in self._clusters.pop(cluster).needs:
                self._sorted.remove(need)
        if gone:
            self.version += 1
        return gone

    def remove(self, cluster: str) -> None:
        """The cluster moved to another shard (a split or merge): forget its needs here."""
        entry = self._clusters.pop(cluster, None)
        if entry is not None:
            for need in entry.needs:
                self._sorted.remove(need)
            self.version += 1

    def __iter__(self) -> Iterator[Need]:
        return iter(self._sorted)

    def __len__(self) -> int:
        return len(self._sorted)

    def clusters(self) -> list[str]:
        return list(self._clusters)

    def needs_of(self, cluster: str) -> list[Need]:
        entry = self._clusters.get(cluster)
        return list(entry.needs) if entry else []

    def generation(self, cluster: str) -> int:
        entry = self._clusters.get(cluster)
        return entry.generation if entry else -1

    def reset_generation(self, cluster: str) -> int | None:
        """Forget the cluster's generation (an operator's `bigfleet cluster NAME
        --reset-generation`): its next roll-up applies whatever its generation; its needs stay
        in force until then. The generation it had, or None if the cluster is not in the table."""
        entry = self._clusters.get(cluster)
        if entry is None:
            return None
        was, entry.generation = entry.generation, -1
        return was

    def health(self, cluster: str) -> tuple[int, NodeHealth | None]:
        """(how many health reports so far, the latest one) for a cluster."""
        entry = self._clusters.get(cluster)
        return (entry.health_generation, entry.health) if entry else (0, None)

    def last_seen(self, cluster: str) -> float | None:
        entry = self._clusters.get(cluster)
        return entry.last_seen if entry else None


# ---- the table as data (snapshots, splits and merges) ---------------------------------------


def needs_state(table: NeedsTable, clusters: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """The table (or those `clusters` of it) as JSON-ready data, arrival order included."""
    out = []
    for cluster in table.clusters() if clusters is None else clusters:
        if cluster not in table._clusters:
            continue
        entry = table._clusters[cluster]
        out.append(
            {
                "cluster": cluster,
                "generation": entry.generation,
                "last_seen": entry.last_seen,
                "needs": [n.spec.model_dump(mode="json") for n in entry.needs],
                "arrivals": [n.arrival for n in entry.needs],
                "health": entry.health.model_dump(mode="json") if entry.health else None,
                "health_generation": entry.health_generation,
            }
        )
    return out


def restore_needs(
    state: list[dict[str, Any]], max_silence: float, table: NeedsTable | None = None
) -> NeedsTable:
    """A needs table from `needs_state`, or those clusters added to `table` (arrival order
    kept, so a cluster that moved keeps its place in the queue)."""
    if table is None:
        table = NeedsTable(max_silence_seconds=max_silence)
    for c in state:
        table.remove(c["cluster"])
        # A generation above MAX_GENERATION was taken before generations were bounded (issue
        # 30): kept, no later roll-up could ever apply, so the cluster starts again from 0.
        generation = c["generation"] if c["generation"] <= MAX_GENERATION else 0
        rollup = from_wire(
            ClusterCapacityNeeds,
            {"cluster": c["cluster"], "generation": max(generation, 0), "needs": c["needs"]},
        )
        table.apply(rollup, c["last_seen"])
        entry = table._clusters[c["cluster"]]
        entry.generation = max(generation, -1)  # (-1: reset by an operator, `reset_generation`)
        for need, arrival in zip(entry.needs, c["arrivals"], strict=True):
            table._sorted.remove(need)
            object.__setattr__(need, "arrival", arrival)
            object.__setattr__(
                need, "order", (-need.priority, arrival, need.cluster, need.index)
            )
            table._sorted.add(need)
        table._arrivals = max([table._arrivals, *c["arrivals"]])
        if c["health"] is not None:
            entry.health = NodeHealth(**c["health"])
        entry.health_generation = c["health_generation"]
    return table
