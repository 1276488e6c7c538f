"""Owned machines yield across cycles (`Policy.fleet_cost`; docs/decisions/0012, rule 5; issue
45), the rule both engines share: a settled need running on an owned machine moves,
make-before-break, onto the cheapest free machine that fits it, when another settled need keeps
paying for an elastic machine the owned one would serve, and the fleet saves more than either
move costs. Phase 1's swap (`fleet_cost.regret_swaps`) does this for needs placed in the same
cycle; this is the same swap for needs placed at different times, or placed while the owned
machines were still speculative racks.

A yield is three ordinary steps over several cycles, each by a rule the engine already has:
1. the giver's replacement is configured (or created, then configured), as a consolidation's
   is (`Yielded` remembers it);
2. once it is configured, Phase 3 drains the giver's owned machine instead of the replacement
   (`Yielded.drained`), so the giver keeps its count throughout;
3. when that machine is idle, the taker's consolidation moves onto it and drains its elastic
   machine. The giver does not take the owned profile back by consolidation meanwhile
   (`blocks`), for `YIELD_HOLD_SECONDS`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from ..needs import Need
from ..policy import Policy
from .memory import EngineMemory, Yielded
from .moves import worth_moving

# How long a need that yielded an owned profile keeps off it (its consolidation does not move
# back onto it): long enough for its replacement to come up, the owned machine to drain in the
# excess grace and the taker to move onto it.
YIELD_HOLD_SECONDS = 3600.0


@dataclass(frozen=True, slots=True)
class Yield:
    """`giver` moves off one machine of `owned` onto one of `instead`; `taker` then moves off
    its `elastic` machine onto the owned one. `saving`: the fleet's, per hour."""

    giver: Need
    owned: Hashable
    instead: Hashable
    taker: Need
    elastic: Hashable
    saving: float


Holding = tuple[Need, Hashable, int]


def pick_yields(
    takers: Sequence[Holding],
    givers: Sequence[Holding],
    replacement: Callable[[Need], Hashable | None],
    take: Callable[[Need, Hashable], None],
    fits: Callable[[Need, Hashable], bool],
    cost: Callable[[Need, Hashable], float],
    policy: Policy,
    budget: int,
) -> list[Yield]:
    """The yields of one cycle, at most `budget` and one per giver.

    `takers`: (need, elastic profile, count) of settled needs' configured elastic machines;
    `givers`: (need, owned profile, count) of settled needs' configured owned machines that
    may drain; both in table order. `replacement(need)`: the cheapest free machine's profile
    for it now (None: none), `take(need, profile)` takes one; `fits(need, profile)`; `cost`:
    a need's effective cost of a profile per hour (owned capacity at its marginal price).

    The dearest elastic machine first (table order on ties) goes to the giver that saves the
    fleet most: the taker's saving, `cost(taker, elastic) - cost(taker, owned)`, less what the
    giver pays more on its replacement, `cost(giver, instead) - cost(giver, owned)`; first in
    table order on ties. Both must be `worth_moving` for the need that moves."""
    search = _Search(givers, replacement, fits, cost, policy)
    order = sorted(range(len(takers)), key=lambda i: (-cost(takers[i][0], takers[i][1]), i))
    out: list[Yield] = []
    for i in order:
        taker, elastic, count = takers[i]
        for _ in range(count):
            if len(out) == budget:
                return out
            found = search.best(taker, cost(taker, elastic))
            if found is None:
                break  # (its cheaper machines would save less, against the same givers)
            saving, g, new = found
            giver, owned, _ = givers[g]
            search.left[g] -= 1
            search.gone.add(giver.key)
            take(giver, new)
            search.instead.clear()  # (a free machine fewer: options are asked again)
            out.append(Yield(giver, owned, new, taker, elastic, saving))
    return out


class _Search:
    """`pick_yields`' search over the givers: what each has left, who yields this cycle, and
    each giver's replacement as last asked."""

    def __init__(
        self,
        givers: Sequence[Holding],
        replacement: Callable[[Need], Hashable | None],
        fits: Callable[[Need, Hashable], bool],
        cost: Callable[[Need, Hashable], float],
        policy: Policy,
    ) -> None:
        self.givers, self.replacement, self.fits, self.cost = givers, replacement, fits, cost
        self.policy = policy
        self.left = [count for _, _, count in givers]
        self.gone: set[str] = set()
        self.instead: dict[str, Hashable | None] = {}

    def option(self, giver: Need) -> Hashable | None:
        if giver.key not in self.instead:
            self.instead[giver.key] = self.replacement(giver)
        return self.instead[giver.key]

    def best(self, taker: Need, paid: float) -> tuple[float, int, Hashable] | None:
        """(saving, giver index, its replacement) of the giver that saves most for `taker`'s
        machine at `paid` an hour, if any is worth it."""
        cost, policy = self.cost, self.policy
        found: tuple[float, int, Hashable] | None = None
        for g, (giver, owned, _) in enumerate(self.givers):
            if not self.left[g] or giver.key in self.gone or giver.key == taker.key:
                continue
            if not self.fits(taker, owned):
                continue
            gain = paid - cost(taker, owned)
            new = self.option(giver) if worth_moving(taker, policy, gain) else None
            if new is None:
                continue
            saving = gain - (cost(giver, new) - cost(giver, owned))
            if worth_moving(giver, policy, saving) and (found is None or saving > found[0]):
                found = (saving, g, new)
        return found


def remember(
    memory: EngineMemory, yields: Sequence[Yield], name: Callable[[Hashable], str], now: float
) -> None:
    """Notes each yield's giver, what it gives up and for what (profile names)."""
    until = now + YIELD_HOLD_SECONDS
    for y in yields:
        memory.yielded[y.giver.key] = Yielded(name(y.owned), name(y.instead), until)


def blocks(memory: EngineMemory, need: Need, profile_name: str) -> bool:
    """The need yielded `profile_name` and may not move back onto it by consolidation."""
    y = memory.yielded.get(need.key)
    return y is not None and y.owned == profile_name


def due(memory: EngineMemory) -> list[tuple[str, Yielded]]:
    """The yields whose owned machine has not been drained yet, in the order they were made."""
    return [(k, y) for k, y in memory.yielded.items() if not y.drained]
