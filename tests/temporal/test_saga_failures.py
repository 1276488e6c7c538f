"""Failures injected at every step of a cross-shard preemption saga, and at its compensations,
on a real Temporal dev server with real workers: whatever fails, every machine of the fleet ends
up owned by exactly one shard, and the saga says which step failed and what it gave back.

The faults come from the saga's own activities (`shard_update`, `shard_machine_states`), run by a
shards worker built like `bigfleet worker`'s but over `FaultyShardClient`:

- refuse: the step is refused before anything happens on the shard (non-retryable);
- flaky: the step fails once before anything happens (retryable; the retry carries it out);
- lost reply: the shard carries the step out, then the reply is lost once (retryable; the retry
  is the same update id, which Temporal answers from the first, so nothing happens twice);
- lost reply across a run: the same, but the shard continues as new before the retry arrives,
  and Temporal deduplicates update ids within a run only;
- newer term: a newer coordinator's first instruction reaches both shards just before the step,
  which the shard's own fencing then refuses as stale (and the compensations with it).

The last two lost or doubled machines until the shards answered a replayed instruction with its
first outcome (kept across continue-as-new) and took back what they had released from a saga's
compensation whatever the term: `test_ownership_survives_a_new_run_and_a_newer_term`.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import pytest
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from activities.shards import ShardClientActivities
from activities.wire import (
    SHARD_TASK_QUEUE,
    Instruction,
    SagaInput,
    SagaResult,
    ShardCall,
    shard_workflow_id,
)
from tests.conftest import eventually, fleet_workers
from tests.temporal.test_temporal_coordinator import (
    ask,
    machines_of,
    on_shard,
    start,
    two_shard_fleet,
)
from workers.worker import build_workers, run_workers
from workflows.sagas import COORDINATOR_ID, TransferSagaWorkflow

FLEET = 40
MOVED = 4  # the most a shard of 40 gives at once (10%)
DONOR, RECEIVER = 0, 1
SHARDS = (DONOR, RECEIVER)
TERM = 3
SEQS = [1, 2, 3, 4]  # drain, release, adopt, one compensation: as the coordinator hands out

REFUSE, FLAKY, LOST = "refuse", "flaky", "lost reply"
LOST_ACROSS_RUNS, NEWER_TERM = "lost reply across a run", "newer term"
SLOW = "slow"  # carried out late, as after a worker's restart (tests/temporal/test_saga_race.py)
SLOW_SECONDS = 12.0
Faults = dict[tuple[str, int], str]  # (update, shard) -> fault; "machine_states" for the wait


class FaultyShardClient(ShardClientActivities):
    """The saga's shard activities, under the same names, with `faults` injected: a refusal
    every time, the others the first time only."""

    def __init__(self, client: Client, faults: Faults) -> None:
        super().__init__(client)
        self.faults = faults
        self.fired: set[tuple[str, int]] = set()
        self.calls: list[tuple[str, int, str | None]] = []  # (update, shard, fault)
        self.reached: list[str] = []  # update ids that got to a shard

    def _fault(self, call: ShardCall) -> str | None:
        key = (call.update, call.shard)
        fault = self.faults.get(key)
        if fault is not None and fault != REFUSE and key in self.fired:
            fault = None
        if fault is not None:
            self.fired.add(key)
        self.calls.append((call.update, call.shard, fault))
        if fault == REFUSE:
            raise ApplicationError(
                f"injected: shard {call.shard} refused {call.update}",
                type="InjectedRefusal",
                non_retryable=True,
            )
        if fault == FLAKY:
            raise ApplicationError(f"injected: {call.update} on shard {call.shard} failed")
        return fault

    @activity.defn(name="shard_update")
    async def update(self, call: ShardCall) -> Any:
        fault = self._fault(call)
        if fault == SLOW:
            await asyncio.sleep(SLOW_SECONDS)
        if fault == NEWER_TERM:
            for s in SHARDS:
                await self.client.get_workflow_handle(shard_workflow_id(s)).execute_update(
                    "adopt", Instruction(term=call.instruction.term + 1, seq=1)
                )
        shard = self.client.get_workflow_handle(shard_workflow_id(call.shard))
        run = (await shard.describe()).run_id if fault == LOST_ACROSS_RUNS else None
        self.reached.append(f"{call.update}-{call.instruction.term}-{call.instruction.seq}")
        result = await super().update(call)
        if fault == LOST_ACROSS_RUNS:
            while (await shard.describe()).run_id == run:
                await asyncio.sleep(0.2)
        if fault in (LOST, LOST_ACROSS_RUNS):
            raise ApplicationError(f"injected: the reply of {call.update} was lost")
        return result

    @activity.defn(name="shard_machine_states")
    async def machine_states(self, call: ShardCall) -> dict[str, str]:
        self._fault(call)
        return await super().machine_states(call)


@asynccontextmanager
async def faulty_fleet(
    client: Client, faults: Faults, **shard_overrides: Any
) -> AsyncIterator[tuple[FaultyShardClient, list[str]]]:
    """Two shards, no coordinator (nothing but the saga under test moves machines), all 40
    machines of shard 0 configured for a priority 100 000 research cluster; the "shards" role of
    `build_workers` with its saga activities faulty. Yields them and the fleet's machine ids."""
    raw = two_shard_fleet(FLEET)
    research = on_shard("research", DONOR)
    raw["clusters"] = [{"name": research}]
    rack = raw["providers"][0]["racks"][0]["rack"]
    made: list[FaultyShardClient] = []

    def faulty(c: Client) -> FaultyShardClient:
        made.append(FaultyShardClient(c, faults))
        return made[-1]

    async with fleet_workers(client, raw, roles=("transitions", "providers")) as sim:
        stop = asyncio.Event()
        workers = build_workers(client, sim, ("shards",), shard_client=faulty)
        task = asyncio.create_task(run_workers(workers, stop))
        try:
            await start(client, raw, **shard_overrides)
            await client.get_workflow_handle(COORDINATOR_ID).terminate("saga failure test")
            await ask(client, DONOR, research, 100_000, FLEET)
            await eventually(lambda: machines_of(client, DONOR), lambda m: m["CONFIGURED"] == FLEET)
            yield made[0], [f"dc-{rack}-{i:05d}" for i in range(FLEET)]
        finally:
            stop.set()
            await task


