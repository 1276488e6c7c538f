"""Phase 3 (design §8, "reclaiming excess"): configured machines no need claims drain back to
idle, most expensive first; idle cloud machines nobody is about to want go back to speculative.
"""

from __future__ import annotations

import numpy as np

from ..cost import DELETABLE
from ..inventory import CODE
from ..models import (
    DeleteAction,
    DeleteReason,
    DrainAction,
    DrainReason,
    MachineState,
)
from .cycle import CycleState
from .decision import Decision
from .fleet_cost import idle_hold, idle_spare
from .rows import RowPicker
from .yield_moves import yield_drains, yield_segments

S = MachineState


def reclaim_excess(
    state: CycleState, picker: RowPicker, out: Decision, taken: np.ndarray, now: float
) -> None:
    """Phase 3 of design §8 ("reclaiming excess"; docs/engine.md, The cycle 6, and the idle
    timeouts of 7).

    Takes the cycle's claims (`state.claims`, whose `excess` are the CONFIGURED machines no
    need kept), the `picker` built with `excess_segments` among its configured segments, the
    rows Phase 1 assigned this cycle (`taken`, never released) and the time.

    Appends to `out.actions`: a Drain (reason `excess`, the policy's full excess grace) for
    every excess machine, most expensive per hour first, lowest reclamation value on ties
    (design §8: free the cheap-to-replace capacity first); then `release_idle`'s Deletes.
    An owned machine a need yields drains in place of its replacement
    (`yield_moves.yield_drains`). Returns nothing: reclaimed machines reach IDLE when their
    drain completes.
    """
    _drain_excess(state, picker, out)
    release_idle(state, taken, now, out, picker.idle_rows())


def excess_segments(state: CycleState) -> list[tuple[str, int]]:
    """The (cluster, profile) segments of configured machines Phase 3 will drain (excess, and
    owned machines yielded in place of it), for the `RowPicker` the cycle builds once."""
    return [(c, p) for c, cc in state.claims.items() for p in cc.excess] + yield_segments(state)


def _drain_excess(state: CycleState, picker: RowPicker, out: Decision) -> None:
    inv = state.inventory
    keep, instead = yield_drains(state, picker)
    segments = [
        (picker.configured(cluster, pid, first + k, count - k), cluster)
        for cluster, cc in state.claims.items()
        for pid, (first, count) in cc.excess.items()
        for k in (keep[(cluster, pid)],)
    ] + instead
    segments = [(rows, cluster) for rows, cluster in segments if len(rows)]
    if not segments:
        return
    rows = np.concatenate([r for r, _ in segments])
    # Each row's (provider, cluster) as one integer key, by column.
    clusters = list(dict.fromkeys(c for _, c in segments))
    cluster_code = {c: i for i, c in enumerate(clusters)}
    segment_cluster = np.array([cluster_code[c] for _, c in segments], dtype=np.int64)
    row_cluster = np.repeat(segment_cluster, [len(r) for r, _ in segments])
    profile_provider, providers = inv.profiles.provider_codes()
    pids = inv.profile[rows].astype(np.int64)
    price = inv.profiles.price[pids]
    marginal = inv.profiles.marginal[pids] if state.policy.fleet_cost else price
    # Most expensive to hold first (owned capacity costs nothing more to hold: its marginal
    # price is 0), then the higher list price, lowest reclamation value on ties, then by row.
    order = np.lexsort(
        (rows, inv.holder_reclamation[rows].astype(np.float64), -price, -marginal)
    )
    rows = rows[order]
    keys = (
        profile_provider[inv.profile[rows].astype(np.int64)] * len(clusters) + row_cluster[order]
    )
    grace = state.policy.excess_grace_seconds
    state.moves.append((S.DRAINING, None, rows))
    # One validated drain per (provider, cluster); each run of machines sharing both in this
    # order is copies of it, made when read (`Actions.stamp_all`).
    ids = state.names(rows)
    starts = np.flatnonzero(np.diff(keys, prepend=-1)).tolist()
    templates: dict[int, DrainAction] = {}
    for start, end in zip(starts, starts[1:] + [len(rows)], strict=True):
        key = int(keys[start])
        template = templates.get(key)
        if template is None:
            provider, cluster = divmod(key, len(clusters))
            template = templates[key] = DrainAction(
                provider=providers[provider],
                machine_id=ids[start],
                cluster=clusters[cluster],
                grace_seconds=grace,
                reason=DrainReason.EXCESS,
            )
        out.actions.stamp_all(template, "machine_id", ids[start:end])


def release_idle(
    state: CycleState,
    taken: np.ndarray,
    now: float,
    out: Decision,
    idle: np.ndarray | None = None,
) -> None:
    """Idle → Speculative (design §8, "Idle → Speculative happens lazily, per-provider"): an
    IDLE cloud machine (a capacity type in `DELETABLE`) not `taken` this cycle is deleted once
    idle for its capacity type's timeout, unless the demand forecast wants its profile soon;
    with `Policy.fleet_cost`, an elastic machine goes instead once it is among the longest
    idle beyond what the forecast wants and a waiting `Same` need keeps (`idle_spare`).
    Bare metal is never released. `idle`: every IDLE row, if the cycle has them already."""
    inv, policy, memory = state.inventory, state.policy, state.memory
    n = inv.rows_used
    profiles = inv.profiles.profiles
    if idle is None:
        idle = np.flatnonzero(inv.state[:n] == CODE[S.IDLE])
    if not len(idle):
        return
    spoken_for = np.zeros(n, dtype=bool)
    spoken_for[taken] = True
    idle = idle[~spoken_for[idle]]
    idle = idle[inv.profiles.deletable[inv.profile[idle].astype(np.int64)]]  # (never bare metal)
    since = inv.since[idle].astype(np.float64)
    age = now - since
    if not policy.fleet_cost:
        # Only machines idle for the shortest timeout of any deletable type can be due.
        due = age >= min(policy.idle_timeout(c) for c in DELETABLE)
        idle, age, since = idle[due], age[due], since[due]
    if not len(idle):
        return
    # Each present profile's timeout and spare count, asked once.
    present, at = np.unique(inv.profile[idle], return_inverse=True)
    timeout, spare = [], []
    for pid in present.tolist():
        p = profiles[pid]
        keep = idle_spare(policy, p, memory.forecast.get(p.name, 0.0))
        wanted = memory.wants_soon(p, policy)
        timeout.append(idle_hold(policy, p, wanted) if keep is None else np.inf)
        spare.append(len(idle) if keep is None else keep + state.kept_idle.get(pid, 0))
    gone = age >= np.array(timeout, dtype=np.float64)[at]
    # Per profile, longest idle first: those past its spare count go too.
    order = np.lexsort((idle, since, at))
    grouped = at[order]
    rank = np.arange(len(order)) - np.searchsorted(grouped, grouped)
    surplus = np.bincount(at, minlength=len(present)) - np.array(spare, dtype=np.int64)
    gone[order[rank < surplus[grouped]]] = True
    for r in idle[gone].tolist():
        state.moves.append((S.DELETING, None, np.array([r], dtype=np.int64)))
        out.actions.append(
            DeleteAction(
                provider=profiles[int(inv.profile[r])].provider,
                machine_id=state.name(r),
                reason=DeleteReason.IDLE_TIMEOUT,
            )
        )
