"""Record, then replay (issue 46; docs/adoption.md): the roll-ups a fleet received, with their
times, in a file that `bigfleet simulate RECORDING --replay` turns back into a run.

A recording is JSON lines. The first is the header; every other line is one event:

    {"format": "bigfleet-recording", "version": 1, "source": "simulation",
     "seed": 4, "scenario": {...the fleet: providers, policy, clusters without demand...}}
    {"t": 30.0, "rollup": {...the roll-up as delivered...}, "accepted": true}
    {"t": 30.0, "decision": {"shard": 0, "digest": "9f2c...", "actions": 3}}
    {"t": 3600.0, "end": "complete"}

The roll-ups are delivered again verbatim, at their times, in their order, to the same fleet
with the same seed, so a replay of a simulator's recording makes the very decisions it made
(the `decision` lines let a replay check that; `digest` hashes a shard's actions in a cycle).
A recording is bounded (`max_bytes`): past it, it ends with `{"end": "truncated"}` and a replay
runs what it holds. It is read strictly: a foreign or damaged file is refused, naming the line.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import IO, Any

from pydantic import ValidationError

from ..inputs import clip, explain
from ..models import ClusterCapacityNeeds, from_wire
from .scenario import Scenario, ScenarioError, TimedRollup

FORMAT, VERSION = "bigfleet-recording", 1
MAX_BYTES = 256 * 1024 * 1024  # a recording's size at most, by default


class RecordingError(ScenarioError):
    """A file that is not a recording this version reads, or a damaged one; says where."""


def digest(actions: Iterable[Any]) -> str:
    """A cycle's actions as a short hash: kind, machines, cluster and reason of each, in order."""
    h = hashlib.sha256()
    for a in actions:
        ids = a.machine_ids if a.kind == "create" else [getattr(a, "machine_id", "")]
        reason = getattr(a, "reason", None)
        h.update(repr((a.kind, ids, getattr(a, "cluster", None), str(reason))).encode())
    return h.hexdigest()[:16]


def recorded_send(
    send: Callable[[str, dict[str, Any]], Awaitable[str]],
    writer: RecordingWriter,
    clock: Callable[[], float],
) -> Callable[[str, dict[str, Any]], Awaitable[str]]:
    """An operator's `send` that also records each roll-up it delivered, at `clock()` (the
    fleet file's time: `bigfleet operator serve --record`, `bigfleet dev --record`)."""

    async def send_and_record(cluster: str, rollup: dict[str, Any]) -> str:
        where = await send(cluster, rollup)
        with contextlib.suppress(ValueError):  # (a roll-up it could not read is not kept)
            writer.rollup(clock(), from_wire(ClusterCapacityNeeds, rollup), True)
            writer.out.flush()
        return where

    return send_and_record


class RecordingWriter:
    """Writes a recording as a run goes (`Simulation(record=...)`); keeps the decision
    digests it wrote (`decisions`), which a replay compares with the recording's."""

    def __init__(
        self,
        out: IO[str],
        scenario: Scenario,
        seed: int,
        max_bytes: int = MAX_BYTES,
        source: str = "simulation",
    ) -> None:
        self.out, self.left, self.full = out, max_bytes, False
        self.decisions: list[tuple[float, int, str]] = []
        fleet = scenario.model_copy(
            update={"clusters": [c.model_copy(update={"rollups": [], "workload": None})
                                 for c in scenario.clusters]}  # fmt: skip
        )
        # (What the file set, no more: a dump of every default would not read back, e.g. a
        # policy's cycle_seconds, which a scenario sets at its top level.)
        header = {"format": FORMAT, "version": VERSION, "source": source, "seed": seed,
                  "scenario": fleet.model_dump(mode="json", exclude_unset=True)}  # fmt: skip
        # (Written whatever the bound: a recording without it could not be read at all.)
        text = json.dumps(header, separators=(",", ":")) + "\n"
        self.left -= len(text)
        out.write(text)

    def rollup(self, t: float, rollup: ClusterCapacityNeeds, accepted: bool) -> None:
        self._line({"t": t, "rollup": rollup.model_dump(mode="json"), "accepted": accepted})

    def decision(self, t: float, shard: int, actions: Any) -> None:
        if len(actions):
            hashed = digest(actions)
            self.decisions.append((t, shard, hashed))
            self._line({"t": t, "decision": {"shard": shard, "digest": hashed,
                                              "actions": len(actions)}})  # fmt: skip

    def end(self, t: float, how: str = "complete") -> None:
        """The last line: the run ended (`how`: complete; an operator's, stopped)."""
        if not self.full:
            self.out.write(json.dumps({"t": t, "end": how}) + "\n")

    def _line(self, obj: dict[str, Any]) -> None:
        if self.full:
            return
        text = json.dumps(obj, separators=(",", ":")) + "\n"
        if len(text) > self.left - 64:  # (room for the last line)
            self.full = True
            self.out.write(json.dumps({"t": obj.get("t", 0.0), "end": "truncated"}) + "\n")
            return
        self.left -= len(text)
        self.out.write(text)


