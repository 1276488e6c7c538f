"""Shadow mode (design §13, migration phase 1): a shard that decides every cycle and acts on
nothing keeps here what it would have done next to what happened at the providers.

The shard's view follows the providers: each cycle its decision is applied to the inventory as
usual (the engine expects it), then the providers' listing replaces every machine's state, so
the decision's hypothetical transitions never stick. `Baseline` is the inventory as the last
listing left it (taken just before the decision); the next listing is compared with it to see
what others did meanwhile. `ShadowBook` keeps the record, bounded: counters, rings of recent
entries, and what crosses continue-as-new stays small. Nothing here does I/O.

Time to capacity is counted per cluster: the machines its needs ask for (the sum of their
counts) against the machines configured for it. A cluster is short from the first cycle that
finds fewer configured than asked; *actual* ends at the first listing that shows enough,
*would-be* at the shadow's first decision that, with what is configured or on its way at the
providers, covers it. The would-be figure excludes the providers' latency (docs/shadow.md).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .engine import Decision
from .inventory import CODE, GONE, NONE16, Inventory
from .models import Machine, MachineState
from .needs import NeedsTable
from .spend import Spend

S = MachineState
STATE_OF = {code: state for state, code in CODE.items()}
RECENT = 250  # entries in each ring (would-be actions, actual changes)
DURATIONS = 500  # time-to-capacity samples kept of each kind
OPEN_MAX = 10_000  # short clusters followed at once
ON_THE_WAY = (S.CREATING, S.CONFIGURING)
BOUND = (S.CONFIGURING, S.CONFIGURED)


@dataclass
class Baseline:
    """Machine states and clusters by inventory row, as the last listing left them."""

    state: np.ndarray
    cluster: np.ndarray

    @classmethod
    def of(cls, inv: Inventory) -> Baseline:
        n = inv.rows_used
        return cls(inv.state[:n].copy(), inv.cluster[:n].copy())

    def cost_per_hour(self, inv: Inventory) -> float:
        """What the machines held (every state but SPECULATIVE: a slot not yet created) cost."""
        held = (self.state != GONE) & (self.state != CODE[S.SPECULATIVE])
        return float(inv.price[: len(self.state)][held].sum())

    def per_cluster(self, inv: Inventory, states: Iterable[MachineState]) -> dict[str, int]:
        codes = [CODE[s] for s in states]
        picked = self.cluster[np.isin(self.state, codes) & (self.cluster != NONE16)]
        counts = np.bincount(picked.astype(np.int64)) if picked.size else np.zeros(0)
        return {inv.clusters.names[i]: int(n) for i, n in enumerate(counts.tolist()) if n}

    def at(self, inv: Inventory, row: int) -> tuple[MachineState | None, str | None]:
        if row < 0 or row >= len(self.state) or self.state[row] == GONE:
            return None, None
        c = int(self.cluster[row])
        return STATE_OF[int(self.state[row])], None if c == NONE16 else inv.clusters.names[c]


def change_kinds(
    old: MachineState | None, old_cluster: str | None, new: MachineState | None, cluster: str | None
) -> list[str]:
    """What someone did to a machine between two listings (None: not listed)."""
    kinds = ["appeared"] if old is None and new is not None else []
    old = S.SPECULATIVE if old is None else old
    if new is None:
        return ["removed"] if old is S.SPECULATIVE else [] if old is S.DELETING else ["deleted"]
    if old is S.SPECULATIVE and new not in (S.SPECULATIVE, S.FAILED, S.DELETING):
        kinds.append("created")
    # (A provider may name the cluster of a CONFIGURING machine only once it is CONFIGURED.)
    moved = old_cluster is not None and cluster is not None and old_cluster != cluster
    if new in BOUND and (old not in BOUND or moved):
        kinds.append("configured")
    if old in BOUND and new in (S.DRAINING, S.IDLE):
        kinds.append("drained")
    # (A machine seen CREATING, then SPECULATIVE: created and deleted between two looks.)
    if (new is S.DELETING and old is not S.DELETING) or (
        new is S.SPECULATIVE and old in (S.CREATING, S.IDLE, *BOUND, S.DRAINING, S.FAILED)
    ):
        kinds.append("deleted")
    if new is S.FAILED and old is not S.FAILED:
        kinds.append("failed")
    return kinds


def observed_changes(
    base: Baseline,
    inv: Inventory,
    listed: list[tuple[str, Machine]],
    answered: set[str],
    now: float,
) -> list[dict[str, Any]]:
    """What the providers that `answered` show changed since `base` (`listed`: each machine
    with the provider that listed it): entries for the record."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for provider, m in listed:
        seen.add(m.id)
        old, old_cluster = base.at(inv, inv.ids.find(m.id))
        kinds = change_kinds(old, old_cluster, m.state, m.cluster)
        if kinds:
            out.append(_change(now, kinds, m.id, provider, old, m.state, m.cluster or old_cluster))
    for row in np.flatnonzero(base.state != GONE).tolist():
        mid = inv.machine_id(row)
        provider = inv.profile_of(row).provider
        if mid not in seen and provider in answered:
            old, old_cluster = base.at(inv, row)
            kinds = change_kinds(old, old_cluster, None, None)
            if kinds:
                out.append(_change(now, kinds, mid, provider, old, None, old_cluster))
    return out


