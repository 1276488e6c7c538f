"""What a shard tells, and nothing here changes it (`ShardViews`, the base of `Shard` in
shard.py): what it holds of a machine and pages of its machines (for queries), machines by
state and what they cost, what each cluster's operator hears of a cycle's actions, and one
cluster's view.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np

from .engine import Decision, FastEngine
from .inventory import CODE, GONE, Inventory, MachineNotFound
from .models import Machine, MachineState
from .needs import NeedsTable
from .notices import NoticeBook
from .offers import Offers
from .operators import OperatorUpdate, Reclaim, UpcomingNode
from .policy import Policy
from .pooling.holdings import demand, holdings
from .reports import ShardReport
from .spend import Spend, measure

S = MachineState
MACHINES_SHOWN = 500  # machines a cluster's view lists (a query's answer stays small)


class ShardViews:
    """The shard's reads for people, operators and queries (see the module docstring); what
    they read is made in `Shard.__init__`."""

    inventory: Inventory
    needs: NeedsTable
    engine: FastEngine
    last: Decision
    handoff: dict[str, Machine]
    leaving: dict[str, Machine]
    decommissioned: set[str]
    notices: NoticeBook
    id: int
    offers: Offers
    policy: Policy

    # ---- what it holds (queries page through it) ---------------------------------------------

    def ownership(self, machine_id: str) -> str:
        """What this shard holds of a machine: its state, DECOMMISSIONED, or GONE."""
        if machine_id in self.handoff:
            return S.IDLE.value
        if machine_id in self.leaving:
            return self.leaving[machine_id].state.value
        if machine_id in self.decommissioned:
            return "DECOMMISSIONED"
        if machine_id in self.notices.quarantined:
            return S.IDLE.value
        row = self.inventory.ids.find(machine_id)
        return self.inventory.state_of(row).value if row >= 0 else "GONE"

    def owned_ids(self, start: int, limit: int) -> tuple[list[str], int]:
        """A page of the machines this shard holds, from inventory row `start`: up to `limit`
        ids and the row the next page starts at (-1: none; the drained hand-offs come with the
        last page). Rows, not sorted ids, so a page costs one numpy pass and no sort; a
        machine that comes or goes between pages may be missed, never invented."""
        inv = self.inventory
        rows = np.flatnonzero(inv.state[start : inv.rows_used] != GONE)[:limit] + start
        ids = [inv.machine_id(r) for r in rows.tolist()]
        if len(rows) == limit:
            return ids, int(rows[-1]) + 1
        return ids + sorted(self.handoff) + sorted(self.notices.quarantined), -1

    def speculative_ids(self, provider: str, start: int, limit: int) -> tuple[list[str], int]:
        """A page of this shard's speculative machines of `provider`, from inventory row
        `start` (as `owned_ids`): a provider's listing is compared with them without the ids
        entering the workflow's history."""
        inv = self.inventory
        pid = inv.providers.get(provider)
        if pid is None:
            return [], -1
        n = inv.rows_used
        hit = (inv.state[start:n] == CODE[S.SPECULATIVE]) & (inv.provider[start:n] == pid)
        rows = np.flatnonzero(hit)[:limit] + start
        ids = [inv.machine_id(r) for r in rows.tolist()]
        return ids, (int(rows[-1]) + 1 if len(rows) == limit else -1)

    # ---- what people and operators ask ------------------------------------------------------

    def machines_by_state(self) -> dict[str, int]:
        """Every machine the shard owns, those waiting in a transfer handoff or quarantine
        counted idle."""
        totals = self.inventory.counts.sum(axis=1)
        out = {s.value: int(totals[CODE[s]]) for s in S}
        out[S.IDLE.value] += len(self.handoff) + len(self.notices.quarantined)
        for m in self.leaving.values():
            out[m.state.value] += 1
        return out

    def spend(
        self,
        assigned_at: float | None = None,
        state: np.ndarray | None = None,
        cluster: np.ndarray | None = None,
    ) -> Spend:
        """What the shard's machines cost per hour, by cluster, priority band and capacity
        type, with idle owned machines and the elastic machines they could replace
        (bigfleet/spend.py; the bands from the engine's last claims). Reads only.
        `assigned_at`: the time of the cycle just run (right after it, its assignments are
        newer than its claims). `state`, `cluster`: columns to read instead of the
        inventory's (shadow mode's baseline)."""
        return measure(
            self.inventory,
            self.needs,
            self.engine.claims,
            self.engine.supply,
            assigned_at=assigned_at,
            state=state,
            cluster=cluster,
        )

    def operator_updates(
        self, decision: Decision, chunk: int | None = None
    ) -> Iterator[OperatorUpdate]:
        """What each cluster touched by this cycle's actions hears (design §6 step 7, §13 step 6):
        nodes on their way, machines being reclaimed with their grace periods, and capacity
        still available. With `chunk`, a cluster's news comes as updates of at most `chunk`
        machines each; they are built as they are read (one cycle can announce 70 000)."""
        upcoming: dict[str, list[str]] = {}
        reclaims: dict[str, list[Reclaim]] = {}
        for a in decision.actions:
            if a.kind == "create" and a.cluster:
                upcoming.setdefault(a.cluster, []).extend(a.machine_ids)
            elif a.kind == "configure":
                upcoming.setdefault(a.cluster, []).append(a.machine_id)
            elif a.kind == "drain" and a.cluster:
                reclaims.setdefault(a.cluster, []).append(
                    Reclaim.model_construct(machine_id=a.machine_id, grace_seconds=a.grace_seconds)
                )
        clusters = sorted(set(upcoming) | set(reclaims))
        if not clusters:
            return
        # Instance types by column; nodes built unvalidated (model_construct): their ids and
        # kinds come from the inventory.
        inv = self.inventory
        announced = [m for c in clusters for m in upcoming.get(c, [])]
        rows = inv.ids.find_many(announced)
        if (rows < 0).any():
            raise MachineNotFound(announced[int(np.flatnonzero(rows < 0)[0])])
        kinds = [p.instance_type for p in inv.profiles.profiles]
        kind_of = inv.profile[rows].tolist()
        node = UpcomingNode.model_construct
        available = self.available()
        at = 0
        for c in clusters:
            ids, gone = upcoming.get(c, []), reclaims.get(c, [])
            size = chunk or len(ids) + len(gone)
            for lo in range(0, len(ids) + len(gone), size):
                # Upcoming nodes first, then reclaims, `size` of them a chunk.
                hi = lo + size
                part = ids[lo:hi]
                taken = gone[max(0, lo - len(ids)) : max(0, hi - len(ids))]
                nodes = [
                    node(machine_id=m, instance_type=kinds[k])
                    for m, k in zip(part, kind_of[at : at + len(part)], strict=True)
                ]
                at += len(part)
                yield OperatorUpdate(cluster=c, upcoming=nodes, reclaims=taken, available=available)

    def available(self) -> dict[str, int]:
        """Idle and speculative machines per instance type: what BigFleet could still provide."""
        inv = self.inventory
        out: Counter[str] = Counter()
        for p, profile in enumerate(inv.profiles.profiles):
            free = inv.counts[CODE[S.IDLE], p] + inv.counts[CODE[S.SPECULATIVE], p]
            if free:
                out[profile.instance_type] += int(free)
        return dict(out)

    def cluster_view(self, cluster: str) -> dict[str, Any]:
        """What the cluster's operator needs (design §14): upcoming nodes, reclaims with their
        grace periods, and capacity available to it."""
        inv = self.inventory
        upcoming, reclaims = [], []
        machines: list[dict[str, Any]] = []
        cidx = inv.clusters.get(cluster)
        held = 0
        if cidx is not None:
            n = inv.rows_used
            rows = np.flatnonzero(inv.cluster[:n] == cidx).tolist()
            held = len(rows)
            for r in rows:
                state = inv.state_of(r)
                if len(machines) < MACHINES_SHOWN:
                    machines.append({
                        "id": inv.machine_id(r),
                        "state": state.value,
                        "profile": inv.profile_of(r).short_name,
                        "since": int(inv.since[r]),
                    })  # fmt: skip
                if state in (S.CREATING, S.CONFIGURING):
                    kind = inv.profile_of(r).instance_type
                    upcoming.append({"machine": inv.machine_id(r), "instance_type": kind})
        for action in self.last.actions:
            if action.kind == "drain" and action.cluster == cluster:
                grace = action.grace_seconds
                reclaims.append({"machine": action.machine_id, "grace_seconds": grace})
        return {
            "cluster": cluster,
            # The last generation taken (-1: none): the gateway answers STALE below it.
            "generation": self.needs.generation(cluster),
            # The machines it holds (id, state, profile, since when: unix s), the first
            # MACHINES_SHOWN of `machines_total`.
            "machines": machines,
            "machines_total": held,
            "upcoming": upcoming,
            "reclaims": reclaims,
            "available": self.available(),
            "needs": [n.spec.model_dump(mode="json") for n in self.needs.needs_of(cluster)],
        }

    def report(self, now: float, sample: int = 256) -> ShardReport:
        """The 30-second report to the coordinator (design §9): summary, shortfalls, and bounded
        samples of what this shard could give: idle, speculative, lowest-priority configured
        (`offers.py`; none if `sample` is 0)."""
        return ShardReport(
            shard=self.id,
            at=now,
            **self.offers.fields(
                self.inventory,
                self.engine.claims,
                sample,
                self.policy,
                lambda need: self.engine.memory.stable(need, self.policy, now),
            ),
            machines=self.machines_by_state(),
            holds=holdings(self.inventory) if sample > 0 else [],
            demand=demand(self.needs) if sample > 0 else [],
            clusters=self.needs.clusters(),
            shortfalls=self.last.shortfalls,
        )
