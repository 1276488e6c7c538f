"""`bigfleet audit`, the pure part: what a shard holds of a provider's machines, page by page,
and how a provider's listing and the shards' holdings disagree.

Four kinds of discrepancy (`KINDS`): a listed machine no shard holds (`orphan`), one two or
more shards hold (`double`), one whose single holder has it in another state, or configured
for another cluster, than the provider says (`mismatch`), and one a shard holds that its
provider does not list (`unlisted`). A disagreement that a transition in flight explains — the
shard or the provider has the machine in a transitional state (or FAILED, which the shard's
reconcile folds in) for less than `stale_seconds` — is counted as `in_flight`, not as a
discrepancy: it settles by itself. So is a speculative slot the provider no longer lists (the
shard's next reconcile gives it up).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .inventory import GONE
from .models import Machine, MachineState
from .profiles import Profile
from .shard import Shard
from .states import STABLE

S = MachineState
KINDS = ("orphan", "double", "mismatch", "unlisted")
HOLDINGS_PAGE_MAX = 10_000  # rows a `holdings` query answers (~60 bytes each)
# Holdings cursors from here on page through the machines outside the inventory: drained for
# a transfer (hand-off) or leaving in a split. Below it a cursor is an inventory row.
EXTRA = 1 << 40
STALE_SECONDS = 3600.0  # a transition older than this is no longer "in flight"

# One shard's hold of a machine: (shard, state, cluster, since) — since: when it entered it.
Holding = tuple[int, str, str | None, int]


def holdings_page(
    shard: Shard, provider: str, cursor: int, limit: int
) -> tuple[list[list[Any]], int]:
    """A page of what `shard` holds of `provider`'s machines: `[id, state, cluster, since]`
    rows from `cursor`, at most `limit`, and the cursor of the next page (-1: none). Inventory
    rows first, by row (one numpy pass, no sort), then hand-offs and leaving machines (cursor
    `EXTRA + k`). A machine that comes or goes between pages may be missed, never invented."""
    inv = shard.inventory
    out: list[list[Any]] = []
    if cursor < EXTRA:
        pid = inv.providers.get(provider)
        if pid is not None:
            n = inv.rows_used
            hit = (inv.state[cursor:n] != GONE) & (inv.provider[cursor:n] == pid)
            rows = np.flatnonzero(hit)[:limit] + cursor
            for r in rows.tolist():
                out.append(
                    [inv.machine_id(r), inv.state_of(r).value, inv.cluster_of(r), int(inv.since[r])]
                )
            if len(rows) == limit:
                return out, int(rows[-1]) + 1
        cursor = EXTRA
    extras = sorted(
        (m for m in (*shard.handoff.values(), *shard.leaving.values())
         if Profile.of(m).provider == provider),
        key=lambda m: m.id,
    )
    k = cursor - EXTRA
    part = extras[k : k + limit - len(out)]
    out += [[m.id, m.state.value, m.cluster, m.transition_started_unix] for m in part]
    return out, (EXTRA + k + len(part) if k + len(part) < len(extras) else -1)


def _busy(state: str) -> bool:
    return S(state) not in STABLE


def classify(
    listed: Mapping[str, Machine],
    held: Mapping[str, Sequence[Holding]],
    now: float,
    stale_seconds: float = STALE_SECONDS,
) -> dict[str, dict[str, tuple]]:
    """Every disagreement between one provider's listing and the shards' holdings of its
    machines, by kind (`KINDS`, and `in_flight`): machine id → a signature of what was seen
    (two looks that see the same signature see the same disagreement)."""
    out: dict[str, dict[str, tuple]] = {kind: {} for kind in (*KINDS, "in_flight")}
    for mid, m in listed.items():
        holders = sorted(held.get(mid, ()))
        if not holders:
            out["orphan"][mid] = (m.state.value, m.cluster)
            continue
        if len(holders) > 1:
            out["double"][mid] = (m.state.value, tuple((h[0], h[1]) for h in holders))
            continue
        shard, state, cluster, since = holders[0]
        if state == m.state.value and (m.state is not S.CONFIGURED or cluster == m.cluster):
            continue
        signature = (m.state.value, m.cluster, shard, state, cluster)
        if _busy(state) or m.state not in STABLE:
            started = since if _busy(state) else m.transition_started_unix
            if now - started < stale_seconds:
                out["in_flight"][mid] = signature
                continue
        out["mismatch"][mid] = signature
    for mid, holding in held.items():
        if mid in listed:
            continue
        holders = sorted(holding)
        if len(holders) > 1:
            out["double"][mid] = (None, tuple((h[0], h[1]) for h in holders))
            continue
        shard, state, cluster, since = holders[0]
        unlisted = (None, None, shard, state, cluster)
        if state == S.SPECULATIVE.value or (_busy(state) and now - since < stale_seconds):
            out["in_flight"][mid] = unlisted
        else:
            out["unlisted"][mid] = unlisted
    return out


def persisting(
    first: Mapping[str, Mapping[str, tuple]], second: Mapping[str, Mapping[str, tuple]]
) -> dict[str, dict[str, tuple]]:
    """What two looks agree on: a discrepancy seen the same way both times (a machine between
    a saga's release and adopt, or read on two shards' pages as it moved, is seen once)."""
    return {
        kind: {mid: sig for mid, sig in found.items() if first.get(kind, {}).get(mid) == sig}
        for kind, found in second.items()
    }