def _change(
    now: float,
    kinds: list[str],
    machine: str,
    provider: str,
    old: MachineState | None,
    new: MachineState | None,
    cluster: str | None,
) -> dict[str, Any]:
    return {
        "t": now,
        "kinds": kinds,
        "machine": machine,
        "provider": provider,
        "from": old.value if old else None,
        "to": new.value if new else None,
        "cluster": cluster,
    }


def per_cluster(listed: Iterable[Machine]) -> tuple[Counter[str], Counter[str]]:
    """Machines configured, and on their way (creating, configuring), per cluster."""
    configured: Counter[str] = Counter()
    coming: Counter[str] = Counter()
    for m in listed:
        if m.cluster and m.state is S.CONFIGURED:
            configured[m.cluster] += 1
        elif m.cluster and m.state in ON_THE_WAY:
            coming[m.cluster] += 1
    return configured, coming


def would_be(decision: Decision, inv: Inventory, now: float) -> list[dict[str, Any]]:
    """The decision's actions as entries for the record, with what they would add to the
    fleet's cost per hour (`price_delta`: a create adds, a delete of a held machine takes)."""
    out = []
    for a in decision.actions:
        ids = list(a.machine_ids) if a.kind == "create" else [a.machine_id]  # type: ignore[union-attr]
        row = inv.ids.find(ids[0])
        profile = inv.profile_of(row) if row >= 0 else None
        price = profile.price_per_hour * len(ids) if profile else 0.0
        delta = price if a.kind == "create" else 0.0
        if a.kind == "delete" and row >= 0 and inv.state_of(row) is not S.SPECULATIVE:
            delta = -price
        reason = getattr(a, "reason", None)
        need = getattr(a, "need", None)
        out.append(
            {
                "t": now,
                "kind": a.kind,
                "reason": reason.value if reason is not None else (f"need {need}" if need else ""),
                "cluster": getattr(a, "cluster", None),
                "machine": ids[0],
                "machines": len(ids),
                "provider": a.provider,
                "capacity_type": profile.capacity_type.value if profile else "",
                "price_delta": delta,
            }
        )
    return out


