"""`bigfleet simulate`'s runs that record or replay (bigfleet/cli.py; docs/adoption.md "Record,
then replay")."""

from __future__ import annotations

import argparse
import io
import os
from typing import Any

from .recording import RecordingError, RecordingWriter, compared, read
from .run import Simulation
from .scenario import on_shards
from .shard_recording import read_dir


def run_one(args: argparse.Namespace, scenario: Any, recording: Any) -> dict[str, Any]:
    """One run: of a scenario (`--record FILE`: written as it goes), or a recording's replay
    (its roll-ups delivered verbatim to its fleet; the report says whether every decision was
    the recorded one)."""
    if recording is None and not args.record:
        return Simulation(scenario, args.seed).run()
    if recording is None:
        with open(args.record, "w", encoding="utf-8") as out:
            writer = RecordingWriter(out, scenario, args.seed or scenario.seed, args.record_bytes)
            return Simulation(scenario, args.seed, record=writer).run()
    fleet = recording.scenario
    if args.shards is not None:
        fleet = on_shards(fleet, args.shards)
    writer = RecordingWriter(io.StringIO(), fleet, args.seed, 0)  # (keeps the digests only)
    result = Simulation(fleet, args.seed, feed=recording.rollups, record=writer).run()
    result["replay"] = {"end": recording.end, **compared(recording.decisions, writer.decisions)}
    if recording.counted:  # (a live fleet's: its lines by kind, its decisions not compared)
        result["replay"]["live"] = recording.counted
    return result


def recording_of(args: argparse.Namespace) -> Any:
    """`--replay`'s recording: a file, or a live fleet's directory on `--fleet`'s fleet."""
    if not os.path.isdir(args.scenario):
        return read(args.scenario)
    if not args.fleet:
        raise RecordingError(f"{args.scenario} is a live fleet's recording: --fleet FILE names "
                             "the fleet file to replay it on")  # fmt: skip
    return read_dir(args.scenario, args.fleet)
