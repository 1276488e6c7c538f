"""Phase 3, plainly (design §8, "reclaiming excess"): configured machines no need holds drain,
most expensive first; idle elastic machines nobody is about to want go back to speculative (the
fast engine's engine/phase3.py, over counts)."""

from __future__ import annotations

from collections import defaultdict

from ...models import DrainAction, DrainReason, MachineState
from ..decision import Decision
from ..fleet_cost import idle_hold, idle_spare
from .cycle import Cycle
from .fleet import Rec
from .yielding import yield_drains

S = MachineState


def reclaim_excess(cycle: Cycle, out: Decision) -> None:
    """A Drain (reason `excess`, the policy's excess grace) for every CONFIGURED machine no
    need holds and not preempted (an owned machine yielded in place of its replacement:
    `yield_drains`): most expensive per hour first (marginal price under
    `Policy.fleet_cost`), then list price, lowest reclamation value on ties."""
    sunk = cycle.sunk
    excess = [
        m
        for m in cycle.machines
        if m.state is S.CONFIGURED
        and m.ordinal not in cycle.holder
        and m.ordinal not in cycle.preempted
    ]
    yield_drains(cycle, excess)
    excess.sort(
        key=lambda m: (
            -(m.profile.marginal_price if sunk else m.profile.price_per_hour),
            -m.profile.price_per_hour,
            m.holder_reclamation,
            m.ordinal,
        )
    )
    for m in excess:
        out.actions.append(
            DrainAction(
                provider=m.profile.provider,
                machine_id=m.id,
                cluster=m.cluster or "",
                grace_seconds=cycle.policy.excess_grace_seconds,
                reason=DrainReason.EXCESS,
            )
        )


def release_idle(cycle: Cycle, now: float) -> set[int]:
    """The idle machines to delete back to speculative (their ordinals): per profile, the
    longest-idle elastic ones beyond what its forecast wants and a waiting `Same` need keeps
    (`idle_spare`); the others once idle for `idle_hold`."""
    policy, memory, kept = cycle.policy, cycle.fleet.memory, cycle.kept
    idle_of: dict[str, list[Rec]] = defaultdict(list)
    for m in cycle.machines:
        if m.state is S.IDLE and (m.ordinal not in cycle.taken or m.ordinal in kept):
            idle_of[m.profile.name].append(m)
    gone: set[int] = set()
    for group in idle_of.values():
        profile = group[0].profile
        spare = idle_spare(policy, profile, memory.forecast.get(profile.name, 0.0))
        free = sorted(
            (m for m in group if m.ordinal not in kept), key=lambda m: (m.since, m.ordinal)
        )
        if spare is None:
            hold = idle_hold(policy, profile, memory.wants_soon(profile, policy))
            gone.update(m.ordinal for m in free if now - m.since >= hold)
        else:
            gone.update(m.ordinal for m in free[: max(0, len(free) - spare)])
    return gone