class ShadowBook:
    """The record of a shadow shard: counters since it began, recent entries, cost, and time
    to capacity. `state()` is what crosses continue-as-new (about 100 KB at most: the rings)."""

    def __init__(self, state: dict[str, Any] | None = None) -> None:
        s = state or {}
        self.since: float | None = s.get("since")
        self.at: float | None = s.get("at")
        self.cycles: int = s.get("cycles", 0)
        self.actions: Counter[str] = Counter(s.get("actions", {}))
        self.changes: Counter[str] = Counter(s.get("changes", {}))
        self.recent_actions: deque[dict[str, Any]] = deque(s.get("recent_actions", []), RECENT)
        self.recent_changes: deque[dict[str, Any]] = deque(s.get("recent_changes", []), RECENT)
        self.cost: dict[str, float] = {"actual": 0.0, "would_be": 0.0, **s.get("cost", {})}
        self.usd: dict[str, float] = {"actual": 0.0, "would_be": 0.0, **s.get("usd", {})}
        self.ttc: dict[str, deque[float]] = {
            k: deque(s.get("ttc", {}).get(k, []), DURATIONS) for k in ("actual", "would_be")
        }
        self.ttc_count: Counter[str] = Counter(s.get("ttc_count", {}))
        # Short clusters: since when, and when the shadow first decided enough (or None).
        self.open: dict[str, list[float | None]] = dict(s.get("open", {}))
        # The last cycle's spend (bigfleet/spend.py) of each side: measured anew every cycle,
        # so it does not cross continue-as-new.
        self.spend: dict[str, Spend] = {}

    def state(self) -> dict[str, Any]:
        return {
            "since": self.since,
            "at": self.at,
            "cycles": self.cycles,
            "actions": dict(self.actions),
            "changes": dict(self.changes),
            "recent_actions": list(self.recent_actions),
            "recent_changes": list(self.recent_changes),
            "cost": dict(self.cost),
            "usd": dict(self.usd),
            "ttc": {k: list(v) for k, v in self.ttc.items()},
            "ttc_count": dict(self.ttc_count),
            "open": dict(self.open),
        }

    def decided(
        self, base: Baseline, inv: Inventory, needs: NeedsTable, actions: list[dict[str, Any]],
        now: float, at_providers: tuple[Counter[str], Counter[str]] | None = None,
    ) -> None:  # fmt: skip
        """A cycle's decision, taken on the fleet as `base` shows it. `at_providers`: machines
        configured and on their way per cluster at every provider, by the last listing (a
        cluster may be served by machines of another shard's share); else `base`'s."""
        if self.since is None:
            self.since = now
        if self.at is not None:
            hours = max(0.0, min(now - self.at, 3600.0)) / 3600
            for k in self.usd:
                self.usd[k] += self.cost[k] * hours
        self.at = now
        self.cycles += 1
        self.cost["actual"] = base.cost_per_hour(inv)
        self.cost["would_be"] = self.cost["actual"] + sum(a["price_delta"] for a in actions)
        for a in actions:
            self.actions[a["kind"]] += 1
            self.recent_actions.append(a)
        configured, coming = at_providers or (
            Counter(base.per_cluster(inv, [S.CONFIGURED])),
            Counter(base.per_cluster(inv, ON_THE_WAY)),
        )
        decided: Counter[str] = Counter()
        for a in actions:
            if a["kind"] in ("create", "configure") and a["cluster"]:
                decided[a["cluster"]] += a["machines"]
        for cluster in needs.clusters():
            want = sum(n.count for n in needs.needs_of(cluster))
            have = configured.get(cluster, 0)
            if want > have and cluster not in self.open and len(self.open) < OPEN_MAX:
                self.open[cluster] = [now, None]
            episode = self.open.get(cluster)
            if (
                episode
                and episode[1] is None
                and have + coming.get(cluster, 0) + decided[cluster] >= want
            ):
                episode[1] = now
                self._took("would_be", now - (episode[0] or now))

    def measured(self, would_be: Spend, actual: Spend) -> None:
        """What the fleet costs by bigfleet/spend.py's rules: as the decision would leave it,
        and as the last listing showed it (the decision's baseline)."""
        self.spend = {"would_be": would_be, "actual": actual}

    def listed(self, changes: list[dict[str, Any]], configured: Counter[str], needs: NeedsTable,
               now: float) -> None:  # fmt: skip
        """What the providers showed after the decision: the changes others made, and the
        machines `configured` per cluster there now."""
        for c in changes:
            for kind in c["kinds"]:
                self.changes[kind] += 1
            self.recent_changes.append(c)
        for cluster, episode in list(self.open.items()):
            want = sum(n.count for n in needs.needs_of(cluster))
            if want == 0:
                del self.open[cluster]
                self.ttc_count["withdrawn"] += 1
            elif configured.get(cluster, 0) >= want:
                del self.open[cluster]
                self._took("actual", now - (episode[0] or now))
                if episode[1] is None:
                    self.ttc_count["actual_first"] += 1

    def _took(self, kind: str, seconds: float) -> None:
        self.ttc[kind].append(round(seconds, 3))
        self.ttc_count[kind] += 1

    def report(self, shard: int) -> dict[str, Any]:
        """What `bigfleet shadow report` prints: would-be against actual."""
        return {
            "shard": shard,
            "since": self.since,
            "at": self.at,
            "cycles": self.cycles,
            "would_be": {
                "actions": dict(self.actions),
                "cost_per_hour": round(self.cost["would_be"], 4),
                "cost_usd": round(self.usd["would_be"], 4),
                "time_to_capacity": self._percentiles("would_be"),
                "spend": self._spend("would_be"),
            },
            "actual": {
                "changes": dict(self.changes),
                "cost_per_hour": round(self.cost["actual"], 4),
                "cost_usd": round(self.usd["actual"], 4),
                "time_to_capacity": self._percentiles("actual"),
                "spend": self._spend("actual"),
            },
            "short_now": len(self.open),
            "withdrawn": self.ttc_count["withdrawn"],
            "actual_first": self.ttc_count["actual_first"],
            "recent_actions": list(self.recent_actions),
            "recent_changes": list(self.recent_changes),
        }

    def _spend(self, kind: str) -> dict[str, Any] | None:
        """`Spend.summary` of one side: $/h in all, by capacity type and band, idle owned
        machines, elastic machines an idle owned one could replace (None: not measured yet)."""
        spend = self.spend.get(kind)
        return spend.summary() if spend is not None else None

    def _percentiles(self, kind: str) -> dict[str, Any]:
        samples = sorted(self.ttc[kind])
        if not samples:
            return {"count": self.ttc_count[kind], "p50": None, "p99": None}
        return {
            "count": self.ttc_count[kind],
            "p50": float(np.percentile(samples, 50)),
            "p99": float(np.percentile(samples, 99)),
        }
