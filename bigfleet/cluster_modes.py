"""Which clusters' machines a shard may act on (issue 46; docs/adoption.md).

BigFleet is adopted beside the autoscalers it replaces, often on providers they share (one cloud
account, one rack inventory). A cluster is *managed* (BigFleet takes its roll-ups and acts on its
machines) or *unmanaged*: BigFleet never touches its machines, whoever lists them — they are
neither adopted, configured, drained nor deleted — and refuses its roll-ups, saying why. A
machine is an unmanaged cluster's when its cluster is on the deployment's `unmanaged_clusters`
list, or when its provider marks it so: the label `bigfleet.io/unmanaged: "true"` (an EC2 tag of
that name, or a label the Redfish provider's rack configuration gives its systems), which also
covers machines of no cluster that another autoscaler keeps (its idle or spare ones).

Clusters not heard from yet are the other case: a shard started over a running fleet adopts a
managed cluster's configured machines before its operator's first roll-up, and keeps them from
the excess drain for as long as a cluster may be silent (`spare_unheard`). A shard revived without
its roll-ups (`drop_rollups`, the recovery ladder's last automatic rung) hears every cluster
anew the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from . import labels as L
from .engine import Decision
from .engine.decision import Actions
from .held import NONE16
from .inputs import clip
from .inventory import CODE, GONE
from .models import DrainAction, DrainReason, Machine, MachineState

if TYPE_CHECKING:
    from .shard import Shard

# Cluster names a deployment may list as unmanaged (each a cluster name, at most 253 bytes).
MAX_UNMANAGED = 10_000


class ClusterModes:
    """A shard's unmanaged clusters, and how many machines it has left alone so far."""

    def __init__(self, unmanaged: Iterable[str] = (), shadow: Iterable[str] = ()) -> None:
        # Shadow clusters are left alone as unmanaged ones are (so `unmanaged` holds them
        # too); their roll-ups go to the shard's shadow instead (bigfleet/shadow_clusters.py).
        self.shadow: frozenset[str] = frozenset(shadow)
        self.unmanaged: frozenset[str] = frozenset(unmanaged) | self.shadow
        # Machines listed to the shard and left alone, and roll-ups refused, since it started
        # (its report and the audit show them apart from BigFleet's own).
        self.left_alone = 0
        self.refused = 0
        # Changed at run time (`set`, the coordinator's `cluster_mode`): the shard's snapshot
        # then carries the set, which wins over its config's list from then on.
        self.changed = False
        # Clusters managed again whose machines the shard is taking back: their roll-ups wait
        # until it has (one served before would buy machines the cluster already has).
        self.taking_back: set[str] = set()

    def mode(self, cluster: str) -> str:
        """"managed", "unmanaged" or "shadow"."""
        if cluster in self.shadow:
            return "shadow"
        return "unmanaged" if cluster in self.unmanaged else "managed"

    def set(self, cluster: str, mode: str) -> str:
        """A cluster's mode from now on ("managed", "unmanaged", "shadow"); the one it had.
        (Its machines: an unmanaged or shadow one's are given up by `forget`, a managed one's
        adopted as listed.)"""
        was = self.mode(cluster)
        left = mode != "managed"
        if left and was == "managed" and len(self.unmanaged) >= MAX_UNMANAGED:
            raise ValueError(f"cluster: at most {MAX_UNMANAGED} clusters may be left alone")
        self.unmanaged = self.unmanaged | {cluster} if left else self.unmanaged - {cluster}
        self.shadow = self.shadow | {cluster} if mode == "shadow" else self.shadow - {cluster}
        self.changed = True
        return was

    def leaves_alone(self, m: Machine) -> bool:
        """The machine is an unmanaged cluster's (see the module)."""
        return (m.cluster is not None and m.cluster in self.unmanaged) or m.labels.get(
            L.UNMANAGED
        ) == "true"

    def keep(self, machines: Iterable[Machine]) -> list[Machine]:
        """Of listed machines, those BigFleet may take (the others are counted)."""
        out = []
        for m in machines:
            if self.leaves_alone(m):
                self.left_alone += 1
            else:
                out.append(m)
        return out

    def refusal(self, cluster: str) -> str | None:
        """Why a roll-up of `cluster` is refused, if its cluster is unmanaged (or its machines
        are being taken back: its operator sends again)."""
        if cluster in self.taking_back:
            return f"cluster {clip(cluster, 80)}: its machines are being taken back; send again"
        if cluster not in self.unmanaged or cluster in self.shadow:
            return None
        self.refused += 1
        return (
            f"cluster {clip(cluster, 80)} is unmanaged (the deployment's unmanaged_clusters, "
            "or `bigfleet cluster NAME --mode`): "
            "BigFleet leaves its machines to its own autoscaler"
        )

    def forget(self, shard: Shard) -> list[str]:
        """Give up (without an action: no drain, no delete) every machine of the shard's
        inventory that is now an unmanaged cluster's, and the needs of unmanaged clusters:
        a deployment that lists a cluster as unmanaged after BigFleet managed it hands the
        cluster back as it stands. Returns the machine ids given up."""
        inv = shard.inventory
        n = inv.rows_used
        live = np.flatnonzero(inv.state[:n] != GONE)
        gone: list[str] = []
        if self.unmanaged:
            codes = [inv.clusters.get(c) for c in self.unmanaged]
            known = np.array([c for c in codes if c is not None], dtype=np.int64)
            if len(known):
                rows = live[np.isin(inv.cluster[live].astype(np.int64), known)]
                rows = rows[inv.cluster[rows] != NONE16]
                gone += [inv.machine_id(r) for r in rows.tolist()]
            for cluster in self.unmanaged & set(shard.needs.clusters()):
                shard.needs.remove(cluster)
        marked = [
            pid for pid, p in enumerate(inv.profiles.profiles) if p.label(L.UNMANAGED) == "true"
        ]
        if marked:
            rows = live[np.isin(inv.profile[live].astype(np.int64), marked)]
            gone += [inv.machine_id(r) for r in rows.tolist()]
        gone = sorted(set(gone))
        for mid in gone:
            inv.remove(mid)
        self.left_alone += len(gone)
        return gone


