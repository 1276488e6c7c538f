"""Managed, shadow and unmanaged clusters side by side, live (issue 46; bigfleet/cluster_modes.py,
bigfleet/shadow_clusters.py). On a real Temporal dev server, one provider is shared with another
autoscaler, which configured two machines for `legacy` (unmanaged) and two for `ml` (shadow).
BigFleet acts for `web`. Long past the silence a cluster is allowed (5 s here; 15 cycles), the
provider has seen no call on `legacy`'s or `ml`'s machines, and `bigfleet shadow report
--cluster ml` compares what `ml` has with what BigFleet would give it. Then `bigfleet cluster ml
--mode managed`: its two machines are the shard's when the command returns, as they stand (no
transition), and its next roll-up is served by the one configure the shadow said it would
make."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest
from temporalio.testing import WorkflowEnvironment

from bigfleet.models import ListFilter, MachineState, Transition
from tests.conftest import eventually, fleet_workers
from tests.temporal.test_temporal_coordinator import REQ, gpu_fleet, start
from workers import cli

S = MachineState


async def operator(shard, cluster: str, count: int, nodes: list[str] | None = None) -> None:
    """What an operator does: a roll-up every second (with the nodes the cluster has)."""
    generation = 0
    while True:
        generation += 1
        need = {"requirements": REQ, "priority": 500, "count": count}
        rollup = {"cluster": cluster, "generation": generation, "needs": [need]}
        if nodes is not None:
            rollup["health"] = {"machine_ids": nodes}
        await shard.signal("rollup", rollup)
        await asyncio.sleep(1)


async def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = await asyncio.to_thread(cli.main, list(argv))
    return code, capsys.readouterr().out


async def test_managed_shadow_and_unmanaged_clusters_side_by_side(
    dev_env: WorkflowEnvironment, capsys: pytest.CaptureFixture[str]
):
    client = dev_env.client
    address = client.service_client.config.target_host
    raw = gpu_fleet(1, {"r1": 8}, ["web", "ml", "legacy"])
    raw["policy"] = {"max_silence_seconds": 5}
    raw["providers"][0]["racks"][0]["price_per_hour"] = 15.0
    async with fleet_workers(client, raw) as sim:
        dc = sim.providers["dc"]
        ids = [m.id for m in dc.list(ListFilter())]
        legacy, ml = ids[:2], ids[2:4]
        for mid in legacy:
            dc.hand_to(mid, "legacy")
        for mid in ml:
            dc.hand_to(mid, "ml")
        await start(client, raw, unmanaged=["legacy"], shadow_clusters=["ml"])
        shard = client.get_workflow_handle("shard-0")
        operators = [
            asyncio.create_task(operator(shard, "web", 2)),
            asyncio.create_task(operator(shard, "ml", 3, ml)),
        ]
        try:
            status = await eventually(
                lambda: shard.query("status"),
                lambda s: s["cycles"] >= 15 and s["machines"]["CONFIGURED"] == 2,
                timeout=120,
                what="15 cycles, web served",
            )
            assert sum(status["machines"].values()) == 4  # legacy's and ml's are not BigFleet's
            assert status["clusters"] == ["web"]  # ml's roll-ups are the shadow's
            listed = {m.id: m for m in dc.list(ListFilter())}
            assert [(listed[m].state, listed[m].cluster) for m in legacy + ml] == [
                (S.CONFIGURED, "legacy")
            ] * 2 + [(S.CONFIGURED, "ml")] * 2
            assert dc.started[Transition.DRAIN] == dc.started[Transition.DELETE] == 0
            assert dc.started[Transition.CONFIGURE] == 2  # web's two, nothing for ml

            # What a user runs: ml has 2 of the 3 it asks for, at $15/h each; BigFleet would
            # give it a third at once (would-be time to capacity 0 s).
            code, out = await run_cli(
                capsys, "shadow", "report", "--cluster", "ml", "--json", "--address", address
            )
            assert code == 0, out
            [report] = json.loads(out)
            assert report["cluster"] == "ml" and report["asked"] == 3 and report["cycles"] >= 5
            assert report["actual"]["machines"] == 2 and report["actual"]["unpriced"] == 0
            assert report["would_be"]["machines"] == 3
            # It would power on the rack's free machine for ml (the twin decides afresh every
            # cycle: the same intent counts once), at the rack's $15/h.
            assert set(report["would_be"]["actions"]) == {"create"}
            assert report["actual"]["cost_per_hour"] == 30.0
            assert report["would_be"]["cost_per_hour"] == 45.0
            assert report["would_be"]["time_to_capacity"]["count"] == 1
            assert report["actual"]["time_to_capacity"]["count"] == 0  # never had 3
            code, text = await run_cli(
                capsys, "shadow", "report", "--clusters", "--address", address
            )
            assert code == 0 and "cluster ml (shadow, shard 0)" in text and "WOULD-BE" in text, text
            print(text)  # (shown with -s)

            # Cut over: ml's machines are the shard's when the command returns, as they stand.
            code, _ = await run_cli(
                capsys, "cluster", "ml", "--mode", "managed", "--reason", "cut over",
                "--address", address,
            )  # fmt: skip
            assert code == 0
            # (Its operator's next roll-up may be served at once: a third machine on its way.)
            status = await shard.query("status")
            machines = status["machines"]
            assert sum(machines.values()) == 6 and machines["CONFIGURED"] >= 4
            assert dc.started[Transition.DRAIN] == dc.started[Transition.DELETE] == 0
            # Its operator's next roll-up is the shard's, and served as the shadow said.
            await eventually(
                lambda: shard.query("status"),
                lambda s: "ml" in s["clusters"] and s["machines"]["CONFIGURED"] == 5,
                timeout=60,
                what="ml served as managed",
            )
            listed = {m.id: m for m in dc.list(ListFilter())}
            assert [listed[m].cluster for m in ml] == ["ml", "ml"]
            assert dc.started[Transition.DRAIN] == dc.started[Transition.DELETE] == 0
            assert dc.started[Transition.CONFIGURE] == 3  # one more, as the shadow said
            assert [listed[m].state for m in legacy] == [S.CONFIGURED] * 2  # still left alone
            clusters = await shard.query("shadow_clusters")
            assert clusters["names"] == [] and clusters["clusters"] == []
        finally:
            for task in operators:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
