"""A shard's side of fleet membership (design §16): splitting in two, merging, taking machines
out of the fleet. A helper object of `Shard` (`shard.membership`), handed the shard whose
state it moves; the coordinator's side is in `coordinator.py`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from . import labels as L
from .decommission import Matching
from .inventory import CODE
from .models import Machine, MachineState
from .needs import needs_state, restore_needs

if TYPE_CHECKING:  # (Shard makes its Membership: a type only, no import cycle)
    from .shard import Shard

S = MachineState


class Membership:
    """What a split, merge or decommission takes from or gives to one shard's state."""

    def __init__(self, shard: Shard) -> None:
        self.shard = shard

    def matching(self, where: Mapping[str, str], limit: int) -> Matching:
        """Machines a decommission could take (design §16): how many, and up to `limit` ids of
        each kind (free, configured) whose provider / zone / instance_type / rack equal
        `where`'s. Machines in a transition or already leaving are not offered."""
        inv = self.shard.inventory
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
            found[kind] = [mid for mid in ids if mid not in self.shard.transfer_out]
        return Matching(
            free=found["free"][:limit],
            configured=found["configured"][:limit],
            free_count=len(found["free"]),
            configured_count=len(found["configured"]),
        )

    # ---- splits and merges (design §16) -------------------------------------------------------

    def split_plan(self, fraction: float = 0.5) -> tuple[list[str], list[str]]:
        """What leaves when the shard divides: `fraction` of its clusters, with the machines
        configured for them, and free machines by whole rack (a `Same`-rack need stays
        satisfiable on both sides) until `fraction` of its machines leave. Machines in a
        transition stay: their workflow reports back here. `fraction=1` is a merge: all."""
        inv = self.shard.inventory
        n = inv.rows_used
        configured = CODE[S.CONFIGURED]
        held: Counter[str] = Counter()
        for r in np.flatnonzero(inv.state[:n] == configured).tolist():
            cluster = inv.cluster_of(r)
            if cluster is not None:
                held[cluster] += 1
        clusters = sorted(set(self.shard.needs.clusters()) | set(held), key=lambda c: (-held[c], c))
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
            if m.id not in self.shard.transfer_out:
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
        clusters = list(clusters)
        needs = needs_state(self.shard.needs, clusters)
        for cluster in clusters:
            self.shard.needs.remove(cluster)
            self.shard.moved[cluster] = to
        for mid in machine_ids:
            if self.shard.inventory.ids.find(mid) >= 0:
                self.shard.leaving[mid] = self.shard.inventory.remove(mid)
        return needs

    def hand_out(self, limit: int) -> list[Machine]:
        """The next `limit` machines of a split, for the receiving shard."""
        ids = sorted(self.shard.leaving)[:limit]
        return [self.shard.leaving.pop(mid) for mid in ids]

    def take_in(
        self, needs: list[dict[str, Any]], machines: Iterable[Machine], now: float
    ) -> int:
        """Clusters and machines from a split or merge (or back from one that failed): the
        needs keep their place in the queue, the machines their state."""
        restore_needs(needs, self.shard.policy.max_silence_seconds, self.shard.needs)
        for c in needs:
            self.shard.moved.pop(c["cluster"], None)
        return self.shard.adopt(machines, now)
