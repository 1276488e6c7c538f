"""The coordinator and its sagas on a real Temporal dev server (issue 5, first part):
a cross-shard transfer ends with the machines configured in the receiving shard's cluster, every
machine owned by exactly one shard; shards refuse stale and oversized instructions; a saga whose
receiver refuses hands the machines back to the donor."""

from __future__ import annotations

import asyncio
import zlib

import pytest
import yaml
from temporalio.client import WorkflowExecutionStatus, WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from activities.wire import (
    MACHINE_IDS,
    SHARD_TASK_QUEUE,
    CoordinatorInput,
    Instruction,
    SagaInput,
    SagaResult,
)
from bigfleet.assignment import cluster_shard
from bigfleet.models import ListFilter, from_wire
from bigfleet.simulation.scenario import Scenario
from tests.conftest import eventually, fleet_workers, query_retrying
from workers import cli
from workers.routing import assign_cluster
from workers.worker import ensure_shards
from workflows.coordinator import CoordinatorWorkflow
from workflows.sagas import COORDINATOR_ID, TransferSagaWorkflow

REQ = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["gpu-8xh100"]}]


def on_shard(prefix: str, shard: int) -> str:
    """A name the assignment rule (crc32 of the name) puts on `shard` of 2."""
    return next(
        f"{prefix}{i}" for i in range(100) if zlib.crc32(f"{prefix}{i}".encode()) % 2 == shard
    )


def gpu_fleet(
    shards: int, racks: dict[str, int], clusters: list[str], types: dict[str, str] | None = None
) -> dict:
    """Bare-metal GPU racks (name → machines; `types`: a rack's instance type, if not
    gpu-8xh100) that configure and drain in a second."""
    return {
        "name": "gpu-fleet",
        "cycle_seconds": 1,
        "duration_seconds": 1,
        "shards": shards,
        "providers": [
            {
                "name": "dc",
                "kind": "bare-metal",
                "configure_latency": 1,
                "drain_latency": 1,
                "racks": [
                    {
                        "rack": r,
                        "zone": "ams-1",
                        "instance_type": (types or {}).get(r, "gpu-8xh100"),
                        "count": n,
                    }
                    for r, n in racks.items()
                ],
            }
        ],
        "clusters": [{"name": c} for c in clusters],
    }


def two_shard_fleet(machines: int = 40) -> dict:
    return gpu_fleet(2, {on_shard("rack", 0): machines}, [on_shard("c", 1)])


async def machines_of(client, shard: int) -> dict[str, int]:
    handle = client.get_workflow_handle(f"shard-{shard}")
    return (await query_retrying(lambda: handle.query("status")))["machines"]


async def start_coordinator(client, **fields) -> None:
    """Started before the workers' own start (which then finds it running), planning every 2 s."""
    await client.start_workflow(
        CoordinatorWorkflow.run,
        CoordinatorInput(shards=2, plan_seconds=2, **fields),
        id=COORDINATOR_ID,
        task_queue=SHARD_TASK_QUEUE,
    )


async def without_coordinator(client) -> None:
    """End the coordinator `start` started: a test that sends instructions of its own terms
    runs none (a shard takes a new term only from the running coordinator, or, with none
    running, a term not after its clock)."""
    await client.get_workflow_handle(COORDINATOR_ID).terminate("a test of instructions alone")


async def ask(
    client, shard: int, cluster: str, priority: int, count: int, requirements=REQ
) -> None:
    need = {"requirements": requirements, "priority": priority, "count": count}
    await client.get_workflow_handle(f"shard-{shard}").signal(
        "rollup", {"cluster": cluster, "generation": 1, "needs": [need]}
    )


async def start(client, raw: dict, **overrides) -> None:
    await ensure_shards(
        client,
        from_wire(Scenario, raw),
        **{
            "transition_poll_seconds": 1.0,
            "report_seconds": 1.0,
            "reconcile_seconds": 5.0,
            **overrides,
        },
    )


