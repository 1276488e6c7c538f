"""A need confined to one topology domain (`same`, e.g. a rack) that its shard cannot serve gets
a whole domain moved to it (design §9 "the global coordinator should correct [the assignment]",
§16; issue 45). Machines are dealt to shards by rack, but idle hand-overs between shards split
racks, and a shard may never have held a rack of the profile its cluster needs.

Once the shortfall has lasted `SAME_AFTER` cycles, the domain chosen is the one where the
receiver already holds the most machines for the need (so a rack half moved keeps being
completed, round after round), then the one with the most to give. It must be able to hold the
whole need: free machines (idle, speculative) and machines held by lower priorities, in the
receiver and in every other shard. Free machines move first, then lower priorities' (a
cross-shard preemption, with the grace their priority gap gives), lowest first.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from ..models import Shortfall
from ..reports import MoveKind
from .index import Round

# Cycles a `same` shortfall lasts before the coordinator moves a domain for it: the shard
# first tries on its own (a preemption inside it may be under way).
SAME_AFTER = 3
ORDER = {MoveKind.IDLE: 0, MoveKind.SPECULATIVE: 1, MoveKind.PREEMPT: 2}


def rack_moves(
    rnd: Round, receiver: int, sf: Shortfall, used: set[str], want: int
) -> list[tuple[MoveKind, int, str, int]]:
    """(kind, donor, machine id, holder's priority) to move to `receiver` for `sf`, `want`
    machines still to come, in the order to move them; [] if no domain can hold the need."""
    if sf.same is None or sf.age < SAME_AFTER or want <= 0:
        return []
    key, wanted = sf.same, rnd.key(sf, sf.requirements)
    have: Counter[str] = Counter()
    offered: dict[str, list[tuple[int, int, int, str, MoveKind]]] = defaultdict(list)

    def domain(shard: int, p: int) -> str | None:
        if not rnd.fits(wanted, sf.requirements, shard, p):
            return None
        return rnd.profiles[shard][p].label_map.get(key)

    def place(shard: int, where: str, kind: MoveKind, holder: int, ids: list[str]) -> None:
        if shard == receiver:
            have[where] += len(ids)
        else:
            offered[where] += [(ORDER[kind], holder, shard, mid, kind) for mid in ids]

    for shard in rnd.shards:

        def in_a_domain(p: int, shard: int = shard) -> bool:
            return domain(shard, p) is not None

        fit = rnd.free(shard, used, in_a_domain)
        for kind, p, ids in fit:
            place(shard, domain(shard, p) or "", kind, -1, ids)
        for g in rnd.victims(shard):
            where = domain(shard, g.profile) if g.priority < sf.priority else None
            if where is not None:
                ids = [i for i in g.ids if i not in used]
                place(shard, where, MoveKind.PREEMPT, g.priority, ids)
    room = [d for d in offered if have[d] + len(offered[d]) >= want]
    if not room:
        return []
    best = max(room, key=lambda d: (have[d], have[d] + len(offered[d]), d))
    picked = sorted(offered[best])[: max(0, want - have[best])]
    return [(kind, shard, mid, holder) for _, holder, shard, mid, kind in picked]
