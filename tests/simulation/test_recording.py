"""Record, then replay (issue 46; bigfleet/simulation/recording.py): `bigfleet simulate
--record FILE` writes the roll-ups the fleet received, with their times, and what each shard
decided; `bigfleet simulate FILE --replay` delivers them again to the same fleet and says
whether every decision was the recorded one. A replay of a simulator's recording makes exactly
the recorded decisions (here on a shipped example with rack failures and node health, on two
shards); a foreign, damaged or out-of-order file is refused naming the line."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from bigfleet.cli import main

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def simulate(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    capsys.readouterr()
    code = main(["simulate", *argv])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else err)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, dict[str, Any]]:
    """The rack failure on two shards, recorded (its report beside it)."""
    path = tmp_path_factory.mktemp("rec") / "rack.jsonl"
    argv = [str(EXAMPLES / "rack-failure.yaml"), "--shards", "2", "--record", str(path), "--json"]
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["simulate", *argv]) == 0
    return path, json.loads(out.getvalue())


def test_a_replay_makes_every_recorded_decision(recorded, capsys):
    path, original = recorded
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    assert header["format"] == "bigfleet-recording" and header["scenario"]["shards"] == 2
    assert not any(c.get("rollups") for c in header["scenario"]["clusters"])  # (the demand
    # is in the events, not the fleet)
    assert json.loads(lines[-1])["end"] == "complete"

    code, replay = simulate(capsys, str(path), "--replay", "--json")
    assert code == 0, replay
    check = replay["replay"]
    assert check["checked"] and check["recorded"] > 20
    assert check["same"] == check["recorded"] == check["replayed"]
    assert check["first_difference"] is None
    assert replay["summary"] == original["summary"]


def test_a_replay_that_decides_otherwise_says_where(recorded, capsys):
    """Another seed gives the providers other luck (create times, failures): the replay's
    decisions part from the recording, and it says when first."""
    path, _ = recorded
    code, replay = simulate(capsys, str(path), "--replay", "--seed", "99", "--json")
    assert code == 0, replay
    assert replay["replay"]["first_difference"] is not None
    assert replay["replay"]["same"] < replay["replay"]["recorded"]


def test_a_bounded_recording_ends_truncated_and_replays_what_it_holds(tmp_path, capsys):
    path = tmp_path / "small.jsonl"
    scenario = str(EXAMPLES / "spot-vs-on-demand.yaml")
    code, _ = simulate(capsys, scenario, "--record", str(path), "--record-bytes", "6000", "--json")
    assert code == 0
    assert path.stat().st_size <= 6000
    assert json.loads(path.read_text().splitlines()[-1])["end"] == "truncated"
    code, replay = simulate(capsys, str(path), "--replay", "--json")
    assert code == 0 and replay["replay"]["end"] == "truncated"
    # A bound below the header's size still leaves a file that reads: the header, the end.
    code, _ = simulate(capsys, scenario, "--record", str(path), "--record-bytes", "10", "--json")
    assert code == 0 and len(path.read_text().splitlines()) == 2
    code, replay = simulate(capsys, str(path), "--replay", "--json")
    assert code == 0 and replay["replay"]["end"] == "truncated"


def damaged(recorded_path: pathlib.Path, how: str) -> str:
    lines = recorded_path.read_text().splitlines()
    header = json.loads(lines[0])
    if how == "foreign":
        return "name: not-a-recording\nduration_seconds: 10\n"
    if how == "version":
        return json.dumps({**header, "version": 2}) + "\n" + "\n".join(lines[1:])
    if how == "truncated":
        return "\n".join(lines[:5]) + "\n" + lines[5][: len(lines[5]) // 2]
    if how == "backwards":
        first = json.loads(lines[2])
        return "\n".join([*lines[:3], json.dumps({**first, "t": first["t"] - 1})])
    if how == "after-end":
        return "\n".join(lines) + "\n" + lines[2]
    assert how == "rollup"
    event = json.loads(lines[2])
    event["rollup"]["needs"][0]["count"] = -3
    return "\n".join([*lines[:2], json.dumps(event)])


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("foreign", "line 1: not a BigFleet recording"),
        ("version", "line 1: version: 2 is not 1"),
        ("truncated", "line 6: not JSON"),
        ("backwards", "line 4: t:"),
        ("after-end", "after the recording's end"),
        ("rollup", "line 3: rollup: needs.0.count"),
    ],
)
def test_a_foreign_or_damaged_recording_is_refused_naming_the_line(
    recorded, tmp_path, capsys, how, said
):
    path = tmp_path / f"{how}.jsonl"
    path.write_text(damaged(recorded[0], how))
    code, err = simulate(capsys, str(path), "--replay")
    assert code == 2 and said in err, err


def test_record_is_for_a_plain_run(tmp_path, capsys):
    scenario = str(EXAMPLES / "spot-vs-on-demand.yaml")
    code, err = simulate(capsys, scenario, "--record", str(tmp_path / "x"), "--compare", "shards")
    assert code == 2 and "--record is for a plain run" in err


def test_a_recordings_demand_compares_with_every_cluster_alone(recorded, capsys):
    """`--compare per-cluster` on a recording: its clusters' roll-ups as the demand."""
    path, original = recorded
    code, out = simulate(capsys, str(path), "--replay", "--compare", "per-cluster", "--json")
    assert code == 0, out
    assert out["bigfleet"]["summary"]["cost_total"] > 0
    assert out["per_cluster"]["summary"]["cost_total"] > 0
    assert out["bigfleet"]["clusters"] == original["clusters"]


