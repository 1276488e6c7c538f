"""MachineTransitionWorkflow driven directly: forced drains, escalation, a worker dying mid-way,
and a batched create. Each test runs its own server and the transition + provider workers."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from activities.starter import start_transition
from bigfleet.models import BootstrapBlob, FencingToken, ListFilter, MachineState, Transition
from tests.conftest import eventually, fleet_workers
from workers.worker import SimulatedFleet, build_workers, run_workers
from workflows.transition import MachineTransitionWorkflow
from workflows.types import (
    TransitionInput,
    TransitionResult,
)

S = MachineState
T = Transition
ROLES = ["transitions", "providers"]
HOUR = 3600.0
EPOCH = 1
_seq = itertools.count(1)


def fleet(**provider: Any) -> dict[str, Any]:
    """One bare-metal provider `dc` with a rack of 16 GPU machines, and cluster `a`."""
    return {
        "name": "transitions",
        "duration_seconds": 1,
        "providers": [
            {
                "name": "dc",
                "kind": "bare-metal",
                "racks": [
                    {"rack": "r1", "zone": "ams-1", "instance_type": "gpu-8xh100", "count": 16}
                ],
                **provider,
            }
        ],
        "clusters": [{"name": "a"}],
    }


def token() -> FencingToken:
    return FencingToken(shard_id=0, shard_epoch=EPOCH, seq=next(_seq))


def transition(t: Transition, machine_ids: list[str], **fields: Any) -> TransitionInput:
    return TransitionInput(
        shard=0,
        transition=t,
        machine_ids=machine_ids,
        provider="dc",
        capacity_type="bare-metal",
        token=token(),
        **fields,
    )


async def start(client: Client, t: TransitionInput) -> WorkflowHandle[Any, TransitionResult]:
    """Start a transition workflow as the shard's starter activity does (same id, attributes)."""
    return await start_transition(client, t)


def machine_ids(sim: SimulatedFleet, n: int) -> list[str]:
    return sorted(m.id for m in sim.providers["dc"].list(ListFilter()))[:n]


def configure_directly(sim: SimulatedFleet, ids: list[str], cluster: str = "a") -> None:
    """Bring machines to CONFIGURED on the provider itself, on its clock before the workflows'
    time (the first workflow call catches the provider's clock up to workflow time)."""
    p, clock = sim.providers["dc"], sim.clocks["dc"]
    p.create(ids, token())
    clock.now += 10
    for mid in ids:
        p.configure(mid, BootstrapBlob(user_data=b"#!boot", ttl_seconds=3600), cluster, token())
    clock.now += 1000
    assert {m.state for m in (p.get(mid) for mid in ids)} == {S.CONFIGURED}


def spy_drains(sim: SimulatedFleet) -> list[dict[str, Any]]:
    """Record every drain call the provider receives (grace and force)."""
    p = sim.providers["dc"]
    seen: list[dict[str, Any]] = []
    drain = p.drain

    def recording(machine_id, grace_seconds, token, force=False):
        seen.append({"machine": machine_id, "grace": grace_seconds, "force": force})
        return drain(machine_id, grace_seconds, token, force=force)

    p.drain = recording
    return seen


async def elapsed(handle: WorkflowHandle) -> float:
    """Workflow time from start to close (skipped time included)."""
    d = await handle.describe()
    assert d.close_time is not None
    return (d.close_time - d.start_time).total_seconds()


async def test_drain_outlasting_its_timeout_is_forced(skipping_env: WorkflowEnvironment):
    client = skipping_env.client
    async with fleet_workers(client, fleet(drain_latency=60), ROLES) as sim:
        (mid,) = machine_ids(sim, 1)
        configure_directly(sim, [mid])
        seen = spy_drains(sim)
        sim.providers["dc"].fail_next[T.DRAIN] = 1  # the graceful drain hangs
        wall = time.monotonic()
        handle = await start(
            client,
            transition(
                T.DRAIN,
                [mid],
                cluster="a",
                grace_seconds=HOUR,
                reason="preempt",
                timeout_seconds=600,
                poll_seconds=60,
            ),
        )
        result = await handle.result()
        wall = time.monotonic() - wall

    (m,) = result.machines
    assert m.state is S.IDLE and m.cluster is None, result
    assert seen[0] == {"machine": mid, "grace": HOUR, "force": False}
    assert any(call["force"] for call in seen[1:]), seen
    assert sim.providers["dc"].get(mid).state is S.IDLE
    assert await elapsed(handle) >= HOUR  # an hour and more of workflow time ...
    assert wall < 60, f"{wall:.1f} s of wall time"  # ... in seconds


