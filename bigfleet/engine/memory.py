"""The engine's memory: what a shard's engine carries from one cycle to the next (shortfall
ages, the demand forecast, since when each need has had its count, frozen clusters)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from math import inf

from ..needs import Need
from ..policy import Policy
from ..profiles import Profile


@dataclass(slots=True)
class Yielded:
    """A need's yield of an owned machine (engine/yielding.py): the profile it gives up, its
    replacement's, until when it keeps off the first, and whether the owned machine drained."""

    owned: str
    instead: str
    until: float
    drained: bool = False


@dataclass
class EngineMemory:
    """What a shard remembers between cycles: shortfall ages and the demand forecast."""

    shortfall_age: dict[str, int] = field(default_factory=dict)
    forecast: dict[str, float] = field(default_factory=dict)
    # Per need key: its count and since when it has had it (consolidation waits for stability).
    # Not in the shard's snapshot: after a restore every need counts as just changed.
    count_since: dict[str, tuple[int, float]] = field(default_factory=dict)
    # Clusters whose disruption budget allows no consolidation move now (bigfleet/disruption.py;
    # set by the shard before each cycle, not in its snapshot).
    frozen: frozenset[str] = frozenset()
    # Preemption victims come off the end of a claim, where a cluster's marked machines are not
    # (rows.py); False: off its start, as shards decided before (set by the shard each cycle).
    victims_from_end: bool = True
    # A spread need keeps to its skew in Phase 2 too (what it waits for and preempts); False:
    # anywhere, as shards decided before (set by the shard each cycle).
    spread_in_phase_2: bool = True
    # A need's placement keeps to every spread rule it has; False: to its first one only, as
    # shards decided before (set by the shard each cycle).
    every_spread_rule: bool = True
    # Consolidation moves no machine its cluster marked do-not-disrupt (it could not leave);
    # False: as shards decided before (set by the shard each cycle).
    marks_steer_moves: bool = True
    # Moves for the fleet's cost respect do-not-disrupt marks and disruption budgets (and buy
    # instead), and a need waiting on preemptions they hold back is a shortfall
    # (`fleet_cost.DrainRoom`); False: as shards decided before (set by the shard each cycle).
    cost_moves_bounded: bool = True
    # Per cluster whose preempt budget holds now: how many more of its machines may drain
    # (absent: unbounded; set by the shard before each cycle, not in its snapshot).
    drain_room: dict[str, int] = field(default_factory=dict)
    # The coordinator's last summary of free machines in other shards, as (labels, count)
    # (bigfleet/pooling/ask_first.py; set by the shard, not in the engine's snapshot): a need
    # about to preempt for machines one of them fits asks first (`fleet_cost.DrainRoom`).
    elsewhere: tuple[tuple[Mapping[str, str], int], ...] = ()
    # Per need key: since when it has waited for the coordinator instead of preempting, and
    # for how many machines a cycle (the free ones it fitted in the summary then); kept while
    # it is short (not in the snapshot: after a restore a need may wait a bound again).
    asked_since: dict[str, tuple[float, int]] = field(default_factory=dict)
    # Owned machines yield across cycles (engine/yielding.py); False: as shards decided
    # before (set by the shard each cycle).
    owned_yields: bool = True
    # Per need key: its yield of an owned machine in progress (not in the snapshot: after a
    # restore its replacement is excess like any other).
    yielded: dict[str, Yielded] = field(default_factory=dict)

    def observe_counts(self, needs: list[Need], now: float) -> None:
        """Notes since when each need has had its count; forgets needs gone from the table,
        and yields past their hold."""
        seen = self.count_since
        for n in needs:
            had = seen.get(n.key)
            if had is None or had[0] != n.count:
                seen[n.key] = (n.count, now)
        if len(seen) > len(needs):
            present = {n.key for n in needs}
            self.count_since = {k: v for k, v in seen.items() if k in present}
        if self.yielded:  # (past their hold, or of needs gone: engine/yielding.py)
            self.yielded = {
                k: y for k, y in self.yielded.items() if y.until > now and k in self.count_since
            }

    def stable(self, need: Need, policy: Policy, now: float) -> bool:
        """The need's count has not changed for `consolidation_stable_seconds`."""
        since = self.count_since.get(need.key, (need.count, now))[1]
        return now - since >= policy.consolidation_stable_seconds

    def next_stable(self, policy: Policy, now: float) -> float:
        """When the next need not yet stable becomes so (infinity: all are)."""
        wait = policy.consolidation_stable_seconds
        return min((t + wait for _, t in self.count_since.values() if t + wait > now), default=inf)

    def deadline(self, policy: Policy) -> float:
        """When the first need waiting for the coordinator stops waiting, or the first yield's
        hold ends (infinity: neither): a quiet cycle is not repeated past it."""
        wait = policy.ask_before_preempt_seconds
        asked = min((t + wait for t, _ in self.asked_since.values()), default=inf)
        return min(asked, min((y.until for y in self.yielded.values()), default=inf))

    def wants_soon(self, profile: Profile, policy: Policy) -> bool:
        """The demand forecast wants the profile (at least `forecast_hold` a cycle)."""
        return self.forecast.get(profile.name, 0.0) >= policy.forecast_hold

    def observe_demand(self, demand: Mapping[str, int], policy: Policy) -> None:
        """Decayed average of machines wanted per profile per cycle."""
        decay = policy.forecast_decay
        for name in set(self.forecast) | set(demand):
            value = decay * self.forecast.get(name, 0.0) + (1 - decay) * demand.get(name, 0)
            if value < 1e-3:
                self.forecast.pop(name, None)
            else:
                self.forecast[name] = value
