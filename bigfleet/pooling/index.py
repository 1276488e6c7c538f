"""The shards' last reports, indexed for one round of the coordinator's planning.

A round asks, for every need and shortfall of every shard, which free or preemptible machines
of every other shard would serve it: shards × needs × profiles questions, each a requirement
match on a profile's labels. Each report's profiles are made once a round (`Profile.of` is most
of a question's cost) and each answer is kept: many needs ask for the same machines, and a
profile's answer for one need serves every shard that reports that profile."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from math import inf

from ..cost import effective_cost
from ..models import NodeSelectorRequirement
from ..profiles import Profile
from ..reports import ElasticGroup, MoveKind, PreemptibleGroup, ShardReport
from ..requirements import all_match

ReqKey = tuple[tuple[str, str, tuple[str, ...]], ...]


def req_key(requirements: Iterable[NodeSelectorRequirement]) -> ReqKey:
    return tuple((r.key, str(r.operator), tuple(r.values)) for r in requirements)


class Round:
    """One planning round's view of the reports (see the module)."""

    def __init__(self, reports: Mapping[int, ShardReport], unsettled: bool = False) -> None:
        self.reports = reports
        # Needs not yet settled weigh in `saves` too (`Coordinator.follows_use`): a shard
        # keeps a free machine that would stand in for any of its own elastic ones.
        self.unsettled = unsettled
        self.shards = sorted(reports)
        self.profiles = {s: [Profile.of(m) for m in r.profiles] for s, r in reports.items()}
        self.names = {s: [p.name for p in ps] for s, ps in self.profiles.items()}
        self._fit: dict[tuple[int, str], bool] = {}
        self._keys: dict[int, tuple[object, int]] = {}
        self._numbers: dict[ReqKey, int] = {}
        self._short: dict[tuple[int, int], float] = {}
        self._saves: dict[tuple[int, int], float] = {}
        self._floors: dict[tuple[int, int], float] = {}
        self._offered: dict[int, list[tuple[MoveKind, int, list[str]]]] = {}
        self._fitting: dict[int, list[tuple[int, MoveKind, int, list[str]]]] = {}
        self._by_cost: dict[tuple[int, float], list[tuple[int, MoveKind, int, list[str]]]] = {}
        self._grouped: dict[tuple[int, str], list[tuple[int, list, list[tuple]]]] = {}

    def key(self, owner: ElasticGroup | object, requirements: Iterable) -> int:
        """A number for an object's requirements (the same for equal requirements), made once
        per object this round."""
        kept = self._keys.get(id(owner))
        if kept is None or kept[0] is not owner:
            number = self._numbers.setdefault(req_key(requirements), len(self._numbers))
            kept = self._keys[id(owner)] = (owner, number)
        return kept[1]

    def fits(self, key: int, requirements: Iterable, shard: int, p: int) -> bool:
        """Whether profile `p` of `shard`'s report fits the requirements (`key` theirs)."""
        name = self.names[shard][p]
        found = self._fit.get((key, name))
        if found is None:
            label_map = self.profiles[shard][p].label_map
            found = self._fit[(key, name)] = all_match(requirements, label_map)
        return found

    def free(
        self, shard: int, used: set[str], keep: Callable[[int], bool] | None = None
    ) -> Iterator[tuple[MoveKind, int, list[str]]]:
        """(kind, profile, ids not taken this round) of the report's idle then speculative
        samples, of the profiles `keep` keeps (asked before the ids are looked at)."""
        offered = self._offered.get(shard)
        if offered is None:
            report = self.reports[shard]
            offered = self._offered[shard] = [
                (kind, g.profile, g.ids)
                for kind, groups in (
                    (MoveKind.IDLE, report.idle),
                    (MoveKind.SPECULATIVE, report.speculative),
                )
                for g in groups
            ]
        for kind, p, all_ids in offered:
            if keep is None or keep(p):
                ids = [mid for mid in all_ids if mid not in used]
                if ids:
                    yield kind, p, ids

    def fitting(
        self, key: int, requirements: Iterable
    ) -> list[tuple[int, MoveKind, int, list[str]]]:
        """(shard, kind, profile, ids) of every report's free samples that fit the
        requirements (`key` theirs), in shard order, idle before speculative: made once per
        requirements a round (many needs ask for the same machines)."""
        found = self._fitting.get(key)
        if found is None:
            found = self._fitting[key] = [
                (shard, kind, p, ids)
                for shard in self.shards
                for kind, p, ids in self.free(shard, set())
                if self.fits(key, requirements, shard, p)
            ]
        return found

    def cheapest(
        self, key: int, requirements: Iterable, penalty: float
    ) -> list[tuple[int, MoveKind, int, list[str]]]:
        """`fitting`, idle before speculative, each kind the cheapest for a need with
        `penalty` first (effective cost at the margin: an owned machine before a cloud slot),
        then in shard order; made once per requirements and penalty a round."""
        found = self._by_cost.get((key, penalty))
        if found is None:
            found = self._by_cost[(key, penalty)] = sorted(
                self.fitting(key, requirements),
                key=lambda f: (f[1] is not MoveKind.IDLE, self.cost(f[0], f[2], penalty)),
            )
        return found

    def victims(self, shard: int) -> Iterator[PreemptibleGroup]:
        yield from self.reports[shard].preemptible

    def cost(self, shard: int, p: int, penalty: float) -> float:
        """Effective cost of profile `p` of `shard`'s report for a need with `penalty`."""
        profile = self.profiles[shard][p]
        return effective_cost(profile.marginal_price, profile.interruption_probability, penalty)

    def stands_in(self, group: ElasticGroup, shard: int, p: int) -> bool:
        """Profile `p` of `shard` fits `group`'s need for less than its elastic machines."""
        return self.cost(shard, p, group.interruption_penalty) < group.cost_per_hour and (
            self.fits(self.key(group, group.requirements), group.requirements, shard, p)
        )

    def _by_key(self, shard: int, what: str) -> list[tuple[int, list, list[tuple]]]:
        """A report's shortfalls (`what` "short": (priority,)) or settled elastic groups
        ("saves": (priority, penalty, cost)), grouped by requirements: (key, requirements,
        entries, highest priority first). Made once per shard a round."""
        kept = self._grouped.get((shard, what))
        if kept is None:
            report = self.reports[shard]
            groups: dict[int, tuple[list, list[tuple]]] = {}
            if what == "short":
                for sf in report.shortfalls:
                    if not sf.repair_held:
                        key = self.key(sf, sf.requirements)
                        groups.setdefault(key, (sf.requirements, []))[1].append((sf.priority,))
            else:
                for g in report.elastic:
                    if g.settled or self.unsettled:
                        key = self.key(g, g.requirements)
                        entry = (
                            g.priority, g.interruption_penalty, g.cost_per_hour, g.displace_below
                        )  # fmt: skip
                        groups.setdefault(key, (g.requirements, []))[1].append(entry)
            kept = self._grouped[(shard, what)] = [
                (key, reqs, sorted(entries, reverse=True))
                for key, (reqs, entries) in groups.items()
            ]
        return kept

    def short_of(self, shard: int, p: int, priority: int) -> bool:
        """Whether `shard` is itself short of machines of profile `p` for a need at
        `priority` or above: it keeps its free machines for that need."""
        top = self._short.get((shard, p))
        if top is None:
            top = self._short[(shard, p)] = max(
                (
                    entries[0][0]
                    for key, reqs, entries in self._by_key(shard, "short")
                    if self.fits(key, reqs, shard, p)
                ),
                default=-inf,
            )
        return top >= priority

    def saves(self, shard: int, p: int, priority: float = -inf) -> bool:
        """Whether profile `p` would stand in for elastic machines of a settled need (with
        `unsettled`, of any need) of `shard`'s own at `priority` or above."""
        top = self._saves.get((shard, p))
        if top is None:
            top = -inf
            for key, reqs, entries in self._by_key(shard, "saves"):
                if entries[0][0] > top and self.fits(key, reqs, shard, p):
                    top = max(
                        (
                            prio
                            for prio, penalty, cost, _ in entries
                            if self.cost(shard, p, penalty) < cost
                        ),
                        default=top,
                    )
            self._saves[(shard, p)] = top
        return top > -inf and top >= priority

    def displaces(self, shard: int, p: int, priority: int) -> bool:
        """Whether profile `p` would stand in for elastic machines of a need of `shard`'s own
        (as `saves` counts them) whose displacement floor is above `priority`: a need that far
        below would have its machine drained for it (`for_cost.cost_victims`), so a free one
        given to it would only be sent back."""
        top = self._floors.get((shard, p))
        if top is None:
            top = max(
                (
                    floor
                    for key, reqs, entries in self._by_key(shard, "saves")
                    if self.fits(key, reqs, shard, p)
                    for _, penalty, cost, floor in entries
                    if self.cost(shard, p, penalty) < cost
                ),
                default=-inf,
            )
            self._floors[(shard, p)] = top
        return top > priority

    def keeps(self, shard: int, p: int, priority: int, service_first: bool = False) -> bool:
        """Whether `shard` keeps its free machines of profile `p` from another shard's need at
        `priority`: it is short of them at that priority or above, or would replace elastic
        machines of a settled need of its own at that priority or above with them. With
        `service_first` (`Coordinator.cheapest_first`), not to save cost alone: only when a
        need of its own they would save on would displace one at `priority` (`displaces`);
        one shard serves every short need before it moves a served one onto cheaper machines."""
        if service_first:
            return self.short_of(shard, p, priority) or self.displaces(shard, p, priority)
        return self.short_of(shard, p, priority) or self.saves(shard, p, priority)
