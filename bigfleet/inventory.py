"""The shard's columnar inventory (design §9): one numpy row per machine.

Per-machine Python objects cost about a kilobyte; a row here costs under 48 bytes. Counts per
(state, profile) and per (cluster, profile, state) (`held.HeldTallies`) are kept up to date on
every move, so a cycle asks "how many" without touching machines and scans columns only when it
must pick rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from . import labels as L
from .held import HELD_SLOT, NONE16, STATES, HeldTallies, distinct
from .machine_ids import MachineIds
from .models import HostRef, Machine, MachineState
from .profiles import Profile, ProfileTable
from .states import LEGAL, check_transition, has_host

CODE: dict[MachineState, int] = {s: i for i, s in enumerate(STATES)}
GONE = 255

_COLUMNS: dict[str, tuple[type, int]] = {
    "state": (np.uint8, GONE),
    "cluster": (np.uint16, NONE16),
    "profile": (np.uint16, 0),
    "provider": (np.uint8, 0),
    "price": (np.float32, 0),
    "interruption": (np.float32, 0),
    "domain": (np.uint16, NONE16),
    "since": (np.uint32, 0),
    "holder_priority": (np.int32, 0),
    "holder_interruption": (np.float32, 0),
    "holder_reclamation": (np.float32, 0),
    "missed": (np.uint8, 0),
    "failed_from": (np.uint8, GONE),
    "risk": (np.uint8, 0),  # 1: its provider recommends moving off it (a rebalance notice)
    "kept": (np.uint8, 0),  # 1: its cluster marked it do-not-disrupt (bigfleet/disruption.py)
}


def _repeats(rows: np.ndarray) -> bool:
    """Whether any row appears twice."""
    ordered = np.sort(rows)
    return bool((ordered[1:] == ordered[:-1]).any())


class Interner:
    """Names to small integers, both ways."""

    def __init__(self, limit: int) -> None:
        self.names: list[str] = []
        self._ids: dict[str, int] = {}
        self._limit = limit

    def intern(self, name: str) -> int:
        idx = self._ids.get(name)
        if idx is None:
            if len(self.names) >= self._limit:
                raise ValueError(f"more than {self._limit} distinct names: {name!r}")
            idx = len(self.names)
            self.names.append(name)
            self._ids[name] = idx
        return idx

    def get(self, name: str) -> int | None:
        return self._ids.get(name)


class MachineNotFound(KeyError):
    def __str__(self) -> str:
        return f"machine {self.args[0]} is not in this shard's inventory"


class Inventory:
    # The columns (`_COLUMNS`), one entry per row; made and grown by name.
    state: np.ndarray
    cluster: np.ndarray
    profile: np.ndarray
    provider: np.ndarray
    price: np.ndarray
    interruption: np.ndarray
    domain: np.ndarray
    since: np.ndarray
    holder_priority: np.ndarray
    holder_interruption: np.ndarray
    holder_reclamation: np.ndarray
    missed: np.ndarray
    failed_from: np.ndarray
    risk: np.ndarray
    kept: np.ndarray

    def __init__(self, capacity: int = 1024) -> None:
        self.capacity = capacity
        self.ids = MachineIds(capacity)
        self.profiles = ProfileTable()
        self.clusters = Interner(NONE16)
        self.providers = Interner(255)
        self.domains = Interner(NONE16)
        for name, (dtype, fill) in _COLUMNS.items():
            setattr(self, name, np.full(capacity, fill, dtype=dtype))
        self.rows_used = 0
        self._free: list[int] = []
        self.counts = np.zeros((len(STATES), 0), dtype=np.int64)
        # What each cluster holds, per profile (`HeldTallies`), and a count of its changes.
        self.tallies = HeldTallies()
        self.held = self.tallies.held
        self.cluster_version = self.tallies.versions
        self.version = 0
        # Rows given to a new machine after another left them: a row then names another machine.
        self.reused = 0
        self.last_error: dict[int, str] = {}

    # ---- adding and removing machines -------------------------------------------------------

    def _grow(self, needed: int) -> None:
        if needed <= self.capacity:
            return
        capacity = max(needed, 2 * self.capacity)
        for name in _COLUMNS:
            old = getattr(self, name)
            grown = np.full(capacity, _COLUMNS[name][1], dtype=old.dtype)
            grown[: len(old)] = old
            setattr(self, name, grown)
        self.ids.resize(capacity, self.live_rows())
        self.capacity = capacity

    def add(self, machines: Sequence[Machine], now: float) -> np.ndarray:
        """Take ownership of machines reported by a provider (or handed over by another shard).

        All or nothing: a duplicate id (within the batch or already owned) changes nothing.
        """
        seen: set[str] = set()
        for m in machines:
            if m.id in seen or self.ids.find(m.id) >= 0:
                raise ValueError(f"machine {m.id} is already in the inventory")
            seen.add(m.id)
        reuse = [self._free.pop() for _ in range(min(len(self._free), len(machines)))]
        self.reused += len(reuse)
        fresh = len(machines) - len(reuse)
        self._grow(self.rows_used + fresh)
        rows = np.array(
            reuse + list(range(self.rows_used, self.rows_used + fresh)), dtype=np.int64
        )
        self.ids.add(rows, [m.id for m in machines])
        self.rows_used += fresh
        for row, machine in zip(rows.tolist(), machines, strict=True):
            self._fill(row, machine, now)
        self.version += 1
        return rows

    def _fill(self, row: int, m: Machine, now: float) -> None:
        pid = self.profiles.intern(Profile.of(m))
        if pid >= self.counts.shape[1]:
            grown = np.zeros((len(STATES), max(pid + 1, 2 * self.counts.shape[1])), np.int64)
            grown[:, : self.counts.shape[1]] = self.counts
            self.counts = grown
        profile = self.profiles.profiles[pid]
        self.profile[row] = pid
        self.provider[row] = self.providers.intern(profile.provider)
        self.price[row] = m.price_per_hour
        self.interruption[row] = m.interruption_probability
        rack = m.labels.get(L.RACK)
        self.domain[row] = self.domains.intern(rack) if rack else NONE16
        self.since[row] = int(m.transition_started_unix or now)
        self.holder_priority[row] = 0
        self.holder_interruption[row] = 0
        self.holder_reclamation[row] = 0
        self.missed[row] = 0
        self.failed_from[row] = GONE
        self.risk[row] = 0
        self.kept[row] = 0
        self.cluster[row] = self.clusters.intern(m.cluster) if m.cluster else NONE16
        self.state[row] = CODE[m.state]
        if m.state is MachineState.FAILED:
            self.last_error[row] = m.last_error
        self._count(row, +1)

    def remove(self, machine_id: str) -> Machine:
        """Give a machine up (to another shard, or back to its provider); returns its record."""
        row = self.row(machine_id)
        record = self.machine(row)
        self._count(row, -1)
        self.ids.forget(machine_id)
        self.state[row] = GONE
        self.cluster[row] = NONE16
        self.last_error.pop(row, None)
        self._free.append(row)
        self.version += 1
        return record

    # ---- lookups ----------------------------------------------------------------------------

    def row(self, machine_id: str) -> int:
        row = self.ids.find(machine_id)
        if row < 0:
            raise MachineNotFound(machine_id)
        return row

    def machine_id(self, row: int) -> str:
        return self.ids.id_of(row)

    def state_of(self, row: int) -> MachineState:
        return STATES[int(self.state[row])]

    def cluster_of(self, row: int) -> str | None:
        c = int(self.cluster[row])
        return None if c == NONE16 else self.clusters.names[c]

    def profile_of(self, row: int) -> Profile:
        return self.profiles.profiles[int(self.profile[row])]

    def live_rows(self) -> np.ndarray:
        return np.flatnonzero(self.state[: self.rows_used] != GONE)

    def __len__(self) -> int:
        return self.rows_used - len(self._free)

    def machine(self, row: int) -> Machine:
        state = self.state_of(row)
        profile = self.profile_of(row)
        # The shard addresses a real host through its provider by machine id; the provider's
        # own reference (an instance id, a serial) lives with the provider, not in this row.
        hosted = has_host(state) or (
            state is MachineState.FAILED
            and int(self.failed_from[row]) not in (CODE[MachineState.CREATING], GONE)
        )
        host = HostRef(provider=profile.provider, ref=self.machine_id(row)) if hosted else None
        cluster = self.cluster_of(row)
        bound = state in (MachineState.CONFIGURED, MachineState.DRAINING)
        return Machine(
            id=self.machine_id(row),
            state=state,
            host=host,
            instance_type=profile.instance_type,
            zone=profile.zone,
            capacity_type=profile.capacity_type,
            price_per_hour=float(self.price[row]),
            interruption_probability=float(self.interruption[row]),
            resources=profile.resources,
            labels=profile.label_map,
            transition_started_unix=int(self.since[row]) if state in _TIMED else 0,
            last_error=self.last_error.get(row, ""),
            cluster=cluster if bound and host is not None else None,
            failed_from=STATES[int(self.failed_from[row])]
            if state is MachineState.FAILED and self.failed_from[row] != GONE
            else None,
        )

    # ---- moves ------------------------------------------------------------------------------

    def move(
        self,
        row: int,
        target: MachineState,
        now: float,
        cluster: str | None = None,
        error: str = "",
    ) -> None:
        """Move a machine along a legal edge of the state machine; keeps every index current.

        `cluster` names the destination when a machine starts CONFIGURING (or CREATING for a
        need). Reaching SPECULATIVE or IDLE unbinds it; SPECULATIVE also drops the host.
        """
        state = self.state_of(row)
        check_transition(self.machine_id(row), state, target)
        if target is MachineState.CONFIGURING and cluster is None and self.cluster[row] == NONE16:
            raise ValueError(f"machine {self.machine_id(row)}: configuring needs a cluster")
        self._count(row, -1)
        if target is MachineState.FAILED:
            self.failed_from[row] = CODE[state]
            self.last_error[row] = error or f"{state} timed out"
        else:
            self.last_error.pop(row, None)
            if state is not MachineState.FAILED:
                self.failed_from[row] = GONE
        self._place(row, target, now, cluster)
        self._count(row, +1)
        self.version += 1

    def move_many(
        self,
        rows: Sequence[int] | np.ndarray,
        target: MachineState,
        now: float,
        cluster: str | None = None,
        cluster_codes: np.ndarray | None = None,
    ) -> None:
        """`move` for each of `rows` in order, to one target, with the same outcome (columns,
        counts, the order of every tally) but one numpy pass per column; FAILED targets and any
        batch `move` would refuse go one by one, so errors and their partial effects match.
        `cluster_codes` instead of `cluster`: each row's own destination, as codes of
        `clusters.intern` (the runs of one cycle's configures or creates, one call)."""
        idx = np.asarray(rows, dtype=np.int64)
        codes = self.state[idx]
        old = distinct(codes)
        if cluster_codes is not None:
            cluster_codes = np.asarray(cluster_codes)
            if len(cluster_codes) != len(idx) or (
                len(idx)
                and not 0 <= int(cluster_codes.min()) <= int(cluster_codes.max()) < len(
                    self.clusters.names
                )
            ):
                raise ValueError("move_many: cluster_codes: one known cluster's code per row")
            cluster_codes = cluster_codes.astype(np.uint16)
        if (
            target is MachineState.FAILED
            or any(c >= len(STATES) or (STATES[c], target) not in LEGAL for c in old)
            or _repeats(idx)
            or (
                target is MachineState.CONFIGURING
                and cluster is None
                and cluster_codes is None
                and bool((self.cluster[idx] == NONE16).any())
            )
        ):
            names = self.clusters.names
            for i, row in enumerate(idx.tolist()):
                to = cluster if cluster_codes is None else names[int(cluster_codes[i])]
                self.move(row, target, now, cluster=to)
            return
        old_clusters = self.cluster[idx].copy()
        if self.last_error:
            for row in set(self.last_error).intersection(idx.tolist()):
                del self.last_error[row]
        self.failed_from[idx[codes != CODE[MachineState.FAILED]]] = GONE
        self._place(idx, target, now, cluster, cluster_codes)
        pids = self.profile[idx]
        np.subtract.at(self.counts, (codes.astype(np.int64), pids.astype(np.int64)), 1)
        np.add.at(self.counts[CODE[target]], pids.astype(np.int64), 1)
        self.tallies.move(
            codes, old_clusters, self.cluster[idx], pids, HELD_SLOT.get(target), len(self.profiles)
        )
        self.version += len(idx)

    def _place(
        self,
        rows: int | np.ndarray,
        target: MachineState,
        now: float,
        cluster: str | None,
        codes: np.ndarray | None = None,
    ) -> None:
        """A move's new state, time and cluster (SPECULATIVE and IDLE unbind) for one row or
        an array of them (`codes`: each row's cluster)."""
        if target in (MachineState.SPECULATIVE, MachineState.IDLE):
            self.cluster[rows] = NONE16
            self.missed[rows] = 0
        elif codes is not None:
            self.cluster[rows] = codes
        elif cluster is not None:
            self.cluster[rows] = self.clusters.intern(cluster)
        self.state[rows] = CODE[target]
        self.since[rows] = int(now)

    def set_holder(
        self,
        rows: np.ndarray,
        priority: int | np.ndarray,
        interruption: float | np.ndarray,
        reclamation: float | np.ndarray,
    ) -> None:
        """Record which need a machine serves: its priority and penalties (victim scoring);
        one value for all `rows`, or a column of one per row."""
        self.holder_priority[rows] = priority
        self.holder_interruption[rows] = interruption
        self.holder_reclamation[rows] = reclamation

    def recount(self, rows: np.ndarray) -> None:
        """Count `rows` into the per-(state, profile) and per-(cluster, profile) tallies at
        once, as `_count(row, +1)` for each would (a restored snapshot of 500 K rows)."""
        codes = self.state[rows].astype(np.int64)
        pids = self.profile[rows].astype(np.int64)
        np.add.at(self.counts, (codes, pids), 1)
        slot_of = np.full(len(STATES), -1, dtype=np.int64)
        for state, slot in HELD_SLOT.items():
            slot_of[STATES.index(state)] = slot
        slots = slot_of[codes]
        clusters = self.cluster[rows].astype(np.int64)
        held = (clusters != NONE16) & (slots >= 0)
        if not held.any():
            return
        self.tallies.add(clusters[held], pids[held], slots[held])

    def _count(self, row: int, delta: int) -> None:
        code = int(self.state[row])
        pid = int(self.profile[row])
        self.counts[code, pid] += delta
        self.tallies.count(int(self.cluster[row]), pid, HELD_SLOT.get(STATES[code]), delta)

    # ---- accounting -------------------------------------------------------------------------

    def nbytes(self) -> int:
        """Bytes held for machines: every column plus the id store and its lookup table."""
        rows = self.capacity
        return sum(getattr(self, name)[:rows].nbytes for name in _COLUMNS) + self.ids.nbytes(
            rows
        )


_TIMED = frozenset(
    {
        MachineState.CREATING,
        MachineState.CONFIGURING,
        MachineState.DRAINING,
        MachineState.DELETING,
        MachineState.FAILED,
    }
)