async def preempt(client: Client, ids: list[str]) -> SagaResult:
    """A cross-shard preemption of `ids` from shard 0 to shard 1, no grace, polling every 1 s."""
    return await client.execute_workflow(
        TransferSagaWorkflow.run,
        SagaInput(
            kind="preempt",
            donor=DONOR,
            receiver=RECEIVER,
            machine_ids=ids,
            term=TERM,
            seqs=SEQS,
            priority=1_000_000,
            grace_seconds=0,
            poll_seconds=1,
        ),
        id="saga-preempt",
        task_queue=SHARD_TASK_QUEUE,
        execution_timeout=timedelta(seconds=60),
    )


async def owners(client: Client, ids: list[str]) -> dict[str, list[int]]:
    """Each machine's owners: the shards on which it is anything but GONE."""
    states = {
        s: await client.get_workflow_handle(shard_workflow_id(s)).query("machine_states", ids)
        for s in SHARDS
    }
    return {mid: [s for s in SHARDS if states[s][mid] != "GONE"] for mid in ids}


async def assert_owned_once(client: Client, fleet: list[str], moved: list[str]) -> None:
    """Every machine of the fleet on exactly one shard: `moved` on the receiver, the rest on
    the donor; the shards' own counts agree."""
    owned = await owners(client, fleet)
    assert {mid: s for mid, s in owned.items() if s != [DONOR]} == {
        mid: [RECEIVER] for mid in moved
    }
    counts = {s: sum((await machines_of(client, s)).values()) for s in SHARDS}
    assert counts == {DONOR: FLEET - len(moved), RECEIVER: len(moved)}


async def applied_updates(client: Client) -> Counter[str]:
    """Update ids the shards accepted, from their histories (a deduplicated retry is not
    accepted twice)."""
    out: Counter[str] = Counter()
    for s in SHARDS:
        history = await client.get_workflow_handle(shard_workflow_id(s)).fetch_history()
        for e in history.events:
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
                attrs = e.workflow_execution_update_accepted_event_attributes
                out[attrs.accepted_request.meta.update_id] += 1
    return out


