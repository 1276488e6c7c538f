"""Clusters in shadow inside a shard that acts (design §13, migration phase 1, cluster by
cluster; issue 46; docs/adoption.md).

A *shadow* cluster keeps its own autoscaler: BigFleet leaves its machines alone exactly as an
unmanaged cluster's (bigfleet/cluster_modes.py) and starts nothing for it. Unlike an unmanaged
cluster, its roll-ups are taken — into a table of their own, never the shard's — and every
cycle, after the shard has decided for its managed clusters, a *twin* decides for the shadow
clusters alone: a throwaway `Shard` holding the shadow clusters' machines as the providers last
listed them and the machines the real shard left free this cycle (idle, and slots not yet
created: what BigFleet could have given them; of each profile as many as they ask for in all,
cheapest first, at most `FREE_MAX`). A cycle where none of that changed reuses the last twin's
decision (`bigfleet/shard.py` at 100 000 machines: 1.3 ms a steady cycle, 2.7 ms with a
shadow cluster; 3.5 and 8.2 ms when its roll-up changes every cycle). What the twin
would do is recorded per cluster, never carried out, beside what the cluster actually has —
the machines its operator reports (the roll-up's `health.machine_ids`), priced by the providers'
listings:

- machines: asked for (its needs' counts), actual, and would-be (actual, plus what the twin would
  configure or create for it, less what it would drain or delete of it);
- cost per hour and dollars at the same prices (a machine no provider listed is counted in
  `unpriced`, not guessed);
- time to capacity: a cluster is short from the first cycle its actual machines are fewer than
  asked; *actual* ends when its operator reports enough, *would-be* at the twin's first decision
  that, with what it has, covers it (the providers' latency is not in the would-be figure).

The twin is built afresh every cycle: it has no memory of earlier cycles (settle times, yields),
so its would-be actions are what BigFleet would do now, from what the cluster has now. The
record is bounded (rings, `MAX_CLUSTERS`) and crosses continue-as-new in the shard's state;
the listing does not (the next reconcile lists again). Nothing here does I/O.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from .inputs import clip
from .inventory import CODE
from .models import ClusterCapacityNeeds, Machine, MachineState
from .needs import NeedsTable, needs_state, restore_needs

if TYPE_CHECKING:
    from .engine import Decision
    from .shard import Shard

S = MachineState
MAX_CLUSTERS = 1_000  # shadow clusters a shard follows (each a record of about 5 KB at most)
MAX_SEEN = 50_000  # shadow clusters' machines kept from the listings
FREE_MAX = 4_096  # the shard's free machines offered to the twin a cycle
RECENT = 20  # would-be actions kept per cluster
DURATIONS = 100  # time-to-capacity samples kept per cluster and side
FREE = (CODE[S.IDLE], CODE[S.SPECULATIVE])


class ShadowRecord:
    """One shadow cluster's comparison (see the module)."""

    def __init__(self, s: dict[str, Any] | None = None) -> None:
        s = s or {}
        self.since: float | None = s.get("since")
        self.at: float | None = s.get("at")
        self.cycles: int = s.get("cycles", 0)
        self.now: dict[str, Any] = dict(s.get("now", {}))  # the last cycle's figures
        self.usd: dict[str, float] = {"actual": 0.0, "would_be": 0.0, **s.get("usd", {})}
        self.actions: Counter[str] = Counter(s.get("actions", {}))
        self.recent: deque[dict[str, Any]] = deque(s.get("recent", []), RECENT)
        self.ttc = {k: deque(s.get("ttc", {}).get(k, []), DURATIONS) for k in self.usd}
        self.open: list[float | None] | None = s.get("open")  # [short since, would-be covered]
        self.withdrawn: int = s.get("withdrawn", 0)  # short episodes its needs ended first
        # The last cycle's would-be actions: one the twin decides again next cycle (it starts
        # from what the cluster has, which did not change) is the same intent, counted once.
        self.last: set[tuple[str, str]] = set()

    def state(self) -> dict[str, Any]:
        return {
            "since": self.since,
            "at": self.at,
            "cycles": self.cycles,
            "now": self.now,
            "usd": self.usd,
            "actions": dict(self.actions),
            "recent": list(self.recent),
            "ttc": {k: list(v) for k, v in self.ttc.items()},
            "open": self.open,
            "withdrawn": self.withdrawn,
        }

    def cycle(self, now: float, figures: dict[str, Any], actions: list[dict[str, Any]]) -> None:
        """A cycle's figures (`want`, `actual`, `would_be`, each side's `cost_per_hour`)."""
        if self.since is None:
            self.since = now
        if self.at is not None:
            hours = max(0.0, min(now - self.at, 3600.0)) / 3600
            for side in self.usd:
                self.usd[side] += self.now.get(f"{side}_cost_per_hour", 0.0) * hours
        self.at, self.now = now, figures
        self.cycles += 1
        intents = {(a["kind"], a["machine"]) for a in actions}
        for a in actions:
            if (a["kind"], a["machine"]) not in self.last:
                self.actions[a["kind"]] += 1
                self.recent.append(a)
        self.last = intents
        want, actual = figures["want"], figures["actual"]
        if self.open is None and actual < want:
            self.open = [now, None]
        if self.open is not None and want == 0:  # (asks for nothing now: not covered by anyone)
            self.open, self.withdrawn = None, self.withdrawn + 1
        if self.open is not None:
            began = self.open[0] if self.open[0] is not None else now
            if self.open[1] is None and figures["would_be"] >= want:
                self.open[1] = now
                self.ttc["would_be"].append(round(now - began, 3))
            if actual >= want:
                self.ttc["actual"].append(round(now - began, 3))
                self.open = None

    def report(self, cluster: str) -> dict[str, Any]:
        def side(name: str) -> dict[str, Any]:
            samples = sorted(self.ttc[name])
            return {
                "machines": self.now.get(name, 0),
                "cost_per_hour": round(self.now.get(f"{name}_cost_per_hour", 0.0), 4),
                "cost_usd": round(self.usd[name], 4),
                "time_to_capacity": {
                    "count": len(samples),
                    "p50": float(np.percentile(samples, 50)) if samples else None,
                    "p99": float(np.percentile(samples, 99)) if samples else None,
                },
            }

        return {
            "cluster": cluster,
            "since": self.since,
            "at": self.at,
            "cycles": self.cycles,
            "asked": self.now.get("want", 0),
            "actual": {**side("actual"), "unpriced": self.now.get("unpriced", 0)},
            "would_be": {**side("would_be"), "actions": dict(self.actions)},
            "short_since": self.open[0] if self.open else None,
            "withdrawn": self.withdrawn,
            "recent_actions": list(self.recent),
        }


