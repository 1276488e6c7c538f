"""Bounding disruption (issue 33; docs/operations.md, "Bounding disruption").

A cluster's operator bounds what BigFleet takes from its cluster voluntarily, in its roll-up's
`disruption` (the deployment's `policy.disruption_budgets` when it sets none):

- budgets: at most N machines, or N % of the cluster's machines (rounded up), disrupted at
  once, for some reasons (consolidation, excess, transfer, preempt) or all, optionally only in
  a window (cron schedule plus duration). The machines of the cluster draining now count
  against every budget; several that hold for a reason: the most restrictive. No budget holds
  for a reason: that reason is not bounded (as Karpenter's budgets, outside their windows).
- do-not-disrupt marks: a machine BigFleet does not drain voluntarily until the mark expires
  (at most `policy.max_do_not_disrupt_seconds` after it was received).

A preemption whose need is at least `policy.disruption_override_gap` priority points above its
victim ignores both: above that gap, priority is the only throttle (design §5); a machine
displaced for the fleet's cost (docs/decisions/0012) never does, and the engine takes none
that would be held back (it buys instead: `fleet_cost.DrainRoom`). Involuntary drains (a
failed or unhealthy machine, decommissioning) are never held back.

The shard applies this to each decision before the decision is applied (`DisruptionBook.hold`):
drains over a budget or of a marked machine are dropped from it and counted as held back (the
need they served is short this cycle and asks again the next), and consolidation moves are not
started for a cluster whose consolidation budget allows none now (`frozen`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

import numpy as np

from .engine.decision import Actions, Decision
from .engine.fleet_cost import overrides_bounds
from .engine.memory import EngineMemory
from .held import NONE16
from .inventory import CODE, Inventory
from .models import (
    BudgetReason,
    Disruption,
    DisruptionBudget,
    DrainAction,
    DrainReason,
    MachineState,
    from_wire,
    share_of,
)
from .policy import Policy
from .schedule import Cron

S = MachineState
R = BudgetReason
# The drains a decision makes that a budget bounds, by the reason a budget names.
BOUNDED = {DrainReason.EXCESS: R.EXCESS, DrainReason.PREEMPT: R.PREEMPT}
MEMBERS = [CODE[s] for s in (S.CONFIGURING, S.CONFIGURED, S.DRAINING)]
# A cluster's machines (configuring, configured or draining) and those draining, by name.
Members = Callable[[str], tuple[int, int]]


@lru_cache(maxsize=1024)
def _cron(expr: str) -> Cron:
    return Cron.parse(expr)


def holds(budget: DisruptionBudget, reason: BudgetReason, now: float) -> bool:
    """Whether `budget` bounds `reason` at `now` (its window open, if it has one)."""
    if budget.reasons and reason not in budget.reasons:
        return False
    if budget.schedule is None or budget.duration_seconds is None:
        return True
    return _cron(budget.schedule).active(now, budget.duration_seconds)


@dataclass
class ClusterBounds:
    """One cluster's: its own budgets (None: the policy's), its marks (machine id → until),
    and what the last decision held back, by reason."""

    budgets: list[DisruptionBudget] | None = None
    marks: dict[str, float] = field(default_factory=dict)
    held: Counter[str] = field(default_factory=Counter)
    max_unhealthy: str | None = None  # (None: the policy's)


class DisruptionBook:
    """Every cluster's bounds, as their roll-ups set them; kept in the shard's snapshot."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.clusters: dict[str, ClusterBounds] = {}
        self._kept: list[int] = []  # the inventory rows `mark` flagged last (derived, not kept)
        # A drain for the fleet's cost is never past a mark or budget, whatever its gap; False:
        # as shards decided before (set by the shard each cycle).
        self.cost = True

    # ---- roll-ups -------------------------------------------------------------------------

    def take(
        self, cluster: str, disruption: Disruption | None, inventory: Inventory, now: float
    ) -> None:
        """A roll-up's `disruption` replaces the cluster's last (unset: the policy's budgets,
        no marks). A mark holds at most `max_do_not_disrupt_seconds` from now, and only for a
        machine of the cluster (so what is kept is bounded by the shard's machines)."""
        if disruption is None:
            self.clusters.pop(cluster, None)
            return
        cap = now + self.policy.max_do_not_disrupt_seconds

        def mine(machine_id: str) -> bool:
            row = inventory.ids.find(machine_id)
            return row >= 0 and inventory.cluster_of(row) == cluster

        marks = {
            m.machine_id: min(m.until, cap) for m in disruption.do_not_disrupt if mine(m.machine_id)
        }
        self.clusters[cluster] = ClusterBounds(
            budgets=list(disruption.budgets) if disruption.budgets else None,
            marks={mid: until for mid, until in marks.items() if until > now},
            max_unhealthy=disruption.max_unhealthy,
        )

    def forget(self, known: set[str]) -> None:
        """Clusters no longer in the needs table (aged out) lose their bounds."""
        for cluster in [c for c in self.clusters if c not in known]:
            del self.clusters[cluster]

    def budgets_of(self, cluster: str) -> list[DisruptionBudget]:
        own = self.clusters.get(cluster)
        if own is not None and own.budgets is not None:
            return own.budgets
        return self.policy.disruption_budgets

    def max_unhealthy(self, cluster: str, machines: int) -> int:
        """How many of a cluster's `machines` may be unhealthy at once and still be repaired."""
        own = self.clusters.get(cluster)
        share = own.max_unhealthy if own is not None and own.max_unhealthy else None
        return share_of(share or self.policy.max_unhealthy, machines)

    def mark(self, inventory: Inventory, now: float) -> None:
        """Flag the machines whose marks hold now in the inventory's `kept` column, before the
        engine decides: it gives up a need's marked machines last, so excess and preemption
        fall on unmarked ones where there are any (a marked one it picked would only be held
        back). A change in the flags is a change the engine must not repeat an outcome across."""
        for row in self._kept:
            if row < len(inventory.kept):
                inventory.kept[row] = 0
        rows = sorted(
            row
            for cluster, bounds in self.clusters.items()
            for mid, until in bounds.marks.items()
            if until > now
            and (row := inventory.ids.find(mid)) >= 0
            and inventory.cluster_of(row) == cluster
        )
        for row in rows:
            inventory.kept[row] = 1
        if rows != self._kept:
            inventory.version += 1
        self._kept = rows

    def marked(self, cluster: str, machine_id: str, now: float) -> bool:
        own = self.clusters.get(cluster)
        return own is not None and own.marks.get(machine_id, 0.0) > now

    def room(self, cluster: str, reason: BudgetReason, size: int, out: int, now: float) -> int:
        """How many more of a cluster's `size` machines may be disrupted for `reason` now,
        with `out` of them disrupted already (-1: unbounded)."""
        limits = [b.limit(size) for b in self.budgets_of(cluster) if holds(b, reason, now)]
        return max(0, min(limits) - out) if limits else -1

    # ---- decisions ------------------------------------------------------------------------

    def bounded(self) -> bool:
        """Whether any budget or mark could hold anything back."""
        return bool(self.policy.disruption_budgets) or bool(self.clusters)

    def tell(
        self, memory: EngineMemory, inventory: Inventory, now: float, members: Members | None
    ) -> None:
        """What the engine must know of the bounds before it decides: the clusters whose
        consolidation budget allows no move now (`frozen`) and, with `cost`, each cluster's
        preempt room (`preempt_room`). A change in either is a change the engine must not
        repeat an earlier cycle's outcome across."""
        frozen = frozenset(self.frozen(inventory, now, members))
        room = self.preempt_room(inventory, now, members) if self.cost else {}
        memory.cost_moves_bounded = self.cost
        if frozen != memory.frozen or room != memory.drain_room:
            memory.frozen, memory.drain_room = frozen, room
            inventory.version += 1

    def preempt_room(
        self, inventory: Inventory, now: float, members: Members | None = None
    ) -> dict[str, int]:
        """Per cluster whose preempt budget holds now: how many more of its machines may be
        drained (the engine's `drain_room`: a move for cost stays inside it)."""
        if not self.bounded():
            return {}
        members = members or count_members(inventory)
        rooms = {c: self.room(c, R.PREEMPT, *members(c), now) for c in inventory.clusters.names}
        return {c: room for c, room in rooms.items() if room >= 0}

    def frozen(self, inventory: Inventory, now: float, members: Members | None = None) -> set[str]:
        """Clusters whose consolidation budget allows no move now (`members`: the cycle's
        count of each cluster's machines, if it has one)."""
        if not self.bounded():
            return set()
        members = members or count_members(inventory)
        return {
            cluster
            for cluster in inventory.clusters.names
            if self.room(cluster, R.CONSOLIDATION, *members(cluster), now) == 0
        }

    def hold(
        self, decision: Decision, inventory: Inventory, now: float, members: Members | None = None
    ) -> Decision:
        """The decision without the drains its clusters' bounds hold back (counted in each
        cluster's `held`); the same decision if none is."""
        for bounds in self.clusters.values():
            bounds.held = Counter()
        if not self.bounded():
            return decision
        members = members or count_members(inventory)
        started: Counter[str] = Counter()  # drains this decision keeps, by cluster
        kept: list[Any] = []
        dropped = 0
        # Drains for the fleet's cost never override (None: as shards decided before).
        cost = {p.machine_id for p in decision.preemptions if p.for_cost} if self.cost else None
        for action in decision.actions:
            if not isinstance(action, DrainAction):
                kept.append(action)
                continue
            reason = BOUNDED.get(action.reason)
            if reason is None or (
                self._overrides(action) and not (cost and action.machine_id in cost)
            ):
                kept.append(action)
                continue
            cluster = action.cluster
            size, draining = members(cluster)
            room = self.room(cluster, reason, size, draining + started[cluster], now)
            if self.marked(cluster, action.machine_id, now) or room == 0:
                self.clusters.setdefault(cluster, ClusterBounds()).held[reason.value] += 1
                dropped += 1
                continue
            started[cluster] += 1
            kept.append(action)
        if not dropped:
            return decision
        return replace(decision, actions=Actions(kept))

    def refuse_transfer(self, machine_ids: list[str], inventory: Inventory, now: float) -> str:
        """Why draining these configured machines to hand them to another shard would break
        their clusters' bounds ("" if it would not): a marked machine, or more than a
        transfer budget allows now. The coordinator's saga is refused, and compensates."""
        members = count_members(inventory)
        by_cluster = Counter(inventory.cluster_of(inventory.row(m)) or "" for m in machine_ids)
        for mid in machine_ids:
            cluster = inventory.cluster_of(inventory.row(mid)) or ""
            if self.marked(cluster, mid, now):
                return f"machine {mid} is marked do-not-disrupt by cluster {cluster}"
        for cluster, count in sorted(by_cluster.items()):
            room = self.room(cluster, R.TRANSFER, *members(cluster), now)
            if 0 <= room < count:
                return (
                    f"cluster {cluster}'s disruption budget allows {room} more machine(s) "
                    f"drained for transfer now, not {count}"
                )
        return ""

    def _overrides(self, action: DrainAction) -> bool:
        """A preemption at least `disruption_override_gap` above its victim."""
        if action.reason is not DrainReason.PREEMPT:
            return False
        if action.preemptor_priority is None or action.victim_priority is None:
            return False
        return overrides_bounds(action.preemptor_priority, action.victim_priority, self.policy)

    # ---- views and snapshots --------------------------------------------------------------

    def members(self, inventory: Inventory) -> Members | None:
        """The cycle's count of each cluster's machines, read once (None if nothing is
        bounded: then nothing reads it)."""
        return count_members(inventory) if self.bounded() else None

    def view(self, cluster: str, inventory: Inventory, now: float) -> dict[str, Any]:
        """What `bigfleet cluster NAME` shows: each budget, whether it holds now and how many
        more it allows per reason, the marks in force, and what the last decision held back."""
        size, draining = count_members(inventory)(cluster)
        own = self.clusters.get(cluster)
        marks = own.marks if own is not None else {}
        budgets = []
        for b in self.budgets_of(cluster):
            reasons = b.reasons or list(R)
            budgets.append(
                {
                    **b.model_dump(mode="json", exclude_none=True),
                    "limit": b.limit(size),
                    "holds_now": [r.value for r in reasons if holds(b, r, now)],
                }
            )
        return {
            "source": "roll-up" if own is not None and own.budgets is not None else "policy",
            "machines": size,
            "draining": draining,
            "budgets": budgets,
            "room": {r.value: self.room(cluster, r, size, draining, now) for r in R},
            "do_not_disrupt": sum(1 for until in marks.values() if until > now),
            "held_back": dict(own.held) if own else {},
        }

    def state(self) -> dict[str, Any]:
        return {
            cluster: {
                "budgets": (
                    None
                    if b.budgets is None
                    else [x.model_dump(mode="json", exclude_none=True) for x in b.budgets]
                ),
                "marks": b.marks,
                **({"max_unhealthy": b.max_unhealthy} if b.max_unhealthy else {}),
            }
            for cluster, b in self.clusters.items()
        }

    def restore(self, state: Any) -> None:
        if not isinstance(state, dict):
            return
        for cluster, entry in state.items():
            budgets = entry.get("budgets")
            self.clusters[cluster] = ClusterBounds(
                budgets=None
                if budgets is None
                else [from_wire(DisruptionBudget, b) for b in budgets],
                marks={str(k): float(v) for k, v in entry.get("marks", {}).items()},
                max_unhealthy=entry.get("max_unhealthy"),
            )


def count_members(inventory: Inventory) -> Members:
    """Per cluster: its machines (configuring, configured or draining), and those draining."""
    n = inventory.rows_used
    state, cluster = inventory.state[:n], inventory.cluster[:n]
    bound = np.isin(state, MEMBERS) & (cluster != NONE16)
    width = len(inventory.clusters.names)
    sizes = np.bincount(cluster[bound], minlength=width)
    out = np.bincount(cluster[bound & (state == CODE[S.DRAINING])], minlength=width)

    def of(name: str) -> tuple[int, int]:
        code = inventory.clusters.get(name)
        if code is None or code >= len(sizes):
            return 0, 0
        return int(sizes[code]), int(out[code])

    return of
