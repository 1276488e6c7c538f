"""What one cycle's phases hand each other, declared in one place.

`FastEngine.decide` builds a `CycleState` after the claims and passes it to Phase 1, Phase 2 and
Phase 3 in turn; nothing a phase leaves for a later one is kept on the engine.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from ..inventory import Inventory
from ..models import MachineState
from ..needs import Need
from ..policy import Policy
from .claims import ClusterClaims
from .fleet_cost import DrainRoom
from .memory import EngineMemory
from .supply import SupplyIndex

S = MachineState


@dataclass(slots=True)
class CycleState:
    """One cycle: what it reads (inventory, policy, memory, needs, claims) and what the phases
    pass on. Built fresh by every `decide`; dropped when it returns."""

    inventory: Inventory
    policy: Policy
    memory: EngineMemory
    supply: SupplyIndex
    # The id of a row an action names; the engine remembers the row so `apply` need not look
    # it up again.
    name: Callable[[int], str]
    names: Callable[[np.ndarray], Sequence[str]]
    # The needs table, in table order, and each cluster's claims on its own machines.
    needs: list[Need] = field(default_factory=list)
    claims: dict[str, ClusterClaims] = field(default_factory=dict)
    # Free machines per profile not yet assigned: Phase 1 takes from them; Phase 2 lets a
    # `Same` need earmark what is left in its domain.
    idle_left: dict[int, int] = field(default_factory=dict)
    spec_left: dict[int, int] = field(default_factory=dict)
    # Free machines a waiting `Same` need keeps this cycle (need key -> count): set by Phase 1,
    # counted as earmarked by Phase 2.
    reserved: dict[str, int] = field(default_factory=dict)
    # Of those, the IDLE ones per profile id: they count toward their profile's idle spare.
    kept_idle: dict[int, int] = field(default_factory=dict)
    # Configured machines still to be drained for the fleet's cost this cycle (None: not
    # counted yet; `fleet_cost.displace_budget`).
    displace_left: int | None = None
    # Machines wanted per profile name this cycle (assigned or missing): the demand forecast's
    # input, filled by Phase 1 and Phase 2.
    demand: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # The moves the cycle's actions ask for, in action order: (target state, destination
    # cluster for CREATING and CONFIGURING, rows). `apply` replays them as they were decided
    # instead of reading each action back and looking its machine up by id.
    moves: list[tuple[MachineState, str | None, np.ndarray]] = field(default_factory=list)
    # Which profiles have any machine, per profile id (computed once, on first ask).
    present_profiles: list[bool] | None = None
    # What the clusters' disruption bounds let this cycle drain (built on first use).
    drain_room: DrainRoom | None = None
    # The cycle's time (a need's wait for the coordinator before it preempts is timed by it).
    now: float = 0.0
    # Needs preempted this cycle (set by `yield_owned` while a yield is due a drain: that
    # need's owned machine is not drained in its replacement's place this cycle).
    preempted: frozenset[str] = frozenset()

    def room(self) -> DrainRoom:
        """`drain_room`, built on first use."""
        if self.drain_room is None:
            self.drain_room = DrainRoom(self.policy, self.memory, self.now)
        return self.drain_room

    def present(self) -> list[bool]:
        """Per profile id: does the shard have any machine of it (in any state)?"""
        if self.present_profiles is None:
            self.present_profiles = (self.inventory.counts.sum(axis=0) > 0).tolist()
        return self.present_profiles


def merged_moves(
    inv: Inventory, moves: list[tuple[MachineState, str | None, np.ndarray]]
) -> list[tuple[MachineState, str | None, np.ndarray, np.ndarray | None]]:
    """`CycleState.moves` as `apply` moves them: consecutive moves of one target as one run,
    to one destination cluster (or keeping theirs: None) or to several, each row's then given
    as a cluster code (`move_many`'s `cluster_codes`). A cycle's configures and creates are a
    few `move_many` calls, not one per cluster and need."""
    runs: list[tuple[MachineState, list[str | None], list[np.ndarray]]] = []
    for target, cluster, rows in moves:
        if runs and runs[-1][0] is target and (cluster is None) == (runs[-1][1][0] is None):
            runs[-1][1].append(cluster)
            runs[-1][2].append(rows)
        else:
            runs.append((target, [cluster], [rows]))
    out: list[tuple[MachineState, str | None, np.ndarray, np.ndarray | None]] = []
    for target, clusters, parts in runs:
        rows = np.concatenate(parts) if len(parts) > 1 else parts[0]
        if len(set(clusters)) == 1:
            out.append((target, clusters[0], rows, None))
        else:
            each = [inv.clusters.intern(cast(str, c)) for c in clusters]
            codes = np.repeat(np.array(each, dtype=np.uint16), [len(p) for p in parts])
            out.append((target, None, rows, codes))
    return out


# The state each kind of action moves its machines to.
TARGET = {
    "create": S.CREATING,
    "configure": S.CONFIGURING,
    "drain": S.DRAINING,
    "delete": S.DELETING,
}


def action_runs(actions: Iterable[Any]) -> list[tuple[MachineState, str | None, list[str]]]:
    """The moves a decision's actions ask for (one not decided by this engine: its machines
    named by id), as runs of one target and destination cluster, in action order, so
    each run moves as one batch exactly as its moves one by one would."""
    runs: list[tuple[MachineState, str | None, list[str]]] = []
    for action in actions:
        target = TARGET.get(action.kind)
        if target is None:
            continue
        cluster = action.cluster if target in (S.CREATING, S.CONFIGURING) else None
        mids = action.machine_ids if action.kind == "create" else [action.machine_id]
        if runs and runs[-1][0] is target and runs[-1][1] == cluster:
            runs[-1][2].extend(mids)
        else:
            runs.append((target, cluster, list(mids)))
    return runs
