"""The rules of placement by the fleet's cost (`Policy.fleet_cost`; docs/decisions/0012),
shared by the fast engine and the reference: who may be displaced for whom and when it pays,
how far a spread need may move, how long an idle machine is held."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from math import inf
from typing import Any

from ..cost import DELETABLE, ELASTIC
from ..needs import Need
from ..policy import Policy
from ..profiles import Profile
from ..requirements import all_match
from .memory import EngineMemory
from .moves import worth_moving


def displace_floor(preemptor: Need, policy: Policy) -> int:
    """The priority a holder must be below for `preemptor` to displace it for cost: backfill
    at least `displace_gap` below it (`displaceable`; the fast engine reads its candidates
    by it)."""
    return preemptor.priority - policy.displace_gap + 1


def displaceable(holder: Need, preemptor: Need, policy: Policy) -> bool:
    """Whether `holder`'s owned machines may be displaced for `preemptor`, which would
    otherwise buy elastic capacity (`Policy.fleet_cost`): backfill at least `displace_gap`
    below it. Between closer priorities preemption stays the last resort (design §8). (Its
    cluster's do-not-disrupt marks and disruption budget bound it too: `DrainRoom`.)"""
    return holder.priority < displace_floor(preemptor, policy)


def overrides_bounds(preemptor: int, victim: int, policy: Policy) -> bool:
    """A preemption by priority from `preemptor` to `victim` (priorities) ignores its
    victim's disruption bounds: at least `disruption_override_gap` above it (design §5:
    priority is then the only throttle). Never a move for cost (`DrainRoom`)."""
    return preemptor - victim >= policy.disruption_override_gap


class DrainRoom:
    """What the clusters' disruption bounds (bigfleet/disruption.py) let one cycle drain of
    them voluntarily, counted as the shard holds the decision to them (`DisruptionBook.hold`:
    the drains in order, each kept one counting against its cluster's budget), so the engine
    decides knowing it. With `EngineMemory.cost_moves_bounded` (else every call allows
    everything, as shards decided before): a machine its cluster marked do-not-disrupt is
    not drained, nor more of a cluster than `EngineMemory.drain_room` says its preempt budget
    allows now (absent: unbounded). Only a priority preemption at least
    `disruption_override_gap` above its victim ignores both (design §5: priority is then the
    only throttle); a move for the fleet's cost never does. `held` counts, per preemptor need
    key and victim cluster, the machines a priority preemption asked for that the bounds
    will hold back, as (marked, over the budget): that need waits on them, a shortfall."""

    def __init__(self, policy: Policy, memory: EngineMemory, now: float = 0.0) -> None:
        self.on: bool = memory.cost_moves_bounded
        self.policy = policy
        self.left: dict[str, int] = dict(memory.drain_room) if self.on else {}
        self.held: dict[str, dict[str, list[int]]] = {}
        self.memory, self.now = memory, now
        # Per preemptor need key that came to preempt this cycle: how many more machines it
        # asks the coordinator for instead (`ask`), and how many it asked for (`asked`).
        self.asking: dict[str, int] = {}
        self.asked: dict[str, int] = {}

    def ask(self, preemptor: Need, count: int) -> int:
        """Of `count` machines `preemptor` is about to preempt by priority, how many it asks
        the coordinator for first (issue 45), best victims first: while less than
        `ask_before_preempt_seconds` have passed since it first came to preempt, as many as
        the coordinator's last summary (`EngineMemory.elsewhere`) then showed free in other
        shards that it fits, a cycle. Those it does not preempt: their holders keep them and
        it is short of them (`waiting`), which the coordinator serves by a move; it preempts
        the rest at once. A `Same` need never asks (only a whole domain moved would serve
        it)."""
        key = preemptor.key
        left = self.asking.get(key)
        if left is None:
            memory, wait = self.memory, self.policy.ask_before_preempt_seconds
            began = memory.asked_since.get(key)
            if began is None and wait > 0 and not preemptor.spec.same:
                free = self.free(preemptor)
                if free:
                    began = memory.asked_since[key] = (self.now, free)
            left = began[1] if began is not None and self.now - began[0] < wait else 0
        n = min(count, left)
        self.asking[key] = left - n
        if n:
            self.asked[key] = self.asked.get(key, 0) + n
        return n

    def free(self, need: Need) -> int:
        """Machines the coordinator's last summary shows free in other shards that `need`
        fits (its requirements, as the coordinator matches them)."""
        reqs = need.requirements
        return sum(n for labels, n in self.memory.elsewhere if all_match(reqs, labels))

    def settle(self) -> None:
        """After Phase 2: the waiting clocks of needs that did not come to preempt this
        cycle (no longer short) end."""
        forget(self.memory, self.asking)

    def for_cost(self, cluster: str, unmarked: int) -> int:
        """Of `unmarked` machines of `cluster`, how many a move for cost may drain now (all,
        when off: the caller counts every machine as unmarked then), counted against its
        budget. Call with what it drains."""
        room = self.left.get(cluster)
        return unmarked if room is None else min(unmarked, room)

    def drained(self, cluster: str, n: int) -> None:
        """`n` unmarked machines of `cluster` drained for cost."""
        if cluster in self.left:
            self.left[cluster] -= n

    def preempted(self, victim: Need, preemptor: Need, count: int, unmarked: int) -> int:
        """`count` machines of `victim`'s preempted for `preemptor` by priority, `unmarked`
        of them not marked: those the bounds will hold back are counted in `held`, and
        returned (the victim keeps them: it is not short of them). (Call it with those not
        asked of the coordinator first: `ask`.)"""
        if not self.on or overrides_bounds(preemptor.priority, victim.priority, self.policy):
            return 0
        room = self.left.get(victim.cluster)
        kept = unmarked if room is None else min(unmarked, room)
        if room is not None:
            self.left[victim.cluster] = room - kept
        if kept < count:
            held = self.held.setdefault(preemptor.key, {}).setdefault(victim.cluster, [0, 0])
            held[0] += count - unmarked
            held[1] += unmarked - kept
        return count - kept

    def waiting(self, need: Need) -> tuple[int, str]:
        """How many machines `need` waits on that the bounds hold back, and why (or that it
        asked the coordinator for instead of preempting them)."""
        asked = self.asked.get(need.key, 0)
        if asked:
            wait = self.policy.ask_before_preempt_seconds
            return asked, (
                f"asked the coordinator for {asked} machine(s) before preempting them: "
                f"{self.free(need)} matching free machine(s) in other shards in its last "
                f"summary; preempts after {wait:g} s if none comes"
            )
        held = self.held.get(need.key)
        if not held:
            return 0, ""
        parts = []
        for cluster, (marked, over) in sorted(held.items())[:3]:
            what = [f"{marked} marked do-not-disrupt"] if marked else []
            what += [f"{over} over its disruption budget"] if over else []
            parts.append(f"cluster {cluster[:80]}: {', '.join(what)}")
        more = ", ..." if len(held) > 3 else ""
        count = sum(m + o for m, o in held.values())
        why = f"waiting on {count} machine(s) it preempts that their clusters hold back "
        return count, f"{why}({'; '.join(parts)}{more})"[:400]


def forget(memory: EngineMemory, asking: Mapping[str, int]) -> None:
    """Of the needs' waiting clocks (`EngineMemory.asked_since`), keep those of the needs in
    `asking` (those that came to preempt this cycle: `DrainRoom.settle`)."""
    if memory.asked_since.keys() - asking.keys():
        memory.asked_since = {k: t for k, t in memory.asked_since.items() if k in asking}


def worth_displacing(holder: Need, policy: Policy, bought: float, instead: float) -> bool:
    """Displacing one of `holder`'s owned machines pays: the preemptor's elastic capacity
    (`bought`, effective cost per hour) less what the holder would buy in its place
    (`instead`: its cheapest elastic option, 0 if it has none and waits) is worth the move by
    consolidation's test (at least the minimum saving, and over the horizon more than the
    holder's reclamation penalty)."""
    return worth_moving(holder, policy, bought - instead)


def displace_budget(policy: Policy, configured: int) -> int:
    """Configured machines a cycle may drain for the fleet's cost: the same share of the
    shard's configured machines as consolidation's budget, at least one (even with
    consolidation off), so a shard never drains much of itself in one cycle for cost."""
    return max(1, int(policy.consolidation_max_fraction * configured))


class SpreadRoom:
    """How many more machines a spread need may take in each domain when it moves machines
    for the fleet's cost: at most `max_skew` in any one domain of each of its spread rules,
    counting what it holds and what this cycle gave it. Conservative (as if its least-filled
    domain had none), so a move never breaks its skew; a profile without a rule's label has
    no room. A need without spread rules has room everywhere."""

    def __init__(self, need: Need, held: Iterable[tuple[Profile, int]]) -> None:
        self.rules = list(need.spread)
        self.count: list[dict[str, int]] = [defaultdict(int) for _ in self.rules]
        for profile, n in held:
            self.add(profile, n)

    def room(self, profile: Profile) -> float:
        out = inf
        for rule, count in zip(self.rules, self.count, strict=True):
            d = profile.label(rule.key)
            out = min(out, rule.max_skew - count[d] if d else 0)
        return out

    def add(self, profile: Profile, n: int) -> None:
        for rule, count in zip(self.rules, self.count, strict=True):
            d = profile.label(rule.key)
            if d:
                count[d] += n


def idle_hold(policy: Policy, profile: Profile, wanted: bool) -> float:
    """Seconds an IDLE machine of `profile` is held before it goes back to speculative (a
    Delete), where `idle_spare` does not decide: held while the demand forecast wants its
    profile (`wanted`), else for its type's idle timeout; bare metal never goes."""
    if profile.capacity_type not in DELETABLE or wanted:
        return inf
    return policy.idle_timeout(profile.capacity_type)


def idle_spare(policy: Policy, profile: Profile, forecast: float) -> int | None:
    """With `Policy.fleet_cost`: how many IDLE elastic (spot, on-demand) machines of `profile`
    are worth holding besides those a waiting `Same` need keeps: the machines its forecast
    (machines asked for per cycle) expects to be asked for within its idle timeout. The
    longest idle beyond that go at once, not at their timeout, so machines bought for a burst
    stop billing as it ends; this replaces `idle_hold` for them. None: `idle_hold` decides
    (owned or reserved capacity, no timeout, or `fleet_cost` off)."""
    timeout = policy.idle_timeout(profile.capacity_type)
    if not policy.fleet_cost or profile.capacity_type not in ELASTIC or timeout == inf:
        return None
    return int(forecast * timeout / policy.cycle_seconds)


@dataclass(frozen=True, slots=True)
class Swap:
    """Owned machines of profile `owned` go from `giver` to `taker`; `giver` buys `instead`
    and `taker` gives back its purchase of `bought` (`count` machines of each). Profiles are
    whatever keys the caller uses (profile ids, `Profile`s)."""

    giver: Need
    owned: Any
    instead: Any
    taker: Need
    bought: Any
    count: int


def regret_swaps(
    given: Sequence[tuple[Need, Any, int]],
    buys: Sequence[tuple[Need, Any, int]],
    spare: Mapping[Any, int],
    options: Callable[[Need], list],
    fits: Callable[[Need, Hashable], bool],
    cost: Callable[[Need, Hashable], float],
) -> list[Swap]:
    """Owned capacity goes where it saves the fleet the most (`Policy.fleet_cost`): when a
    need was given owned machines this cycle (`given`: need, profile, count) and another buys
    elastic ones (`buys`) that an owned machine would fit, and the first could buy elastic
    capacity that costs it less (`cost`: effective cost, design §4) than the second's purchase
    costs the second, they swap. Dearest purchase first; for each, the giver whose own
    cheapest option (`options`: its elastic profiles, cheapest first; `spare`: slots left per
    profile) costs least. A need keeps its count: it is served by another option, never by
    none. Plain needs only (no `same`, no spread), in the cycle's order; nothing drains."""
    gives: list[list] = [list(g) for g in given]
    left: dict[Hashable, int] = {}
    out: list[Swap] = []
    todo: list[list] = sorted((list(b) for b in buys), key=lambda b: -cost(b[0], b[1]))
    for buy in todo:
        taker, bought = buy[0], buy[1]
        price = cost(taker, bought)
        while buy[2] > 0:
            best = None
            for give in gives:
                giver, owned, count = give
                if count <= 0 or giver is taker or not fits(taker, owned):
                    continue
                instead = next(
                    (p for p in options(giver) if left.get(p, spare.get(p, 0)) > 0), None
                )
                if instead is None:
                    continue
                option = cost(giver, instead)
                if option < price and (best is None or option < best[0]):
                    best = (option, give, instead)
            if best is None:
                break
            _, give, instead = best
            n = min(buy[2], give[2], left.get(instead, spare.get(instead, 0)))
            out.append(Swap(give[0], give[1], instead, taker, bought, n))
            give[2] -= n
            buy[2] -= n
            left[instead] = left.get(instead, spare.get(instead, 0)) - n
            left[bought] = left.get(bought, spare.get(bought, 0)) + n
    return out
