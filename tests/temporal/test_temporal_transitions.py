"""MachineTransitionWorkflow driven directly: forced drains, escalation, a worker dying mid-way,
and a batched create. Each test runs its own server and the transition + provider workers."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import MetricBuffer, Runtime, TelemetryConfig
from temporalio.testing import WorkflowEnvironment

from activities.starter import start_transition
from activities.wire import (
    RESULT_STATE,
    TransitionInput,
    TransitionResult,
)
from bigfleet.models import BootstrapBlob, FencingToken, ListFilter, MachineState, Transition
from tests.conftest import eventually, fleet_workers
from workers.worker import SimulatedFleet, build_workers, run_workers

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

    def recording(machine_id, grace_seconds, token, force=False, *, key=""):
        seen.append({"machine": machine_id, "grace": grace_seconds, "force": force})
        return drain(machine_id, grace_seconds, token, force=force, key=key)

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
        await handle.signal("escalate_drain", 5.0)
        result = await handle.result()

    (m,) = result.machines
    assert m.state is S.IDLE and m.cluster is None, result
    assert [c["grace"] for c in seen] == [HOUR, 5.0], seen
    assert result.corrective == []
    assert await elapsed(handle) < 600


async def test_a_batched_drain_drains_and_escalates_every_machine(
    skipping_env: WorkflowEnvironment,
):
    """One drain workflow for several machines of a cluster (`ShardConfig.drain_batch`): a
    drain call for each, and `escalate_drain` escalates each machine of it."""
    client = skipping_env.client
    async with fleet_workers(client, fleet(drain_latency=3000), ROLES) as sim:
        ids = machine_ids(sim, 3)
        configure_directly(sim, ids)
        seen = spy_drains(sim)
        handle = await start(
            client,
            transition(T.DRAIN, ids, cluster="a", grace_seconds=HOUR, poll_seconds=30),
        )
        await eventually(lambda: len(seen) == 3, bool, what="a drain call for each machine")
        await handle.signal("escalate_drain", 5.0)
        result = await handle.result()

    assert sorted((m.id, m.state, m.cluster) for m in result.machines) == [
        (mid, S.IDLE, None) for mid in ids
    ]
    calls = sorted((c["machine"], c["grace"]) for c in seen)
    assert calls == sorted([(mid, HOUR) for mid in ids] + [(mid, 5.0) for mid in ids]), seen
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


def spy_configures(sim: SimulatedFleet) -> list[tuple[str, bytes]]:
    """Record every configure call the provider receives: the machine and its blob."""
    p = sim.providers["dc"]
    seen: list[tuple[str, bytes]] = []
    configure = p.configure

    def recording(machine_id, blob, cluster, token, *, key=""):
        seen.append((machine_id, blob.user_data))
        return configure(machine_id, blob, cluster, token, key=key)

    p.configure = recording
    return seen


async def test_a_batched_configure_bootstraps_and_configures_each_machine(
    dev_env: WorkflowEnvironment,
):
    """One configure workflow for several machines of a need (the shard merges a cycle's,
    `ShardConfig.configure_batch`): each machine gets its own blob from the operator (it names
    its machine) and its own provider call. A machine whose call fails for good (here one never
    created) comes back as it is, at once; the others are watched until configured."""
    client = dev_env.client
    async with fleet_workers(client, fleet(configure_latency=2), ROLES) as sim:
        ids = machine_ids(sim, 4)
        ready, never = ids[:3], ids[3]
        sim.providers["dc"].create(ready, token())
        sim.clocks["dc"].now += 1000  # created: idle
        seen = spy_configures(sim)
        t = transition(T.CONFIGURE, ids, cluster="a", need="a#0", poll_seconds=0.5)
        result = await asyncio.wait_for((await start(client, t)).result(), 30)
        asked = [r.machine_id for r in sim.operators["a"].requests]
    assert sorted((m.id, m.state, m.cluster) for m in result.machines) == sorted(
        [(mid, S.CONFIGURED, "a") for mid in ready] + [(never, S.SPECULATIVE, None)]
    )
    assert sorted(asked) == ids  # a bootstrap for each machine
    assert sorted(mid for mid, _ in seen) == ids  # a provider call for each
    for mid, blob in seen:  # each with its own machine's blob
        assert [other for other in ids if other.encode() in blob] == [mid], blob
    assert sim.providers["dc"].started[T.CONFIGURE] == 3
    assert result.refused is None and result.corrective == []


async def test_a_create_refused_for_want_of_capacity_ends_and_returns_its_machines(
    dev_env: WorkflowEnvironment,
):
    """The cloud withdraws a slot (its quota shrank, or EC2 answered InsufficientInstanceCapacity)
    between the shard's plan and the create: the provider refuses the whole batch with
    QuotaExhausted. The transition ends (not fails) at once, naming the withdrawn machine as
    unavailable and handing back the one it never reached, still speculative, so the shard can
    plan again instead of waiting out the create's timeout."""
    client = dev_env.client
    cloud = {
        "name": "dc",
        "kind": "cloud",
        "region": "us-east-1",
        "create_latency": [0.2, 0.4],
        "quota": [
            {"instance_type": "m6i.xlarge", "zone": "us-east-1a",
             "capacity_type": "on-demand", "count": 4, "price_per_hour": 0.2},
        ],
    }  # fmt: skip
    spec = {**fleet(), "providers": [cloud]}
    async with fleet_workers(client, spec, ROLES) as sim:
        ids = machine_ids(sim, 4)
        sim.providers["dc"].set_quota("m6i.xlarge", "us-east-1a", "on-demand", 3)
        withdrawn = ids[3]
        t = transition(T.CREATE, [ids[0], withdrawn], cluster="a", need="n1", poll_seconds=0.5)
        t = t.model_copy(update={"capacity_type": "on-demand"})
        handle = await start(client, t)
        result = await asyncio.wait_for(handle.result(), 30)
        attributes = (await handle.describe()).typed_search_attributes
    assert result.unavailable == [withdrawn]
    assert [(m.id, m.state) for m in result.machines] == [(ids[0], S.SPECULATIVE)]
    assert result.refused is None  # not the operator's refusal to bootstrap
    assert sim.providers["dc"].started[T.CREATE] == 0  # all or nothing: nothing was started
    assert attributes.get(RESULT_STATE) == "SPECULATIVE"


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
        await handle.signal("escalate_drain", 0.0)
        result = await asyncio.wait_for(handle.result(), 30)
    (m,) = result.machines
    assert m.state is S.CONFIGURED
    # About one read a second for ~4 s; a hot loop of reads would make hundreds.
    assert provider.calls["get"] - gets <= 10, provider.calls