async def test_a_shortfall_is_served_from_another_shards_rack(dev_env: WorkflowEnvironment):
    client = dev_env.client
    raw = two_shard_fleet()
    cluster = raw["clusters"][0]["name"]
    async with fleet_workers(client, raw):
        await start_coordinator(client)
        await start(client, raw)
        await ask(client, 1, cluster, 1_000_000, 4)
        receiver = await eventually(
            lambda: machines_of(client, 1), lambda m: m["CONFIGURED"] == 4, timeout=60
        )
        donor = await machines_of(client, 0)
        # Every machine is owned by exactly one shard: 40 in all. (Once the need is served, the
        # coordinator also spreads free machines by demand: up to 4 more, idle at shard 1.)
        receiver = await machines_of(client, 1)
        assert sum(receiver.values()) + sum(donor.values()) == 40
        assert receiver["CONFIGURED"] == 4 and sum(receiver.values()) <= 8
        sagas = [wf async for wf in client.list_workflows('WorkflowType = "TransferSaga"')]
        assert sagas


async def test_a_round_planned_in_steps_serves_the_shortfall(dev_env: WorkflowEnvironment):
    """A round's plan in steps, each its own workflow task (bigfleet/pooling/pace.py: a large
    fleet's round outlasts the SDK's 2 s task bound on a busy core). With a step for every
    shortfall (`plan_step_work` 1), shard 1's need is served from shard 0's rack as in one
    step, the coordinator's history shows the steps' short timers, and it keeps running."""
    client = dev_env.client
    raw = two_shard_fleet()
    cluster = raw["clusters"][0]["name"]
    async with fleet_workers(client, raw):
        await start_coordinator(client, plan_step_work=1)
        await start(client, raw)
        await ask(client, 1, cluster, 1_000_000, 4)
        await eventually(
            lambda: machines_of(client, 1), lambda m: m["CONFIGURED"] == 4, timeout=60
        )
        coordinator = client.get_workflow_handle(COORDINATOR_ID)
        steps = [
            e
            async for e in coordinator.fetch_history_events()
            if e.HasField("timer_started_event_attributes")
            and e.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta().total_seconds()
            < 0.5
        ]
        assert steps, "no round was planned in steps"
        assert (await coordinator.describe()).status == WorkflowExecutionStatus.RUNNING
        assert sum((await machines_of(client, 0)).values()) + sum(
            (await machines_of(client, 1)).values()
        ) == 40


async def test_shards_refuse_stale_and_oversized_instructions(dev_env: WorkflowEnvironment):
    client = dev_env.client
    raw = two_shard_fleet()
    async with fleet_workers(client, raw):
        await start(client, raw)
        await without_coordinator(client)
        shard0 = client.get_workflow_handle("shard-0")
        await eventually(lambda: machines_of(client, 0), lambda m: m["SPECULATIVE"] == 40)
        ids = [f"dc-{raw['providers'][0]['racks'][0]['rack']}-{i:05d}" for i in range(40)]
        assert await shard0.execute_update("adopt", Instruction(term=7, seq=1)) == 0
        with pytest.raises(WorkflowUpdateFailedError) as stale:
            await shard0.execute_update("release", Instruction(term=6, seq=2, machine_ids=ids[:1]))
        assert "stale instruction" in str(stale.value.cause)
        # A hand-over of free machines disrupts nothing: at most half the shard's machines in
        # one instruction (`idle_share`; drains of configured ones: `max_share`, 10 %).
        with pytest.raises(WorkflowUpdateFailedError) as large:
            await shard0.execute_update(
                "release", Instruction(term=7, seq=3, machine_ids=ids[:21])
            )
        assert "more than 50%" in str(large.value.cause)
        assert sum((await machines_of(client, 0)).values()) == 40  # nothing changed


