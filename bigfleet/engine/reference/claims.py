# mypy: disable-error-code="arg-type,index,misc"
# (The reference is the seed's pseudo-code written plainly: a domain of a machine without the
# label is None and is tallied like any other, as the seed does; typed loosely on purpose.)
"""Claims, plainly: each need keeps the machines its cluster already has (or has on the way),
one linear scan of the fleet per need (the fast engine's engine/claims.py, over counts)."""

from __future__ import annotations

from collections import defaultdict

from ...needs import Need
from ..domains import domain_of
from ..ranking import CLAIM_ORDER, supply_key
from .cycle import Cycle
from .fleet import Rec


def claim_own_machines(cycle: Cycle) -> None:
    """Each need, in table order, claims up to its count of its cluster's own CONFIGURED,
    CONFIGURING, then CREATING machines that match it, cheapest for it first, a `Same` need
    only in the domain where it has the most. Fills `cycle.claims`, `.holder` and `.taken`."""
    for need in cycle.needs:
        cands = _candidates(cycle, need)
        cands.sort(
            key=lambda m: (
                CLAIM_ORDER.index(m.state),
                supply_key(need, m.profile, cycle.sunk),
                not m.kept,  # (marked machines first: given up last)
                -m.holder_reclamation,
                m.ordinal,
            )
        )
        cycle.claims[need.key] = cands[: need.count]
        for m in cycle.claims[need.key]:
            cycle.taken.add(m.ordinal)
            cycle.holder[m.ordinal] = need


def _candidates(cycle: Cycle, need: Need) -> list[Rec]:
    """The need's cluster's claimable machines no earlier need took (a `Same` need's: those
    of its home domain)."""
    cands = [
        m
        for m in cycle.machines
        if m.state in CLAIM_ORDER
        and m.cluster == need.cluster
        and m.ordinal not in cycle.taken
        and cycle.matches(need, m)
    ]
    if need.spec.same:
        per_domain: dict[str, int] = defaultdict(int)
        for m in cands:
            per_domain[domain_of(need, m.profile)] += 1
        if per_domain:
            home = max(sorted(per_domain), key=lambda d: per_domain[d])
            cands = [m for m in cands if domain_of(need, m.profile) == home]
    return cands
