"""Unmanaged clusters, live (issue 46, bigfleet/cluster_modes.py): on a real Temporal dev server, a
provider shared with another autoscaler lists two machines that autoscaler configured for its
cluster `legacy`. The deployment lists `legacy` as unmanaged: the shard never adopts them, so
long past the silence a cluster is allowed (5 s here) nothing drains them, and `legacy`'s
roll-ups are refused with the reason. Before, the shard adopted them and drained them as excess
once `legacy` had been silent for `max_silence_seconds` (tests/core/test_cluster_modes.py keeps
that as a check). Then `bigfleet cluster legacy --mode managed` through the coordinator: the shard
takes the two machines back as they stand, no transition started, and `legacy`'s roll-ups are
taken; `--mode unmanaged` hands them back the same way."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.testing import WorkflowEnvironment

from bigfleet.models import ListFilter, MachineState, Transition
from tests.conftest import eventually, fleet_workers
from tests.temporal.test_audit import audit
from tests.temporal.test_temporal_coordinator import ask, gpu_fleet, start
from workers import cli

S = MachineState


async def test_an_unmanaged_clusters_machines_are_left_alone_on_a_shared_provider(
    dev_env: WorkflowEnvironment, capsys: pytest.CaptureFixture[str]
):
    client = dev_env.client
    raw = gpu_fleet(1, {"r1": 6}, ["legacy"])
    raw["policy"] = {"max_silence_seconds": 5}
    async with fleet_workers(client, raw) as sim:
        dc = sim.providers["dc"]
        theirs = [m.id for m in dc.list(ListFilter())][:2]
        for mid in theirs:
            dc.hand_to(mid, "legacy")
        await start(client, raw, unmanaged=["legacy"])
        shard = client.get_workflow_handle("shard-0")
        # Cycles every second: 15 of them are three times the silence allowed.
        status = await eventually(
            lambda: shard.query("status"), lambda s: s["cycles"] >= 15, timeout=120
        )
        assert sum(status["machines"].values()) == 4  # the other 4 are BigFleet's
        assert status["unmanaged"]["clusters"] == 1
        assert status["unmanaged"]["machines_left_alone"] >= 2
        listed = {m.id: m for m in dc.list(ListFilter())}
        assert [(listed[m].state, listed[m].cluster) for m in theirs] == [
            (S.CONFIGURED, "legacy")
        ] * 2
        assert dc.started[Transition.DRAIN] == 0 and dc.started[Transition.DELETE] == 0
        # `bigfleet audit` names them apart: not orphans, nothing to repair.
        code, out = await audit(capsys, client.service_client.config.target_host)
        assert code == 0, out
        assert out["report"]["counts"]["unmanaged"] == 2
        assert out["report"]["counts"]["orphan"] == 0

        await ask(client, 0, "legacy", 100, 2)
        status = await eventually(
            lambda: shard.query("status"),
            lambda s: s["unmanaged"]["rollups_refused"] >= 1,
            timeout=60,
        )
        assert "legacy" not in status["clusters"]
        assert any("unmanaged" in r for r in status["rejections"])
        assert dc.started[Transition.CONFIGURE] == 0

        # Managed from now on: taken back as they stand, without a transition.
        address = client.service_client.config.target_host
        argv = ["cluster", "legacy", "--mode", "managed", "--reason", "cut over", "--address"]
        assert await asyncio.to_thread(cli.main, [*argv, address]) == 0
        status = await eventually(
            lambda: shard.query("status"),
            lambda s: s["machines"]["CONFIGURED"] == 2 and s["unmanaged"]["clusters"] == 0,
            timeout=60,
        )
        assert sum(status["machines"].values()) == 6
        await ask(client, 0, "legacy", 100, 2)
        await eventually(
            lambda: shard.query("status"), lambda s: "legacy" in s["clusters"], timeout=60
        )
        log = await client.get_workflow_handle("coordinator").query("cluster_modes")
        assert [(e["cluster"], e["mode"], e["reason"]) for e in log] == [
            ("legacy", "managed", "cut over")
        ]
        # A cluster no shard leaves alone cannot become managed: refused, saying so.
        capsys.readouterr()
        nobody = ["cluster", "nobody", "--mode", "managed", "--address", address]
        assert await asyncio.to_thread(cli.main, nobody) != 0
        assert "not unmanaged or shadow on any shard" in capsys.readouterr().err

        # Unmanaged again: handed back as they stand, its needs gone.
        argv = ["cluster", "legacy", "--mode", "unmanaged", "--address", address]
        assert await asyncio.to_thread(cli.main, argv) == 0
        status = await eventually(
            lambda: shard.query("status"),
            lambda s: sum(s["machines"].values()) == 4 and "legacy" not in s["clusters"],
            timeout=60,
        )
        listed = {m.id: m for m in dc.list(ListFilter())}
        assert {(listed[m].state, listed[m].cluster) for m in theirs} == {(S.CONFIGURED, "legacy")}
        for kind in (Transition.CONFIGURE, Transition.DRAIN, Transition.DELETE):
            assert dc.started[kind] == 0, kind

        # A shard added later leaves alone what the fleet leaves alone now: the config's
        # `legacy` and `old-eu`, made unmanaged at run time.
        argv = ["cluster", "old-eu", "--mode", "unmanaged", "--address", address]
        assert await asyncio.to_thread(cli.main, argv) == 0
        assert await asyncio.to_thread(cli.main, ["shard", "add", "--address", address]) == 0
        added = client.get_workflow_handle("shard-1")
        await eventually(
            lambda: added.query("unmanaged_clusters"),
            lambda names: names == ["legacy", "old-eu"],
            timeout=60,
        )