async def test_a_refused_adopt_hands_the_machines_back_to_the_donor(
    dev_env: WorkflowEnvironment,
):
    client = dev_env.client
    raw = two_shard_fleet()
    async with fleet_workers(client, raw):
        await start(client, raw)
        await without_coordinator(client)
        await eventually(lambda: machines_of(client, 0), lambda m: m["SPECULATIVE"] == 40)
        # The receiver has already seen a newer coordinator: this saga's adopt is stale there.
        await client.get_workflow_handle("shard-1").execute_update(
            "adopt", Instruction(term=9, seq=1)
        )
        rack = raw["providers"][0]["racks"][0]["rack"]
        result = await client.execute_workflow(
            TransferSagaWorkflow.run,
            SagaInput(
                kind="speculative",
                donor=0,
                receiver=1,
                machine_ids=[f"dc-{rack}-{i:05d}" for i in range(3)],
                term=8,
                seqs=[1, 2, 3, 4],
            ),
            id="saga-test",
            task_queue=SHARD_TASK_QUEUE,
        )
        assert result.failed_step == "adopt" and len(result.compensated) == 3
        assert result.moved == []
        assert sum((await machines_of(client, 0)).values()) == 40
        assert sum((await machines_of(client, 1)).values()) == 0


async def test_cross_shard_preemption_drains_on_the_donor_and_configures_on_the_receiver(
    dev_env: WorkflowEnvironment,
):
    """Seed §8's cross-shard preemption: priority 1 000 000 training on shard 1 takes 64
    machines from priority 100 000 research on shard 0, with the 30 s grace of a 900 000 gap,
    once nothing is idle or speculative anywhere; they end configured in training's cluster.
    (The share a shard gives up at once is raised to half, so 128 machines make the 64.)"""
    client = dev_env.client
    raw = two_shard_fleet(128)
    research, training = on_shard("research", 0), on_shard("training", 1)
    raw["clusters"] = [{"name": research}, {"name": training}]
    async with fleet_workers(client, raw) as sim:
        await start_coordinator(client, max_share=0.5)
        await start(client, raw, max_share=0.5)
        await ask(client, 0, research, 100_000, 128)
        await eventually(
            lambda: machines_of(client, 0), lambda m: m["CONFIGURED"] == 128, timeout=90
        )
        await ask(client, 1, training, 1_000_000, 64)
        receiver = await eventually(
            lambda: machines_of(client, 1), lambda m: m["CONFIGURED"] == 64, timeout=120
        )
        assert sum(receiver.values()) == 64
        assert sum((await machines_of(client, 0)).values()) == 64
        drains = [
            wf
            async for wf in client.list_workflows(
                'BigFleetTransition = "drain" AND BigFleetShard = "0"'
            )
        ]
        # Drains of one cluster with one grace merge into workflows (`drain_batch`).
        assert sum(len(wf.typed_search_attributes.get(MACHINE_IDS) or []) for wf in drains) == 64
        for wf in drains[:4]:
            summary = await (await client.get_workflow_handle(wf.id).describe()).static_summary()
            assert "grace 30 s" in summary and "(transfer)" in summary
        # A report offers 32 victims at a time: two preemption sagas of 32.
        sagas = [wf.id async for wf in client.list_workflows('WorkflowType = "TransferSaga"')]
        assert sagas and all(s.startswith("saga-preempt-") for s in sagas)
        moved = [
            len((await client.get_workflow_handle(s, result_type=SagaResult).result()).moved)
            for s in sagas
        ]
        assert sum(moved) == 64
        provider = sim.providers["dc"]
        bound = [m for m in provider.list(ListFilter()) if m.cluster == training]
        assert len(bound) == 64


async def test_shards_serve_alone_while_the_coordinator_is_down(dev_env: WorkflowEnvironment):
    """Static stability (design §11): with no coordinator a shard serves what it can from its own
    inventory; a coordinator started later picks the unresolved shortfall up."""
    client = dev_env.client
    raw = two_shard_fleet()
    rack = raw["providers"][0]["racks"][0]
    raw["providers"][0]["racks"].append({**rack, "rack": on_shard("rack", 1), "count": 8})
    cluster = raw["clusters"][0]["name"]
    async with fleet_workers(client, raw):
        await start(client, raw)  # starts the coordinator too: there are two shards
        await client.get_workflow_handle(COORDINATOR_ID).terminate("static-stability test")
        await ask(client, 1, cluster, 1_000_000, 12)
        alone = await eventually(
            lambda: machines_of(client, 1), lambda m: m["CONFIGURED"] == 8, timeout=60
        )
        assert sum(alone.values()) == 8  # its own rack, nothing from shard 0
        status = await client.get_workflow_handle("shard-1").query("status")
        assert [s["count"] for s in status["shortfalls"]] == [4]

        await start_coordinator(client)
        await eventually(
            lambda: machines_of(client, 1), lambda m: m["CONFIGURED"] == 12, timeout=60
        )
        # 48 machines in all, each in one shard (free ones may follow demand to shard 1 too).
        both = [await machines_of(client, s) for s in (0, 1)]
        assert sum(sum(m.values()) for m in both) == 48