async def test_escalate_drain_shortens_the_grace(skipping_env: WorkflowEnvironment):
    client = skipping_env.client
    # Without escalation this drain would take 3000 s: min(grace, drain_latency).
    async with fleet_workers(client, fleet(drain_latency=3000), ROLES) as sim:
        (mid,) = machine_ids(sim, 1)
        configure_directly(sim, [mid])
        seen = spy_drains(sim)
        handle = await start(
            client,
            transition(T.DRAIN, [mid], cluster="a", grace_seconds=HOUR, poll_seconds=30),
        )
        await eventually(lambda: len(seen), bool, what="the first drain call")
        await handle.signal(MachineTransitionWorkflow.escalate_drain, 5.0)
        result = await handle.result()

    (m,) = result.machines
    assert m.state is S.IDLE and m.cluster is None, result
    assert [c["grace"] for c in seen] == [HOUR, 5.0], seen
    assert result.corrective == []
    assert await elapsed(handle) < 600


async def test_worker_killed_mid_transition_resumes_without_a_second_call(
    dev_env: WorkflowEnvironment,
):
    client = dev_env.client
    async with fleet_workers(client, fleet(configure_latency=5), ROLES) as sim:
        (mid,) = machine_ids(sim, 1)
        create = await start(client, transition(T.CREATE, [mid], poll_seconds=0.5))
        created = await asyncio.wait_for(create.result(), 30)
        assert [m.state for m in created.machines] == [S.IDLE]

    provider = sim.providers["dc"]
    stop = asyncio.Event()
    worker_task = asyncio.create_task(run_workers(build_workers(client, sim, ROLES), stop))
    try:
        handle = await start(client, transition(T.CONFIGURE, [mid], cluster="a", poll_seconds=0.5))
        await eventually(lambda: provider.started[T.CONFIGURE], bool, what="configure started")
    finally:
        # Kill the workers mid-transition: the task running them is cancelled outright.
        worker_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await worker_task
    assert provider.get(mid).state is S.CONFIGURING

    async with fleet_workers(client, sim, ROLES):  # a new worker over the same providers
        result = await asyncio.wait_for(handle.result(), 60)

    (m,) = result.machines
    assert m.state is S.CONFIGURED and m.cluster == "a", result
    assert provider.started[T.CONFIGURE] == 1
    assert provider.calls["configure"] == 1


async def test_batched_create_returns_a_result_per_machine(dev_env: WorkflowEnvironment):
    client = dev_env.client
    async with fleet_workers(client, fleet(), ROLES) as sim:
        ids = machine_ids(sim, 10)
        t = transition(T.CREATE, ids, cluster="a", need="n1", priority=7, poll_seconds=0.5)
        handle = await start(client, t)
        result = await asyncio.wait_for(handle.result(), 30)
    assert sorted(m.id for m in result.machines) == ids
    assert {m.state for m in result.machines} == {S.IDLE}
    assert all(m.host is not None for m in result.machines)
    assert (result.cluster, result.need, result.priority) == ("a", "n1", 7)
    assert sim.providers["dc"].calls["create"] == 1  # one provider call for the batch
    assert sim.providers["dc"].started[T.CREATE] == 10


async def test_escalate_drain_sent_to_a_configure_changes_nothing(dev_env: WorkflowEnvironment):
    """`escalate_drain` only means something to a drain: a configure keeps its poll cadence."""
    client = dev_env.client
    async with fleet_workers(client, fleet(configure_latency=4), ROLES) as sim:
        (mid,) = machine_ids(sim, 1)
        configure_directly(sim, [mid])  # then drain it back to idle on the provider
        sim.providers["dc"].drain(mid, 0.0, token(), force=True)
        sim.clocks["dc"].now += 10
        provider = sim.providers["dc"]
        handle = await start(client, transition(T.CONFIGURE, [mid], cluster="a", poll_seconds=1))
        await eventually(lambda: provider.calls["configure"] == 2, bool, what="configure")
        gets = provider.calls["get"]
        await handle.signal(MachineTransitionWorkflow.escalate_drain, 0.0)
        result = await asyncio.wait_for(handle.result(), 30)
    (m,) = result.machines
    assert m.state is S.CONFIGURED
    # About one read a second for ~4 s; a hot loop of reads would make hundreds.
    assert provider.calls["get"] - gets <= 10, provider.calls
