"""A live shard records (issue 46; workflows/shard_record.py, activities/recording.py): on a real
Temporal dev server, a shard started with `record` writes the roll-ups it accepted, its
decisions and what it held, beside its loop; `bigfleet simulate DIR --replay --fleet FILE`
replays the directory on the fleet file, serving the same demand."""

from __future__ import annotations

import asyncio
import json

import pytest
import yaml
from temporalio.testing import WorkflowEnvironment

from tests.conftest import eventually, fleet_workers
from tests.temporal.test_temporal_coordinator import REQ, gpu_fleet, start
from workers import cli


async def test_a_recording_of_a_live_shard_replays_in_the_simulator(
    dev_env: WorkflowEnvironment, tmp_path, monkeypatch, capsys: pytest.CaptureFixture[str]
):
    client = dev_env.client
    monkeypatch.setenv("BIGFLEET_RECORD_DIR", str(tmp_path / "rec"))
    raw = gpu_fleet(1, {"r1": 4}, ["web"])
    raw["duration_seconds"] = 30
    fleet_file = tmp_path / "fleet.yaml"
    fleet_file.write_text(yaml.safe_dump(raw))
    async with fleet_workers(client, raw):
        await start(client, raw, record=True)
        shard = client.get_workflow_handle("shard-0")
        for generation, count in ((1, 1), (2, 3)):
            need = {"requirements": REQ, "priority": 1000, "count": count}
            await shard.signal("rollup", {"cluster": "web", "generation": generation,
                                          "needs": [need]})  # fmt: skip
            await eventually(
                lambda: shard.query("status"),
                lambda s, c=count: s["machines"]["CONFIGURED"] == c,
                timeout=60,
                what=f"web served {count}",
            )
        status = await eventually(
            lambda: shard.query("status"),
            lambda s: s["recording"]["written"] >= 4 and s["recording"]["waiting"] == 0,
            timeout=60,
            what="the lines written",
        )
        assert status["recording"]["dropped"] == 0
    lines = [json.loads(x) for x in (tmp_path / "rec" / "shard-0.jsonl").read_text().splitlines()]
    assert lines[0]["format"] == "bigfleet-shard-recording"
    rollups = [x["rollup"] for x in lines if "rollup" in x]
    assert [(r["generation"], r["needs"][0]["count"]) for r in rollups] == [(1, 1), (2, 3)]
    assert any("decision" in x for x in lines) and any("holdings" in x for x in lines)

    capsys.readouterr()
    argv = ["simulate", str(tmp_path / "rec"), "--replay", "--fleet", str(fleet_file), "--json"]
    assert await asyncio.to_thread(cli.main, argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["replay"]["live"]["rollup"] == 2
    assert report["summary"]["bands"]["<100000"]["served_fraction"] > 0.5  # (priority 1000)
