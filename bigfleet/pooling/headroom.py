"""Free owned machines follow demand (issue 45; decision 0015 rule 11).

One shard serves a burst from one pool of free machines. N shards serve it from the share of
that pool its own shard holds, and the rest only after the coordinator's next round (up to
`REPORT_SECONDS`) and a hand-over: meanwhile the shard buys cloud machines, or its need waits.
Dealt by a hash of the rack, the free owned machines of a kind sit where their racks landed,
not where the needs that burst onto them are. So each round the free owned machines (bare
metal, reserved; idle, or not made ready yet) of each kind are spread over the shards in
proportion to what their needs ask for of that kind (`ShardReport.demand`, all needs,
served or not: a burst is about as large as the demand it comes from), and no shard's share
more than that (a fleet with more free machines than demand leaves the rest where they are,
rather than piling them onto the few shards with demand). A shard holding fewer than its share
by at least a machine and a quarter of its share (`BAND`) gets machines from shards holding
more than theirs by as much, the furthest below first, whole machines only: demand moves all
day, and a machine should not follow every wobble (the day on 4 shards sent 954 machines back
where they came from with no band, at a median of 5.5 minutes apart; 644 with it, 30 minutes
apart). A shard with machines on their way to it (`settling`: its report does not count them
yet) gets none until it reports them; nor does a shard that would not otherwise pay for what
the machines would serve (`buys`: it runs cloud machines or is short for a need the kind fits,
or holds a free cloud slot such a need would be given): a shard served from owned machines
alone, with nothing to buy, gains nothing from idle ones at home but a longer inventory.

A *kind* is a provider's instance type in one zone at one capacity type: machines of one kind
differ only by rack, and a need that fits one fits all (unless it asks for a rack, which the
rule for `same` needs serves: `whole_rack.py`). A donor short of the kind itself keeps it
(`Round.short_of`, at any priority). Cloud slots are left to the quota rule (`quota.py`):
spreading them over every shard with use made the week 1.0 % dearer (shards bought at home
instead of being sent idle owned machines).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Set

from ..cost import ELASTIC, OWNED
from ..models import INT32_MIN, Shortfall
from ..reports import ElasticGroup, MoveKind
from .for_cost import Take
from .index import Round
from .quota import QUOTA

# A shard moves only when further from its share than this part of it (and one machine): shares
# follow demand, which moves all day, and a machine should not follow every wobble.
BAND = 0.25
Kind = tuple[str, str, str, str]  # provider, instance type, zone, capacity type
Free = list[tuple[MoveKind, int, list[str]]]  # (kind of move, profile, ids) of one shard


def free_owned(rnd: Round, used: set[str]) -> dict[Kind, dict[int, Free]]:
    """Per kind, per shard: its free owned machines not taken this round."""
    out: dict[Kind, dict[int, Free]] = defaultdict(dict)
    for shard in rnd.shards:
        for move, p, ids in rnd.free(shard, used):
            pr = rnd.profiles[shard][p]
            if pr.capacity_type in OWNED:
                kind = (pr.provider, pr.instance_type, pr.zone, pr.capacity_type.value)
                out[kind].setdefault(shard, []).append((move, p, ids))
    return out


Asked = dict[int, tuple[list, dict[int, int]]]  # requirements key → (them, shard → machines)


def asked_by_key(rnd: Round) -> Asked:
    """What every shard's needs ask for (`ShardReport.demand`), per requirements (made once a
    round: shards' needs ask for the same machines)."""
    out: Asked = {}
    for s in rnd.shards:
        for d in rnd.reports[s].demand:
            if d.count > 0:
                counts = out.setdefault(rnd.key(d, d.requirements), (d.requirements, {}))[1]
                counts[s] = counts.get(s, 0) + d.count
    return out


def shares(rnd: Round, kind: dict[int, Free], asked: Asked) -> dict[int, float]:
    """Each shard's share of a kind's free machines (`kind`: per shard, its free ones): in
    proportion to what its needs that fit the kind ask for (`asked`), and no more than that;
    empty when no need does."""
    shard, free = next(iter(kind.items()))
    p = free[0][1]  # (a machine of the kind: every one fits the same needs)
    wants: dict[int, int] = {}
    for key, (requirements, counts) in asked.items():
        if rnd.fits(key, requirements, shard, p):
            for s, n in counts.items():
                wants[s] = wants.get(s, 0) + n
    total = sum(wants.values())
    held = sum(len(ids) for free in kind.values() for _, _, ids in free)
    return {s: min(n, held * n / total) for s, n in wants.items()} if total else {}


def buys(rnd: Round, shard: int, kind: dict[int, Free], used: set[str]) -> bool:
    """Whether `shard` would pay for what a machine of `kind` would serve: it runs cloud
    machines for a need, or is short for one, that the kind fits, or holds a free cloud slot
    that one of its needs the kind fits would be given."""
    rep, free = next(iter(kind.items()))
    p = free[0][1]
    report = rnd.reports[shard]

    def kind_fits(w: object, requirements: list) -> bool:
        return rnd.fits(rnd.key(w, requirements), requirements, rep, p)

    wants: list[ElasticGroup | Shortfall] = [*report.elastic, *report.shortfalls]
    if any(kind_fits(w, w.requirements) for w in wants):
        return True
    mine = [d for d in report.demand if d.count > 0 and kind_fits(d, d.requirements)]
    return any(
        rnd.fits(rnd.key(d, d.requirements), d.requirements, shard, q)
        for _, q, _ in rnd.free(
            shard, used, lambda q: rnd.profiles[shard][q].capacity_type in ELASTIC
        )
        for d in mine
    )


def headroom_moves(rnd: Round, used: set[str], take: Take, settling: Set[int]) -> None:
    """This round's moves of free owned machines from shards holding more than their share
    to shards holding less and not `settling`, through `take` (see the module)."""
    asked = asked_by_key(rnd)
    for kind in free_owned(rnd, used).values():
        share = shares(rnd, kind, asked)
        if not share:
            continue
        held = {s: sum(len(ids) for _, _, ids in kind.get(s, [])) for s in rnd.shards}
        short = sorted(
            (held[s] - n, s)
            for s, n in share.items()
            if n - held[s] >= max(1.0, BAND * n) and s not in settling and buys(rnd, s, kind, used)
        )
        for gap, receiver in short:
            want = int(-gap)
            for donor in sorted(kind, key=lambda s: (share.get(s, 0.0) - held[s], s)):
                if want == 0:
                    break
                mine = share.get(donor, 0.0)
                spare = min(want, int(held[donor] - mine - BAND * mine))
                if donor == receiver or spare < 1:
                    continue
                given = _give(rnd, kind[donor], donor, receiver, spare, used, take)
                held[donor] -= given
                held[receiver] += given
                want -= given


def _give(
    rnd: Round, free: Free, donor: int, receiver: int, n: int, used: set[str], take: Take
) -> int:
    """Up to `n` of `donor`'s free machines `free` to `receiver`, idle first; how many."""
    given = 0
    for move, p, ids in free:
        if rnd.short_of(donor, p, INT32_MIN):
            continue
        for mid in ids:
            if given == n:
                return given
            if mid in used:
                continue
            if not take(move, donor, receiver, QUOTA, mid, 0.0, "headroom"):
                return given
            given += 1
    return given
