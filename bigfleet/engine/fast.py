"""The fast engine: the rules of docs/engine.md over profile counts and numpy columns.

Decisions are made in profile space (a shard has hundreds of profiles, not hundreds of thousands
of machines); rows are picked only for the machines an action names, in one pass per cycle.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ..cost import DELETABLE
from ..inventory import CODE, NONE16, Inventory
from ..models import CreateAction, DeleteAction, DeleteReason, MachineState, VerifyAction
from ..needs import Need
from ..policy import Policy
from .claims import CONFIGURED_SLOT, ClusterClaims, claim_cluster
from .common import Decision, EngineMemory, age_shortfalls, need_matches, supply_key
from .phase1 import Assignment, assign_free_capacity
from .phase2 import Victim, resolve_inversions
from .rows import RowPicker

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


class FastEngine:
    def __init__(self, inventory: Inventory, policy: Policy) -> None:
        self.inventory = inventory
        self.policy = policy
        self.memory = EngineMemory()
        self._match: dict[str, tuple[int, frozenset[int]]] = {}
        self._rank: dict[str, tuple[int, dict[int, int]]] = {}
        self._quiet: _Quiet | None = None
        self._rows: dict[str, int] = {}
        # Free machines a waiting `Same` need keeps this cycle (need key -> count).
        self.reserved: dict[str, int] = {}
        self._claims: dict[str, tuple[tuple, ClusterClaims]] = {}
        self._holders: list[tuple[np.ndarray, Need]] = []
        self.claims: dict[str, ClusterClaims] = {}

    def matching(self, need: Need) -> frozenset[int]:
        table = self.inventory.profiles
        cached = self._match.get(need.signature)
        if cached is not None and cached[0] == len(table):
            return cached[1]
        pids = table.matching(need.signature, need.requirements, need.spec.resources)
        found = frozenset(
            p for p in pids.tolist() if need_matches(need, table.profiles[p], True)
        )
        self._match[need.signature] = (len(table), found)
        return found

    def supply_rank(self, need: Need) -> dict[int, int]:
        """Matching profiles in the order the need prefers them (cheapest effective cost, then
        name), as profile -> rank; dicts keep that order for iteration too."""
        table = self.inventory.profiles
        cached = self._rank.get(need.signature)
        if cached is not None and cached[0] == len(table):
            return cached[1]
        order = sorted(self.matching(need), key=lambda p: supply_key(need, table.profiles[p]))
        rank = {p: i for i, p in enumerate(order)}
        self._rank[need.signature] = (len(table), rank)
        return rank

    def ready(self, need: Need) -> int:
        """Configured machines the need held at the last cycle."""
        cc = self.claims.get(need.cluster)
        taken = cc.claims.get(need.key, []) if cc else []
        return sum(c.count for c in taken if c.slot == CONFIGURED_SLOT)

    def _cluster_claims(self, cluster: str, needs: list[Need]) -> ClusterClaims:
        cidx = self.inventory.clusters.get(cluster)
        version = self.inventory.cluster_version.get(cidx, 0) if cidx is not None else 0
        key = (tuple((n.signature, n.count, n.arrival, n.index) for n in needs), version)
        cached = self._claims.get(cluster)
        if cached is not None and cached[0] == key:
            return cached[1]
        result = claim_cluster(self.inventory, cluster, needs, self)
        self._claims[cluster] = (key, result)
        return result

    def decide(self, needs: Iterable[Need], now: float) -> Decision:
        inv, policy = self.inventory, self.policy
        needs = list(needs)
        quiet = self._quiet
        if (
            quiet is not None
            and quiet.version == inv.version
            and len(quiet.needs) == len(needs)
            and all(a is b for a, b in zip(quiet.needs, needs, strict=True))
        ):
            return self._repeat(quiet, now)
        by_cluster: dict[str, list[Need]] = defaultdict(list)
        for need in needs:
            by_cluster[need.cluster].append(need)
        for cidx in inv.held:
            by_cluster.setdefault(inv.clusters.names[cidx], [])
        claims = {c: self._cluster_claims(c, ns) for c, ns in by_cluster.items()}
        self._claims = {c: v for c, v in self._claims.items() if c in by_cluster}
        self.claims = claims

        out = Decision()
        demand: dict[str, int] = defaultdict(int)
        assignments = assign_free_capacity(self, needs, claims, demand)
        victims, unmet = resolve_inversions(self, needs, claims, assignments, out, demand)
        out.shortfalls = age_shortfalls(self.memory, policy, unmet)
        self.memory.observe_demand(demand, policy)

        picker = RowPicker(
            inv,
            free=[(a.state, a.profile) for a in assignments],
            configured=[(v.cluster, v.profile) for v in victims]
            + [(c, p) for c, cc in claims.items() for p in cc.excess],
        )
        self._emit_assignments(picker, assignments, out)
        self._emit_drains(picker, claims, victims, out)
        taken = np.array(
            [r for rows, _ in self._holders for r in rows.tolist()], dtype=np.int64
        )
        self._upkeep(out, taken, now)
        changes = any(a.kind in ("create", "configure", "drain") for a in out.actions)
        self._quiet = (
            None
            if changes
            else _Quiet(inv.version, needs, dict(out.satisfied), dict(out.earmarked), unmet, demand)
        )
        return out

    def _repeat(self, quiet: _Quiet, now: float) -> Decision:
        """Nothing the phases read has changed since a cycle that changed nothing: its
        outcome stands. Only what time alone moves is redone: ages, forecast, upkeep."""
        out = Decision(satisfied=dict(quiet.satisfied), earmarked=dict(quiet.earmarked))
        out.shortfalls = age_shortfalls(self.memory, self.policy, quiet.unmet)
        self.memory.observe_demand(quiet.demand, self.policy)
        self._holders = []
        self._upkeep(out, np.zeros(0, dtype=np.int64), now)
        return out

    # ---- turning counts into actions --------------------------------------------------------

    def _emit_assignments(
        self, picker: RowPicker, assignments: list[Assignment], out: Decision
    ) -> None:
        profiles = self.inventory.profiles.profiles
        self._holders = []
        creates: dict[tuple[str, str], list[str]] = {}
        create_need: dict[tuple[str, str], Need] = {}
        for a in assignments:
            rows = picker.take_free(a.state, a.profile, a.count)
            self._holders.append((rows, a.need))
            provider = profiles[a.profile].provider
            ids = [self._name(r) for r in rows.tolist()]
            if a.state is S.IDLE:
                out.actions.extend(a.configure(provider, mid) for mid in ids)
            else:
                key = (provider, a.need.key)
                creates.setdefault(key, []).extend(ids)
                create_need[key] = a.need
        batch = self.policy.create_batch
        for (provider, key), ids in creates.items():
            need = create_need[(provider, key)]
            for i in range(0, len(ids), batch):
                out.actions.append(
                    CreateAction(
                        provider=provider,
                        machine_ids=ids[i : i + batch],
                        cluster=need.cluster,
                        need=need.key,
                        requirements=list(need.requirements),
                        priority=need.priority,
                    )
                )

    def _emit_drains(
        self,
        picker: RowPicker,
        claims: dict[str, ClusterClaims],
        victims: list[Victim],
        out: Decision,
    ) -> None:
        inv, policy = self.inventory, self.policy
        profiles = inv.profiles.profiles
        for v in victims:
            rows = picker.configured(v.cluster, v.profile, v.offset, v.count)
            provider = profiles[v.profile].provider
            for r in rows.tolist():
                mid = self._name(r)
                out.actions.append(v.drain(provider, mid))
                out.preemptions.append(v.preemption(mid))
        excess: list[tuple[float, float, int, str]] = []
        for cluster, cc in claims.items():
            for pid, (first, count) in cc.excess.items():
                price = profiles[pid].price_per_hour
                for r in picker.configured(cluster, pid, first, count).tolist():
                    excess.append((-price, float(inv.holder_reclamation[r]), r, cluster))
        excess.sort()
        for _, _, r, cluster in excess:
            out.actions.append(
                Victim.excess_drain(
                    profiles[int(inv.profile[r])].provider,
                    self._name(r),
                    cluster,
                    policy.excess_grace_seconds,
                )
            )

    def _upkeep(self, out: Decision, taken: np.ndarray, now: float) -> None:
        """Idle timeouts, stuck transitions and health verification: vectorised column scans."""
        inv, policy = self.inventory, self.policy
        n = inv.rows_used
        state, since, profile = inv.state[:n], inv.since[:n], inv.profile[:n]
        profiles = inv.profiles.profiles
        age = now - since.astype(np.float64)

        timeout = np.array(
            [
                policy.idle_timeout_seconds[p.capacity_type]
                if p.capacity_type in DELETABLE and not self.memory.wants_soon(p, policy)
                else np.inf
                for p in profiles
            ],
            dtype=np.float64,
        )
        idle = np.flatnonzero(state == CODE[S.IDLE])
        if len(idle):
            idle = idle[~np.isin(idle, taken)]
            for r in idle[age[idle] >= timeout[profile[idle]]].tolist():
                out.actions.append(
                    DeleteAction(
                        provider=profiles[int(inv.profile[r])].provider,
                        machine_id=self._name(r),
                        reason=DeleteReason.IDLE_TIMEOUT,
                    )
                )
        limits = np.full(256, np.inf)
        for s, limit in policy.transition_timeout_seconds.items():
            limits[CODE[s]] = limit
        for r in np.flatnonzero(age > limits[state]).tolist():
            out.timed_out.append(self._name(r))
        sick = np.flatnonzero(
            (inv.missed[:n] >= policy.health_missed_reports) & (state == CODE[S.CONFIGURED])
        )
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

    def apply(self, decision: Decision, now: float) -> None:
        """Start every transition the decision asked for, as the shard does."""
        inv = self.inventory
        named, self._rows = self._rows, {}

        def row(machine_id: str) -> int:
            found = named.get(machine_id)
            return inv.row(machine_id) if found is None else found
        for rows, need in self._holders:
            inv.set_holder(
                rows, need.priority, need.spec.interruption_penalty, need.spec.reclamation_penalty
            )
        self._holders = []
        for action in decision.actions:
            if action.kind == "create":
                for mid in action.machine_ids:
                    inv.move(row(mid), S.CREATING, now, cluster=action.cluster)
            elif action.kind == "configure":
                inv.move(row(action.machine_id), S.CONFIGURING, now, cluster=action.cluster)
            elif action.kind == "drain":
                inv.move(row(action.machine_id), S.DRAINING, now)
            elif action.kind == "delete":
                inv.move(row(action.machine_id), S.DELETING, now)
        for mid in decision.timed_out:
            inv.move(row(mid), S.FAILED, now, error="transition timed out")
