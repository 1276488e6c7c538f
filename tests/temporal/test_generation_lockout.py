"""Issue 44, item 4: the largest generation a shard accepted froze its cluster. A roll-up of
generation 2^53 - 1 was taken, and every later roll-up of that cluster — one clearing its needs
too — was refused as stale, for good. Now a shard refuses a generation ahead of its clock (unix
ms + GENERATION_AHEAD_MS), naming `generation`, and an operator can make a shard forget a
cluster's generation (`bigfleet cluster NAME --reset-generation`, the `reset_generation`
update) when one inside that bound still ran ahead of what its operator sends. On a real
Temporal dev server, with the CLI in this process.

Both tests fail on the code before (2e880d5): the 2^53 - 1 roll-up was taken and the clearing
one ignored; `--reset-generation` did not exist (the CLI refused the flag).
"""

from __future__ import annotations

import time

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from bigfleet.models import GENERATION_AHEAD_MS, MAX_GENERATION
from tests.conftest import eventually, fleet_workers, query_retrying
from tests.temporal.test_cli_live import NEED, run
from tests.temporal.test_temporal_coordinator import gpu_fleet, start


def rollup(generation: int, count: int) -> dict:
    return {"cluster": "web", "generation": generation, "needs": [{**NEED, "count": count}]}


async def test_a_generation_ahead_of_the_clock_is_refused_and_locks_nothing(
    dev_env: WorkflowEnvironment,
):
    client = dev_env.client
    raw = gpu_fleet(1, {"r1": 2}, ["web"])
    shard = client.get_workflow_handle("shard-0")
    async with fleet_workers(client, raw):
        await start(client, raw)
        now_ms = int(time.time() * 1000)
        await shard.signal("rollup", rollup(now_ms, 1))
        await eventually(
            lambda: query_retrying(lambda: shard.query("cluster", "web")),
            lambda v: v["generation"] == now_ms,
            what="web's first roll-up taken",
        )
        # The largest generation there is, then one just past the clock's bound.
        for ahead in (MAX_GENERATION, now_ms + GENERATION_AHEAD_MS + 600_000):
            await shard.signal("rollup", rollup(ahead, 2))
        status = await eventually(
            lambda: query_retrying(lambda: shard.query("status")),
            lambda s: sum("ahead of the shard's clock" in r for r in s["rejections"]) == 2,
            what="both refused",
        )
        refused = [r for r in status["rejections"] if "ahead of the shard's clock" in r]
        assert all("generation:" in r for r in refused), refused
        # Nothing locked: the cluster's next roll-up (clearing its need) applies.
        await shard.signal("rollup", rollup(now_ms + 1, 0))
        view = await eventually(
            lambda: query_retrying(lambda: shard.query("cluster", "web")),
            lambda v: v["generation"] == now_ms + 1,
            what="web's clearing roll-up taken",
        )
        assert view["generation"] == now_ms + 1


async def test_an_operator_resets_a_generation_that_ran_ahead(
    dev_env: WorkflowEnvironment, capsys: pytest.CaptureFixture[str]
):
    client = dev_env.client
    address = client.service_client.config.target_host
    raw = gpu_fleet(1, {"r1": 2}, ["web"])
    shard = client.get_workflow_handle("shard-0")
    async with fleet_workers(client, raw):
        await start(client, raw)
        # A counter-driven operator, and one roll-up half an hour of unix ms ahead (inside the
        # bound: taken): every roll-up of its counter after it is stale.
        await shard.signal("rollup", rollup(5, 1))
        ahead = int(time.time() * 1000) + GENERATION_AHEAD_MS // 2
        await shard.signal("rollup", rollup(ahead, 2))
        await shard.signal("rollup", rollup(6, 0))
        await eventually(
            lambda: query_retrying(lambda: shard.query("cluster", "web")),
            lambda v: v["generation"] == ahead,
            what="the generation ahead taken, the counter's next one stale",
        )
        capsys.readouterr()

        # Refused, naming the field: a cluster the shard has no generation for.
        for bad, field in (({"cluster": "nobody"}, "cluster"), ({"cluster": "web", "reason": 7},
                           "reason"), (None, "expected one argument")):
            with pytest.raises(WorkflowUpdateFailedError) as err:
                args = [] if bad is None else [bad]
                await shard.execute_update("reset_generation", args=args)
            assert f"reset_generation: {field}" in str(err.value.cause), err.value.cause
        assert await run(["cluster", "nobody", "--reset-generation", "--address", address,
                          "--shard", "0"]) == 1

        code = await run(["cluster", "web", "--reset-generation", "--reason", "counter vs clock",
                          "--address", address])
        out = capsys.readouterr().out
        assert code == 0 and f"generation {ahead} forgotten by shard-0" in out, out
        status = await query_retrying(lambda: shard.query("status"))
        assert any("reset by an operator (counter vs clock)" in r for r in status["rejections"])
        # The needs stay in force until the next roll-up, which applies whatever its generation.
        view = await query_retrying(lambda: shard.query("cluster", "web"))
        assert view["generation"] == -1
        await shard.signal("rollup", rollup(7, 0))
        await eventually(
            lambda: query_retrying(lambda: shard.query("cluster", "web")),
            lambda v: v["generation"] == 7,
            what="the counter's roll-up taken again",
        )
