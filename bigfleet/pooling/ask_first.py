"""A shard asks before it preempts (issue 45; docs/operations.md, "Asking before preempting").

The coordinator tells each shard, in a bounded summary, which owned machines (bare metal,
reserved) other shards hold free (the idle and speculative samples of their reports, less those
a donor keeps for itself and those a running move has in hand; cloud quota elsewhere is no
reason to wait: the shard would pay its price, which its own cost rules weigh against the
backfill it preempts): entries of one profile's labels (`Profile.label_map`, as
the coordinator matches a shortfall's requirements against them) and how many, the largest
first, at most `MAX_ENTRIES`. The shard gives the summary to its engine
(`EngineMemory.elsewhere`): a need about to preempt by priority for machines an entry fits
waits `Policy.ask_before_preempt_seconds` instead, short of them with the reason, and the
coordinator serves that shortfall by a move from another shard; when nothing comes in time it
preempts as before (`engine.fleet_cost.DrainRoom.asks`).

Pure: the coordinator workflow (workflows/coordinator_pool.py) and the simulator
(simulation/rebalance.py) build the summaries with the same code, and the shard workflow
(workflows/shard_pool.py) and the simulator's shards hand them to the engine with `tell`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from ..cost import OWNED
from ..models import INT32_MAX, INT32_MIN, Wire
from ..reports import ShardReport
from .index import Round

if TYPE_CHECKING:
    from ..shard import Shard

MAX_ENTRIES = 64  # entries of a summary, at most (the largest first)
MAX_LABELS = 40  # labels of an entry, at most (an entry with more is left out)
# A summary's bytes as a signal, at most (64 entries of 40 labels of ~50 bytes is ~130 KB; a
# fleet's profiles carry a handful of labels each: a few KB).
SUMMARY_BYTES = 200_000
# A summary older than this is not used (the coordinator sends one when it changes and at
# least every `REFRESH_SECONDS`): a coordinator that stopped leaves no shard waiting on it.
STALE_SECONDS = 600.0
REFRESH_SECONDS = 300.0

LabelKey = Annotated[str, Field(min_length=1, max_length=317)]  # (prefix 253 / name 63)
LabelValue = Annotated[str, Field(max_length=253)]
Labels = tuple[tuple[str, str], ...]


class FreeElsewhere(Wire):
    """`count` machines of one profile (its labels) free in other shards."""

    labels: dict[LabelKey, LabelValue] = Field(max_length=MAX_LABELS)
    count: int = Field(ge=1, le=INT32_MAX)


class PoolSummary(Wire):
    """What the coordinator (term `term`, at its time `at`) tells one shard of the machines
    other shards hold free, the largest entries first."""

    term: int = Field(ge=0)
    at: float = Field(allow_inf_nan=False)
    free: list[FreeElsewhere] = Field(default_factory=list, max_length=MAX_ENTRIES)

    def for_engine(self) -> tuple[tuple[Mapping[str, str], int], ...]:
        """The entries as the engine reads them (`EngineMemory.elsewhere`)."""
        return tuple((dict(e.labels), e.count) for e in self.free)


def free_by_shard(
    reports: Mapping[int, ShardReport],
    used: Iterable[str],
    unsettled: bool = False,
    service_first: bool = False,
) -> dict[int, Counter]:
    """Per reporting shard: its free machines (idle and speculative samples) by profile
    labels, less those `used` (a running move has them) and those it keeps from any other
    shard's need (`Round.keeps` at the lowest priority: short of them itself, or they would
    replace its own elastic machines; with `unsettled`, as the coordinator's plan has it
    with `follows_use`; with `service_first`, short of them or keeping them for a need of its
    own that would displace the lowest priority, as its plan answers a shortfall with
    `cheapest_first`)."""
    busy, rnd = set(used), Round(reports, unsettled)
    out: dict[int, Counter] = {}
    for shard in rnd.shards:

        def given(p: int, shard: int = shard) -> bool:
            owned = rnd.profiles[shard][p].capacity_type in OWNED
            return owned and not rnd.keeps(shard, p, INT32_MIN, service_first)

        found: Counter = Counter()
        for _, p, ids in rnd.free(shard, busy, given):
            labels = rnd.profiles[shard][p].labels
            if len(labels) <= MAX_LABELS:
                found[labels] += len(ids)
        out[shard] = found
    return out


def summaries(
    reports: Mapping[int, ShardReport],
    shards: Iterable[int],
    term: int,
    at: float,
    used: Iterable[str] = (),
    unsettled: bool = False,
    service_first: bool = False,
) -> dict[int, PoolSummary]:
    """Each of `shards`' summary: what the other reporting shards hold free (`free_by_shard`),
    summed over them per profile labels, the largest entries first (then by labels), at most
    `MAX_ENTRIES`; an entry whose labels break the wire's bounds is left out."""
    free = free_by_shard(reports, used, unsettled, service_first)
    total: Counter = Counter()
    for found in free.values():
        total.update(found)
    out = {}
    for shard in shards:
        mine = total - free.get(shard, Counter())
        entries = sorted(mine.items(), key=lambda e: (-e[1], e[0]))
        kept = [(dict(labels), n) for labels, n in entries if _fits_the_wire(labels)]
        out[shard] = PoolSummary(
            term=term,
            at=at,
            free=[FreeElsewhere(labels=labels, count=n) for labels, n in kept[:MAX_ENTRIES]],
        )
    return out


def _fits_the_wire(labels: Labels) -> bool:
    return all(0 < len(k) <= 317 and len(v) <= 253 for k, v in labels)


def tell(shard: Shard, summary: PoolSummary | None, now: float) -> None:
    """Hand the shard's engine the summary (none, or one older than `STALE_SECONDS`: an empty
    one); a change is a change the engine must not repeat an earlier cycle's outcome across."""
    fresh = summary is not None and now - summary.at <= STALE_SECONDS
    free = summary.for_engine() if summary is not None and fresh else ()
    memory = shard.engine.memory
    if free != memory.elsewhere:
        memory.elsewhere = free
        shard.inventory.version += 1
