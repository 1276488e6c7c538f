"""The topology rules both engines share: which domain a `Same` need grows or waits in, which
domain a spread need takes its next machine from, and the domains a move must keep."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from ..needs import Need
from ..profiles import Profile


def need_matches(need: Need, profile: Profile, matches: bool) -> bool:
    """`matches` is requirement and resource matching; a `Same` need also needs the key."""
    return matches and (need.spec.same is None or profile.label(need.spec.same) is not None)


def domain_of(need: Need, profile: Profile) -> str | None:
    """The profile's domain for a `Same` need (its label under the need's key); None else."""
    return profile.label(need.spec.same) if need.spec.same else None


def pick_same_domain(
    need: Need, claimed: Mapping[str, int], supply: Mapping[str, int], deficit: int
) -> str | None:
    """The one domain a `Same` need grows in: where it already is, else the one with the most
    free supply that can hold the whole deficit (ties by name). None: no domain can."""
    if claimed:
        home = max(sorted(claimed), key=lambda d: claimed[d])
        return home if supply.get(home, 0) >= deficit else None
    fits = [d for d in sorted(supply) if supply[d] >= deficit]
    return max(fits, key=lambda d: supply[d]) if fits else None


def pick_same_wait_domain(
    claimed_domains: Iterable[str],
    incoming: Mapping[str, int],
    victims: Mapping[str, int],
    deficit: int,
) -> str | None:
    """Where a `Same` need that Phase 1 could not place waits or preempts: its own domain if it
    has one, else the domain needing the fewest victims (ties by name). None: no domain can."""
    domains = sorted(set(claimed_domains)) or sorted(set(incoming) | set(victims))
    best: tuple[int, str] | None = None
    for d in domains:
        have, take = incoming.get(d, 0), victims.get(d, 0)
        if have + take >= deficit and (best is None or max(0, deficit - have) < best[0]):
            best = (max(0, deficit - have), d)
    return best[1] if best else None


def domain_tallies(
    values: list[str], claimed: set[int], deficit: int, *columns: np.ndarray
) -> list[dict[str, int]]:
    """Per-domain columns as the dicts `pick_same_domain` and `pick_same_wait_domain` read,
    cut to the domains they can pick (a rack label has thousands): the need's own domains if
    it has any, else those whose columns together can complete its `deficit`."""
    keep = sorted(claimed) if claimed else np.flatnonzero(sum(columns) >= deficit).tolist()
    return [{values[d]: int(column[d]) for d in keep} for column in columns]


def pick_spread_domain(
    current: Mapping[str, int], supply: Mapping[str, int], eligible: Iterable[str], max_skew: int
) -> str | None:
    """Next domain for a spread need: the least-filled one with supply, unless that would put
    it more than `max_skew` above the least-filled eligible domain."""
    open_domains = [d for d in sorted(supply) if supply[d] > 0]
    if not open_domains:
        return None
    best = min(open_domains, key=lambda d: current.get(d, 0))
    floor = min((current.get(d, 0) for d in eligible), default=0)
    if current.get(best, 0) + 1 - floor > max_skew:
        return None
    return best


def move_domain(need: Need, profile: Profile) -> tuple[str | None, ...]:
    """The domains a replacement must share with the machine it replaces: the need's `same`
    key and its spread keys (so a move never breaks a `Same` placement nor changes a spread)."""
    keys = ([need.spec.same] if need.spec.same else []) + [r.key for r in need.spread]
    return tuple(profile.label(k) for k in keys)
