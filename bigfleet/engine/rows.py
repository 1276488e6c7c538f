"""Picking the rows an action names: one vectorised scan per cycle, whatever the action count."""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

import numpy as np

from ..inventory import CODE, Inventory
from ..models import MachineState

S = MachineState


def _numbered(count: int) -> type:
    """The smallest unsigned dtype for group numbers 1..count (16 bits sort by radix)."""
    return np.uint16 if count < 0xFFFF else np.uint32


class _Grouped:
    """Rows by group, each group's rows contiguous and in their order: a group is a span of
    one sorted array, sliced when asked (a cycle asks for few of the hundreds of groups a
    scan finds; making an array of each cost more than the scan)."""

    __slots__ = ("rows", "spans")

    def __init__(self, rows: np.ndarray, groups: np.ndarray, keys: list[int]) -> None:
        """`rows` by group number (1-based into `keys`), keeping their order within each
        group: one stable sort of the small group numbers (a radix sort for 16-bit numbers),
        not a sort of every row by a composite key."""
        order = np.argsort(groups, kind="stable")
        self.rows, groups = rows[order], groups[order]
        self.spans: dict[int, tuple[int, int]] = {}
        if len(rows):
            cuts = np.flatnonzero(np.diff(groups)) + 1
            starts, ends = [0, *cuts.tolist()], [*cuts.tolist(), len(rows)]
            firsts = groups[starts].tolist()
            for g, start, end in zip(firsts, starts, ends, strict=True):
                self.spans[keys[g - 1]] = (start, end)

    def take(self, key: int, offset: int, count: int) -> np.ndarray:
        """Up to `count` rows of group `key` from its `offset`-th on (none if it has none)."""
        start, end = self.spans.get(key, (0, 0))
        return self.rows[start + offset : min(start + offset + count, end)]


def _wanted(rows: np.ndarray, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows with a group number (0: not wanted), and their numbers."""
    some = np.flatnonzero(groups)
    return rows[some], groups[some]


_NONE = _Grouped(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint16), [])


class RowPicker:
    """Rows for (state, profile) free-capacity picks and (cluster, profile) configured segments.

    Orders are the engine's tie-breaks: idle machines by lowest reclamation value then row,
    speculative slots by row, a cluster's configured machines by highest reclamation value
    then row (so claims keep the valuable ones and the tail is the excess).
    """

    def __init__(
        self,
        inventory: Inventory,
        free: Iterable[tuple[MachineState, int]],
        configured: Iterable[tuple[str, int]],
    ) -> None:
        self.inv = inventory
        self._idle: np.ndarray | None = None
        self._free = self._scan_free(set(free))
        self._free_used: dict[tuple[MachineState, int], int] = {}
        self._configured = self._scan_configured(set(configured))

    def _scan_free(self, wanted: set[tuple[MachineState, int]]) -> _Grouped:
        inv = self.inv
        if not wanted:
            return _NONE
        n = inv.rows_used
        # Each wanted (state, profile) numbered from 1 in a lookup table per state (0: not
        # wanted): a gather per free row, not isin's sort of them all.
        keys = sorted(CODE[s] * 65536 + p for s, p in wanted if s in (S.IDLE, S.SPECULATIVE))
        number: np.ndarray = np.zeros((2, len(inv.profiles) + 1), dtype=_numbered(len(keys)))
        for i, key in enumerate(keys, start=1):
            number[int(key // 65536 == CODE[S.IDLE]), key % 65536] = i
        state = inv.state[:n]
        self._idle = idle = np.flatnonzero(state == CODE[S.IDLE])
        spec = np.flatnonzero(state == CODE[S.SPECULATIVE])
        idle, idle_groups = _wanted(idle, number[1][inv.profile[idle]])
        spec, spec_groups = _wanted(spec, number[0][inv.profile[spec]])
        # Idle machines by lowest reclamation value then row, speculative slots by row.
        order = np.argsort(inv.holder_reclamation[idle], kind="stable")
        groups = np.concatenate([idle_groups[order], spec_groups])
        return _Grouped(np.concatenate([idle[order], spec]), groups, keys)

    def _scan_configured(self, wanted: set[tuple[str, int]]) -> _Grouped:
        inv = self.inv
        if not wanted:
            return _NONE
        n = inv.rows_used
        # Wanted (cluster, profile) pairs numbered from 1 in a flat lookup table (a gather per
        # configured row; a flat index costs a third of a 2-D one). Its last line, past the
        # highest wanted cluster, is all zeros: rows of the clusters above it land there.
        pairs = sorted((cast(int, inv.clusters.get(c)), p) for c, p in wanted)
        width, top = len(inv.profiles) + 1, pairs[-1][0] + 1
        number: np.ndarray = np.zeros((top + 1) * width, dtype=_numbered(len(pairs)))
        at = np.array(pairs, dtype=np.int64)
        number[at[:, 0] * width + at[:, 1]] = np.arange(1, len(pairs) + 1)
        rows = np.flatnonzero(inv.state[:n] == CODE[S.CONFIGURED])
        key = np.minimum(inv.cluster[rows], top).astype(np.int64)
        key *= width
        key += inv.profile[rows]
        rows, groups = _wanted(rows, number[key])
        # Highest reclamation value first, then row; machines at risk (a rebalance notice)
        # last, so the tails that are given up (excess; preemption victims, off the end of a
        # claim) take them first, and machines their cluster marked do-not-disrupt first, so
        # they are taken last (a marked one taken would be held back: the need it serves
        # would wait while unmarked ones stay).
        order = np.argsort(-inv.holder_reclamation[rows], kind="stable")
        risky, kept = inv.risk[rows[order]], inv.kept[rows[order]]
        if risky.any() or kept.any():
            rank = 1 + risky.astype(np.int8) - kept.astype(np.int8)
            order = order[np.argsort(rank, kind="stable")]
        return _Grouped(rows[order], groups[order], [c * 65536 + p for c, p in pairs])

    def idle_rows(self) -> np.ndarray:
        """Every IDLE row, ascending: the free scan's, when it ran (the inventory does not
        change while a cycle decides)."""
        if self._idle is None:
            self._idle = np.flatnonzero(self.inv.state[: self.inv.rows_used] == CODE[S.IDLE])
        return self._idle

    def take_free(self, state: MachineState, profile: int, count: int) -> np.ndarray:
        key = CODE[state] * 65536 + profile
        start = self._free_used.get((state, profile), 0)
        self._free_used[(state, profile)] = start + count
        return self._free.take(key, start, count)

    def configured(self, cluster: str, profile: int, offset: int, count: int) -> np.ndarray:
        key = cast(int, self.inv.clusters.get(cluster)) * 65536 + profile
        return self._configured.take(key, offset, count)
