"""A live fleet's recording (issue 46): the files the shards' recorder writes
(activities/recording.py) are bounded and rotate, and `bigfleet simulate DIR --replay --fleet
FILE` replays them on a fleet file (bigfleet/simulation/shard_recording.py). A foreign or
damaged file, or a roll-up of a cluster the fleet file lacks, is refused naming what is wrong.
tests/temporal/test_recording_live.py records a shard on a real Temporal server."""

from __future__ import annotations

import json
import pathlib

import pytest
import yaml

from activities.recording import RecordActivities
from bigfleet.cli import main

from .scenarios import bare_metal, cluster, rack, scenario


def rollup(t: float, cluster_name: str, generation: int, count: int, shard: int = 0) -> str:
    need_ = {"requirements": [], "priority": 1000, "count": count}
    rollup_ = {"cluster": cluster_name, "generation": generation, "needs": [need_],
               "health": {"machine_ids": ["live-node-1"]}}  # fmt: skip
    return json.dumps({"t": t, "rollup": rollup_, "accepted": True, "shard": shard})


@pytest.fixture
def fleet_file(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(scenario(
        [bare_metal(rack("r1", 4))], [cluster("a"), cluster("b")], 60
    )))  # fmt: skip
    return path


def test_files_rotate_and_are_bounded(tmp_path: pathlib.Path):
    rec = RecordActivities(tmp_path, file_bytes=400, files=2)
    for i in range(30):
        rec.append(3, [rollup(1_000 + i, "a", i + 1, 1, shard=3)])
    current = tmp_path / "shard-3.jsonl"
    rotated = sorted(tmp_path.glob("shard-3.*.jsonl"))
    assert current.exists() and len(rotated) == 2  # (the oldest deleted)
    for f in [current, *rotated]:
        lines = f.read_text().splitlines()
        assert json.loads(lines[0])["format"] == "bigfleet-shard-recording"
        assert f.stat().st_size <= 400 + 200  # (a file passes its bound by one batch at most)


def test_a_live_recording_replays_on_its_fleet_file(tmp_path, fleet_file, capsys):
    rec = RecordActivities(tmp_path / "rec")
    # Two shards, clock times of a live fleet; a decision and what was held, counted only.
    rec.append(0, [rollup(1_796_690_010.0, "a", 1_796_690_010_000, 2)])
    rec.append(1, [rollup(1_796_690_000.0, "b", 7, 1, shard=1)])
    rec.append(0, [json.dumps({"t": 1_796_690_020.0, "decision": {"shard": 0, "digest": "x",
                                                                   "actions": 2}}),  # fmt: skip
                   json.dumps({"t": 1_796_690_020.0, "holdings": {"shard": 0, "profiles": []}}),
                   rollup(1_796_690_030.0, "a", 1_796_690_030_000, 3)])  # fmt: skip
    capsys.readouterr()
    argv = ["simulate", str(tmp_path / "rec"), "--replay", "--fleet", str(fleet_file), "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["replay"]["live"] == {"files": 2, "rollup": 3, "decision": 1, "holdings": 1}
    assert out["replay"]["checked"] is False  # (a live fleet's decisions are not compared)
    from bigfleet.simulation.shard_recording import read_dir

    got = read_dir(str(tmp_path / "rec"), str(fleet_file))
    # From t = 0 at the first line; generations numbered again per cluster; health dropped.
    assert [(t, r.cluster, r.generation, r.needs[0].count, r.health) for t, r in got.rollups] == [
        (0.0, "b", 1, 1, None), (10.0, "a", 1, 2, None), (30.0, "a", 2, 3, None)
    ]  # fmt: skip
    assert got.scenario.duration_seconds == 60  # (the fleet file's: longer than the recording)


@pytest.mark.parametrize(
    "content, says",
    [
        ('{"format": "bigfleet-recording", "version": 1}\n', "line 1: format: not a shard's"),
        ('{"format":"bigfleet-shard-recording","version":1,"shard":0}\n{"t": 5, "rollu',
         "line 2: not JSON"),
        ('{"format":"bigfleet-shard-recording","version":1,"shard":0}\n{"t": 5, "what": 1}\n',
         "line 2: an event is one of rollup, decision, holdings"),
        ('{"format":"bigfleet-shard-recording","version":1,"shard":0}\n'
         '{"t": 5, "rollup": {"cluster": "a", "generation": -1}}\n', "line 2: rollup: generation"),
        ('{"format":"bigfleet-shard-recording","version":1,"shard":0}\n'
         + rollup(5, "nobody", 1, 1) + "\n", "clusters nobody are not in"),
    ],
)  # fmt: skip
def test_a_foreign_or_damaged_live_recording_is_refused(tmp_path, fleet_file, capsys,
                                                        content, says):  # fmt: skip
    (tmp_path / "rec").mkdir()
    (tmp_path / "rec" / "shard-0.jsonl").write_text(content)
    capsys.readouterr()
    argv = ["simulate", str(tmp_path / "rec"), "--replay", "--fleet", str(fleet_file)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert says in err, err


def test_a_directory_without_a_fleet_or_without_files_is_refused(tmp_path, fleet_file, capsys):
    (tmp_path / "rec").mkdir()
    capsys.readouterr()
    assert main(["simulate", str(tmp_path / "rec"), "--replay"]) == 2
    assert "--fleet FILE" in capsys.readouterr().err
    assert main(["simulate", str(tmp_path / "rec"), "--replay", "--fleet", str(fleet_file)]) == 2
    assert "no shard-<n>.jsonl" in capsys.readouterr().err
