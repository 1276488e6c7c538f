"""Reading real traces through a mapping (bigfleet/simulation/trace_mapping.py): per-job logs into
`Jobs`, per-group time series into `Series`. Every bad value is reported with the file, the line
and the column; docs/traces.md describes the formats."""

from __future__ import annotations

import csv
import gzip
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from .trace_mapping import Column, FileSpec, JobsMapping, Mapping, SeriesMapping

_CACHE: dict[tuple[str, int, int, str], Jobs | Series] = {}
_CACHE_SIZE = 8


class TraceError(ValueError):
    """A trace file that cannot be read as its mapping says: missing, not text, not CSV, or a
    bad value (the file and line named)."""


@dataclass(frozen=True)
class Jobs:
    """A parsed job log, one array entry per job, in file order."""

    ids: tuple[str, ...]
    groups: tuple[str, ...]  # "" when the mapping has no group column
    cls: np.ndarray  # int: index into mapping.class_order()
    kind: np.ndarray  # int: index into mapping.kinds; -1 when no kind takes the job
    units: np.ndarray  # float64: amount of the kind's resource
    start: np.ndarray  # float64 trace seconds
    end: np.ndarray  # float64 trace seconds; inf when the job outlives the trace

    def __len__(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class Series:
    """A parsed time series: per (group, class index, kind index), the row times (trace seconds,
    increasing) and running + pending at each."""

    steps: dict[tuple[str, int, int], tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)


class _Table:
    """The rows of a delimited file, with columns resolved by name or position."""

    def __init__(self, path: str, spec: FileSpec) -> None:
        self.path, self.spec = path, spec
        self.header: list[str] | None = None
        self.line = 1

    def error(self, message: str, column: Column | None = None) -> TraceError:
        where = f"line {self.line}" + ("" if column is None else f", column {column}")
        return TraceError(f"{self.path}: {where}: {message}")

    def rows(self, f) -> Iterator[list[str]]:
        """The non-blank, non-comment rows; `self.line` is the line number of the last one."""
        lines = self._numbered(f)
        rows: Iterator[list[str]]
        if self.spec.delimiter == "whitespace":
            rows = (text.split() for text in lines)
        else:
            rows = csv.reader(lines, delimiter=self.spec.delimiter)
        for row in rows:
            if row and not (len(row) == 1 and not row[0].strip()):
                yield row

    def _numbered(self, f) -> Iterator[str]:
        for number, text in enumerate(f, start=1):
            self.line = number
            if not (self.spec.comment and text.startswith(self.spec.comment)):
                yield text

    def set_header(self, row: list[str] | None, wanted: list[Column]) -> None:
        if row is None:
            raise self.error("empty file, expected a header row")
        self.header = [h.strip() for h in row]
        missing = [str(c) for c in wanted if isinstance(c, str) and c not in self.header]
        if missing:
            raise self.error(
                f"missing column(s) {', '.join(missing)} (the mapping names "
                f"{', '.join(str(c) for c in wanted)})"
            )

    def index(self, column: Column) -> int:
        if isinstance(column, int):
            return column
        assert self.header is not None
        return self.header.index(column)

    def check_width(self, row: list[str], need: int) -> None:
        if self.header is not None and len(row) != len(self.header):
            raise self.error(f"{len(row)} fields, the header has {len(self.header)}")
        if len(row) < need:
            raise self.error(f"{len(row)} fields, the mapping reads field {need - 1}")

    def text(self, row: list[str], column: Column) -> str | None:
        """The value, or None when it is one of the mapping's missing-value tokens."""
        value = row[self.index(column)].strip()
        return None if value in self.spec.missing else value

    def number(self, row: list[str], column: Column) -> float | None:
        text = self.text(row, column)
        if text is None:
            return None
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < 0:
            raise self.error(f"expected a non-negative number, got {text!r}", column)
        return value


def _cached(path: str | os.PathLike[str], mapping: Mapping, parse) -> Jobs | Series:
    path = os.fspath(path)
    try:
        st = os.stat(path)
    except OSError as err:
        raise TraceError(f"{path}: cannot read trace: {err.strerror}") from None
    key = (path, st.st_size, st.st_mtime_ns, mapping.model_dump_json())
    if key not in _CACHE:
        table = _Table(path, mapping.file)
        try:
            # A trace may be kept gzipped (examples/traces/): read through.
            opener = gzip.open if path.endswith(".gz") else open
            with opener(path, "rt", newline="", encoding="utf-8") as f:
                parsed = parse(table, table.rows(f), mapping)
        except OSError as err:
            raise TraceError(f"{path}: cannot read trace: {err.strerror}") from None
        except UnicodeDecodeError as err:
            raise TraceError(f"{path}: not UTF-8 text: {err.reason}") from None
        except csv.Error as err:
            raise TraceError(f"{path}: not a valid CSV file: {err}") from None
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = parsed
    return _CACHE[key]


def read_jobs(path: str | os.PathLike[str], mapping: JobsMapping) -> Jobs:
    """Parse a job log; parsed once per (file version, mapping)."""
    jobs = _cached(path, mapping, _parse_jobs)
    assert isinstance(jobs, Jobs)
    return jobs


def read_series(path: str | os.PathLike[str], mapping: SeriesMapping) -> Series:
    """Parse a per-group time series; parsed once per (file version, mapping)."""
    series = _cached(path, mapping, _parse_series)
    assert isinstance(series, Series)
    return series


def _open(table: _Table, rows: Iterator[list[str]], wanted: list[Column]) -> int:
    """Read the header if any; the number of fields a row must have at least."""
    if table.spec.header:
        table.set_header(next(rows, None), wanted)
    return 1 + max(table.index(c) for c in wanted)


def _class_of(table: _Table, row: list[str], column: Column | None, mapping: Mapping) -> int:
    order = mapping.class_order()
    name = None if column is None else table.text(row, column)
    if name is None:
        if mapping.default_class is None:
            raise table.error("no class, and the mapping has no default_class", column)
        name = mapping.default_class
    if name not in mapping.classes:
        raise table.error(
            f"unknown class {name!r} (expected one of {', '.join(mapping.classes)})", column
        )
    return order.index(name)


def _time(table: _Table, row: list[str], column: Column, mapping: Mapping) -> float | None:
    value = table.number(row, column)
    return None if value is None else (value - mapping.time.origin) * mapping.time.seconds


# Over 40 lines: one pass over the rows, column by column, so the file is read once.
def _parse_jobs(table: _Table, rows: Iterator[list[str]], mapping: JobsMapping) -> Jobs:
    cols = mapping.columns
    need = _open(table, rows, mapping.read_columns())
    ids: list[str] = []
    groups: list[str] = []
    out: dict[str, list[float]] = {"cls": [], "kind": [], "units": [], "start": [], "end": []}
    for number, row in enumerate(rows, start=1):
        table.check_width(row, need)
        name = str(number) if cols.id is None else table.text(row, cols.id)
        if not name:
            raise table.error("empty job id", cols.id)
        start = _time(table, row, cols.start, mapping)
        if start is None:
            raise table.error("missing start time", cols.start)
        if cols.end is not None:
            end = _time(table, row, cols.end, mapping)
            if end is not None and end < start:
                raise table.error(
                    f"{row[table.index(cols.end)].strip()} is before "
                    f"{cols.start} {row[table.index(cols.start)].strip()}",
                    cols.end,
                )
        else:
            assert cols.duration is not None
            length = table.number(row, cols.duration)
            end = None if length is None else start + length * mapping.time.seconds
        amounts = {
            r: math.prod(table.number(row, c) or 0.0 for c in spec.columns) * spec.scale
            for r, spec in mapping.resources.items()
        }
        kind = next(
            (k for k, s in enumerate(mapping.kinds) if s.when is None or amounts[s.when] > 0), -1
        )
        ids.append(name)
        groups.append("" if cols.group is None else (table.text(row, cols.group) or ""))
        out["cls"].append(_class_of(table, row, cols.class_, mapping))
        out["kind"].append(kind)
        out["units"].append(amounts[mapping.kinds[kind].resource] if kind >= 0 else 0.0)
        out["start"].append(start)
        out["end"].append(math.inf if end is None else end)
    return Jobs(
        ids=tuple(ids),
        groups=tuple(groups),
        cls=np.asarray(out["cls"], dtype=np.int64),
        kind=np.asarray(out["kind"], dtype=np.int64),
        units=np.asarray(out["units"], dtype=np.float64),
        start=np.asarray(out["start"], dtype=np.float64),
        end=np.asarray(out["end"], dtype=np.float64),
    )


def _parse_series(table: _Table, rows: Iterator[list[str]], mapping: SeriesMapping) -> Series:
    cols = mapping.columns
    need = _open(table, rows, mapping.read_columns())
    kinds = [k.name for k in mapping.kinds]
    points: dict[tuple[str, int, int], dict[float, float]] = {}
    for row in rows:
        table.check_width(row, need)
        t = _time(table, row, cols.time, mapping)
        if t is None:
            raise table.error("missing time", cols.time)
        kind = 0
        if cols.kind is not None:
            name = table.text(row, cols.kind)
            if name not in kinds:
                raise table.error(
                    f"unknown kind {name!r} (expected one of {', '.join(kinds)})", cols.kind
                )
            kind = kinds.index(name)
        group = "" if cols.group is None else (table.text(row, cols.group) or "")
        key = (group, _class_of(table, row, cols.class_, mapping), kind)
        value = table.number(row, cols.running) or 0.0
        if cols.pending is not None:
            value += table.number(row, cols.pending) or 0.0
        at = points.setdefault(key, {})
        at[t] = at.get(t, 0.0) + value  # several rows of one key and time add up
    steps = {}
    for key, at in points.items():
        times = sorted(at)
        steps[key] = (np.asarray(times), np.asarray([at[t] for t in times]))
    return Series(steps=steps)
