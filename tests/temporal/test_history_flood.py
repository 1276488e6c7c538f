"""Issue 30, defect 2: a shard flooded with oversized signals until the server ends it for the
size of its history, and a shard brought back from a snapshot older than machines it adopted
since, on a real Temporal dev server.

- The flood: every `rollup` of 1.5 MB is refused by the shard's guard, but each one is in its
  history; ~35 pass the default 50 MB limit and the server terminates the run. The revival
  resets the run to before the flood (the last completed workflow task below
  `RESET_HISTORY_BYTES`) instead of restarting it from its snapshot, which lost every machine
  adopted since: same machines before and after, and an audit finds none owned by nobody.
- The older snapshot: a shard restarted from a snapshot taken before a transfer saga gave it 4
  configured machines takes them back at revival (`provider_unowned`, before it decides
  again). Before, nobody owned them, the shard's need was short again, and the coordinator
  preempted 4 more machines of another cluster to refill it.
- A server whose history limit is lower (1 MB): the reset point is a fifth of it in.
- `bigfleet dev`'s payload bound takes BigFleet's largest payload and refuses a larger one.

The flood test and the older-snapshot test fail on the code before (the revival answered
"restarted", and shard 1 ended up with 4 other machines, preempted from training).
"""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from activities.shards import (
    RESET_HISTORY_BYTES,
    RESET_SHARE,
    DeadRun,
    _restart,
    reset_point,
    revive,
)
from activities.wire import ShardInput
from bigfleet.shard import Shard
from bigfleet.snapshot import restore_shard
from tests.conftest import TEMPORAL, eventually, fleet_workers, query_retrying
from tests.temporal.test_audit import NONE, audit, kinds
from tests.temporal.test_shard_restart import one_rack, revivals
from tests.temporal.test_temporal_coordinator import (
    ask,
    machines_of,
    on_shard,
    start,
    start_coordinator,
)
from workers.dev.server import BLOB_ERROR_BYTES, BLOB_LIMITS, throwaway_server
from workflows.sagas import COORDINATOR_ID
from workflows.shard import ROLLUPS_BYTES

FLOOD_BYTES = 1_500_000  # a signal's payload: under Temporal's 2 MB blob limit, over the guard's


def test_a_run_ended_for_its_size_is_reset_below_the_budget():
    MB = 1_000_000
    # (event id, history bytes and events up to it) of each completed workflow task.
    tasks = [(10, 1 * MB, 10), (20, 4 * MB, 20), (30, 9 * MB, 30), (40, 12 * MB, 40)]
    tasks.append((50, 49 * MB, 50))
    assert reset_point(tasks, 51 * MB, 60) == 30  # the last below 10 MB
    # A server with a lower limit: a fifth of where it ended the run.
    assert reset_point(tasks, 21 * MB, 60) == 20
    assert reset_point(tasks[2:], 21 * MB, 60) == 0  # none below: from its snapshot
    # Ended for its event count: a fifth of its events too.
    assert reset_point(tasks, 51 * MB, 100, by_count=True) == 20
    assert reset_point([], 51 * MB, 60) == 0


async def owners(client: Client, ids: list[str]) -> dict[str, list[int]]:
    """Each machine's owners: the running shards on which it is anything but GONE."""
    held = {
        s: await query_retrying(
            lambda s=s: client.get_workflow_handle(f"shard-{s}").query("machine_states", ids)
        )
        for s in (0, 1)
    }
    return {mid: [s for s in (0, 1) if held[s][mid] != "GONE"] for mid in ids}


async def drains_of(client: Client, shard: int) -> int:
    query = f'BigFleetTransition = "drain" AND BigFleetShard = "{shard}"'
    return len([wf async for wf in client.list_workflows(query)])


async def flood(client: Client, shard: int) -> int:
    """Roll-ups of 1.5 MB to `shard-N`, as fast as they go, until the server refuses them (it
    ended the run): how many it took. Each is refused by the shard, and each is in its
    history. (Sent one at a time, each refused before the next, they never get there: Temporal
    suggests a continue-as-new past 4 MB and the shard's next cycle takes it.)"""
    handle = client.get_workflow_handle(f"shard-{shard}")
    for i in range(60):
        try:
            await handle.signal("rollup", {"cluster": f"flood-{i}", "pad": "x" * FLOOD_BYTES})
        except RPCError:
            return i
    raise AssertionError("60 signals of 1.5 MB and the server still takes more")


