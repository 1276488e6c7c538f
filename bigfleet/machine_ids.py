"""Compact machine ids: ~6 bytes a machine plus an 8-byte open-addressing lookup slot.

A Python dict from id string to row costs ~100 bytes a machine, twice the whole budget of
design §9. Machine ids are nearly always a prefix and a number ("aws-euw1-p5-00042"), so an id is
stored as (interned prefix, number) and looked up through a numpy hash table.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import islice
from typing import overload

import numpy as np

_DIGITS = "0123456789"
_EMPTY = -1
_GONE = -2
_MULT_INT = 0x9E3779B97F4A7C15
_MULT = np.uint64(_MULT_INT)
_MASK64 = (1 << 64) - 1


def _parts(machine_id: str) -> tuple[str, str]:
    """An id as (prefix, its last 1-9 ASCII digits); digits "" if it ends in none."""
    text = machine_id.rstrip(_DIGITS)
    cut = max(len(text), len(machine_id) - 9)
    return machine_id[:cut], machine_id[cut:]


class IdList(Sequence[str]):
    """Machine ids kept as their two columns (copied when made: later writes to the store do
    not change them) and formatted when read. A decision names tens of thousands of machines;
    their id strings are made by whoever reads its actions, not by the engine deciding."""

    __slots__ = ("_formats", "_prefix", "_number")

    def __init__(self, formats: list[str], prefix: np.ndarray, number: np.ndarray) -> None:
        # `formats` only ever grows, so the indices in `prefix` keep meaning the same format.
        self._formats, self._prefix, self._number = formats, prefix, number

    def __len__(self) -> int:
        return len(self._prefix)

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> IdList: ...
    def __getitem__(self, index: int | slice) -> str | IdList:
        if isinstance(index, slice):
            return IdList(self._formats, self._prefix[index], self._number[index])
        return self._formats[int(self._prefix[index])] % int(self._number[index])

    def __iter__(self) -> Iterator[str]:
        formats = self._formats
        prefixes, numbers = self._prefix.tolist(), self._number.tolist()
        return iter([formats[p] % number for p, number in zip(prefixes, numbers, strict=True)])


class IdBatches(Sequence[list[str]]):
    """`ids` cut into lists of `size` (the last may be shorter), each list made when read."""

    __slots__ = ("_ids", "_size")

    def __init__(self, ids: IdList, size: int) -> None:
        self._ids, self._size = ids, size

    def __len__(self) -> int:
        return -(-len(self._ids) // self._size)

    @overload
    def __getitem__(self, index: int) -> list[str]: ...
    @overload
    def __getitem__(self, index: slice) -> list[list[str]]: ...
    def __getitem__(self, index: int | slice) -> list[str] | list[list[str]]:
        if isinstance(index, slice):
            return [self[i] for i in range(len(self))[index]]
        i = range(len(self))[index] * self._size
        return list(self._ids[i : i + self._size])

    def __iter__(self) -> Iterator[list[str]]:
        ids = iter(self._ids)
        for _ in range(len(self)):
            yield list(islice(ids, self._size))


class MachineIds:
    def __init__(self, capacity: int = 1024) -> None:
        self._prefixes: list[tuple[str, int]] = []
        self._prefix_ids: dict[tuple[str, int], int] = {}
        self._formats: list[str] = []  # per prefix: its ids as a %-format of the number
        self.prefix = np.zeros(capacity, dtype=np.uint16)
        self.number = np.zeros(capacity, dtype=np.uint32)
        self._table = np.full(_table_size(capacity), _EMPTY, dtype=np.int32)

    def _split(self, machine_id: str) -> tuple[int, int]:
        text, digits = _parts(machine_id)
        width = len(digits) if digits.startswith("0") else 0
        key = (text, width if digits else -1)
        pid = self._prefix_ids.get(key)
        if pid is None:
            if len(self._prefixes) >= 65535:
                raise ValueError("more than 65535 distinct machine-id prefixes in one shard")
            pid = len(self._prefixes)
            self._prefixes.append(key)
            self._prefix_ids[key] = pid
        return pid, int(digits) if digits else 0

    def id_of(self, row: int) -> str:
        text, width = self._prefixes[int(self.prefix[row])]
        if width < 0:
            return text
        return f"{text}{int(self.number[row]):0{width}d}"

    def ids_of(self, rows: np.ndarray) -> list[str]:
        """`id_of` for many rows at once (the columns read once, not per row)."""
        return list(self.deferred(rows))

    def deferred(self, rows: np.ndarray) -> IdList:
        """`ids_of` as it is now, each id made into a string only when read."""
        return IdList(self._ready_formats(), self.prefix[rows], self.number[rows])

    def _ready_formats(self) -> list[str]:
        """Per prefix: its ids as a %-format of the number (extended for new prefixes)."""
        formats = self._formats
        for text, width in self._prefixes[len(formats) :]:
            # (%.0s prints nothing: an id without a number is its prefix alone.)
            tail = f"%0{width}d" if width > 0 else "%d" if width == 0 else "%.0s"
            formats.append(text.replace("%", "%%") + tail)
        return formats

    def _hash(self, keys: np.ndarray) -> np.ndarray:
        return ((keys.astype(np.uint64) * _MULT) >> np.uint64(20)) % np.uint64(len(self._table))

    def _keys(self, rows: np.ndarray) -> np.ndarray:
        return (self.prefix[rows].astype(np.uint64) << np.uint64(32)) | self.number[rows]

    def resize(self, capacity: int, live_rows: np.ndarray) -> None:
        for name in ("prefix", "number"):
            old = getattr(self, name)
            grown = np.zeros(capacity, dtype=old.dtype)
            grown[: len(old)] = old
            setattr(self, name, grown)
        if _table_size(capacity) > len(self._table):
            self._table = np.full(_table_size(capacity), _EMPTY, dtype=np.int32)
            self._insert(live_rows)

    def add(self, rows: np.ndarray, machine_ids: list[str]) -> None:
        """Record ids for fresh rows (the caller has checked they are new)."""
        for row, machine_id in zip(rows.tolist(), machine_ids, strict=True):
            self.prefix[row], self.number[row] = self._split(machine_id)
        self._insert(rows)

    def _insert(self, rows: np.ndarray) -> None:
        """Vectorised linear probing: each round places one row per free slot."""
        pending = rows.astype(np.int64)
        probe = np.zeros(len(pending), dtype=np.uint64)
        size = np.uint64(len(self._table))
        home = self._hash(self._keys(pending))
        while len(pending):
            slot = ((home + probe) % size).astype(np.int64)
            free = self._table[slot] < 0
            slot_free, rows_free = slot[free], pending[free]
            _, first = np.unique(slot_free, return_index=True)
            self._table[slot_free[first]] = rows_free[first]
            placed = np.zeros(len(pending), dtype=bool)
            placed[np.flatnonzero(free)[first]] = True
            pending, home, probe = pending[~placed], home[~placed], probe[~placed] + np.uint64(1)

    def find(self, machine_id: str) -> int:
        """The row of `machine_id`, or -1."""
        text, digits = _parts(machine_id)
        width = len(digits) if digits.startswith("0") else 0
        pid = self._prefix_ids.get((text, width if digits else -1))
        if pid is None:
            return -1
        number = int(digits) if digits else 0
        # `_hash` in Python integers (one id: numpy's per-call cost would be most of it).
        size = len(self._table)
        slot = ((((pid << 32) | number) * _MULT_INT) & _MASK64) >> 20
        slot %= size
        table, prefix, numbers = self._table, self.prefix, self.number
        while True:
            row = int(table[slot])
            if row == _EMPTY:
                return -1
            if row >= 0 and int(prefix[row]) == pid and int(numbers[row]) == number:
                return row
            slot = (slot + 1) % size

    def find_many(self, machine_ids: Sequence[str]) -> np.ndarray:
        """The rows of many ids at once (-1 for an unknown one): the ids split in Python, the
        table probed by column."""
        n = len(machine_ids)
        keys = np.zeros(n, dtype=np.uint64)
        known = np.zeros(n, dtype=bool)
        prefix_ids = self._prefix_ids
        for i, machine_id in enumerate(machine_ids):
            text, digits = _parts(machine_id)
            width = len(digits) if digits.startswith("0") else 0
            pid = prefix_ids.get((text, width if digits else -1))
            if pid is not None:
                keys[i] = (pid << 32) | (int(digits) if digits else 0)
                known[i] = True
        rows = np.full(n, -1, dtype=np.int64)
        pending = np.flatnonzero(known)
        size = np.uint64(len(self._table))
        slot = self._hash(keys[pending])
        while len(pending):
            row = self._table[slot.astype(np.int64)].astype(np.int64)
            live = row >= 0
            match = np.zeros(len(pending), dtype=bool)
            match[live] = self._keys(row[live]) == keys[pending[live]]
            rows[pending[match]] = row[match]
            going = ~match & (row != _EMPTY)  # a hit elsewhere, or a forgotten slot: probe on
            pending, slot = pending[going], (slot[going] + np.uint64(1)) % size
        return rows

    def forget(self, machine_id: str) -> int:
        """Remove an id (the machine left the shard); returns its row."""
        row = self.find(machine_id)
        if row < 0:
            raise KeyError(machine_id)
        slots = np.flatnonzero(self._table == row)
        self._table[slots] = _GONE
        return row

    def nbytes(self, rows: int) -> int:
        return int(self.prefix[:rows].nbytes + self.number[:rows].nbytes + self._table.nbytes)


def _table_size(capacity: int) -> int:
    """Load factor at most ~0.77 when full: short probes, ~5 bytes a machine."""
    return max(16, capacity * 13 // 10 + 1)
