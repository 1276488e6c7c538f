"""The global coordinator's planning (design §6 tier 1, §9): pure, so it runs in a workflow, in
the simulator and in tests alike. What the shards report is in `reports.py`; a decommission's
shares in `decommission.py`.

It assigns clusters to shards on first contact, keeps the fleet view from shard reports, and
turns shortfalls into moves in design §9's order: idle machines from another shard, then
speculative quota, then — only when neither exists anywhere and the priority is strictly higher
— cross-shard preemption.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Mapping
from dataclasses import dataclass, field

from .assignment import cluster_shard
from .cluster_questions import MAX_ASKED as MAX_ASKED
from .cluster_questions import NO_SHARD as NO_SHARD
from .cluster_questions import ClusterAsk as ClusterAsk
from .cluster_questions import ClusterName as ClusterName
from .cluster_questions import ClusterOwners as ClusterOwners
from .cluster_questions import ClusterQuestion as ClusterQuestion
from .cluster_questions import wants_of as wants_of
from .cost import drain_grace_period
from .fleet_shape import MembershipThresholds as MembershipThresholds
from .fleet_shape import merge_candidate, split_candidate
from .models import Shortfall
from .pooling.bounds import IDLE_SHARE, Budgets
from .pooling.for_cost import Asker, cost_moves
from .pooling.headroom import headroom_moves
from .pooling.holdings import Wants, fitting
from .pooling.index import Round
from .pooling.pace import Pace, finish
from .pooling.quota import quota_moves
from .pooling.whole_rack import rack_moves
from .reports import REPORT_SECONDS, MoveKind, ShardReport

MAX_SHARE = 0.10
PLAN_SHORTFALLS = 500  # shortfalls a round answers, at most (the highest priorities first)
# The cluster → shard map crosses continue-as-new in the coordinator's one payload, under the
# server's payload limit (workers/dev/server.py BLOB_ERROR_BYTES, 600 KB since issue 44) with
# its sagas beside it: at most this many bytes of names (~8 000 names of 30 letters). A
# coordinator's run begun before keeps the bound it had (ASSIGNMENT_BYTES_BEFORE).
ASSIGNMENT_BYTES = 300_000
ASSIGNMENT_BYTES_BEFORE = 1_000_000


ESCALATE_MAX = 1000  # blocked drains escalated in one round, at most (one activity's input)


@dataclass
class Move:
    """Machines to move from `donor` to `receiver`, one saga each."""

    kind: MoveKind
    donor: int
    receiver: int
    machine_ids: list[str]
    priority: int
    grace_seconds: float = 0.0
    cluster: str = ""
    # Why (issue 45): "shortfall" (design §9's order), "domain" (a `same` need's rack), "cost",
    # "quota" or "headroom" (`pooling/for_cost.py`, `quota.py`, `headroom.py`).
    reason: str = "shortfall"


@dataclass
class Coordinator:
    """The coordinator's state and planning: its term and instruction sequence, the shards, the
    cluster → shard map and the shards' last reports; it assigns clusters and plans the moves
    that answer shortfalls (see the module)."""

    term: int = 0
    seq: int = 0
    shards: list[int] = field(default_factory=list)
    clusters: dict[str, int] = field(default_factory=dict)
    reports: dict[int, ShardReport] = field(default_factory=dict)
    received: dict[int, float] = field(default_factory=dict)
    # Shards merging away: assigned nothing new, and gone from the fleet once retired (a late
    # report from a retired shard is ignored; its number is never used again).
    retiring: set[int] = field(default_factory=set)
    retired: set[int] = field(default_factory=set)
    # New clusters go home first (`home`); off: to the least-loaded shard (coordinator runs
    # begun before the rule).
    by_home: bool = True
    assignment_max: int = ASSIGNMENT_BYTES  # (bytes of names in the map, at most)
    # The shards the fleet was deployed with (0 … founding − 1; 0: as many as there are).
    founding: int = 0
    # Blocked preemption drains already escalated (bigfleet/blocked.py): each is escalated
    # once; kept while a shortfall still names it.
    escalated_drains: set[str] = field(default_factory=set)
    # One pool across shards (issue 45, `pooling/`): whole domains for `same` shortfalls,
    # idle owned machines for elastic spend elsewhere, hand-overs bounded apart from drains,
    # a donor short of a machine keeps it. Off: coordinator runs begun before the rules.
    pools: bool = True
    # With `pools`: needs not yet settled draw free machines for cost too, and speculative
    # machines go to the shards that use their kind (`pooling/quota.py`). Off: runs begun
    # before these rules.
    follows_use: bool = True
    # With `pools`: a shortfall takes the cheapest free machines that fit it first (an owned
    # rack's before a cloud slot), a donor keeps a free machine from it only when short of it
    # itself, not to save cost, and free owned machines are spread over the shards by demand
    # (`pooling/headroom.py`; decision 0015 rules 10, 11). Off: runs begun before.
    cheapest_first: bool = True
    # The last round's index of the reports (`plan`), for what the round reports after it.
    last_round: Round | None = field(default=None, repr=False, compare=False)

    def next_token(self) -> tuple[int, int]:
        """(coordinator_term, seq) for the next instruction (design §11)."""
        self.seq += 1
        return self.term, self.seq

    # ---- membership and assignment ----------------------------------------------------------

    def add_shard(self, shard: int) -> None:
        if shard not in self.shards:
            self.shards.append(shard)
            self.shards.sort()

    def remove_shard(self, shard: int) -> None:
        """A shard that merged away (or a split that never got going)."""
        if shard in self.shards:
            self.shards.remove(shard)
        self.retired.add(shard)
        self.reports.pop(shard, None)
        self.received.pop(shard, None)
        self.retiring.discard(shard)

    def moved(self, clusters: Iterable[str], shard: int) -> None:
        """Clusters a split or merge moved: the one time an assignment changes (design §16)."""
        for cluster in clusters:
            self.clusters[cluster] = shard

    def new_shard_id(self) -> int:
        return max([*self.shards, *self.retired], default=-1) + 1

    def membership_change(self, limits: MembershipThresholds) -> tuple[str, int, int] | None:
        """("split", shard, new shard) or ("merge", donor, into) this round, or None."""
        members = {s: r for s, r in self.reports.items() if s not in self.retiring}
        shard = split_candidate(members, limits.split_machines, limits.split_clusters)
        if shard is not None:
            return "split", shard, self.new_shard_id()
        if len(self.shards) - len(self.retiring) < 2:
            return None
        pair = merge_candidate(members, limits.merge_machines, limits.merge_clusters)
        return None if pair is None else ("merge", *pair)

    def assign(self, cluster: str, prefer: int | None = None, wants: Wants = ()) -> int:
        """A cluster's shard, chosen on first contact and kept forever (design §16): its home
        (`home`, the seed's "at random") while the fleet has the shards it was deployed with,
        else the least-loaded one (fewest clusters; among equals the lowest number, or
        `prefer`); with `pools`, among the shards that hold owned machines its needs
        (`wants`) fit, if any (`pooling/holdings.py`)."""
        shard = self.clusters.get(cluster)
        if shard is None:
            if not set(self.shards) - self.retiring:
                raise ValueError("no shards: add one before assigning clusters")
            shard = self._place(cluster, self._load(), prefer, wants)
            self.clusters[cluster] = shard
        return shard

    def home(self, cluster: str) -> int:
        """The shard the fleet's shards adopt the cluster's configured machines into at a
        fresh start (assignment.machine_shard): `cluster_shard` over the founding shards."""
        return cluster_shard(cluster, self.founding or len(self.shards))

    def _place(
        self, cluster: str, load: Mapping[int, int], prefer: int | None, wants: Wants = ()
    ) -> int:
        """Where a new cluster goes, given clusters per member shard (`load`). Home, not the
        least-loaded: a fleet started over machines that already serve clusters has adopted
        each cluster's machines into its home, and a cluster sent anywhere else would find
        none of them (its home would give them up after `max_silence_seconds`). Hashing
        1 000 clusters over 4 shards leaves each within a few percent of the mean. Once
        shards were added, split off or merged away, new clusters fill the least-loaded (a
        shard added by hand is the one they go to first). With `pools` and `wants`, both
        choose among the shards holding owned machines the cluster's needs fit, if any: its
        home when it is one of them (`pooling/holdings.py`)."""
        fit = fitting(self.reports, wants, load) if self.pools and wants else set()
        founding = self.founding or len(self.shards)
        if self.by_home and not self.retired and all(s < founding for s in self.shards):
            home = self.home(cluster)
            if home in load and (not fit or home in fit):
                return home
        return self._least_loaded({s: load[s] for s in fit} if fit else load, prefer)

    def _load(self) -> dict[int, int]:
        """Clusters per member shard (merging ones are assigned nothing new)."""
        load = {s: 0 for s in self.shards if s not in self.retiring}
        for assigned in self.clusters.values():
            if assigned in load:
                load[assigned] += 1
        return load

    @staticmethod
    def _least_loaded(load: Mapping[int, int], prefer: int | None) -> int:
        return min(load, key=lambda s: (load[s], s != prefer, s))

    def owners(
        self,
        shard: int,
        clusters: Iterable[str],
        moving: Mapping[int, int] | None = None,
        wants: Mapping[str, Wants] | None = None,
    ) -> dict[str, int]:
        """Whose each of `clusters` is, for `shard`, which got their roll-ups without serving
        them yet. A cluster nobody has asked about is assigned now as `assign_cluster` would
        (home, else least-loaded, `shard` first among equals): the answer its sender would
        have had.
        A cluster a running split or merge moves from its shard to `shard` (`moving`: donor →
        receiver) is `shard`'s already. NO_SHARD: no room in the map for it."""
        moving = moving or {}
        load: dict[int, int] | None = None  # (counted once: up to MAX_ASKED new ones a call)
        used = self.assignment_bytes()
        out: dict[str, int] = {}
        for cluster in clusters:
            owner = self.clusters.get(cluster)
            if owner is None:
                load = self._load() if load is None else load
                size = len(cluster) + 8
                if not load or not 0 < len(cluster) <= 253 or used + size > self.assignment_max:
                    out[cluster] = NO_SHARD
                    continue
                owner = self._place(cluster, load, shard, (wants or {}).get(cluster, ()))
                self.clusters[cluster] = owner
                load[owner] += 1
                used += size
            out[cluster] = shard if moving.get(owner) == shard else owner
        return out

    # ---- the fleet view ---------------------------------------------------------------------

    def receive(self, report: ShardReport, now: float) -> None:
        if report.shard in self.retired:
            return
        self.add_shard(report.shard)
        self.reports[report.shard] = report
        self.received[report.shard] = now
        self.learn(report.shard, report.clusters)

    def learn(self, shard: int, clusters: Iterable[str]) -> None:
        """Clusters a shard already serves are its own, whoever assigned them (a coordinator
        started from scratch rebuilds its map this way before it assigns anything new)."""
        used = None
        for cluster in clusters:
            if cluster in self.clusters:
                continue
            used = self.assignment_bytes() if used is None else used
            if 0 < len(cluster) <= 253 and used + len(cluster) + 8 <= self.assignment_max:
                self.clusters[cluster] = shard
                used += len(cluster) + 8

    def assignment_bytes(self) -> int:
        return sum(len(c) + 8 for c in self.clusters)  # name, quotes, colon, shard number

    def room_for(self, cluster: str) -> bool:
        """Whether the map can take one more cluster (`assignment_max`)."""
        return (
            0 < len(cluster) <= 253
            and self.assignment_bytes() + len(cluster) + 8 <= self.assignment_max
        )

    def missing(
        self, now: float, after: float = REPORT_SECONDS, since: float = -float("inf")
    ) -> list[int]:
        """Shards that have not reported for `after` seconds; one never heard from counts
        from `since` (when the coordinator's run began: a shard that has not had the time to
        report yet is not missing, issue 34)."""
        return [s for s in self.shards if now - self.received.get(s, since) > after]

    def fleet_shortfalls(self) -> list[tuple[int, Shortfall]]:
        pairs = [(s, sf) for s, r in self.reports.items() for sf in r.shortfalls]
        return sorted(pairs, key=lambda p: (-p[1].priority, -p[1].age, p[0], p[1].cluster))

    def escalations(self) -> list[tuple[int, Shortfall]]:
        """Shortfalls unresolved for more than 5 cycles: for a human."""
        return [(s, sf) for s, sf in self.fleet_shortfalls() if sf.escalated]

    def drains_to_escalate(self, limit: int = ESCALATE_MAX) -> list[str]:
        """The preemption drains escalated shortfalls wait on (design §7: "escalate the drain"),
        not escalated before: each is escalated once, down to the policy's floor; at most
        `limit` a round (the rest the next)."""
        named = {mid for _, sf in self.escalations() for mid in sf.blocked_drains}
        self.escalated_drains &= named
        fresh = sorted(named - self.escalated_drains)[:limit]
        self.escalated_drains.update(fresh)
        return fresh

    def shared_shortfalls(self) -> list[str]:
        """Profiles every reporting shard is short of: time to buy capacity, not to rebalance."""
        if len(self.reports) < 2:
            return []
        per_shard = [{sf.profile for sf in r.shortfalls} for r in self.reports.values()]
        return sorted(set.intersection(*per_shard))

    # ---- shortfall resolution ---------------------------------------------------------------

    def plan(
        self,
        max_share: float = MAX_SHARE,
        busy: Iterable[str] = (),
        pending: Mapping[tuple[int, str, int], int] | None = None,
        idle_share: float = IDLE_SHARE,
    ) -> list[Move]:
        """Moves for this round, highest-priority shortfalls first (design §9's order), then
        (with `pools`) idle owned machines to elastic spend elsewhere (`pooling/for_cost.py`).
        No donor gives more than `max_share` of its machines a round in drains, nor (with
        `pools`) `idle_share` in hand-overs (`pooling/bounds.py`; shards refuse more);
        machines in `busy` (already moving) are left alone, and `pending` machines per
        (receiver, cluster, priority), already on their way, are not asked for again."""
        return finish(self.plan_steps(max_share, busy, pending, idle_share))

    def plan_steps(
        self,
        max_share: float = MAX_SHARE,
        busy: Iterable[str] = (),
        pending: Mapping[tuple[int, str, int], int] | None = None,
        idle_share: float = IDLE_SHARE,
        pace: Pace | None = None,
    ) -> Generator[None, None, list[Move]]:
        """`plan` in steps (`pooling/pace.py`): it yields after each `pace` step of work, the
        same moves in the end (its return value). The reports must not change between steps."""
        pace = pace or Pace(len(self.reports))
        used: set[str] = set(busy)
        pending = dict(pending or {})
        coming = {r for (r, _, _), n in pending.items() if n > 0}  # (receivers of earlier moves)
        budget = Budgets.of(self.reports, max_share, idle_share if self.pools else None)
        rnd = Round(self.reports, unsettled=self.pools and self.follows_use)
        moves: dict[tuple[MoveKind, int, int, int, float, str, str], Move] = {}

        def still_wanted(receiver: int, cluster: str, priority: int, count: int) -> int:
            asked = (receiver, cluster, priority)
            on_the_way = min(count, pending.get(asked, 0))
            pending[asked] = pending.get(asked, 0) - on_the_way
            return count - on_the_way

        def take(
            kind: MoveKind,
            donor: int,
            receiver: int,
            sf: Asker,
            mid: str,
            grace: float = 0.0,
            reason: str = "shortfall",
        ) -> bool:  # (`pooling.for_cost.Take`)
            if budget.left(kind, donor) <= 0:
                return False
            key = (kind, donor, receiver, sf.priority, grace, sf.cluster, reason)
            self._take(moves, key, mid)
            used.add(mid)
            pace.add()
            budget.spend(kind, donor)
            return True

        # (With `pools`, the highest PLAN_SHORTFALLS a round, in steps of `pace` (the SDK's 2 s
        # bound on a workflow task: pooling/pace.py); the rest wait for the next round.)
        limit = PLAN_SHORTFALLS if self.pools else None
        for receiver, sf in self.fleet_shortfalls()[:limit]:
            if pace.tick():
                yield
            if sf.repair_held:
                continue  # a held repair is a human's
            if _confined_to_a_domain(sf):
                # Topology never crosses shards (design §16): a whole domain moves instead.
                if self.pools:
                    want = still_wanted(receiver, sf.cluster, sf.priority, sf.count)
                    for kind, donor, mid, holder in rack_moves(rnd, receiver, sf, used, want):
                        grace = 0.0 if holder < 0 else drain_grace_period(sf.priority, holder)
                        if not take(kind, donor, receiver, sf, mid, grace, "domain"):
                            break
                continue
            if sf.why and not sf.held_back:
                # A need no machine of its shard could ever serve (`why`: a label key none
                # carries) is not served by machines of the same profile from elsewhere. (One
                # waiting on machines their clusters hold back, `held_back`, may be.)
                continue
            want = still_wanted(receiver, sf.cluster, sf.priority, sf.count)
            if want == 0:
                continue
            free_anywhere = False
            for kind in (MoveKind.IDLE, MoveKind.SPECULATIVE):
                for donor, mid in self._offers(rnd, kind, receiver, sf, used):
                    free_anywhere = True
                    if want == 0:
                        break
                    want -= take(kind, donor, receiver, sf, mid)
            if want == 0 or free_anywhere:
                continue
            for donor, mid, priority in self._victims(rnd, receiver, sf, used):
                if want == 0:
                    break
                grace = drain_grace_period(sf.priority, priority)
                if take(MoveKind.PREEMPT, donor, receiver, sf, mid, grace):
                    want -= 1
        self.last_round = rnd
        if self.pools:
            yield from cost_moves(
                rnd, used, still_wanted, take, pace, not self.follows_use, self.cheapest_first
            )
            if self.follows_use:
                quota_moves(rnd, used, take)
            if self.cheapest_first:
                headroom_moves(rnd, used, take, coming | {m.receiver for m in moves.values()})
        return list(moves.values())

    def _offers(
        self, rnd: Round, kind: MoveKind, receiver: int, sf: Shortfall, used: set[str]
    ) -> Iterable[tuple[int, str]]:
        key = rnd.key(sf, sf.requirements)
        if self.pools and self.cheapest_first:
            found = rnd.cheapest(key, sf.requirements, sf.interruption_penalty)
        else:
            found = rnd.fitting(key, sf.requirements)
        for donor, k, p, ids in found:
            if (
                k is kind
                and donor != receiver
                and not (self.pools and rnd.keeps(donor, p, sf.priority, self.cheapest_first))
            ):
                yield from ((donor, mid) for mid in ids if mid not in used)

    def _victims(
        self, rnd: Round, receiver: int, sf: Shortfall, used: set[str]
    ) -> list[tuple[int, str, int]]:
        want = rnd.key(sf, sf.requirements)
        found = [
            (donor, mid, g.priority)
            for donor in rnd.shards
            if donor != receiver
            for g in rnd.victims(donor)
            if g.priority < sf.priority and rnd.fits(want, sf.requirements, donor, g.profile)
            for mid in g.ids
            if mid not in used
        ]
        return sorted(found, key=lambda v: (v[2], v[0], v[1]))

    @staticmethod
    def _take(
        moves: dict, key: tuple[MoveKind, int, int, int, float, str, str], machine_id: str
    ) -> None:
        move = moves.get(key)
        if move is None:
            kind, donor, receiver, priority, grace, cluster, reason = key
            move = moves[key] = Move(kind, donor, receiver, [], priority, grace, cluster, reason)
        move.machine_ids.append(machine_id)


def _confined_to_a_domain(sf: Shortfall) -> bool:
    return sf.same is not None
