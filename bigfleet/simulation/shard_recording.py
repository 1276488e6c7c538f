"""A live fleet's recording read back for a replay (issue 46; docs/adoption.md "Record, then
replay"): the directory the shards' recorder writes (activities/recording.py,
workflows/shard_record.py), made into a `Recording` of the fleet file given
(`bigfleet simulate DIR --replay --fleet FILE`).

Each `shard-<n>[.<unix ms>].jsonl` begins with a header line and holds lines of three kinds:
roll-ups the shard accepted, its decisions (digests), and what it held per profile with prices
after each reconcile. A replay delivers the roll-ups of every shard, in time order, from
t = 0 at the first line of the recording, to the fleet file's fleet (without its own demand).
Generations are numbered again per cluster and node health is dropped (it names the live
fleet's machines). The live fleet's decisions are counted, not compared: a replay's fleet is
the fleet file's, not the machines the live shards held. Read strictly: a foreign or damaged
file is refused, naming the file and the line.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

from pydantic import ValidationError

from ..inputs import clip, explain
from ..models import ClusterCapacityNeeds, from_wire
from .recording import Recording, RecordingError
from .scenario import load

HEADER = "bigfleet-shard-recording"  # (activities/recording.py writes it)
KINDS = ("rollup", "decision", "holdings")


def _files(root: pathlib.Path) -> list[pathlib.Path]:
    """The recording's files, each shard's rotated ones first, oldest first."""

    def order(p: pathlib.Path) -> tuple[str, int]:
        parts = p.name.split(".")
        rotated = int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else 2**63
        return parts[0], rotated

    return sorted(root.glob("shard-*.jsonl"), key=order)


def read_dir(path: str, fleet_path: str) -> Recording:
    """The recording in directory `path`, on the fleet of `fleet_path` (see the module)."""
    root = pathlib.Path(path)
    files = _files(root)
    if not files:
        raise RecordingError(f"recording {path}: no shard-<n>.jsonl file in it (a directory "
                             "the shards' recorder wrote: docs/adoption.md)")  # fmt: skip
    events: list[tuple[float, int, dict[str, Any]]] = []
    counted = dict.fromkeys(KINDS, 0)
    for f in files:
        for t, obj in _lines(f):
            kind = next(k for k in KINDS if k in obj)
            counted[kind] += 1
            if kind == "rollup":
                events.append((t, len(events), obj))
    fleet = load(fleet_path)
    events.sort(key=lambda e: (e[0], e[1]))
    t0 = events[0][0] if events else 0.0
    rec = Recording(fleet, fleet.seed, source="shards", end="complete")
    for t, _, obj in events:
        rollup = from_wire(ClusterCapacityNeeds, obj["rollup"])
        n = rec.sent[rollup.cluster] = rec.sent.get(rollup.cluster, 0) + 1
        rec.rollups.append((t - t0, rollup.model_copy(update={"generation": n, "health": None})))
    last = rec.rollups[-1][0] if rec.rollups else 0.0
    clusters = [c.model_copy(update={"rollups": [], "workload": None}) for c in fleet.clusters]
    known = {c.name for c in fleet.clusters}
    strangers = sorted({r.cluster for _, r in rec.rollups} - known)
    if strangers:
        raise RecordingError(
            f"recording {path}: clusters {', '.join(strangers[:5])} are not in {fleet_path} "
            "(replay it on the fleet file the live fleet was started from)"
        )
    rec.scenario = fleet.model_copy(
        update={
            "clusters": clusters,
            "duration_seconds": max(fleet.duration_seconds, last + 2 * fleet.cycle_seconds),
        }
    )
    rec.counted = {"files": len(files), **counted}
    return rec


def _lines(f: pathlib.Path) -> list[tuple[float, dict[str, Any]]]:
    """A file's events after its header (time, object), checked."""
    try:
        lines = f.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise RecordingError(f"recording {f}: cannot read it: {err}") from None
    header = _json(f, 1, lines[0]) if lines else {}
    if header.get("format") != HEADER or header.get("version") != 1:
        raise RecordingError(f"recording {f} line 1: format: not a shard's recording (expected "
                             f"{HEADER!r}, version 1)")  # fmt: skip
    out = []
    for n, line in enumerate(lines[1:], start=2):
        obj = _json(f, n, line)
        t = obj.get("t")
        if isinstance(t, bool) or not isinstance(t, int | float) or not 0 <= t < float("inf"):
            raise RecordingError(f"recording {f} line {n}: t: a time in seconds is required")
        if not any(k in obj for k in KINDS):
            raise RecordingError(f"recording {f} line {n}: an event is one of {', '.join(KINDS)}")
        if "rollup" in obj:
            try:
                from_wire(ClusterCapacityNeeds, obj["rollup"])
            except (ValidationError, ValueError) as err:
                why = explain(err) if isinstance(err, ValidationError) else clip(str(err))
                raise RecordingError(f"recording {f} line {n}: rollup: {why}") from None
        out.append((float(t), obj))
    return out


def _json(f: pathlib.Path, n: int, line: str) -> dict[str, Any]:
    try:
        obj = json.loads(line)
    except ValueError:
        raise RecordingError(f"recording {f} line {n}: not JSON (a damaged or truncated file?)"
                             ) from None  # fmt: skip
    if not isinstance(obj, dict):
        raise RecordingError(f"recording {f} line {n}: an object is required")
    return obj