async def metered(env: WorkflowEnvironment) -> tuple[Client, MetricBuffer]:
    """A client on the same server whose runtime keeps the SDK's metric updates in a buffer:
    workers built on it record what the workflows count."""
    buffer = MetricBuffer(100_000)
    client = await Client.connect(
        env.client.service_client.config.target_host,
        namespace=env.client.namespace,
        data_converter=pydantic_data_converter,
        runtime=Runtime(telemetry=TelemetryConfig(metrics=buffer)),
    )
    return client, buffer


def outcomes(buffer: MetricBuffer) -> list[tuple[str, str, float]]:
    """(transition, outcome, seconds) of each transition end the workflows counted."""
    updates = buffer.retrieve_updates()
    counted = [
        (u.attributes["transition"], u.attributes["outcome"])
        for u in updates
        if u.metric.name == "bigfleet_transition_outcomes_total" and u.value
    ]
    durations = [
        u.value for u in updates if u.metric.name == "bigfleet_transition_duration_seconds"
    ]
    assert len(durations) == len(counted), (counted, durations)
    return [(t, o, float(d)) for (t, o), d in zip(counted, durations, strict=True)]


async def test_every_end_of_a_transition_is_counted_and_searchable(
    skipping_env: WorkflowEnvironment,
):
    """ok, forced (outlasting its time, or escalated to grace 0) and failed for good: each end
    is counted with its outcome and duration, and sets BigFleetState — a workflow that fails
    too, so `BigFleetState = "FAILED"` finds it."""
    client = skipping_env.client
    workers_client, buffer = await metered(skipping_env)
    async with fleet_workers(workers_client, fleet(drain_latency=3000), ROLES) as sim:
        ids = machine_ids(sim, 4)
        configure_directly(sim, ids[:2])
        # The graceful drain of ids[0] hangs; the workflow's time (grace + 300 s) runs out
        # before the provider's (grace + 600 s), so the workflow forces it.
        sim.providers["dc"].fail_next[T.DRAIN] = 1
        outlasting = await start(
            client,
            transition(
                T.DRAIN, [ids[0]], cluster="a", grace_seconds=HOUR, timeout_seconds=300,
                poll_seconds=60,
            ),
        )
        assert (await outlasting.result()).machines[0].state is S.IDLE
        seen = spy_drains(sim)
        escalated = await start(
            client,
            transition(T.DRAIN, [ids[1]], cluster="a", grace_seconds=HOUR, poll_seconds=30),
        )
        await eventually(lambda: len(seen), bool, what="the first drain call")
        await escalated.signal("escalate_drain", 0.0)
        assert (await escalated.result()).machines[0].state is S.IDLE
        created = await start(client, transition(T.CREATE, [ids[2]], poll_seconds=5))
        assert (await created.result()).machines[0].state is S.IDLE
        # A drain of a machine that was never created: the provider refuses the call for good
        # (a non-retryable error), and the workflow fails.
        failing = await start(client, transition(T.DRAIN, [ids[3]], cluster="a"))
        with pytest.raises(WorkflowFailureError):
            await failing.result()

    states = [
        (await h.describe()).typed_search_attributes.get(RESULT_STATE)
        for h in (outlasting, escalated, created, failing)
    ]
    assert states == ["IDLE", "IDLE", "IDLE", "FAILED"]
    counted = outcomes(buffer)
    assert [(t, o) for t, o, _ in counted] == [
        ("drain", "forced"),
        ("drain", "forced"),
        ("create", "ok"),
        ("drain", "failed"),
    ]
    assert counted[0][2] >= HOUR  # seconds, not milliseconds: an hour's grace and more


