"""What the coordinator shows of the pool across shards (issue 45, "Visible"; `PoolVisible`,
mixed into workflows/coordinator.py): every round, the gauge
`bigfleet_elastic_beside_idle_owned{profile}` (bigfleet/pooling/stranded.py) and the counter
`bigfleet_coordinator_moves_total{kind,reason}` (machines the round's moves take); the `pool`
section of the `status` query; the reason in each transfer saga's summary.

The machines moved for cost in the last hour are kept per minute (at most 60 buckets, a few
hundred bytes), carried across continue-as-new with the profiles the gauge last showed above 0
(so that one gone meanwhile is set to 0 by the next run too). Nothing here decides anything:
no command changes, runs begun before replay as they were.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.wire import CoordinatorInput
    from bigfleet.coordinator import Coordinator, Move
    from bigfleet.fleet_shape import PROPOSE_AFTER, short_beside_free, short_rounds
    from bigfleet.pooling.stranded import stranded
    from bigfleet.reports import MoveKind

REASONS = ("shortfall", "domain", "cost", "quota", "headroom")  # `Move.reason`
# How a saga's summary names each reason.
WHY = {
    "shortfall": "for a shortfall",
    "domain": "for a need confined to one domain (a whole rack)",
    "cost": "for cost (elastic machines paid for there)",
    "quota": "to where their kind is used (unused here)",
    "headroom": "to spread free owned machines by demand",
}
MINUTE = 60
HOUR_MINUTES = 60
SHOWN_MAX = 512  # profiles whose gauge is carried across continue-as-new, at most


class PoolView:
    """The pool's metrics and status for one coordinator (see the module)."""

    def __init__(self, c: Coordinator, state: Any = None) -> None:
        state = state if isinstance(state, Mapping) else {}
        self.c = c
        # minute (unix time // 60) → machines moved for cost in it
        self.moved: dict[int, int] = {}
        for pair in state.get("moved_for_cost", []):
            if isinstance(pair, list) and len(pair) == 2:
                self.moved[int(pair[0])] = int(pair[1])
        self.shown: set[str] = {p for p in state.get("shown", []) if isinstance(p, str)}
        self.reasons: dict[str, str] = {}  # machine id → reason, the last round's moves
        # shard → rounds in a row it was short beside free machines elsewhere, and how many
        self.short: dict[int, tuple[int, int]] = {}
        for row in state.get("short_beside_free", []):
            if isinstance(row, list) and len(row) == 3 and all(isinstance(x, int) for x in row):
                self.short[row[0]] = (row[1], row[2])

    def planned(self, moves: list[Move]) -> list[Move]:
        """The round's moves, unchanged, once counted and the gauge set."""
        meter = workflow.metric_meter()
        gauge = meter.create_gauge(
            "bigfleet_elastic_beside_idle_owned",
            "elastic machines one shard runs while free owned ones in another would do",
        )
        found = stranded(self.c.reports)
        for profile in sorted(self.shown - found.keys()):
            gauge.set(0, {"profile": profile})
        for profile, n in found.items():
            gauge.set(n, {"profile": profile})
        self.shown = set(found)
        counter = meter.create_counter(
            "bigfleet_coordinator_moves_total", "machines the coordinator moved between shards"
        )
        for kind in MoveKind:  # exported at 0, so that a rate sees the first move
            for reason in REASONS:
                counter.add(0, {"kind": kind.value, "reason": reason})
        self.reasons = {}
        minute = int(workflow.now().timestamp()) // MINUTE
        for move in moves:
            counter.add(len(move.machine_ids), {"kind": move.kind.value, "reason": move.reason})
            self.reasons.update(dict.fromkeys(move.machine_ids, move.reason))
            if move.reason == "cost":
                self.moved[minute] = self.moved.get(minute, 0) + len(move.machine_ids)
        self.moved = {m: n for m, n in self.moved.items() if m > minute - HOUR_MINUTES}
        self._propose_splits(meter, [mid for move in moves for mid in move.machine_ids])
        return moves

    def _propose_splits(self, meter: Any, moving: list[str]) -> None:
        """A shard short round after round while other shards hold free machines its
        shortfalls fit is proposed for a split (issue 45; `fleet_shape.PROPOSE_AFTER`):
        `bigfleet_split_proposed{shard}` 1, and the status says so. A proposal, not a split:
        the moves are not reaching it, and an operator decides why."""
        gauge = meter.create_gauge(
            "bigfleet_split_proposed",
            "1: the shard has been short for rounds while other shards hold machines it fits",
        )
        before = set(self.proposed())
        found = short_beside_free(self.c.reports, moving, self.c.last_round)
        counted = short_rounds(self.short, found, self.c.reports)
        self.short = {s: v for s, v in counted.items() if s in self.c.shards}  # (not retired)
        now = set(self.proposed())
        for shard in sorted(before | now):
            gauge.set(1 if shard in now else 0, {"shard": str(shard)})

    def proposed(self) -> list[int]:
        """Shards proposed for a split now."""
        return sorted(s for s, (rounds, _) in self.short.items() if rounds >= PROPOSE_AFTER)

    def moved_for_cost(self, now: float) -> int:
        """Machines moved for cost in the last hour (this minute and the 59 before)."""
        minute = int(now) // MINUTE
        return sum(n for m, n in self.moved.items() if m > minute - HOUR_MINUTES)

    def status(self, now: float) -> dict[str, Any]:
        """The `pool` section of the coordinator's status, from the shards' last reports."""
        found = stranded(self.c.reports)
        return {
            "elastic_beside_idle_owned": sum(found.values()),
            "by_profile": found,
            "moved_for_cost_last_hour": self.moved_for_cost(now),
            "split_proposed": [
                {"shard": s, "rounds": self.short[s][0], "free_elsewhere": self.short[s][1]}
                for s in self.proposed()
            ],
        }

    def summary(self, kind: str, machine_ids: list[str], where: str) -> str:
        """A transfer saga's summary: what, how many, from where to where, and why."""
        text = f"{kind}: {len(machine_ids)} machine(s), {where}"
        if kind not in {k.value for k in MoveKind} or not machine_ids:
            return text  # (a decommission's)
        reason = self.reasons.get(machine_ids[0], "")
        return f"{text}, {WHY[reason]}" if reason in WHY else text

    def state(self) -> dict[str, Any]:
        """What the next run starts from (small: see the module)."""
        return {
            "moved_for_cost": [[m, n] for m, n in sorted(self.moved.items())],
            "shown": sorted(self.shown)[:SHOWN_MAX],
            "short_beside_free": [[s, r, n] for s, (r, n) in sorted(self.short.items())],
        }


class PoolVisible:
    """The coordinator workflow's `pool` (a `PoolView` of its coordinator and carried state)."""

    inp: CoordinatorInput
    c: Coordinator

    @cached_property
    def pool(self) -> PoolView:
        return PoolView(self.c, (self.inp.state or {}).get("pool"))
