"""The rules of placement by the fleet's cost (`Policy.fleet_cost`; docs/decisions/0012),
shared by the fast engine and the reference: who may be displaced for whom and when it pays,
how far a spread need may move, how long an idle machine is held."""

from __future__ import annotations

from math import inf

from ..cost import DELETABLE, ELASTIC
from ..needs import Need
from ..policy import Policy
from ..profiles import Profile
from .common import worth_moving


def displaceable(holder: Need, preemptor: Need, policy: Policy) -> bool:
    """Whether `holder`'s owned machines may be displaced for `preemptor`, which would
    otherwise buy elastic capacity (`Policy.fleet_cost`): backfill at least `displace_gap`
    below it. Between closer priorities preemption stays the last resort (seed §8)."""
    return holder.priority <= preemptor.priority - policy.displace_gap


def worth_displacing(holder: Need, policy: Policy, bought: float, instead: float) -> bool:
    """Displacing one of `holder`'s owned machines pays: the preemptor's elastic capacity
    (`bought`, effective cost per hour) less what the holder would buy in its place
    (`instead`: its cheapest elastic option, 0 if it has none and waits) is worth the move by
    consolidation's test (at least the minimum saving, and over the horizon more than the
    holder's reclamation penalty)."""
    return worth_moving(holder, policy, bought - instead)


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
