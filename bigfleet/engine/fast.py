"""The fast engine: the rules of docs/engine.md over profile counts and numpy columns.

Decisions are made in profile space (a shard has hundreds of profiles, not hundreds of thousands
of machines); rows are picked only for the machines an action names, in one pass per cycle.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..inventory import CODE, NONE16, Inventory
from ..machine_ids import IdBatches, IdList
from ..models import ConfigureAction, CreateAction, MachineState, VerifyAction, stamper
from ..needs import Need
from ..policy import Policy
from .claims import CONFIGURED_SLOT, ClusterClaims, claim_cluster, same_needs
from .clock import PhaseClock
from .consolidate import consolidate
from .cycle import CycleState, action_runs, merged_moves
from .decision import TIMED_OUT, Decision
from .memory import EngineMemory
from .phase1 import Assignment, assign_free_capacity
from .phase2 import Victim, emit_preemptions, resolve_inversions
from .phase3 import excess_segments, reclaim_excess, release_idle
from .rows import RowPicker
from .shortfalls import age_shortfalls
from .supply import SupplyIndex, free_pool
from .yield_moves import yield_owned

S = MachineState


@dataclass
class _Quiet:
    """The outcome of a cycle whose phases asked for nothing, and what it was computed from."""

    version: int
    needs: list[Need]
    satisfied: dict[str, int]
    earmarked: dict[str, int]
    unmet: list
    demand: dict[str, int]
    kept_idle: dict[int, int]
    # A need becoming stable may start a consolidation: the outcome holds until then.
    until: float


@dataclass
class _Claimed:
    """A cluster's claims and what they were worked out from: its needs, its tallies' version
    and its position in the tallies' log of changed profiles (`HeldTallies.touched`)."""

    needs: list[Need]
    version: int
    position: int
    claims: ClusterClaims