async def test_a_shard_flooded_past_the_history_limit_is_reset_to_before_the_flood(
    dev_env: WorkflowEnvironment, capsys: pytest.CaptureFixture[str]
):
    client = dev_env.client
    address = client.service_client.config.target_host
    raw, ids = one_rack()  # 40 machines, all shard 0's by the rule; a cluster on shard 1
    cluster = raw["clusters"][0]["name"]
    shard1 = client.get_workflow_handle("shard-1")
    async with fleet_workers(client, raw):
        # The coordinator does not revive a silent shard within the test: it is revived by
        # hand below, as the coordinator's `revive_shard` would.
        await start_coordinator(client, missing_after_seconds=600)
        await start(client, raw)
        await ask(client, 1, cluster, 1_000_000, 4)  # 4 of shard 0's machines move to shard 1
        await eventually(
            lambda: machines_of(client, 1), lambda m: m["CONFIGURED"] == 4, timeout=60
        )
        before = {s: await machines_of(client, s) for s in (0, 1)}
        status = await query_retrying(lambda: shard1.query("status"))
        dead = (await shard1.describe()).run_id

        sent = await flood(client, 1)
        ended = await eventually(
            shard1.describe,
            lambda d: d.status == WorkflowExecutionStatus.TERMINATED,
            timeout=30,
            what="shard-1 ended by the server",
        )
        assert ended.run_id == dead and sent >= 30
        reasons = [
            e.workflow_execution_terminated_event_attributes.reason
            async for e in shard1.fetch_history_events()
            if e.HasField("workflow_execution_terminated_event_attributes")
        ]
        assert reasons and "exceeds limit" in reasons[0], reasons
        run = await DeadRun.read(client, "shard-1", ended)
        # Reset to a task below RESET_HISTORY_BYTES (here the last one: in a burst the shard
        # completes no task until the end; `test_a_run_ended_for_its_size_is_reset_below_the_
        # budget` has one past it).
        assert run.too_long and 0 < run.reset_to <= run.last_task

        assert await revive(client, 1) == "reset"
        await eventually(
            lambda: shard1.query("status"),
            lambda s: s["epoch"] > status["epoch"] and s["cycles"] > status["cycles"] + 2,
            timeout=30,
            what="shard-1 reset, revived and cycling again",
        )
        desc = await shard1.describe()
        assert desc.run_id != dead and desc.status == WorkflowExecutionStatus.RUNNING
        # Reset to before the flood: the new run's history is far below the limit.
        assert desc.raw_description.workflow_execution_info.history_size_bytes < (
            RESET_HISTORY_BYTES + 2 * FLOOD_BYTES
        )
        # The same machines on each shard, and none owned by nobody (nor by two).
        assert {s: await machines_of(client, s) for s in (0, 1)} == before
        assert all(len(o) == 1 for o in (await owners(client, ids)).values())
        code, out = await audit(capsys, address)
        assert code == 0 and kinds(out["report"]) == NONE, out["report"]


async def first_run_holding(client: Client, cluster: str, after: str) -> tuple[str, ShardInput]:
    """The first run of shard 1 after run `after` whose input (the snapshot its predecessor
    handed over) holds `cluster`'s need and no machine: (run id, input)."""
    handle = client.get_workflow_handle("shard-1")
    while True:
        desc = await handle.describe()
        if desc.run_id != after:
            async for e in client.get_workflow_handle(
                "shard-1", run_id=desc.run_id
            ).fetch_history_events():
                attrs = e.workflow_execution_started_event_attributes
                [inp] = await client.data_converter.decode(list(attrs.input.payloads), [ShardInput])
                break
            assert inp.state is not None  # (a small shard's snapshot is inline)
            shard = Shard(1)
            restore_shard(inp.state, shard)
            assert shard.needs.clusters() == [cluster]
            assert len(shard.inventory) == 0, "the saga's adopt came before the snapshot"
            return desc.run_id, inp
        await asyncio.sleep(0.2)