class ShadowClusters:
    """A shard's shadow clusters: their roll-ups, their machines as listed, and a record each."""

    def __init__(self, max_silence_seconds: float = 300.0) -> None:
        self.needs = NeedsTable(max_silence_seconds=max_silence_seconds)
        self.seen: dict[str, Machine] = {}
        self.records: dict[str, ShadowRecord] = {}
        self.error = ""  # the last cycle that failed, if any (`cycle`)
        self.mark: tuple[Any, ...] = ()  # what the last twin decided on
        self.per: dict[str, tuple[int, int, float, list[dict[str, Any]]]] = {}

    def take(self, rollup: ClusterCapacityNeeds, now: float) -> str | None:
        """A shadow cluster's roll-up, into the shadow's own table; why not, if refused."""
        if rollup.cluster not in self.records and len(self.records) >= MAX_CLUSTERS:
            return f"at most {MAX_CLUSTERS} clusters are followed in shadow by a shard"
        self.needs.apply(rollup, now)
        self.records.setdefault(rollup.cluster, ShadowRecord())
        return None

    def listed(self, machines: Iterable[Machine], shadow: frozenset[str]) -> None:
        """Machines the providers list: those of shadow clusters are kept (bounded)."""
        for m in machines:
            if m.cluster in shadow and (m.id in self.seen or len(self.seen) < MAX_SEEN):
                self.seen[m.id] = m

    def forget(self, keep: frozenset[str]) -> None:
        """Clusters no longer in shadow: their roll-ups, machines and records go."""
        for cluster in [c for c in self.needs.clusters() if c not in keep]:
            self.needs.remove(cluster)
        self.records = {c: r for c, r in self.records.items() if c in keep}
        self.seen = {i: m for i, m in self.seen.items() if m.cluster in keep}

    def cycle(self, shard: Shard, now: float) -> None:
        """The twin's decision for the shadow clusters, recorded against what they have. A
        failure here is kept for the report (`error`), never the shard's: the clusters it acts
        for do not pay for the shadow."""
        try:
            self._cycle(shard, now)
        except Exception as err:  # (bounded: the text is cut)
            self.error = f"at {now:.0f}: {err!r}"[:300]

    def _cycle(self, shard: Shard, now: float) -> None:
        self.needs.expire(now)
        if not self.needs.clusters():
            return
        # What each has: the machines its operator reports, else those listed as configured
        # in its name.
        listed: dict[str, set[str]] = {}
        for seen in self.seen.values():
            if seen.state is S.CONFIGURED and seen.cluster is not None:
                listed.setdefault(seen.cluster, set()).add(seen.id)
        has = {}
        for c in self.needs.clusters():
            health = self.needs.health(c)[1]
            has[c] = set(health.machine_ids) if health else listed.get(c, set())
        want = sum(n.count for n in self.needs)
        free = _free_rows(shard, want)
        inv = shard.inventory
        # Nothing changed since the last twin (roll-ups, what they have, what is free): the
        # same decision, not made again (a twin costs ~200 ms with thousands of free machines).
        mark = (self.needs.version, tuple(sorted((c, len(h)) for c, h in has.items())),
                tuple(free.tolist()), len(self.seen))  # fmt: skip
        if mark != self.mark:
            self.mark = mark
            twin = type(shard)(shard.id, shard.policy)  # (a twin is a shard)
            twin.keep_unheard = False
            twin.needs = self.needs
            # (Each reported machine in its cluster's name and configured, as its operator
            # says.)
            mine = [
                m.model_copy(update={"cluster": c, "state": S.CONFIGURED})
                for c, ids in has.items()
                for i in sorted(ids)
                if (m := self.seen.get(i)) is not None and m.host is not None
            ]
            twin.adopt(mine + [inv.machine(r) for r in free.tolist()], now)
            self.per = _per_cluster(twin.cycle(now), twin, now)
        per = self.per
        for cluster in self.needs.clusters():
            record = self.records.setdefault(cluster, ShadowRecord())
            priced = [self.seen[i] for i in has[cluster] if i in self.seen]
            cost = sum(_price(m) for m in priced)
            gained, lost, delta, actions = per.get(cluster, (0, 0, 0.0, []))
            figures = {
                "want": sum(n.count for n in self.needs.needs_of(cluster)),
                "actual": len(has[cluster]),
                "unpriced": len(has[cluster]) - len(priced),
                "would_be": len(has[cluster]) + gained - lost,
                "actual_cost_per_hour": cost,
                "would_be_cost_per_hour": max(0.0, cost + delta),
            }
            record.cycle(now, figures, actions)

    def state(self, names: frozenset[str]) -> dict[str, Any]:
        return {
            "names": sorted(names),
            "needs": needs_state(self.needs),
            "records": {c: r.state() for c, r in self.records.items()},
        }

    def restore(self, state: dict[str, Any] | None) -> None:
        """Take up `state` (the last run's); one that does not read starts the record afresh
        (anyone may start a shard with any input): the roll-ups come again within a cycle."""
        if not state:
            return
        try:
            restore_needs(state.get("needs", []), self.needs.max_silence_seconds, self.needs)
            records = state.get("records", {})
            if not all(isinstance(r, dict) for r in records.values()):
                raise ValueError("records: each an object")
            self.records = {c: ShadowRecord(r) for c, r in list(records.items())[:MAX_CLUSTERS]}
            for c, r in self.records.items():
                r.report(c)  # (each reads back whole, or none does)
                if r.open is not None and not (isinstance(r.open, list) and len(r.open) == 2):
                    raise ValueError(f"records: {clip(c, 80)}: open: a pair is required")
                if not isinstance(r.withdrawn, int) or not isinstance(r.cycles, int):
                    raise ValueError(f"records: {clip(c, 80)}: counts are whole numbers")
        except (ValueError, TypeError, KeyError, AttributeError) as err:
            self.needs = NeedsTable(max_silence_seconds=self.needs.max_silence_seconds)
            self.records = {}
            self.error = f"restoring: {err!r}"[:300]

    def report(self, cluster: str | None = None) -> list[dict[str, Any]]:
        """Each shadow cluster's comparison (or one's)."""
        return [
            r.report(c) for c, r in sorted(self.records.items()) if cluster is None or c == cluster
        ]


