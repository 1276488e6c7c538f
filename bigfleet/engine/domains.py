"""The topology rules both engines share: which domain a `Same` need grows or waits in, which
domain a spread need takes its next machine from, and the domains a move must keep."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import cast

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


def pick_every_spread(
    rules: list[tuple[dict[str, int], set[str], int]],
    domains: list[tuple[str | None, ...]],
    left: list[int],
    most: int,
) -> list[int]:
    """How many machines of each candidate a need with several spread rules takes, at most
    `most`. `rules`: per rule, its machines per domain (counted into as it takes), the domains
    it could use and its `max_skew`; `domains`: each candidate's domain under each rule;
    `left`: each candidate's machines. One machine at a time from the domains (one per rule)
    that keep every rule within its `max_skew` of its least-filled usable domain: the
    least-filled by the first rule, then the next, then by name, from the first candidate
    there with a machine left. A candidate without some rule's key is never taken."""
    taken = [0] * len(left)
    groups: dict[tuple[str, ...], list[int]] = {}
    for i, ds in enumerate(domains):
        if all(ds):
            groups.setdefault(cast(tuple[str, ...], ds), []).append(i)
    for _ in range(most):
        floors = [min((c.get(d, 0) for d in usable), default=0) for c, usable, _ in rules]
        best: tuple[tuple[int, ...], tuple[str, ...]] | None = None
        for ds, members in groups.items():
            if all(taken[i] >= left[i] for i in members):
                continue
            have = tuple(c.get(d, 0) for (c, _, _), d in zip(rules, ds, strict=True))
            over = zip(have, floors, rules, strict=True)
            if any(n + 1 - floor > skew for n, floor, (_, _, skew) in over):
                continue
            if best is None or (have, ds) < best:
                best = (have, ds)
        if best is None:
            break
        ds = best[1]
        taken[next(i for i in groups[ds] if taken[i] < left[i])] += 1
        for (c, _, _), d in zip(rules, ds, strict=True):
            c[d] = c.get(d, 0) + 1
    return taken


def move_domain(need: Need, profile: Profile) -> tuple[str | None, ...]:
    """The domains a replacement must share with the machine it replaces: the need's `same`
    key and its spread keys (so a move never breaks a `Same` placement nor changes a spread)."""
    keys = ([need.spec.same] if need.spec.same else []) + [r.key for r in need.spread]
    return tuple(profile.label(k) for k in keys)