@dataclass
class Recording:
    """A recording read back: the fleet, the seed, the roll-ups delivered (time, roll-up) in
    order, each shard's decision digests per cycle, and how it ended."""

    scenario: Scenario
    seed: int
    rollups: list[tuple[float, ClusterCapacityNeeds]] = field(default_factory=list)
    decisions: list[tuple[float, int, str]] = field(default_factory=list)
    end: str = "missing"
    sent: dict[str, int] = field(default_factory=dict)  # roll-ups read so far, per cluster
    source: str = "simulation"  # what wrote it: the simulator, an operator, or live shards
    counted: dict[str, int] = field(default_factory=dict)  # (live shards': lines by kind)

    def deliver(self, t: float, rollup: ClusterCapacityNeeds) -> None:
        """A roll-up to deliver at `t`. Generations are numbered again per cluster, in order (a
        live operator's are its clock's milliseconds, far ahead of a simulation's): only their
        order counts. A live cluster's node health names the machines it had there, which a
        replay's fleet does not give it: kept only from a simulation's own recording."""
        n = self.sent[rollup.cluster] = self.sent.get(rollup.cluster, 0) + 1
        update: dict[str, Any] = {"generation": n}
        if self.source != "simulation":
            update["health"] = None
        self.rollups.append((float(t), rollup.model_copy(update=update)))

    def demand_scenario(self) -> Scenario:
        """The fleet with each cluster's accepted roll-ups as its timed roll-ups (the demand
        `--compare per-cluster` splits; a run of it re-sends as the simulator does, so it is
        close to, not exactly, the recorded run)."""
        timed: dict[str, list[TimedRollup]] = {}
        for t, r in self.rollups:
            mine = timed.setdefault(r.cluster, [])
            if not mine or mine[-1].needs != r.needs:
                mine.append(TimedRollup(at=t, needs=r.needs))
        clusters = [
            c.model_copy(update={"rollups": timed.get(c.name, [])})
            for c in self.scenario.clusters
        ]
        return self.scenario.model_copy(update={"clusters": clusters})