async def test_a_failed_saga_step_leaves_every_machine_owned_once(dev_env: WorkflowEnvironment):
    """Failures injected at the saga's steps: a drain that does not finish in time is cancelled
    (the donor uses its machines again), a release of busy machines is refused; either way no
    machine is lost or owned twice."""
    client = dev_env.client
    raw = two_shard_fleet()
    research = on_shard("research", 0)
    raw["clusters"] = [{"name": research}]
    rack = raw["providers"][0]["racks"][0]["rack"]
    ids = [f"dc-{rack}-{i:05d}" for i in range(4)]
    async with fleet_workers(client, raw):
        await start(client, raw)
        await without_coordinator(client)
        await ask(client, 0, research, 100_000, 40)
        await eventually(
            lambda: machines_of(client, 0), lambda m: m["CONFIGURED"] == 40, timeout=60
        )

        async def saga(kind: str, seqs: list[int], **kw) -> SagaResult:
            return await client.execute_workflow(
                TransferSagaWorkflow.run,
                SagaInput(kind=kind, donor=0, receiver=1, machine_ids=ids, term=3, seqs=seqs, **kw),
                id=f"saga-{kind}-{seqs[0]}",
                task_queue=SHARD_TASK_QUEUE,
            )

        refused = await saga("idle", [1, 2, 3, 4])  # they are configured, not idle
        assert refused.failed_step == "release" and refused.moved == []

        timed_out = await saga("preempt", [5, 6, 7, 8], drain_timeout_seconds=0, poll_seconds=1)
        assert timed_out.failed_step == "wait_drained"
        assert sorted(timed_out.compensated) == ids

        back = await eventually(
            lambda: machines_of(client, 0), lambda m: m["CONFIGURED"] == 40, timeout=60
        )
        assert sum(back.values()) == 40
        assert sum((await machines_of(client, 1)).values()) == 0


async def test_roll_up_senders_ask_the_coordinator_once_and_it_assigns_home(
    dev_env: WorkflowEnvironment, tmp_path
):
    """Seed §16: a cluster goes to its home (a hash of its name, where a fresh fleet adopts its
    machines) on its first roll-up, for good. The first sender of a new fleet starts the
    coordinator (update-with-start); `bigfleet rollup send --direct` asks it and signals the
    shard it names; a coordinator started from scratch first learns which clusters the
    shards already serve."""
    client = dev_env.client
    raw = two_shard_fleet()
    async with fleet_workers(client, raw):
        names = ("a", "b", "a", "c", on_shard("x", 0))
        assert [await assign_cluster(client, c, 2) for c in names] == [
            cluster_shard(c, 2) for c in names
        ]
        coordinator = await client.get_workflow_handle(COORDINATOR_ID).describe()
        assert coordinator.status == WorkflowExecutionStatus.RUNNING

        await start(client, raw)
        path = tmp_path / "rollup.yaml"
        # (A type no shard holds owned machines of: home. One shard 0's rack fits could go
        # there instead, once its report is in: tests/core/test_pooling.py.)
        other = [{**REQ[0], "values": ["m6i.xlarge"]}]
        need = {"requirements": other, "priority": 5, "count": 2}
        d = on_shard("d", 1)
        path.write_text(yaml.safe_dump({"cluster": d, "generation": 1, "needs": [need]}))
        address = client.service_client.config.target_host
        code = await asyncio.to_thread(
            cli.main, ["rollup", "send", str(path), "--direct", "--address", address]
        )
        assert code == 0
        await eventually(  # (a cluster new to a shard waits for the coordinator's word)
            lambda: client.get_workflow_handle("shard-1").query("status"),
            lambda s: d in s["clusters"],  # its home
        )

        await client.get_workflow_handle(COORDINATOR_ID).terminate("lost its memory")
        e = on_shard("e", 1)
        await ask(client, 0, e, 5, 1)  # a cluster shard 0 serves that nobody assigned
        await eventually(
            lambda: client.get_workflow_handle("shard-0").query("status"),
            lambda s: e in s["clusters"],
        )
        # From scratch: d and e are where the shards serve them, e not at its home anew.
        assert await assign_cluster(client, d, 2) == 1
        assert await assign_cluster(client, e, 2) == 0
        with pytest.raises(WorkflowUpdateFailedError) as bad:
            await assign_cluster(client, " ", 2)
        assert "cluster" in str(bad.value.cause)


