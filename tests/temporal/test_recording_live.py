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


def written(tmp_path) -> list[dict]:
    path = tmp_path / "rec" / "shard-0.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


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
        await start(client, raw, record=True, max_cycles_per_run=8)  # (lines cross runs)
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
        # (Its counters are the run's: it continues as new every 8 cycles, its lines written
        # before each continue-as-new.)
        lines = await eventually(
            lambda: written(tmp_path),
            lambda lines: any("holdings" in x for x in lines)
            and any(x.get("rollup", {}).get("generation") == 2 for x in lines),
            timeout=60,
            what="the lines written",
        )
        assert (await shard.query("status"))["recording"]["dropped"] == 0
    assert lines[0]["format"] == "bigfleet-shard-recording"
    rollups = [x["rollup"] for x in lines if "rollup" in x]
    # Each new run records the roll-ups in force when it began again: each file and run reads
    # on its own (the replay numbers them again).
    got = [(r["generation"], r["needs"][0]["count"]) for r in rollups]
    assert sorted(set(got)) == [(1, 1), (2, 3)] and got == sorted(got)
    assert any("decision" in x for x in lines) and any("holdings" in x for x in lines)

    capsys.readouterr()
    argv = ["simulate", str(tmp_path / "rec"), "--replay", "--fleet", str(fleet_file), "--json"]
    assert await asyncio.to_thread(cli.main, argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["replay"]["live"]["rollup"] == len(rollups)
    assert report["summary"]["bands"]["<100000"]["served_fraction"] > 0.5  # (priority 1000)


async def test_a_shard_in_shadow_mode_records_what_it_saw_and_would_do(
    dev_env: WorkflowEnvironment, tmp_path, monkeypatch
):
    """Shadow mode (docs/shadow.md) lists the providers every cycle and starts nothing: its
    recording holds the roll-ups, what it would have decided, and what it saw each cycle."""
    client = dev_env.client
    monkeypatch.setenv("BIGFLEET_RECORD_DIR", str(tmp_path / "rec"))
    raw = gpu_fleet(1, {"r1": 4}, ["web"])
    async with fleet_workers(client, raw) as sim:
        await start(client, raw, record=True, shadow=True)
        shard = client.get_workflow_handle("shard-0")
        need = {"requirements": REQ, "priority": 1000, "count": 2}
        await shard.signal("rollup", {"cluster": "web", "generation": 1, "needs": [need]})
        await eventually(
            lambda: shard.query("status"),
            lambda s: s["recording"]["written"] >= 4 and s["recording"]["waiting"] == 0,
            timeout=60,
            what="the lines written",
        )
        assert sum(sim.providers["dc"].started.values()) == 0  # (shadow: nothing started)
    lines = [json.loads(x) for x in (tmp_path / "rec" / "shard-0.jsonl").read_text().splitlines()]
    assert [x["rollup"]["cluster"] for x in lines if "rollup" in x] == ["web"]
    assert any("decision" in x for x in lines)  # what it would have done
    holdings = [x["holdings"] for x in lines if "holdings" in x]
    assert holdings and sum(sum(p[5].values()) for p in holdings[-1]["profiles"]) == 4
