"""A shard keeps deciding while Temporal catches up (issue 32).

A loaded server takes seconds to start a workflow; a shard whose cycle waited for its starts
was blind for minutes during a burst. Here the shard's `start_transitions` activity is held
back (as such a server holds it) on a real dev server, and the shard must go on: cycles keep
coming, a new need is seen and planned, the backlog shows in `status`, higher bands go first
once the starts flow again, and demand that went away while its creates waited gets none.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from activities.starter import StarterActivities
from activities.wire import TransitionInput
from bigfleet.models import Transition, from_wire
from bigfleet.simulation.scenario import Scenario
from tests.conftest import eventually, fleet_workers
from tests.temporal.test_temporal_shard import listed, scheduled, status
from workers.worker import ensure_shards

T = Transition
CLUSTERS = ("low", "low2", "high", "gone")
HELD = ("CREATING", "IDLE", "CONFIGURING", "CONFIGURED")  # a machine decided for a need


class HeldStarter(StarterActivities):
    """Starts wait until `flowing` is set: a server too busy to take them."""

    flowing = asyncio.Event()

    @activity.defn(name="start_transitions")
    async def start_transitions(self, transitions: list[TransitionInput]) -> list[str]:
        await self.flowing.wait()
        return await super().start_transitions(transitions)


def fleet() -> Scenario:
    """A cloud of 40 machines (creates of a second), four clusters, a 1 s cycle."""
    line = {
        "instance_type": "m5.large",
        "zone": "us-east-1a",
        "capacity_type": "on-demand",
        "count": 40,
        "price_per_hour": 1,
    }
    return from_wire(
        Scenario,
        {
            "name": "backlog-test",
            "cycle_seconds": 1,
            "duration_seconds": 1,
            "shards": 1,
            "providers": [
                {
                    "name": "cloud",
                    "kind": "cloud",
                    "create_latency": [1.0, 1.0],
                    "configure_latency": 1.0,
                    "quota": [line],
                }
            ],
            "clusters": [{"name": c} for c in CLUSTERS],
        },
    )


async def configured(client: Client, count: int, timeout: float = 60) -> dict[str, Any]:
    """Shard 0's status once it holds `count` machines CONFIGURED."""
    return await eventually(
        lambda: status(client),
        lambda st: st["machines"].get("CONFIGURED", 0) == count,
        timeout=timeout,
        what=f"{count} machines configured",
    )


def rollup(cluster: str, generation: int, count: int, priority: int) -> dict[str, Any]:
    need = {"requirements": [], "priority": priority, "count": count}
    return {"cluster": cluster, "generation": generation, "needs": [need] if count else []}


async def send(client: Client, raw: dict[str, Any]) -> None:
    await client.get_workflow_handle("shard-0").signal("rollup", raw)


async def test_a_shard_decides_on_while_its_starts_wait_and_sends_the_higher_band_first(
    dev_env: WorkflowEnvironment,
):
    client = dev_env.client
    HeldStarter.flowing = asyncio.Event()
    async with fleet_workers(client, fleet(), starter=HeldStarter) as sim:
        # One start a cycle: the order they go in is the order the backlog keeps.
        await ensure_shards(client, sim.fleet, transition_poll_seconds=0.5, max_starts_per_cycle=1)
        await send(client, rollup("low", 1, 4, 1))
        first = await eventually(
            lambda: status(client),
            lambda st: st["queued_starts"] + st["in_flight"] >= 1,
            timeout=30,
            what="the first create decided",
        )
        # Behind a start that does not come back, more demand arrives, lowest band first.
        await send(client, rollup("low2", 1, 4, 1))
        await send(client, rollup("gone", 1, 4, 1))
        await asyncio.sleep(2)
        await send(client, rollup("high", 1, 4, 900_000))
        seen = await eventually(
            lambda: status(client),
            lambda st: st["cycles"] >= first["cycles"] + 5 and st["oldest_queued_seconds"] >= 2,
            timeout=30,
            what="five more cycles while the starts wait",
        )
        # Every need was seen and planned (its machines CREATING) while nothing could start.
        assert seen["queued_starts"] >= 3, seen
        assert seen["machines"].get("CREATING", 0) == 16, seen["machines"]
        assert not any(seen["shortfalls"]), seen["shortfalls"]
        # The demand of `gone` goes away before any of its creates could start.
        await send(client, rollup("gone", 2, 0, 1))
        await eventually(
            lambda: status(client),
            lambda st: st["machines"].get("CREATING", 0) == 12,
            timeout=30,
            what="the creates queued for demand that went away dropped",
        )
        HeldStarter.flowing.set()
        done = await eventually(
            lambda: status(client),
            lambda st: st["machines"].get("CONFIGURED", 0) == 12 and st["queued_starts"] == 0,
            timeout=90,
            what="the three clusters served once the starts flow",
        )
        creates_of_gone = await listed(
            client, 'BigFleetTransition = "create" AND BigFleetCluster = "gone"'
        )
        provider = sim.providers["cloud"]
    assert done["oldest_queued_seconds"] == 0
    assert creates_of_gone == []
    assert provider.started[T.CREATE] == 12  # (a machine each: no create for `gone`)
    # The creates went out one a cycle: `low` first (it was in flight), then `high` (the
    # higher band, queued last), then `low2`.
    order = [
        t.cluster
        for task in await scheduled(client, "start_transitions", list[TransitionInput])
        for batch in task
        for t in batch
        if t.transition is T.CREATE
    ]
    assert order == ["low", "high", "low2"], order