def spare_unheard(shard: Shard, decision: Decision, now: float) -> Decision:
    """The decision without its excess drains of machines of clusters not heard from yet
    (`Shard.unheard`; those that have reported, or stayed silent too long, leave it first)."""
    grace, known = shard.policy.max_silence_seconds, set(shard.needs.clusters())
    shard.unheard = {c: t for c, t in shard.unheard.items() if now - t <= grace and c not in known}

    def spared(a: object) -> bool:
        return (
            isinstance(a, DrainAction)
            and a.reason is DrainReason.EXCESS
            and a.cluster in shard.unheard
        )

    if not shard.unheard or not any(map(spared, decision.actions)):
        return decision
    kept = [a for a in decision.actions if not spared(a)]
    return replace(decision, actions=Actions(kept))


def drop_rollups(shard: Shard, now: float) -> list[str]:
    """Forget every roll-up the shard holds (recovery, docs/decisions/0006: one of them may be
    what broke it): each cluster with machines configured or configuring is then unheard, its
    machines kept from the excess drain until it sends again (operators resend every cycle) or
    stays silent for `max_silence_seconds`. Returns the clusters forgotten."""
    dropped = shard.needs.clusters()
    for cluster in dropped:
        shard.needs.remove(cluster)
    inv = shard.inventory
    n = inv.rows_used
    serving = np.isin(
        inv.state[:n], [CODE[MachineState.CONFIGURED], CODE[MachineState.CONFIGURING]]
    )
    codes = np.unique(inv.cluster[:n][serving & (inv.cluster[:n] != NONE16)])
    for code in codes.tolist():
        shard.unheard.setdefault(inv.clusters.names[code], now)
    return dropped
