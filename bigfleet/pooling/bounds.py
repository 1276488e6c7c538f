"""How many machines a donor shard gives in one coordinator round (design §11's sanity limits).

Moves that disrupt something (a drain of a configured machine for another shard's need) stay
under `max_share` of the donor's machines a round. Moves that disrupt nothing (an idle or
speculative machine handed over: bookkeeping, seconds) get their own, larger bound
(`idle_share`), sized to move a burst's worth in a round or two (issue 45). A coordinator run
begun before the rule has one bound for both (`idle_share` None)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..reports import MoveKind, ShardReport

# Of a donor's machines, what one round may hand over idle or speculative (the shard's release
# check takes the same share: activities/wire/shard.py `ShardConfig.idle_share`).
IDLE_SHARE = 0.5


@dataclass
class Budgets:
    """Machines each donor may still give this round, per kind of move."""

    disruptive: dict[int, int]
    free: dict[int, int] | None = None  # None: free moves count against `disruptive`

    @classmethod
    def of(
        cls, reports: Mapping[int, ShardReport], max_share: float, idle_share: float | None
    ) -> Budgets:
        def share(fraction: float) -> dict[int, int]:
            return {s: max(1, int(r.size * fraction)) for s, r in reports.items()}

        return cls(share(max_share), None if idle_share is None else share(idle_share))

    def _pool(self, kind: MoveKind) -> dict[int, int]:
        if kind is MoveKind.PREEMPT or self.free is None:
            return self.disruptive
        return self.free

    def left(self, kind: MoveKind, donor: int) -> int:
        return self._pool(kind).get(donor, 0)

    def spend(self, kind: MoveKind, donor: int) -> None:
        self._pool(kind)[donor] -= 1
