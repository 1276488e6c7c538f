"""What each cluster holds, per profile: the tallies a need's claims are made of (design §8).

For every cluster, per profile, how many of its machines are CONFIGURED, CONFIGURING,
CREATING, DRAINING and FAILED (`HELD_STATES`, in that slot order), kept current on every
move. A cluster's profiles are kept in the order moving machines one by one leaves them (a
profile enters when its first machine does and leaves with its last, re-entering last), and a
batch of moves leaves the same order: the engine reads a cluster's excess in that order.
"""

from __future__ import annotations

from array import array

import numpy as np

from .models import MachineState

STATES: tuple[MachineState, ...] = tuple(MachineState)
NONE16 = 0xFFFF
# The states whose machines a cluster holds or is about to hold, in the order `held` counts them.
HELD_STATES = (
    MachineState.CONFIGURED,
    MachineState.CONFIGURING,
    MachineState.CREATING,
    MachineState.DRAINING,
    MachineState.FAILED,
)
HELD_SLOT = {s: i for i, s in enumerate(HELD_STATES)}
# Per state code (`STATES` order): its slot in a tally, or None for a state no cluster holds.
_SLOT_OF = [HELD_SLOT.get(s) for s in STATES]
_SLOTS = len(HELD_STATES)


def distinct(codes: np.ndarray) -> list[int]:
    """The distinct state codes (uint8) in `codes`, ascending: one bincount, not a sort."""
    return np.flatnonzero(np.bincount(codes, minlength=1)).tolist()


# A cluster's log of changed profiles is cut back to nothing past this many entries (a reader
# that last looked before the cut is told it no longer knows: it works the cluster out afresh).
# A reader looks every cycle, in which a cluster logs tens of entries; 4 bytes an entry.
TOUCHED_LIMIT = 1024


