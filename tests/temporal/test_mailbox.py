"""A shard's mailbox (workflows/mailbox.py): transitions leave their results there and the shard
takes them each cycle, so a shard's continue-as-new never races a stream of result signals.

On a real dev server: results reach the shard through the mailbox and nothing is signalled to
the shard itself; the mailbox refuses what is malformed or too much, holds no more than its
bound, and keeps what it holds across its own continue-as-new."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from activities.mailbox import MailboxActivities
from activities.wire import SHARD_TASK_QUEUE, MailboxInput, MailboxTake, TransitionResult
from bigfleet.inputs import json_size
from bigfleet.models import Transition, from_wire
from bigfleet.policy import Policy
from tests.conftest import eventually, fleet_workers
from tests.temporal.test_shard_backlog import configured, fleet, rollup, send
from workers.worker import ensure_shards
from workflows.mailbox import PENDING_BYTES, RUN_EVENTS

MAILBOX = "shard-7-mailbox"  # (no shard 7 runs: the test takes from it itself)


def result(i: int) -> dict:
    return {"transition": "delete", "machines": [], "unavailable": [f"m-{i:05d}"]}


async def kinds(client: Client, workflow_id: str, what: str) -> list[str]:
    """The names of the signals or activities (`what`) in a workflow's current run."""
    out = []
    async for e in client.get_workflow_handle(workflow_id).fetch_history_events():
        if what == "signal" and e.HasField("workflow_execution_signaled_event_attributes"):
            out.append(e.workflow_execution_signaled_event_attributes.signal_name)
        if what == "activity" and e.HasField("activity_task_scheduled_event_attributes"):
            out.append(e.activity_task_scheduled_event_attributes.activity_type.name)
    return out


async def test_results_reach_the_shard_through_its_mailbox(dev_env: WorkflowEnvironment):
    client = dev_env.client
    async with fleet_workers(client, fleet()) as sim:
        await ensure_shards(client, sim.fleet)
        await send(client, rollup("low", 1, 3, 1))
        await configured(client, 3)
        to_shard = await kinds(client, "shard-0", "signal")
        to_mailbox = await kinds(client, "shard-0-mailbox", "signal")
        taken = await kinds(client, "shard-0", "activity")
    assert "transition_done" not in to_shard
    assert to_mailbox.count("transition_done") >= 2  # (the creates and the configures)
    assert "mailbox_take_after" in taken


async def test_a_take_whose_answer_is_lost_loses_no_result(dev_env: WorkflowEnvironment):
    """Someone takes from shard 0's mailbox all along and throws the answers away (as a worker
    killed while its take came back would): the shard still gets every result, and the
    machines it creates are configured."""
    client = dev_env.client
    takes = MailboxActivities(client)
    async with fleet_workers(client, fleet()) as sim:
        await ensure_shards(client, sim.fleet)
        stolen: list[TransitionResult] = []
        done = asyncio.Event()

        async def steal() -> None:
            while not done.is_set():
                stolen.extend((await takes.take_after(MailboxTake(shard=0))).results)
                await asyncio.sleep(0.05)

        thief = asyncio.create_task(steal())
        try:
            await send(client, rollup("low", 1, 3, 1))
            await configured(client, 3)
        finally:
            done.set()
            await thief
    assert {r.transition for r in stolen} >= {Transition.CREATE, Transition.CONFIGURE}


async def test_machines_whose_results_are_all_lost_are_read_back_past_their_timeout(
    dev_env: WorkflowEnvironment,
):
    """Someone empties shard 0's mailbox with the destructive `take` of runs begun before
    acked takes: every result is lost. The shard fails each machine when its transition's
    time is up, then reads it back from its provider (`unstick_seconds` later), and gets its
    machines configured all the same."""
    client = dev_env.client
    takes = MailboxActivities(client)
    policy = {"transition_timeout_seconds": {"CREATING": 8, "CONFIGURING": 8}}
    lossy = fleet().model_copy(update={"policy": from_wire(Policy, policy)})
    async with fleet_workers(client, lossy) as sim:
        await ensure_shards(
            client, sim.fleet, reconcile_seconds=2.0, transition_poll_seconds=0.5,
            unstick_seconds=2.0,
        )  # fmt: skip
        eaten: list[TransitionResult] = []
        done = asyncio.Event()

        async def eat() -> None:
            while not done.is_set():
                eaten.extend(await takes.take(0))
                await asyncio.sleep(0.05)

        thief = asyncio.create_task(eat())
        try:
            await send(client, rollup("low", 1, 3, 1))
            await configured(client, 3, timeout=120)
        finally:
            done.set()
            await thief
        history = await kinds(client, "shard-0", "activity")
    assert {r.transition for r in eaten} >= {Transition.CREATE, Transition.CONFIGURE}
    assert "provider_get" in history