async def test_idle_machines_move_before_speculative_quota(dev_env: WorkflowEnvironment):
    """Seed §9's order: a shortfall on shard 1 takes machines shard 0 has idle (drained, still
    claimed) before any of its speculative ones, in one `idle` saga."""
    client = dev_env.client
    raw = two_shard_fleet()
    research, training = on_shard("research", 0), on_shard("training", 1)
    raw["clusters"] = [{"name": research}, {"name": training}]
    async with fleet_workers(client, raw) as sim:
        await start(client, raw)  # its coordinator plans every 30 s: replaced by a quicker one
        await client.get_workflow_handle(COORDINATOR_ID).terminate("a quicker one, please")
        await start_coordinator(client)
        await ask(client, 0, research, 100_000, 8)
        await eventually(lambda: machines_of(client, 0), lambda m: m["CONFIGURED"] == 8)
        need = {"requirements": REQ, "priority": 100_000, "count": 0}
        await client.get_workflow_handle("shard-0").signal(
            "rollup", {"cluster": research, "generation": 2, "needs": [need]}
        )
        donor = await eventually(lambda: machines_of(client, 0), lambda m: m["IDLE"] == 8)
        assert donor["SPECULATIVE"] == 32
        idle = {m.id for m in sim.providers["dc"].list(ListFilter()) if m.state.value == "IDLE"}

        await ask(client, 1, training, 500_000, 3)
        await eventually(lambda: machines_of(client, 1), lambda m: m["CONFIGURED"] == 3)
        states = await client.get_workflow_handle("shard-1").query("machine_states", sorted(idle))
        assert sum(s == "CONFIGURED" for s in states.values()) == 3  # the idle ones moved
        # (Free machines following demand to shard 1 afterwards are idle ones too: 5 are left.)
        sagas = [wf.id async for wf in client.list_workflows('WorkflowType = "TransferSaga"')]
        assert sagas and all(s.startswith("saga-idle-") for s in sagas)
        assert (await machines_of(client, 0))["SPECULATIVE"] == 32


async def test_a_router_started_before_many_new_clusters_gets_each_a_shard(
    dev_env: WorkflowEnvironment,
):
    """A gateway (re)started while hundreds of clusters send their roll-ups asks the
    coordinator about each at once; Temporal takes 10 updates in flight per workflow and
    aborts the rest. The router asks a few at a time: every roll-up is delivered, every
    cluster gets a shard, the load spread over both."""
    from workers.routing import ShardRouter

    client = dev_env.client
    raw = two_shard_fleet()
    async with fleet_workers(client, raw):
        await start(client, raw)
        router = ShardRouter(client, shards=2)
        clusters = [f"new-{i:03d}" for i in range(300)]
        need = {"requirements": REQ, "priority": 5, "count": 0}
        sent = await asyncio.gather(
            *(router(c, {"cluster": c, "generation": 1, "needs": [need]}) for c in clusters)
        )
    shards = [shard for shard, _ in sent]
    assert len(sent) == 300 and set(shards) == {0, 1}
    assert abs(shards.count(0) - shards.count(1)) <= 2, shards  # (shard 1 held one already)
    assert router.assigned == dict(zip(clusters, shards, strict=True))
