"""A coordinator term is taken only from the coordinator that runs (issue 30, defect 1).

Anyone who can write to the Temporal namespace can send a shard an instruction with any term.
A term from the near future used to be taken on trust (a compensation such as
`cancel_transfer` from any term, moving nothing, moved the shard's term), and every saga of the
real coordinator was then refused as stale on that shard: a priority-1 000 000 need stayed short
beside idle GPUs on the other shard until the coordinator was restarted.
"""

from __future__ import annotations

import time

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from activities.wire import Instruction
from tests.conftest import eventually, fleet_workers, query_retrying
from tests.temporal.test_temporal_coordinator import (
    ask,
    machines_of,
    start,
    start_coordinator,
    two_shard_fleet,
    without_coordinator,
)
from workflows.sagas import COORDINATOR_ID

DONOR, RECEIVER = 0, 1  # two_shard_fleet: the rack is shard 0's, the cluster shard 1's


async def coordinator_term(client) -> int:
    handle = client.get_workflow_handle(COORDINATOR_ID)
    return int((await query_retrying(lambda: handle.query("status")))["term"])


async def shard_term(client, shard: int) -> int:
    handle = client.get_workflow_handle(f"shard-{shard}")
    return int((await query_retrying(lambda: handle.query("status")))["coordinator_term"])


async def test_a_forged_term_does_not_lock_the_coordinator_out(dev_env: WorkflowEnvironment):
    client = dev_env.client
    raw = two_shard_fleet()
    cluster = raw["clusters"][0]["name"]
    async with fleet_workers(client, raw):
        await start_coordinator(client)
        await start(client, raw)
        await eventually(lambda: machines_of(client, DONOR), lambda m: m["SPECULATIVE"] == 40)
        real = await coordinator_term(client)
        receiver = client.get_workflow_handle(f"shard-{RECEIVER}")
        before = await shard_term(client, RECEIVER)
        forged = int(time.time() * 1000) + 240_000  # within the 5-minute clock tolerance

        # The reproduction: a no-op compensation with the forged term. It may be answered (it
        # gives back nothing), but it must move no term.
        await receiver.execute_update(
            "cancel_transfer", Instruction(term=forged, seq=1, machine_ids=[])
        )
        assert await shard_term(client, RECEIVER) == before
        # An instruction that would take the term: refused, since the running coordinator's
        # term is another, and refused on sight when sent again.
        for seq in (2, 3):
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await receiver.execute_update("adopt", Instruction(term=forged, seq=seq))
            assert "not the running coordinator's term" in str(refused.value.cause)
        assert await shard_term(client, RECEIVER) == before
        assert sum((await machines_of(client, RECEIVER)).values()) == 0

        # The real coordinator still moves machines to the receiver: its need is served from
        # the donor's rack, and the receiver now carries the real term.
        await ask(client, RECEIVER, cluster, 1_000_000, 4)
        served = await eventually(
            lambda: machines_of(client, RECEIVER), lambda m: m.get("CONFIGURED") == 4, timeout=90
        )
        assert served["CONFIGURED"] == 4
        assert await shard_term(client, RECEIVER) == real
        assert sum((await machines_of(client, DONOR)).values()) == 36


async def test_without_a_coordinator_only_past_terms_are_taken(dev_env: WorkflowEnvironment):
    """No coordinator runs: a term not after the shard's clock is taken (a coordinator started
    later has a larger one), a term from the near future is not."""
    client = dev_env.client
    raw = two_shard_fleet()
    async with fleet_workers(client, raw):
        await start(client, raw)
        await without_coordinator(client)
        shard = client.get_workflow_handle(f"shard-{DONOR}")
        await eventually(lambda: machines_of(client, DONOR), lambda m: m["SPECULATIVE"] == 40)
        ahead = int(time.time() * 1000) + 120_000
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await shard.execute_update("adopt", Instruction(term=ahead, seq=1))
        assert "not the running coordinator's term" in str(refused.value.cause)
        assert await shard_term(client, DONOR) == 0
        past = int(time.time() * 1000) - 60_000
        assert await shard.execute_update("adopt", Instruction(term=past, seq=1)) == 0
        assert await shard_term(client, DONOR) == past