def test_an_operators_recording_replays_in_the_simulator(tmp_path, capsys):
    """`bigfleet operator serve --record` (and so `bigfleet dev --record`): the roll-ups the
    example operators send, at their scripts' times, replay on the fleet file. Their
    generations (a live clock's milliseconds) are numbered again, their node health dropped."""
    import asyncio

    import yaml

    from bigfleet.simulation.recording import RecordingWriter, read, recorded_send
    from bigfleet.simulation.scenario import load
    from workers.dev.operators import Operators

    from .scenarios import bare_metal, cluster, need, rack, scenario

    fleet_file = tmp_path / "tiny.yaml"
    fleet_file.write_text(yaml.safe_dump(scenario(
        [bare_metal(rack("r1", 4))],
        [cluster("a", (0, [need(900_000, 2)])), cluster("b", (0, [need(100, 1)]))],
        600,
    )))  # fmt: skip
    fleet = load(fleet_file)
    sent: list[str] = []
    stop = asyncio.Event()

    async def send(cluster_name: str, rollup: dict) -> str:
        sent.append(cluster_name)
        if len(sent) == 2:
            stop.set()
        return "shard-0"

    path = tmp_path / "operator.jsonl"
    with open(path, "w", encoding="utf-8") as out:
        ops = Operators(None, fleet, send=send, health=lambda c: [f"{c}-node-1"])
        writer = RecordingWriter(out, fleet, fleet.seed, source="operator")
        ops.send = recorded_send(send, writer, ops.elapsed)
        asyncio.run(asyncio.wait_for(ops.run(stop), 30))
    rec = read(str(path))
    assert rec.source == "operator" and sorted(r.cluster for _, r in rec.rollups) == ["a", "b"]
    assert [r.generation for _, r in rec.rollups] == [1, 1]
    assert all(r.health is None for _, r in rec.rollups)
    code, replay = simulate(capsys, str(path), "--replay", "--json")
    assert code == 0, replay
    assert replay["replay"]["checked"] is False  # (an operator records no decisions)
    # The same demand from t = 0 as the fleet file's own run gives (its roll-ups came a
    # fraction of a second into the operators' script, not at 0 exactly).
    code, own = simulate(capsys, str(fleet_file), "--json")
    assert code == 0, own
    for band, measured in own["summary"]["bands"].items():
        assert abs(replay["summary"]["bands"][band]["served_fraction"]
                   - measured["served_fraction"]) < 0.02, band  # fmt: skip
    assert replay["summary"]["cost_total"] == pytest.approx(own["summary"]["cost_total"], 0.02)
