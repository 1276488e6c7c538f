"""Shortfalls (design §9): a cycle's unmet needs, aged across cycles and bounded, and how a
need's requirements are named when no profile matches it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

from ..models import NodeSelectorRequirement, Shortfall
from ..needs import Need
from ..policy import Policy
from ..requirements import describe as describe_requirement
from .memory import EngineMemory


class Unmet(NamedTuple):
    """A need's shortfall in the making: `missing` machines, named by `profile`; of them
    `held` it preempted but their clusters hold back (`fleet_cost.DrainRoom`), `why`."""

    need: Need
    missing: int
    profile: str
    held: int = 0
    why: str = ""


def describe(requirements: Iterable[NodeSelectorRequirement]) -> str:
    """A need's requirements as a shortfall names them when no profile matches it."""
    return "; ".join(describe_requirement(r) for r in requirements) or "any machine"


def unplaceable(need: Need, carried: Callable[[str], bool]) -> str:
    """Why no machine could ever serve `need`, if a `same` or spread key of it is one no
    machine carries (`carried`: whether some machine of the shard carries a label key)."""
    keys = ([need.spec.same] if need.spec.same else []) + [r.key for r in need.spread]
    missing = sorted({k for k in keys if not carried(k)})
    if not missing:
        return ""
    shown = ", ".join(k[:100] for k in missing[:3]) + (", ..." if len(missing) > 3 else "")
    return f"no machine of this shard carries label key {shown} (same or spread)"


def age_shortfalls(
    memory: EngineMemory,
    policy: Policy,
    unmet: list[Unmet],
    carried: Callable[[str], bool] = lambda key: True,
) -> list[Shortfall]:
    """Turn this cycle's unmet needs (table order) into aged, bounded shortfalls (design §9),
    each saying why it can never be served here where that is so (`unplaceable`), or why it
    waits (the unmet entry's own why: machines their clusters hold back)."""
    ages: dict[str, int] = {}
    out: list[Shortfall] = []
    for need, deficit, profile, held, waits in unmet:
        ident = f"{need.key}|{need.arrival}"
        age = memory.shortfall_age.get(ident, 0) + 1
        ages[ident] = age
        if len(out) < policy.max_shortfalls:
            out.append(
                Shortfall(
                    cluster=need.cluster,
                    profile=profile,
                    requirements=list(need.requirements),
                    priority=need.priority,
                    count=deficit,
                    age=age,
                    interruption_penalty=need.spec.interruption_penalty,
                    escalated=age > policy.escalate_after_cycles,
                    same=need.spec.same,
                    why=(unplaceable(need, carried) if need.spec.same or need.spread else "")
                    or waits,
                    held_back=held,
                )
            )
    memory.shortfall_age = ages
    return out