class HeldTallies:
    """`held`: cluster code -> profile id -> machines per slot; `versions`: cluster code -> a
    count of its tallies' changes (a cluster whose count is unchanged holds what it held);
    `touched`: which of a cluster's profiles changed since a reader last looked."""

    __slots__ = ("held", "versions", "_log", "_base")

    def __init__(self) -> None:
        self.held: dict[int, dict[int, list[int]]] = {}
        self.versions: dict[int, int] = {}
        # Per cluster: the profiles whose tallies changed, in order, and how many entries
        # were cut from the front (positions are counted from the cluster's first change).
        self._log: dict[int, array[int]] = {}
        self._base: dict[int, int] = {}

    def touched(self, cluster: int, since: int | None) -> tuple[set[int] | None, int]:
        """The profiles whose tallies in `cluster` changed after position `since` (one this
        returned before), or None if that is no longer known (or `since` is None); and the
        position now."""
        base = self._base.get(cluster, 0)
        log = self._log.get(cluster)
        end = base + (len(log) if log is not None else 0)
        if since is None or since < base or since > end:
            return None, end
        return (set(log[since - base :]) if log is not None else set()), end

    def _touch(self, cluster: int, pid: int) -> None:
        log = self._log.get(cluster)
        if log is None:
            log = self._log[cluster] = array("I")
        log.append(pid)
        if len(log) > TOUCHED_LIMIT:
            self._base[cluster] = self._base.get(cluster, 0) + len(log)
            del log[:]

    def count(self, cluster: int, pid: int, slot: int | None, delta: int) -> None:
        """One machine of profile `pid` in `slot` comes into (+1) or leaves (-1) `cluster`."""
        if cluster == NONE16 or slot is None:
            return
        per_profile = self.held.setdefault(cluster, {})
        tally = per_profile.setdefault(pid, [0] * _SLOTS)
        tally[slot] += delta
        if not any(tally):
            del per_profile[pid]
        self.versions[cluster] = self.versions.get(cluster, 0) + 1
        self._touch(cluster, pid)

    def add(self, clusters: np.ndarray, pids: np.ndarray, slots: np.ndarray) -> None:
        """Machines counted in at once (a restored snapshot of 500 K rows), each given by its
        cluster code, profile and slot."""
        if not len(pids):
            return
        n_profiles = int(pids.max()) + 1
        keys = (clusters.astype(np.int64) * n_profiles + pids) * _SLOTS + slots
        uniq, counts = np.unique(keys, return_counts=True)
        for key, k in zip(uniq.tolist(), counts.tolist(), strict=True):
            rest, slot = divmod(key, _SLOTS)
            c, pid = divmod(rest, n_profiles)
            self.held.setdefault(c, {}).setdefault(pid, [0] * _SLOTS)[slot] += k
            self.versions[c] = self.versions.get(c, 0) + k
            self._touch(c, pid)

    def move(
        self,
        codes: np.ndarray,
        old_clusters: np.ndarray,
        new_clusters: np.ndarray,
        pids: np.ndarray,
        new_slot: int | None,
        n_profiles: int,
    ) -> None:
        """Machines moved, in order: each leaves its old state's slot in its old cluster
        (`codes`, `old_clusters`) and enters `new_slot` in its new one, as `count(-1)` then
        `count(+1)` for each would leave the tallies and their order. `n_profiles`: how many
        profiles the inventory knows."""
        held, versions = self.held, self.versions
        width = n_profiles + 1
        leaving = [c for c in distinct(codes) if _SLOT_OF[c] is not None]
        if new_slot is not None and not (
            leaving and bool((old_clusters[np.isin(codes, leaving)] != NONE16).any())
        ):
            # Only additions: tallies grow (none empties), each cluster's profiles first seen
            # in row order, as one by one.
            bound = new_clusters != NONE16
            keys = new_clusters[bound].astype(np.int64) * width + pids[bound]
            uniq, first, k = np.unique(keys, return_index=True, return_counts=True)
            order = np.argsort(first, kind="stable").tolist()
            for key, n in zip(uniq[order].tolist(), k[order].tolist(), strict=True):
                c, pid = divmod(key, width)
                held.setdefault(c, {}).setdefault(pid, [0] * _SLOTS)[new_slot] += n
                versions[c] = versions.get(c, 0) + n
                self._touch(c, pid)
            return
        if self._move_in_place(codes, old_clusters, new_clusters, pids, new_slot, width):
            return
        for code, c_old, c_new, pid in zip(
            codes.tolist(),
            old_clusters.tolist(),
            new_clusters.tolist(),
            pids.tolist(),
            strict=True,
        ):
            self.count(c_old, pid, _SLOT_OF[code], -1)
            self.count(c_new, pid, new_slot, +1)

    def _move_in_place(
        self,
        codes: np.ndarray,
        old_clusters: np.ndarray,
        new_clusters: np.ndarray,
        pids: np.ndarray,
        new_slot: int | None,
        width: int,
    ) -> bool:
        """`move` for machines that stay with their cluster and all leave one held state for
        another (a drain: CONFIGURED to DRAINING), one step per (cluster, profile) instead of
        per row; False (nothing done) for any other batch.

        One by one, a tally is emptied (and re-created last in its cluster's order) only when
        it held just the one machine moving: its profile moves to the end, here as there."""
        old_slot = _SLOT_OF[int(codes[0])] if len(codes) else None
        if (
            new_slot is None
            or old_slot is None
            or old_slot == new_slot
            or bool((codes != codes[0]).any())
            or bool((old_clusters != new_clusters).any())
            or bool((old_clusters == NONE16).any())
        ):
            return False
        keys = old_clusters.astype(np.int64) * width + pids.astype(np.int64)
        uniq, first, k = np.unique(keys, return_index=True, return_counts=True)
        order = np.argsort(first, kind="stable")
        for key, n in zip(uniq[order].tolist(), k[order].tolist(), strict=True):
            c, pid = divmod(key, width)
            per_profile = self.held[c]
            tally = per_profile[pid]
            if sum(tally) == 1:  # (then n == 1: emptied and re-created, one by one)
                del per_profile[pid]
                tally = per_profile[pid] = [0] * _SLOTS
                tally[old_slot] = 1
            tally[old_slot] -= n
            tally[new_slot] += n
            self.versions[c] = self.versions.get(c, 0) + 2 * n
            self._touch(c, pid)
        return True
