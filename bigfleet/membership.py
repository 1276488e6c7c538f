"""A shard's side of fleet membership (seed §16): splitting in two, merging, taking machines
out of the fleet, and capacity that comes and goes at its providers. Mixed into `Shard`, whose
state these methods share; the coordinator's side is in `coordinator.py`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from . import labels as L
from .coordinator import Matching
from .inventory import CODE, GONE, Inventory
from .models import Machine, MachineState
from .needs import NeedsTable
from .policy import Policy

S = MachineState


class ShardMembership:
    inventory: Inventory
    needs: NeedsTable
    policy: Policy
    transfer_out: set[str]
    handoff: dict[str, Machine]
    leaving: dict[str, Machine]
    moved: dict[str, int]
    decommissioned: set[str]
    adopt: Callable[[Iterable[Machine], float], int]

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
        return ids + sorted(self.handoff), -1

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

    def ownership(self, machine_id: str) -> str:
        """What this shard holds of a machine: its state, DECOMMISSIONED, or GONE."""
        if machine_id in self.handoff:
            return S.IDLE.value
        if machine_id in self.leaving:
            return self.leaving[machine_id].state.value
        if machine_id in self.decommissioned:
            return "DECOMMISSIONED"
        row = self.inventory.ids.find(machine_id)
        return self.inventory.state_of(row).value if row >= 0 else "GONE"

    def matching(self, where: Mapping[str, str], limit: int) -> Matching:
        """Machines a decommission could take (seed §16): how many, and up to `limit` ids of
        each kind (free, configured) whose provider / zone / instance_type / rack equal
        `where`'s. Machines in a transition or already leaving are not offered."""
        inv = self.inventory
        n = inv.rows_used
        fields = [
            {"provider": p.provider, "zone": p.zone, "instance_type": p.instance_type,
             "rack": dict(p.labels).get(L.RACK)}
            for p in inv.profiles.profiles
        ]
        wanted = np.array(
            [all(f.get(k) == v for k, v in where.items()) for f in fields] or [False]
        )
        found: dict[str, list[str]] = {}
        for kind, states in (("free", (S.IDLE, S.SPECULATIVE)), ("configured", (S.CONFIGURED,))):
            in_state = np.isin(inv.state[:n], [CODE[s] for s in states])
            rows = np.flatnonzero(in_state & wanted[inv.profile[:n]])
            ids = map(inv.machine_id, rows.tolist())
            found[kind] = [mid for mid in ids if mid not in self.transfer_out]
        return Matching(
            free=found["free"][:limit],
            configured=found["configured"][:limit],
            free_count=len(found["free"]),
            configured_count=len(found["configured"]),
        )

    # ---- splits and merges (seed §16) -------------------------------------------------------

    def split_plan(self, fraction: float = 0.5) -> tuple[list[str], list[str]]:
        """What leaves when the shard divides: `fraction` of its clusters, with the machines
        configured for them, and free machines by whole rack (a `Same`-rack need stays
        satisfiable on both sides) until `fraction` of its machines leave. Machines in a
        transition stay: their workflow reports back here. `fraction=1` is a merge: all."""
        inv = self.inventory
        n = inv.rows_used
        configured = CODE[S.CONFIGURED]
        held: Counter[str] = Counter()
        for r in np.flatnonzero(inv.state[:n] == configured).tolist():
            cluster = inv.cluster_of(r)
            if cluster is not None:
                held[cluster] += 1
        clusters = sorted(set(self.needs.clusters()) | set(held), key=lambda c: (-held[c], c))
        want = len(clusters) if fraction >= 1 else round(len(clusters) * fraction)
        leave: list[str] = []
        moving = staying = 0
        for i, cluster in enumerate(clusters):
            left = len(clusters) - i  # clusters not placed yet, this one included
            must = want - len(leave) >= left
            balanced = moving * (1 - fraction) <= staying * fraction
            if len(leave) < want and (must or balanced):
                leave.append(cluster)
                moving += held[cluster]
            else:
                staying += held[cluster]
        leaving = set(leave)
        ids = [
            inv.machine_id(r)
            for r in np.flatnonzero(inv.state[:n] == configured).tolist()
            if inv.cluster_of(r) in leaving or fraction >= 1
        ]
        target = len(inv) * fraction
        free = np.flatnonzero(
            (inv.state[:n] == CODE[S.IDLE]) | (inv.state[:n] == CODE[S.SPECULATIVE])
        ).tolist()
        racks: dict[str, list[str]] = {}
        for r in free:
            m = inv.machine(r)
            if m.id not in self.transfer_out:
                racks.setdefault(m.labels.get(L.RACK) or m.id, []).append(m.id)
        for rack in sorted(racks):
            if fraction < 1 and len(ids) >= target:
                break
            ids.extend(racks[rack])
        return sorted(leave), ids

    def split_out(
        self, clusters: Iterable[str], machine_ids: Iterable[str], to: int
    ) -> list[dict[str, Any]]:
        """Let clusters and machines go to shard `to`: the clusters' needs leave the table
        (returned, for `to`; roll-ups that still come here are for `to`), the machines wait in
        `leaving`, out of the engine's reach, until handed out."""
        from .snapshot import needs_state

        clusters = list(clusters)
        needs = needs_state(self.needs, clusters)
        for cluster in clusters:
            self.needs.remove(cluster)
            self.moved[cluster] = to
        for mid in machine_ids:
            if self.inventory.ids.find(mid) >= 0:
                self.leaving[mid] = self.inventory.remove(mid)
        return needs

    def hand_out(self, limit: int) -> list[Machine]:
        """The next `limit` machines of a split, for the receiving shard."""
        ids = sorted(self.leaving)[:limit]
        return [self.leaving.pop(mid) for mid in ids]

    def take_in(
        self, needs: list[dict[str, Any]], machines: Iterable[Machine], now: float
    ) -> int:
        """Clusters and machines from a split or merge (or back from one that failed): the
        needs keep their place in the queue, the machines their state."""
        from .snapshot import restore_needs

        restore_needs(needs, self.policy.max_silence_seconds, self.needs)
        for c in needs:
            self.moved.pop(c["cluster"], None)
        return self.adopt(machines, now)