CASES = [
    # A step refused: the saga stops there and undoes what it did, in reverse; each undo here
    # also fails once (or loses its reply once) and is retried, carried out exactly once.
    # (Plain refusals of release, adopt and the drain's wait: test_temporal_coordinator.py.)
    pytest.param({("drain_for_transfer", DONOR): REFUSE}, "drain_for_transfer", id="refused-drain"),
    pytest.param(
        {("machine_states", DONOR): REFUSE, ("cancel_transfer", DONOR): FLAKY},
        "wait_drained",
        id="refused-wait-flaky-cancel",
    ),
    pytest.param(
        {("release", DONOR): REFUSE, ("cancel_transfer", DONOR): LOST},
        "release",
        id="refused-release-lost-cancel",
    ),
    pytest.param(
        {("adopt", RECEIVER): REFUSE, ("adopt", DONOR): LOST},
        "adopt",
        id="refused-adopt-lost-adopt-back",
    ),
    # A step failing once, or carried out with its reply lost: the saga succeeds, every machine
    # moved exactly once.
    pytest.param({("machine_states", DONOR): FLAKY}, None, id="flaky-wait"),
    pytest.param({("drain_for_transfer", DONOR): LOST}, None, id="lost-drain"),
    pytest.param({("release", DONOR): LOST}, None, id="lost-release"),
    pytest.param({("adopt", RECEIVER): LOST}, None, id="lost-adopt"),
]


@pytest.mark.parametrize(("faults", "failed_step"), CASES)
async def test_a_preemption_saga_conserves_ownership_whatever_step_fails(
    dev_env: WorkflowEnvironment, faults: Faults, failed_step: str | None
):
    client = dev_env.client
    async with faulty_fleet(client, faults) as (steps, fleet):
        ids = fleet[:MOVED]
        result = await preempt(client, ids)

        # Every injected fault was hit; a passing one (flaky, lost reply) was retried.
        assert steps.fired == set(faults)
        for (update, shard), fault in faults.items():
            tries = sum(1 for u, s, _ in steps.calls if (u, s) == (update, shard))
            assert tries >= 2 if fault != REFUSE else tries == 1, (update, shard, steps.calls)

        # The saga's account of itself.
        assert result.failed_step == failed_step, result
        if failed_step is None:
            assert sorted(result.moved) == ids and result.compensated == []
        else:
            assert result.moved == [] and "injected" in (result.error or "")
            undone = [] if failed_step == "drain_for_transfer" else ids
            assert sorted(result.compensated) == undone

        await assert_owned_once(client, fleet, ids if failed_step is None else [])

        # Nothing happened twice: every update that reached a shard was accepted once.
        applied = await applied_updates(client)
        assert set(applied) == set(steps.reached), applied
        assert max(applied.values(), default=1) == 1, applied

        if failed_step is not None:
            # The donor uses its machines again: all configured for research once more.
            await eventually(
                lambda: machines_of(client, DONOR),
                lambda m: m["CONFIGURED"] == FLEET,
                what="the donor's machines configured again",
            )
            await assert_owned_once(client, fleet, [])


@pytest.mark.parametrize(
    ("faults", "failed_step"),
    [
        # The retry reaches the shard's next run, where Temporal no longer deduplicates it:
        # the shard answers it with the outcome it kept.
        pytest.param({("release", DONOR): LOST_ACROSS_RUNS}, None, id="lost-release-across-runs"),
        pytest.param({("adopt", RECEIVER): LOST_ACROSS_RUNS}, None, id="lost-adopt-across-runs"),
        # A newer coordinator's term reaches both shards before the adopt: the receiver refuses
        # it as stale, and the donor still takes back what it released (a compensation).
        pytest.param({("adopt", RECEIVER): NEWER_TERM}, "adopt", id="newer-term-before-adopt"),
    ],
)
async def test_ownership_survives_a_new_run_and_a_newer_term(
    dev_env: WorkflowEnvironment, faults: Faults, failed_step: str | None
):
    """Whatever the saga's outcome, it returns one, and every machine is owned exactly once."""
    client = dev_env.client
    # A shard continues as new every 3 cycles: a lost reply's retry reaches the next run.
    async with faulty_fleet(client, faults, max_cycles_per_run=3) as (steps, fleet):
        ids = fleet[:MOVED]
        result = await preempt(client, ids)
        assert steps.fired == set(faults)
        assert result.failed_step == failed_step, result
        assert sorted(result.moved) == (ids if failed_step is None else []), result
        assert sorted(result.compensated) == ([] if failed_step is None else ids), result
        assert result.orphaned == []
        await assert_owned_once(client, fleet, result.moved)