def _price(m: Machine) -> float:
    return float(m.price_per_hour or 0.0)


def _free_rows(shard: Shard, want: int) -> np.ndarray:
    """The shard's free machines this cycle (idle, and slots not yet created): what BigFleet
    could have given the shadow clusters. Of each profile the `want` cheapest (no need of
    theirs could take more of one profile than they ask for in all), FREE_MAX in all."""
    inv = shard.inventory
    n = inv.rows_used
    rows = np.flatnonzero(np.isin(inv.state[:n], FREE))
    rows = rows[np.lexsort((rows, inv.price[rows], inv.profile[rows]))]
    profiles = inv.profile[rows]
    _, first = np.unique(profiles, return_index=True)
    rank = np.arange(len(rows)) - np.repeat(first, np.diff(np.append(first, len(rows))))
    rows = rows[rank < max(want, 0)]
    return np.sort(rows[np.argsort(inv.price[rows], kind="stable")][:FREE_MAX])


def _per_cluster(
    decision: Decision, twin: Shard, now: float
) -> dict[str, tuple[int, int, float, list[dict[str, Any]]]]:
    """Per shadow cluster: machines the twin would give it and take from it, what that adds to
    its cost per hour, and the actions as entries for its record."""
    inv = twin.inventory
    out: dict[str, tuple[int, int, float, list[dict[str, Any]]]] = {}
    for a in decision.actions:
        ids = list(a.machine_ids) if a.kind == "create" else [a.machine_id]  # type: ignore[union-attr]
        row = inv.ids.find(ids[0])
        price = inv.profile_of(row).price_per_hour * len(ids) if row >= 0 else 0.0
        cluster = getattr(a, "cluster", None)
        if cluster is None:
            continue  # (a delete of a free machine: nobody's)
        gained, lost, delta, actions = out.get(cluster, (0, 0, 0.0, []))
        if a.kind in ("create", "configure"):
            gained, delta = gained + len(ids), delta + price
        elif a.kind == "drain":
            lost, delta = lost + 1, delta - price
        entry = {"t": now, "kind": a.kind, "machine": ids[0], "machines": len(ids)}
        out[cluster] = (gained, lost, delta, [*actions, entry])
    return out