async def test_the_mailbox_answers_a_take_again_until_it_is_told_it_was_received(
    dev_env: WorkflowEnvironment,
):
    client = dev_env.client
    takes = MailboxActivities(client)
    async with fleet_workers(client, fleet(), roles=["shards"]):
        handle = await client.start_workflow(
            "ShardMailbox", MailboxInput(shard=9), id="shard-9-mailbox",
            task_queue=SHARD_TASK_QUEUE,
        )  # fmt: skip
        for i in range(5):
            await handle.signal("transition_done", result(i))
        first = await takes.take_after(MailboxTake(shard=9))
        again = await takes.take_after(MailboxTake(shard=9))  # (the first answer was lost)
        assert again == first and first.first == 0 and first.chain
        assert [r.unavailable[0] for r in first.results] == [f"m-{i:05d}" for i in range(5)]
        # Another mailbox's numbers let nothing go; its own do, up to the number given.
        other = await takes.take_after(MailboxTake(shard=9, after=3, chain="another"))
        assert other == first
        part = await takes.take_after(MailboxTake(shard=9, after=2, chain=first.chain))
        assert part.first == 3 and [r.unavailable[0] for r in part.results] == [
            "m-00003", "m-00004",
        ]  # fmt: skip
        await handle.signal("transition_done", result(5))
        rest = await takes.take_after(MailboxTake(shard=9, after=4, chain=first.chain))
        assert rest.first == 5 and [r.unavailable[0] for r in rest.results] == ["m-00005"]
        assert (await handle.query("held_results"))["results"] == 1
        # Malformed takes are refused, naming what is wrong, and let nothing go.
        for bad in ("an argument", {"shard": 9, "after": "all"}, {"shard": 9, "after": -5}):
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await handle.execute_update("take_after", bad)
            assert "take_after" in str(refused.value.cause)
        done = await takes.take_after(MailboxTake(shard=9, after=5, chain=first.chain))
        assert done.results == [] and done.first == 6
        assert await handle.query("held_results") == {"results": 0, "bytes": 0}


async def test_the_mailbox_refuses_bad_input_and_holds_no_more_than_its_bound(
    dev_env: WorkflowEnvironment,
):
    client = dev_env.client
    async with fleet_workers(client, fleet(), roles=["shards"]):
        handle = await client.start_workflow(
            "ShardMailbox", MailboxInput(shard=7), id=MAILBOX, task_queue=SHARD_TASK_QUEUE
        )
        # Malformed: no argument, the wrong type, too many machines.
        await handle.signal("transition_done")
        await handle.signal("transition_done", "not a result")
        huge = {**result(0), "unavailable": [], "page": {"shapes": [{}], "rows": [["x"]] * 65}}
        await handle.signal("transition_done", huge)
        # Too much: results of ~100 KB each until the bound is passed.
        big = [
            {**result(i), "unavailable": [f"m-{i:05d}-{'x' * 100_000}"]}
            for i in range(PENDING_BYTES // 100_000 + 3)
        ]
        for raw in big:
            await handle.signal("transition_done", raw)
        refused = await eventually(
            lambda: handle.query("rejections"),
            lambda r: r["total"] >= 6,
            what="every malformed or excess result refused",
        )
        held = await handle.query("held_results")
        size = json_size(from_wire(TransitionResult, big[0]).model_dump(mode="json"))
        assert held["bytes"] <= PENDING_BYTES < held["bytes"] + size  # (full: one more is not)
        assert refused["total"] == 3 + (len(big) - held["results"])
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update("take", "an argument")
        # The shard's take gets what was held, oldest first, and the mailbox is empty after.
        taken = await MailboxActivities(client).take(7)
        assert [r.unavailable[0][:7] for r in taken] == [
            f"m-{i:05d}" for i in range(held["results"])
        ]
        assert await handle.query("held_results") == {"results": 0, "bytes": 0}


async def test_the_mailbox_keeps_what_it_holds_across_its_continue_as_new(
    dev_env: WorkflowEnvironment,
):
    client = dev_env.client
    async with fleet_workers(client, fleet(), roles=["shards"]):
        await client.start_workflow(
            "ShardMailbox", MailboxInput(shard=8), id="shard-8-mailbox",
            task_queue=SHARD_TASK_QUEUE,
        )  # fmt: skip
        mailbox = client.get_workflow_handle("shard-8-mailbox")  # (whichever run is current)
        first = (await mailbox.describe()).run_id
        sent = RUN_EVENTS + 100  # (a signal is an event: RUN_EVENTS of them at least)
        for at in range(0, sent, 100):
            await asyncio.gather(
                *(mailbox.signal("transition_done", result(i)) for i in range(at, at + 100))
            )
        await eventually(
            mailbox.describe, lambda d: d.run_id != first, timeout=60, what="a new run"
        )
        taken = await MailboxActivities(client).take(8)
        # What the next run holds is numbered on from where the first left off.
        await mailbox.signal("transition_done", result(sent))
        after = await MailboxActivities(client).take_after(MailboxTake(shard=8))
    assert after.first == sent and after.chain == first
    assert [r.unavailable[0] for r in after.results] == [f"m-{sent:05d}"]
    assert sorted(r.unavailable[0] for r in taken) == [f"m-{i:05d}" for i in range(sent)]
    assert {r.transition for r in taken} == {Transition.DELETE}
    assert all(isinstance(r, TransitionResult) for r in taken)
