"""What a shard tells the coordinator every 30 s (design §6 tier 1): a summary, the machines it
could give (idle, speculative, preemptible), and what it misses (shortfalls). Offers are
bounded samples grouped by profile, not inventories, so a report — and the coordinator's
history, which holds every report — stays small."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from enum import StrEnum
from typing import Annotated, Any

from pydantic import Field

from .models import Count, Dollars, Int32, Machine, NodeSelectorRequirement, Shortfall, Wire
from .models.base import INT32_MIN
from .profiles import Profile

REPORT_SECONDS = 30.0
# (Need, cost) groups of elastic machines a report names, at most (the most spend first).
ELASTIC_GROUPS = 128
# Kinds of owned machines a report names, at most (the most machines first).
HOLDINGS = 128
# Requirement sets of its needs a report names, at most (the most machines first).
DEMANDS = 64


class MoveKind(StrEnum):
    """How machines move between shards, in the order the coordinator tries (design §9)."""

    IDLE = "idle"
    SPECULATIVE = "speculative"
    PREEMPT = "preempt"


class Preemptible(Wire):
    """A configured machine a shard could give up for a higher priority elsewhere."""

    machine: Machine
    priority: Int32
    cluster: str
    reclamation_penalty: Dollars = 0.0


class OfferGroup(Wire):
    """Machines of one profile (`ShardReport.profiles[profile]`) a shard could give."""

    profile: int
    ids: list[str]


class PreemptibleGroup(OfferGroup):
    """Configured machines of one profile held by one cluster at one priority;
    `reclamation_penalty`, the highest of the needs holding them (what a move for cost must
    save more than, issue 45)."""

    priority: Int32
    cluster: str
    reclamation_penalty: Dollars = 0.0


class ElasticGroup(Wire):
    """Elastic machines (on-demand, spot) a shard runs or is bringing up for one need at one
    effective cost, which would move onto an owned machine if it had one free (issue 45):
    what such a machine idle in another shard would save it. `cost_per_hour`: each one's
    effective cost (price + interruption probability × the need's `interruption_penalty`)."""

    cluster: str = Field(max_length=253)
    priority: Int32
    requirements: list[NodeSelectorRequirement] = Field(default_factory=list)
    count: Count
    cost_per_hour: Dollars
    interruption_penalty: Dollars = 0.0
    # Its shard's placement by the fleet's cost (bigfleet/engine/fleet_cost.py): an owned
    # machine held by a priority below `displace_below` may be drained for the need when
    # `cost_per_hour` × `horizon_hours` is more than its holder's reclamation penalty (the
    # lowest Int32: never).
    displace_below: Int32 = INT32_MIN
    horizon_hours: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 1.0
    # The need's count has held still long enough for its shard's consolidation to move it
    # (`Policy.consolidation_stable_seconds`): only then is a machine drained elsewhere for it,
    # or kept from another shard's need for it.
    settled: bool = False


class Demand(Wire):
    """The machines a shard's needs with one set of requirements ask for, all clusters
    together (issue 45: where a kind of capacity is used, `pooling/quota.py`)."""

    requirements: list[NodeSelectorRequirement] = Field(default_factory=list)
    count: Count
    # The lowest of the needs' interruption penalties: what a spot machine costs the needs
    # most willing to run on one (`pooling/quota.py`).
    interruption_penalty: Dollars = 0.0


class Holding(Wire):
    """Owned machines (bare metal, reserved) of one kind a shard holds, in any state: where a
    new cluster whose needs they fit can be served without buying (issue 45). `labels`: one of
    its profiles' labels (the kind's first)."""

    labels: dict[str, str] = Field(default_factory=dict, max_length=64)
    owned: Count


def preemptible_groups(
    held: dict[tuple[int, int, str], list[str]], penalties: dict[tuple[int, int, str], float]
) -> list[PreemptibleGroup]:
    """Groups from machine ids and reclamation penalties per (profile, priority, cluster)."""
    return [
        PreemptibleGroup(
            profile=i, ids=ids, priority=priority, cluster=cluster, reclamation_penalty=penalties[k]
        )
        for k, ids in held.items()
        for i, priority, cluster in (k,)
    ]


class ShardReport(Wire):
    """What a shard tells the coordinator every 30 s: a summary, what it could give, what it
    misses. Offers are bounded samples, not inventories, grouped by profile: one machine record
    per profile and ids for the rest, so a report (and the coordinator's history, which holds
    every report) stays small."""

    shard: int
    at: float
    machines: dict[str, Count] = Field(default_factory=dict)
    clusters: list[str] = Field(default_factory=list)
    shortfalls: list[Shortfall] = Field(default_factory=list)
    profiles: list[Machine] = Field(default_factory=list)
    idle: list[OfferGroup] = Field(default_factory=list)
    speculative: list[OfferGroup] = Field(default_factory=list)
    preemptible: list[PreemptibleGroup] = Field(default_factory=list)
    elastic: list[ElasticGroup] = Field(default_factory=list, max_length=ELASTIC_GROUPS)
    holds: list[Holding] = Field(default_factory=list, max_length=HOLDINGS)
    # What its needs ask for (empty from a shard built before the field: then unknown).
    demand: list[Demand] = Field(default_factory=list, max_length=DEMANDS)

    @classmethod
    def of(
        cls,
        shard: int,
        at: float,
        idle: Iterable[Machine] = (),
        speculative: Iterable[Machine] = (),
        preemptible: Iterable[Preemptible] = (),
        **summary: Any,
    ) -> ShardReport:
        """A report from machine records, grouped by profile."""
        templates: dict[Profile, int] = {}
        profiles: list[Machine] = []

        def index(m: Machine) -> int:
            key = Profile.of(m)
            if key not in templates:
                templates[key] = len(profiles)
                profiles.append(m)
            return templates[key]

        def groups(machines: Iterable[Machine]) -> list[OfferGroup]:
            out: dict[int, OfferGroup] = {}
            for m in machines:
                i = index(m)
                out.setdefault(i, OfferGroup(profile=i, ids=[])).ids.append(m.id)
            return list(out.values())

        held: dict[tuple[int, int, str], list[str]] = {}
        penalties: dict[tuple[int, int, str], float] = {}
        for p in preemptible:
            key = (index(p.machine), p.priority, p.cluster)
            held.setdefault(key, []).append(p.machine.id)
            penalties[key] = max(penalties.get(key, 0.0), p.reclamation_penalty)
        groups_held = preemptible_groups(held, penalties)
        return cls(
            shard=shard,
            at=at,
            idle=groups(idle),
            speculative=groups(speculative),
            preemptible=groups_held,
            profiles=profiles,
            **summary,
        )

    @property
    def size(self) -> int:
        return sum(self.machines.values())

    def offers(self, kind: MoveKind) -> Iterator[tuple[Machine, list[str]]]:
        """(profile record, machine ids) of the idle or speculative sample."""
        for g in self.idle if kind is MoveKind.IDLE else self.speculative:
            yield self.profiles[g.profile], g.ids

    def victims(self) -> Iterator[tuple[Machine, PreemptibleGroup]]:
        """(profile record, group) of the preemptible sample, lowest priority first."""
        for g in self.preemptible:
            yield self.profiles[g.profile], g