async def test_a_batched_delete_deletes_every_machine_with_a_call_each(
    dev_env: WorkflowEnvironment,
):
    """One delete workflow for several machines of a provider (`ShardConfig.delete_batch`): a
    delete call per machine, each back to a speculative slot, in one workflow."""
    client = dev_env.client
    line = {"instance_type": "m5.large", "zone": "z1", "capacity_type": "on-demand", "count": 4,
            "price_per_hour": 1}
    cloud = {"name": "dc", "kind": "cloud", "create_latency": [0.2, 0.2], "quota": [line]}
    raw = {"name": "deletes", "duration_seconds": 1, "providers": [cloud], "clusters": []}
    async with fleet_workers(client, raw, ROLES) as sim:
        ids = machine_ids(sim, 3)
        create = await start(client, transition(T.CREATE, ids, poll_seconds=0.2))
        assert {m.state for m in (await create.result()).machines} == {S.IDLE}
        gone = transition(T.DELETE, ids, reason="idle-timeout", poll_seconds=0.2)
        delete = await start(client, gone)
        result = await asyncio.wait_for(delete.result(), 60)
        provider = sim.providers["dc"]
    assert sorted((m.id, m.state) for m in result.machines) == [(i, S.SPECULATIVE) for i in ids]
    assert provider.calls["delete"] == 3
    assert {provider.get(i).state for i in ids} == {S.SPECULATIVE}