class FastEngine:
    """The decision engine of design §8 over an `Inventory`: `decide` a cycle, then `apply` it."""

    def __init__(self, inventory: Inventory, policy: Policy) -> None:
        self.inventory = inventory
        # Which profiles each need can use, in its order (cached across cycles).
        self.supply = SupplyIndex(inventory, policy.fleet_cost)
        self.policy = policy
        self.memory = EngineMemory()
        self._quiet: _Quiet | None = None
        self._rows: dict[str, int] = {}
        self._claims: dict[str, _Claimed] = {}
        self._holders: list[tuple[np.ndarray, Need]] = []
        # The last decision and the moves it asks for, as rows (`CycleState.moves`).
        self._decided: tuple[Decision, list] | None = None
        # Each cluster's claims at the last cycle (the shard's report reads them).
        self.claims: dict[str, ClusterClaims] = {}
        # Time per part of a cycle, for `bigfleet bench engine --phases` (off: costs nothing).
        self.clock = PhaseClock()

    def ready(self, need: Need) -> int:
        """Configured machines the need held at the last cycle."""
        cc = self.claims.get(need.cluster)
        taken = cc.claims.get(need.key, []) if cc else []
        return sum(c.count for c in taken if c.slot == CONFIGURED_SLOT)

    def _cluster_claims(self, cluster: str, needs: list[Need]) -> ClusterClaims:
        inv = self.inventory
        cidx = inv.clusters.get(cluster)
        version = inv.cluster_version.get(cidx, 0) if cidx is not None else 0
        cached = self._claims.get(cluster)
        if cached is not None and cached.version == version and same_needs(cached.needs, needs):
            # The very needs of last time (the table keeps a need's object until its roll-up
            # changes it) and the same machines: the same claims.
            return cached.claims
        since = cached.position if cached is not None else None
        touched: set[int] | None
        if cidx is None:
            touched, position = (set() if cached is not None else None), 0
        else:
            touched, position = inv.tallies.touched(cidx, since)
        previous = cached.claims if cached is not None else None
        result = claim_cluster(inv, cluster, needs, self.supply, previous, touched)
        self._claims[cluster] = _Claimed(needs, version, position, result)
        return result

    def decide(self, needs: Iterable[Need], now: float) -> Decision:
        """One cycle of design §8's worker loop (`runCycle`; docs/engine.md, The cycle).

        Takes the needs table (in table order: priority descending, then arrival) and the
        time; reads the inventory and the policy, and changes nothing in the inventory (that
        is `apply`'s job). Claims, then Phase 1 (`assign_free_capacity`), Phase 2
        (`resolve_inversions`), consolidation toward cheaper capacity (`consolidate`),
        shortfalls (design §9), Phase 3 (`reclaim_excess`) and upkeep: stuck transitions and
        health verification (design §9).

        Returns the `Decision`: actions in that order, satisfied and earmarked counts per
        need key, preemptions, consolidations, aged shortfalls and timed-out machine ids.
        Updates the engine's memory (shortfall ages, demand forecast, since when each need has
        had its count). A cycle whose inputs are exactly those of a previous cycle that changed
        nothing repeats its outcome, until a need becomes stable enough to consolidate.
        """
        needs = list(needs)
        self.supply.retain(needs)
        quiet = self._quiet
        if (
            quiet is not None
            and quiet.version == self.inventory.version
            and len(quiet.needs) == len(needs)
            and all(a is b for a, b in zip(quiet.needs, needs, strict=True))
            and now < quiet.until
        ):
            return self._repeat(quiet, now)
        clock = self.clock
        clock.start()
        self.memory.observe_counts(needs, now)
        state = self._begin(needs)
        state.now = now
        clock.lap("claims")
        out = Decision()
        assignments = assign_free_capacity(state)
        clock.lap("phase 1")
        victims, unmet = resolve_inversions(state, assignments, out)
        clock.lap("phase 2")
        moved = consolidate(state, victims, out, now)
        assignments += moved + yield_owned(state, victims, moved, out, now)
        clock.lap("consolidation")
        carried = self.inventory.profiles.carries
        out.shortfalls = age_shortfalls(self.memory, self.policy, unmet, carried)
        self.memory.observe_demand(state.demand, self.policy)
        clock.lap("shortfalls and forecast")
        self._emit(state, assignments, victims, out, now)
        self._decided = (out, state.moves)
        changes = bool(out.actions.kinds() & {"create", "configure", "drain"})
        self._quiet = None if changes else self._quiet_since(state, out, unmet, now)
        return out

    def _emit(
        self,
        state: CycleState,
        assignments: list[Assignment],
        victims: list[Victim],
        out: Decision,
        now: float,
    ) -> None:
        """The decided counts as actions: rows picked once for the whole cycle (`RowPicker`),
        then assignments, preemptions, Phase 3 and upkeep, in that order."""
        clock = self.clock
        picker = RowPicker(
            self.inventory,
            free=[(a.state, a.profile) for a in assignments],
            configured=[(v.cluster, v.profile) for v in victims if not v.asked]
            + excess_segments(state),
        )
        clock.lap("row picking")
        self._emit_assignments(state, picker, assignments, out)
        clock.lap("assignments' actions")
        emit_preemptions(state, picker, victims, out)
        clock.lap("preemptions' actions")
        taken = _rows_of(self._holders)
        reclaim_excess(state, picker, out, taken, now)
        clock.lap("phase 3")
        self._upkeep(out, now)
        clock.lap("upkeep")

    def _quiet_since(self, state: CycleState, out: Decision, unmet: list, now: float) -> _Quiet:
        """This cycle's outcome, to repeat while nothing it read changes."""
        return _Quiet(
            self.inventory.version,
            state.needs,
            dict(out.satisfied),
            dict(out.earmarked),
            unmet,
            state.demand,
            state.kept_idle,
            min(self.memory.next_stable(self.policy, now), self.memory.deadline(self.policy)),
        )

    def _begin(self, needs: list[Need]) -> CycleState:
        """The cycle's state: each cluster's claims (cached per cluster) and the free pools."""
        inv = self.inventory
        by_cluster: dict[str, list[Need]] = defaultdict(list)
        for need in needs:
            by_cluster[need.cluster].append(need)
        for cidx in inv.held:
            by_cluster.setdefault(inv.clusters.names[cidx], [])
        claims = {c: self._cluster_claims(c, ns) for c, ns in by_cluster.items()}
        self._claims = {c: v for c, v in self._claims.items() if c in by_cluster}
        self.claims = claims
        return CycleState(
            inv,
            self.policy,
            self.memory,
            self.supply,
            self._name,
            self._names,
            needs=needs,
            claims=claims,
            idle_left=free_pool(inv.counts, S.IDLE, len(inv.profiles)),
            spec_left=free_pool(inv.counts, S.SPECULATIVE, len(inv.profiles)),
        )

    def _repeat(self, quiet: _Quiet, now: float) -> Decision:
        """Nothing the phases read has changed since a cycle that changed nothing: its
        outcome stands. Only what time alone moves is redone: ages, forecast, upkeep."""
        out = Decision(satisfied=dict(quiet.satisfied), earmarked=dict(quiet.earmarked))
        carried = self.inventory.profiles.carries
        out.shortfalls = age_shortfalls(self.memory, self.policy, quiet.unmet, carried)
        self.memory.observe_demand(quiet.demand, self.policy)
        self._holders = []
        inv, policy, memory, supply = self.inventory, self.policy, self.memory, self.supply
        state = CycleState(inv, policy, memory, supply, self._name, self._names)
        state.kept_idle = quiet.kept_idle
        release_idle(state, np.zeros(0, dtype=np.int64), now, out)
        self._upkeep(out, now)
        self._decided = (out, state.moves)
        return out

    # ---- turning counts into actions --------------------------------------------------------

    def _emit_assignments(
        self, state: CycleState, picker: RowPicker, assignments: list[Assignment], out: Decision
    ) -> None:
        profiles = self.inventory.profiles.profiles
        self._holders = []
        create_rows: dict[tuple[str, str], list[np.ndarray]] = {}
        create_need: dict[tuple[str, str], Need] = {}
        # One validated configure per (need, provider): the others differ only in the machine.
        configures: dict[tuple[str, str], Callable[[str], ConfigureAction]] = {}
        for a in assignments:
            rows = picker.take_free(a.state, a.profile, a.count)
            self._holders.append((rows, a.need))
            provider = profiles[a.profile].provider
            if a.state is S.IDLE:
                if len(rows):
                    ids = self._names(rows)
                    state.moves.append((S.CONFIGURING, a.need.cluster, rows))
                    configure = configures.get((a.need.key, provider))
                    if configure is None:
                        first = a.configure(provider, ids[0])
                        configures[(a.need.key, provider)] = stamper(first, "machine_id")
                    else:
                        first = configure(ids[0])
                    out.actions.stamp(first, "machine_id", ids[1:])
            else:
                key = (provider, a.need.key)
                create_rows.setdefault(key, []).append(rows)
                create_need[key] = a.need
        batch = self.policy.create_batch
        for (provider, need_key), parts in create_rows.items():
            need = create_need[(provider, need_key)]
            rows = np.concatenate(parts)
            state.moves.extend(
                (S.CREATING, need.cluster, rows[i : i + batch]) for i in range(0, len(rows), batch)
            )
            ids = self._names(rows)
            if not ids:
                continue
            # Validated once with the first id; every batch's create is a copy of it with its
            # own ids, made when read (`stamp_all`): no id is made a string here.
            create = CreateAction(
                provider=provider,
                machine_ids=[ids[0]],
                cluster=need.cluster,
                need=need.key,
                requirements=list(need.requirements),
                priority=need.priority,
            )
            out.actions.stamp_all(create, "machine_ids", IdBatches(ids, batch))

    def _upkeep(self, out: Decision, now: float) -> None:
        """Stuck transitions and health verification (design §9): vectorised column scans.

        A machine in a transition longer than its timeout is reported `timed_out`; a
        CONFIGURED machine its cluster has left out of `health_missed_reports` consecutive
        health reports gets a Verify action (its provider is asked; a dead one is replaced).
        """
        inv, policy = self.inventory, self.policy
        n = inv.rows_used
        state = inv.state[:n]
        profiles = inv.profiles.profiles
        since = inv.since[:n]
        limits = timeout_limits(policy)
        # Per state, a `since` (whole seconds) below which a row may be overdue: a superset
        # by a second's margin, read as uint32 like the column; the exact test runs on it
        # (a state with no timeout, infinity: 0, no row).
        before = np.clip(np.floor(now - limits) + 2, 0, 0xFFFFFFFF).astype(np.uint32)
        maybe = np.flatnonzero(since < before[state])
        age = now - since[maybe].astype(np.float64)
        for r in maybe[age > limits[state[maybe]]].tolist():
            out.timed_out.append(self._name(r))
        # (Few rows miss reports: their states are read after.)
        sick = np.flatnonzero(inv.missed[:n] >= policy.health_missed_reports)
        sick = sick[state[sick] == CODE[S.CONFIGURED]]
        for r in sick.tolist():
            c = int(inv.cluster[r])
            out.actions.append(
                VerifyAction(
                    provider=profiles[int(inv.profile[r])].provider,
                    machine_id=inv.machine_id(r),
                    cluster=inv.clusters.names[c] if c != NONE16 else "",
                )
            )

    # ---- applying a decision ----------------------------------------------------------------

    def _name(self, row: int) -> str:
        """The id of a row an action names, remembered so `apply` need not look it up."""
        machine_id = self.inventory.machine_id(row)
        self._rows[machine_id] = row
        return machine_id

    def _names(self, rows: np.ndarray) -> IdList:
        """The ids of many rows an action names (their moves are in the cycle's `moves`),
        made into strings only when the actions are read."""
        return self.inventory.ids.deferred(rows)

    def apply(self, decision: Decision, now: float) -> None:
        """Start every transition the decision asked for, as the shard does."""
        self.clock.start()
        inv = self.inventory
        named, self._rows = self._rows, {}

        def row(machine_id: str) -> int:
            found = named.get(machine_id)
            return inv.row(machine_id) if found is None else found

        if self._holders:  # (one write per column: the holders' rows never overlap)
            sizes = [len(rows) for rows, _ in self._holders]
            needs = [need for _, need in self._holders]
            inv.set_holder(
                _rows_of(self._holders),
                np.repeat([n.priority for n in needs], sizes),
                np.repeat([n.spec.interruption_penalty for n in needs], sizes),
                np.repeat([n.spec.reclamation_penalty for n in needs], sizes),
            )
        self._holders = []
        decided, self._decided = self._decided, None
        runs: Sequence[tuple[MachineState, str | None, Sequence[int] | np.ndarray, Any]]
        if decided is not None and decided[0] is decision:
            runs = merged_moves(inv, decided[1])  # the rows as decided
        else:  # (a decision this engine did not make: its machines by id)
            runs = [
                (target, cluster, [row(mid) for mid in mids], None)
                for target, cluster, mids in action_runs(decision.actions)
            ]
        for target, cluster, moved, codes in runs:
            inv.move_many(moved, target, now, cluster=cluster, cluster_codes=codes)
        for mid in decision.timed_out:
            inv.move(row(mid), S.FAILED, now, error=TIMED_OUT)
        self.clock.lap("apply")


def _rows_of(holders: list[tuple[np.ndarray, Need]]) -> np.ndarray:
    """Every row the cycle's assignments took, in order."""
    if not holders:
        return np.zeros(0, dtype=np.int64)
    return np.concatenate([rows for rows, _ in holders]).astype(np.int64, copy=False)


_LIMITS: dict[tuple[tuple[MachineState, float], ...], np.ndarray] = {}


def timeout_limits(policy: Policy) -> np.ndarray:
    """Each state code's transition timeout (infinity: none), made once per set of timeouts:
    upkeep reads it every cycle."""
    key = tuple(policy.transition_timeouts().items())
    limits = _LIMITS.get(key)
    if limits is None:
        limits = np.full(256, np.inf)
        for s, limit in key:
            limits[CODE[s]] = limit
        limits.flags.writeable = False
        if len(_LIMITS) > 64:
            _LIMITS.clear()
        _LIMITS[key] = limits
    return limits