async def test_a_run_continued_from_another_decides_as_soon_as_its_state_is_back(
    dev_env: WorkflowEnvironment,
):
    """The last cycle of a run came before its state was written and read back, seconds on a
    loaded server: the next run decides at once, not a `cycle_seconds` later (issue 32). With
    an hour's cycle and a run of one cycle, cycles come only that way."""
    client = dev_env.client
    hourly = fleet().model_copy(update={"cycle_seconds": 3600})
    async with fleet_workers(client, hourly) as sim:
        # (The adopting run continues as new too: past `adopted_continue_bytes` of history.)
        await ensure_shards(client, sim.fleet, max_cycles_per_run=1, adopted_continue_bytes=1)
        await send(client, rollup("low", 1, 2, 1))
        seen = await eventually(
            lambda: status(client),
            lambda st: st["cycles"] >= 3 and sum(st["machines"].get(s, 0) for s in HELD) >= 2,
            timeout=60,
            what="three cycles of an hourly shard within a minute",
        )
    assert seen["cycles"] >= 3


def arrivals(events: list[Any], failed: Any, scheduled: dict[int, str]) -> set[str]:
    """What arrived while the failed workflow task ran (UnhandledCommand): the activities that
    closed and the signals and timers that came between its start and the next task's start,
    by name ("signal" or "timer" for those)."""
    at = events.index(failed)
    started = [i for i in range(at) if events[i].HasField("workflow_task_started_event_attributes")]
    start = started[-1]
    end = next(
        (i for i in range(at + 1, len(events))
         if events[i].HasField("workflow_task_started_event_attributes")),
        len(events),
    )  # fmt: skip
    names: set[str] = set()
    for e in events[start + 1 : end]:
        for attrs in (
            e.activity_task_completed_event_attributes,
            e.activity_task_failed_event_attributes,
            e.activity_task_timed_out_event_attributes,
        ):
            if attrs.scheduled_event_id:
                names.add(scheduled.get(attrs.scheduled_event_id, "?"))
        if e.HasField("workflow_execution_signaled_event_attributes"):
            names.add("signal")
        if e.HasField("timer_fired_event_attributes"):
            names.add("timer")
    return names


async def test_a_run_continues_as_new_with_nothing_out_and_loses_no_result(
    dev_env: WorkflowEnvironment,
):
    """A continue-as-new refused because something of the shard's came back during its task
    (UnhandledCommand) makes the worker replay the whole run. The cycle before it is quiet
    (it comes once what is out is back, and starts nothing): every run of a busy shard ends
    with no failed workflow task and nothing of its own out, and every machine it asked for
    is configured, its results carried from run to run. Its `status` shows the last cycles'
    ends across continues-as-new (what a benchmark measures intervals with)."""
    client = dev_env.client
    async with fleet_workers(client, fleet()) as sim:
        await ensure_shards(client, sim.fleet, max_cycles_per_run=2)
        await send(client, rollup("low", 1, 6, 1))
        await configured(client, 6, timeout=90)
        # `status` shows the last cycles across continues-as-new, the last run's too.
        began = (await client.get_workflow_handle("shard-0").describe()).start_time.timestamp()
        ends = (await status(client))["cycle_ends"]
        assert min(ends) < began < max(ends), (ends, began)
        runs = [wf async for wf in client.list_workflows('WorkflowId = "shard-0"')]
        continued = [w for w in runs if w.status is WorkflowExecutionStatus.CONTINUED_AS_NEW]
        assert len(continued) >= 2
        for wf in continued:
            handle = client.get_workflow_handle("shard-0", run_id=wf.run_id)
            events = [e async for e in handle.fetch_history_events()]
            scheduled = {
                e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name
                for e in events
                if e.HasField("activity_task_scheduled_event_attributes")
            }
            failed = [e for e in events if e.HasField("workflow_task_failed_event_attributes")]
            causes = [arrivals(events, e, scheduled) for e in failed]
            # Two things may still come back during the continue-as-new's short task, rarely,
            # and cost a replay, not a result: the operators' notices, which it does not wait
            # for (workflows/shard_carry.py `_settled`), and the quiet cycle's own timer, which
            # it cancels in that same task when it ended early (CI saw one UnhandledCommand in
            # ~6 runs; not reproduced here). Anything of the shard's own (a take, a report, a
            # chore) or a signal coming back then is a failure of the quiet cycle.
            allowed = {"notify_operators", "timer"}
            assert all(c and c <= allowed for c in causes), (causes, failed)
            closed = {
                attrs.scheduled_event_id
                for e in events
                for attrs in (
                    e.activity_task_completed_event_attributes,
                    e.activity_task_failed_event_attributes,
                    e.activity_task_timed_out_event_attributes,
                )
                if attrs.scheduled_event_id
            }
            out = {n for i, n in scheduled.items() if i not in closed} - {"notify_operators"}
            assert not out, f"run {wf.run_id} continued as new with {out} out"
