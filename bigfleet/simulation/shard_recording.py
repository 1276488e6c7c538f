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

import pathlib

from ..models import ClusterCapacityNeeds
from .recording import Recording, RecordingError, event_rollup, event_time, json_line
from .scenario import load

HEADER = "bigfleet-shard-recording"  # (activities/recording.py writes it: `header_line`)
KINDS = ("rollup", "decision", "holdings")


def header_line(shard: int) -> str:
    """The first line of each file of shard `shard`'s recording."""
    return f'{{"format":"{HEADER}","version":1,"shard":{shard}}}'


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
    rollups: list[tuple[float, int, ClusterCapacityNeeds]] = []
    counted = dict.fromkeys(KINDS, 0)
    for f in files:
        for t, kind, rollup in _events(f):
            counted[kind] += 1
            if rollup is not None:
                rollups.append((t, len(rollups), rollup))
    fleet = load(fleet_path)
    strangers = sorted({r.cluster for _, _, r in rollups} - {c.name for c in fleet.clusters})
    if strangers:
        raise RecordingError(
            f"recording {path}: clusters {', '.join(strangers[:5])} are not in {fleet_path} "
            "(replay it on the fleet file the live fleet was started from)"
        )
    rollups.sort(key=lambda e: (e[0], e[1]))
    t0 = rollups[0][0] if rollups else 0.0
    rec = Recording(fleet, fleet.seed, source="shards", end="complete")
    for t, _, rollup in rollups:
        rec.deliver(t - t0, rollup)
    last = rec.rollups[-1][0] if rec.rollups else 0.0
    clusters = [c.model_copy(update={"rollups": [], "workload": None}) for c in fleet.clusters]
    rec.scenario = fleet.model_copy(
        update={
            "clusters": clusters,
            "duration_seconds": max(fleet.duration_seconds, last + 2 * fleet.cycle_seconds),
        }
    )
    rec.counted = {"files": len(files), **counted}
    return rec


def _events(f: pathlib.Path) -> list[tuple[float, str, ClusterCapacityNeeds | None]]:
    """A file's events after its header (time, kind, the roll-up if it is one), checked."""
    try:
        lines = f.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise RecordingError(f"recording {f}: cannot read it: {err}") from None
    header = json_line(str(f), 1, lines[0]) if lines else {}
    if header.get("format") != HEADER or header.get("version") != 1:
        raise RecordingError(f"recording {f} line 1: format: not a shard's recording (expected "
                             f"{HEADER!r}, version 1)")  # fmt: skip
    out = []
    for n, line in enumerate(lines[1:], start=2):
        where = f"recording {f} line {n}"
        obj = json_line(str(f), n, line)
        t = event_time(where, obj)
        kind = next((k for k in KINDS if k in obj), None)
        if kind is None:
            raise RecordingError(f"{where}: an event is one of {', '.join(KINDS)}")
        out.append((t, kind, event_rollup(where, obj["rollup"]) if kind == "rollup" else None))
    return out