def read(path: str) -> Recording:
    """A recording from `path`, strictly (a `RecordingError` names the line)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise RecordingError(f"recording {path}: cannot read it: {err}") from None
    if not lines:
        raise RecordingError(f"recording {path}: empty")
    try:
        header = json_line(path, 1, lines[0])
    except RecordingError:
        raise RecordingError(f"recording {path} line 1: not a BigFleet recording (not JSON)"
                             ) from None  # fmt: skip
    if header.get("format") != FORMAT:
        raise RecordingError(f"recording {path} line 1: format: not a BigFleet recording "
                             f"(expected {FORMAT!r})")  # fmt: skip
    if header.get("version") != VERSION:
        raise RecordingError(f"recording {path} line 1: version: {clip(header.get('version'), 20)}"
                             f" is not {VERSION}, the version this BigFleet reads")  # fmt: skip
    try:
        scenario = from_wire(Scenario, header.get("scenario"))
    except (ValidationError, ValueError) as err:
        why = explain(err) if isinstance(err, ValidationError) else clip(str(err))
        raise RecordingError(f"recording {path} line 1: scenario: {why}") from None
    seed = header.get("seed")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise RecordingError(f"recording {path} line 1: seed: a whole number is required")
    rec = Recording(scenario, seed, source=str(header.get("source", "simulation"))[:20])
    for n, line in enumerate(lines[1:], start=2):
        _event(rec, path, n, json_line(path, n, line))
    return rec


def json_line(path: str, n: int, line: str) -> dict[str, Any]:
    """Line `n` of recording `path`: one JSON object, or a `RecordingError` naming it."""
    try:
        obj = json.loads(line)
    except ValueError:
        raise RecordingError(f"recording {path} line {n}: not JSON (a damaged or truncated "
                             "file?)") from None  # fmt: skip
    if not isinstance(obj, dict):
        raise RecordingError(f"recording {path} line {n}: an object is required")
    return obj


def _event(rec: Recording, path: str, n: int, obj: dict[str, Any]) -> None:
    where = f"recording {path} line {n}"
    if rec.end != "missing":
        raise RecordingError(f"{where}: an event after the recording's end")
    t = event_time(where, obj)
    if rec.rollups and t < rec.rollups[-1][0]:
        raise RecordingError(f"{where}: t: {t} is before the event above it")
    if "end" in obj:
        rec.end = str(obj["end"])[:20]
    elif "rollup" in obj:
        if obj.get("accepted", True):
            rec.deliver(t, event_rollup(where, obj["rollup"]))
    elif "decision" in obj:
        d = obj["decision"]
        if not isinstance(d, dict) or not isinstance(d.get("shard"), int):
            raise RecordingError(f"{where}: decision: shard and digest are required")
        rec.decisions.append((float(t), d["shard"], str(d.get("digest", ""))[:64]))
    else:
        raise RecordingError(f"{where}: an event is a rollup, a decision or the end")


def event_time(where: str, obj: dict[str, Any]) -> float:
    """An event's `t`: seconds, finite, not negative (a `RecordingError` at `where` if not)."""
    t = obj.get("t")
    if isinstance(t, bool) or not isinstance(t, int | float) or not 0 <= t < float("inf"):
        raise RecordingError(f"{where}: t: a time in seconds is required")
    return float(t)


def event_rollup(where: str, raw: Any) -> ClusterCapacityNeeds:
    """An event's roll-up, checked (a `RecordingError` at `where` naming the field if not)."""
    try:
        return from_wire(ClusterCapacityNeeds, raw)
    except (ValidationError, ValueError) as err:
        why = explain(err) if isinstance(err, ValidationError) else clip(str(err))
        raise RecordingError(f"{where}: rollup: {why}") from None


def compared(recorded: list[tuple[float, int, str]], replayed: list[tuple[float, int, str]]
             ) -> dict[str, Any]:  # fmt: skip
    """How a replay's decisions compare with the recording's: how many, how many the same, and
    the first that differs (time and shard), if any. `checked`: the recording had decisions to
    compare with (an operator's has none: it saw only what it sent)."""
    if not recorded:
        return {"checked": False, "recorded": 0, "replayed": len(replayed), "same": 0,
                "first_difference": None}  # fmt: skip
    same = 0
    for a, b in zip(recorded, replayed, strict=False):
        if a != b:
            return {"checked": True, "recorded": len(recorded), "replayed": len(replayed),
                    "same": same, "first_difference": {"t": a[0], "shard": a[1]}}  # fmt: skip
        same += 1
    differs = None if len(recorded) == len(replayed) else {"t": None, "shard": None}
    return {"checked": True, "recorded": len(recorded), "replayed": len(replayed),
            "same": same, "first_difference": differs}  # fmt: skip
