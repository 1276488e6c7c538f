"""Picking the rows an action names: one vectorised scan per cycle, whatever the action count."""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

import numpy as np

from ..inventory import CODE, Inventory
from ..models import MachineState

S = MachineState


def _group(rows: np.ndarray, keys: np.ndarray, within: np.ndarray) -> dict[int, np.ndarray]:
    """`rows` (ascending) grouped by `keys`, each group ordered by `within`, then by row."""
    if not len(rows):
        return {}
    order = np.lexsort((rows, within, keys))
    rows, keys = rows[order], keys[order]
    cuts = np.flatnonzero(np.diff(keys)) + 1
    return {
        int(chunk_keys[0]): chunk
        for chunk, chunk_keys in zip(np.split(rows, cuts), np.split(keys, cuts), strict=True)
    }


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
        self._free = self._scan_free(set(free))
        self._free_used: dict[tuple[MachineState, int], int] = {}
        self._configured = self._scan_configured(set(configured))

    def _scan_free(self, wanted: set[tuple[MachineState, int]]) -> dict[int, np.ndarray]:
        inv = self.inv
        if not wanted:
            return {}
        n = inv.rows_used
        # Wanted profiles as a lookup column (a gather per row, not isin's sort of them all).
        want = np.zeros(len(inv.profiles) + 1, dtype=bool)
        want[[p for _, p in wanted]] = True
        state = inv.state[:n]
        free = (state == CODE[S.IDLE]) | (state == CODE[S.SPECULATIVE])
        rows = np.flatnonzero(free)
        rows = rows[want[inv.profile[rows]]]
        keys = state[rows].astype(np.int64) * 65536 + inv.profile[rows]
        # Idle machines by lowest reclamation value, speculative slots by row alone.
        value = np.where(state[rows] == CODE[S.IDLE], inv.holder_reclamation[rows], 0)
        return _group(rows, keys, value)

    def _scan_configured(self, wanted: set[tuple[str, int]]) -> dict[int, np.ndarray]:
        inv = self.inv
        if not wanted:
            return {}
        n = inv.rows_used
        # Wanted (cluster, profile) pairs as a lookup table (a gather per configured row).
        cidx = [(cast(int, inv.clusters.get(c)), p) for c, p in wanted]
        want = np.zeros((max(c for c, _ in cidx) + 1, len(inv.profiles) + 1), dtype=bool)
        want[tuple(np.array(cidx, dtype=np.int64).T)] = True
        rows = np.flatnonzero(inv.state[:n] == CODE[S.CONFIGURED])
        clusters = inv.cluster[rows].astype(np.int64)
        rows, clusters = rows[clusters < len(want)], clusters[clusters < len(want)]
        rows = rows[want[clusters, inv.profile[rows]]]
        composite = inv.cluster[rows].astype(np.int64) * 65536 + inv.profile[rows]
        return _group(rows, composite, -inv.holder_reclamation[rows])

    def take_free(self, state: MachineState, profile: int, count: int) -> np.ndarray:
        key = CODE[state] * 65536 + profile
        start = self._free_used.get((state, profile), 0)
        self._free_used[(state, profile)] = start + count
        return self._free.get(key, np.zeros(0, dtype=np.int64))[start : start + count]

    def configured(self, cluster: str, profile: int, offset: int, count: int) -> np.ndarray:
        key = cast(int, self.inv.clusters.get(cluster)) * 65536 + profile
        return self._configured.get(key, np.zeros(0, dtype=np.int64))[offset : offset + count]
