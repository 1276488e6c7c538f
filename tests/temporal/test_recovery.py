"""Recovery never loops (issue 9): a shard wedged by an input its code cannot take (its
workflow task fails on every attempt) is seen as wedged, and the revival does not replay the
input that broke it; a revived run that dies again comes back from its snapshot instead of
being reset once more, and if the snapshot itself holds what breaks it, from the snapshot
without its roll-ups. The bug is planted (tests/temporal/poisoned.py): input checks make the real
handlers unbreakable by payload, but not every future bug."""

from __future__ import annotations

import pytest
from temporalio.testing import WorkflowEnvironment

import workers.worker as worker_module
from activities.shards import revive, wedged
from tests.conftest import eventually, fleet_workers
from tests.temporal.poisoned import POISON, PoisonedShard
from tests.temporal.test_temporal_coordinator import gpu_fleet, start

NEED = {"requirements": [], "priority": 1000, "count": 2}


@pytest.fixture
def poisoned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        worker_module,
        "SHARD_WORKFLOWS",
        [PoisonedShard, *worker_module.SHARD_WORKFLOWS[1:]],
    )


async def test_a_wedged_shard_is_revived_without_the_input_that_broke_it(
    dev_env: WorkflowEnvironment, poisoned: None
):
    client = dev_env.client
    raw_fleet = gpu_fleet(1, {"r1": 4}, ["web"])
    shard = client.get_workflow_handle("shard-0")
    async with fleet_workers(client, raw_fleet):
        # (A failing task is reported once; its later attempts each wait out the task
        # timeout: with the default minute, wedging twice alone took two minutes here.)
        await start(client, raw_fleet, max_cycles_per_run=3, task_timeout_seconds=10)
        await shard.signal("rollup", {"cluster": "web", "generation": 1, "needs": [NEED]})
        before = await eventually(
            lambda: shard.query("status"),
            lambda s: s["machines"]["CONFIGURED"] == 2,
            timeout=60,
            what="web served",
        )
        assert await revive(client, 0) == "running"  # healthy: nothing to do

        # The poison is taken without trouble; the run after it, started from the snapshot
        # that holds it, breaks on its first cycle.
        await shard.signal("rollup", {"cluster": POISON, "generation": 1, "needs": [NEED]})
        why = await eventually(
            lambda: wedged(client, "shard-0"), bool, timeout=120, what="the shard wedged"
        )
        assert "planted bug" in why and "attempt" in why

        # Each rung once. It broke in its first workflow task (a continued run decides at
        # once), so there is no good task to reset it to: restarted from the snapshot its run
        # started from, which holds the poison ...
        assert await revive(client, 0) == "restarted"
        await eventually(lambda: wedged(client, "shard-0"), bool, timeout=120, what="restart")
        # ... that run reset to its last good task, without the signals after it ...
        assert await revive(client, 0) == "reset"
        await eventually(lambda: wedged(client, "shard-0"), bool, timeout=120, what="the reset")
        # ... and restarted from the snapshot once more, without any roll-up.
        assert await revive(client, 0) == "restarted"
        after = await eventually(
            lambda: shard.query("status"),
            lambda s: s["epoch"] != before["epoch"] and s["cycles"] > before["cycles"],
            timeout=60,
            what="the revived shard cycling under a new epoch",
        )
        assert await wedged(client, "shard-0") is None
        assert after["clusters"] == []  # every roll-up forgotten: the clusters are heard anew
        assert after["machines"]["CONFIGURED"] == 2  # nothing lost
        later = await eventually(
            lambda: shard.query("status"),
            lambda s: s["cycles"] > after["cycles"] + 3,
            what="cycles after the revival",
        )
        # web, not heard from since, keeps its machines while it may be silent
        assert later["machines"]["CONFIGURED"] == 2 and later["machines"]["DRAINING"] == 0
        await shard.signal("rollup", {"cluster": "web", "generation": 1, "needs": [NEED]})
        heard = await eventually(
            lambda: shard.query("status"),
            lambda s: s["clusters"] == ["web"] and s["cycles"] > later["cycles"] + 3,
            what="web heard again",
        )
        assert heard["machines"]["CONFIGURED"] == 2  # served by the machines it kept
        assert await wedged(client, "shard-0") is None
