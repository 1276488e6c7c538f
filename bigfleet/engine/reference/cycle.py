"""What one reference cycle's steps hand each other, declared in one place: the reference's
counterpart of the fast engine's `CycleState` (engine/cycle.py), in plain dicts and sets of
machine records and their ordinals.

`ReferenceEngine.decide` builds a `Cycle` and passes it to each step in turn (claims, Phase 1,
Phase 2, consolidation, Phase 3).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from ...cost import VictimWeights
from ...needs import Need
from ...policy import Policy
from ..fleet_cost import DrainRoom
from ..shortfalls import Unmet
from .fleet import Rec, ReferenceFleet


@dataclass
class Cycle:
    """One cycle over `fleet`: the needs (table order) and what the steps pass on."""

    fleet: ReferenceFleet
    needs: list[Need]
    # Claims: each need's machines of its own cluster (need key -> machines).
    claims: dict[str, list[Rec]] = field(default_factory=dict)
    # Who holds each machine claimed or assigned this cycle (ordinal -> need).
    holder: dict[int, Need] = field(default_factory=dict)
    # Machines a step has taken (claimed, assigned, kept, moved onto): no later step takes them.
    taken: set[int] = field(default_factory=set)
    # Phase 1: each need's chosen free machines (need key -> machines) and their count; the
    # configures of IDLE ones (emitted after Phase 2: a need yielding for cost may take one
    # over) and the SPECULATIVE ones to create, per (provider, need key).
    chosen_of: dict[str, list[Rec]] = field(default_factory=dict)
    assigned: dict[str, int] = field(default_factory=dict)
    configures: list[tuple[Need, Rec]] = field(default_factory=list)
    creates: dict[tuple[str, str], list[Rec]] = field(default_factory=lambda: defaultdict(list))
    # Free machines a waiting `Same` need keeps: how many per need key, and which.
    reserved: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    kept: set[int] = field(default_factory=set)
    # Phase 2: machines waited for (earmarked) and drained for a need (preempted), the victim
    # weights of this cycle, the configured machines still to be displaced for the fleet's
    # cost, and the needs left short as (need, missing count, profile label).
    earmarked: set[int] = field(default_factory=set)
    preempted: set[int] = field(default_factory=set)
    # Of those, the ones their clusters' bounds hold back (`DrainRoom`): their holders keep them.
    kept_by_bounds: set[int] = field(default_factory=set)
    weights: VictimWeights | None = None
    displace_left: int = 0
    unmet: list[Unmet] = field(default_factory=list)
    # Machines wanted per profile name (assigned or missing): the demand forecast's input.
    demand: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # The cycle's time (a need's wait for the coordinator before it preempts is timed by it).
    now: float = 0.0
    # Each need's position in the table (need key -> index).
    position: dict[str, int] = field(init=False)
    # What the clusters' disruption bounds let this cycle drain.
    room: DrainRoom = field(init=False)

    def __post_init__(self) -> None:
        self.position = {n.key: i for i, n in enumerate(self.needs)}
        self.room = DrainRoom(self.fleet.policy, self.fleet.memory, self.now)

    def marked(self, m: Rec) -> bool:
        """Marked do-not-disrupt, where moves respect the marks (`DrainRoom`)."""
        return m.kept and self.room.on

    @property
    def policy(self) -> Policy:
        return self.fleet.policy

    @property
    def machines(self) -> list[Rec]:
        return self.fleet.machines

    @property
    def sunk(self) -> bool:
        """Owned and committed capacity ranks at its marginal price (`Policy.fleet_cost`)."""
        return self.fleet.policy.fleet_cost

    def matches(self, need: Need, m: Rec) -> bool:
        return self.fleet.matches(need, m)
