"""What a shard tells the coordinator every 30 s (design §6 tier 1): a summary, the machines it
could give (idle, speculative, preemptible), and what it misses (shortfalls). Offers are
bounded samples grouped by profile, not inventories, so a report — and the coordinator's
history, which holds every report — stays small."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from enum import StrEnum
from typing import Any

from pydantic import Field

from .models import Count, Int32, Machine, Shortfall, Wire
from .profiles import Profile

REPORT_SECONDS = 30.0


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


class OfferGroup(Wire):
    """Machines of one profile (`ShardReport.profiles[profile]`) a shard could give."""

    profile: int
    ids: list[str]


class PreemptibleGroup(OfferGroup):
    """Configured machines of one profile held by one cluster at one priority."""

    priority: Int32
    cluster: str


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

        held: dict[tuple[int, int, str], PreemptibleGroup] = {}
        for p in preemptible:
            i = index(p.machine)
            key = (i, p.priority, p.cluster)
            if key not in held:
                held[key] = PreemptibleGroup(
                    profile=i, ids=[], priority=p.priority, cluster=p.cluster
                )
            held[key].ids.append(p.machine.id)
        return cls(
            shard=shard,
            at=at,
            idle=groups(idle),
            speculative=groups(speculative),
            preemptible=list(held.values()),
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
