"""Whether a machine a shard reports could serve a need another shard reports: the shard's own
matching, on the machine's labels plus those its fields imply."""

from __future__ import annotations

from collections.abc import Iterable

from ..models import Machine, NodeSelectorRequirement
from ..profiles import Profile
from ..reports import MoveKind, ShardReport
from ..requirements import all_match


def fits(requirements: Iterable[NodeSelectorRequirement], m: Machine) -> bool:
    return all_match(requirements, Profile.of(m).label_map)


def free_offers(
    report: ShardReport, used: set[str]
) -> Iterable[tuple[MoveKind, Machine, list[str]]]:
    """(kind, profile record, ids not yet taken this round) of a report's idle then speculative
    samples."""
    for kind in (MoveKind.IDLE, MoveKind.SPECULATIVE):
        for m, ids in report.offers(kind):
            free = [mid for mid in ids if mid not in used]
            if free:
                yield kind, m, free