async def test_a_shard_restarted_from_an_older_snapshot_takes_back_its_configured_machines(
    dev_env: WorkflowEnvironment, capsys: pytest.CaptureFixture[str]
):
    client = dev_env.client
    address = client.service_client.config.target_host
    raw, ids = one_rack()  # 40 machines, all shard 0's by the rule
    serving, training = raw["clusters"][0]["name"], on_shard("training", 0)
    raw["clusters"].append({"name": training})
    shard1 = client.get_workflow_handle("shard-1")
    async with fleet_workers(client, raw):
        await start_coordinator(client, missing_after_seconds=600)
        # A snapshot every 3 cycles (~3 s).
        await start(client, raw, max_cycles_per_run=3)
        await ask(client, 0, training, 50, 40)
        await eventually(
            lambda: machines_of(client, 0), lambda m: m["CONFIGURED"] == 40, timeout=60
        )
        # Serving (1 000 000 on shard 1) takes 4 of training's (50 on shard 0) by a
        # cross-shard preemption: a 10 s grace, so shard 1 hands over a snapshot with the need
        # and no machine first — the state it is restarted from below.
        await ask(client, 1, serving, 1_000_000, 4)
        await eventually(
            lambda: shard1.query("cluster", serving), lambda v: v["needs"], what="need taken"
        )
        running = (await shard1.describe()).run_id  # (holds the need, as its successors do)
        old_run, old_input = await first_run_holding(client, serving, running)
        await eventually(
            lambda: machines_of(client, 1), lambda m: m["CONFIGURED"] == 4, timeout=60
        )
        moved = sorted(m for m, o in (await owners(client, ids)).items() if o == [1])
        assert len(moved) == 4
        # The saga is over and shard 1 reported since: the coordinator has them in no saga.
        coordinator = client.get_workflow_handle(COORDINATOR_ID)
        await eventually(lambda: coordinator.query("saga_machines", moved), lambda m: m == [])
        drains = await drains_of(client, 0)

        # Shard 1 vanishes and comes back from the older snapshot (as `_restart` does with
        # its latest run's input when that predates the saga).
        dead = (await shard1.describe()).run_id
        await shard1.terminate("test: the shard workflow vanished")
        gone = DeadRun(wid="shard-1", run_id=dead, status="terminated", start=old_input)
        await _restart(client, 1, gone)
        await eventually(
            shard1.describe,
            lambda d: d.run_id not in (dead, old_run)
            and d.status == WorkflowExecutionStatus.RUNNING,
            timeout=20,
        )
        # It takes them back before deciding: owned by it, none by nobody.
        after = await eventually(
            lambda: machines_of(client, 1),
            lambda m: m["CONFIGURED"] == 4,
            timeout=30,
            what="shard 1 holding its 4 configured machines again",
        )
        assert sum(after.values()) == 4
        owned = await owners(client, ids)
        assert sorted(m for m, o in owned.items() if o == [1]) == moved
        assert all(len(o) == 1 for o in owned.values())
        code, out = await audit(capsys, address)
        assert code == 0 and kinds(out["report"]) == NONE, out["report"]
        # Nothing to refill: several coordinator rounds (every 2 s) later, no new preemption.
        await asyncio.sleep(8)
        assert await drains_of(client, 0) == drains
        assert (await machines_of(client, 0))["CONFIGURED"] == 36
        assert (await machines_of(client, 1))["CONFIGURED"] == 4


async def test_a_shard_ended_by_a_lower_history_limit_is_reset_below_a_fifth_of_it():
    """A server with a 1 MB history limit: junk roll-ups of 100 KB (refused by the shard, each
    in its history) end shard 0's run. It is reset, not restarted from its snapshot (its
    first run's input here: from scratch), to a task below a fifth of the history the server
    ended it at — the limit is lower than RESET_HISTORY_BYTES, and a reset to its last task
    would be ended again at once."""
    limits = [
        "--dynamic-config-value",
        "limit.historySize.error=1000000",
        "--dynamic-config-value",
        "limit.historySize.warn=500000",
    ]
    async with await throwaway_server(TEMPORAL, limits) as env:
        client = env.client
        raw, ids = one_rack()
        shard0 = client.get_workflow_handle("shard-0")
        async with fleet_workers(client, raw):
            await start_coordinator(client, missing_after_seconds=3)
            await start(client, raw)
            before = await eventually(
                lambda: shard0.query("status"), lambda s: sum(s["machines"].values()) == 40
            )
            dead = (await shard0.describe()).run_id
            for i in range(12):  # the server refuses signals once the history is too long
                try:
                    await shard0.signal("rollup", {"cluster": f"junk-{i}", "pad": "x" * 100_000})
                except RPCError as err:
                    assert "exceeds limit" in str(err) or "completed" in str(err)
                    break
            # The coordinator revives it (its reports stopped 3 s ago).
            await eventually(lambda: revivals(client), lambda r: r == ["reset"], timeout=40)
            back = await shard0.describe()
            assert back.run_id != dead
            size = back.raw_description.workflow_execution_info.history_size_bytes
            assert size < 1_000_000 // RESET_SHARE + 100_000, size
            await eventually(
                lambda: shard0.query("status"),
                lambda s: s["epoch"] > before["epoch"] and s["cycles"] > before["cycles"],
                what="the reset shard 0 cycling again",
            )
            assert sum((await machines_of(client, 0)).values()) == 40
            assert all(o == [0] for o in (await owners(client, ids)).values())


async def test_bigfleet_dev_blob_limit_takes_its_largest_payload_and_refuses_more():
    """`bigfleet dev`'s server bound (BLOB_LIMITS): a `rollups` signal as large as a shard
    accepts goes in; one over the limit is refused by the server and never enters the
    history. (tests/workers/test_blob_limits.py checks the arithmetic.)"""
    async with await throwaway_server(TEMPORAL, BLOB_LIMITS) as env:
        handle = await env.client.start_workflow("Nothing", id="nothing", task_queue="nobody")
        largest = [{"cluster": "c", "pad": "x" * (ROLLUPS_BYTES - 40)}]
        [payload] = await env.client.data_converter.encode([largest])
        assert ROLLUPS_BYTES - 100 < len(payload.data) <= ROLLUPS_BYTES  # what the guard takes
        await handle.signal("rollups", largest)
        with pytest.raises(RPCError, match="exceeds limit"):
            await handle.signal("rollups", [{"cluster": "c", "pad": "x" * BLOB_ERROR_BYTES}])
        signals = [
            e async for e in handle.fetch_history_events()
            if e.HasField("workflow_execution_signaled_event_attributes")
        ]
        assert len(signals) == 1
