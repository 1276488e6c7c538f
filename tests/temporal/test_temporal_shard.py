"""The shard workflow end to end on a real dev server: roll-ups in as signals, transition
workflows out, simulated providers underneath. Each test has its own server (shards are always
`shard-<n>`), a 1 s decision cycle and fast simulated machines."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.providers import ProviderActivities
from activities.snapshots import SnapshotActivities
from activities.wire import (
    CLUSTER,
    MACHINE_IDS,
    PROVIDER,
    RESULT_STATE,
    SHARD,
    SHARD_TASK_QUEUE,
    TRANSITION,
    Instruction,
    MachinePage,
    ProviderRead,
    ShardInput,
    SnapshotPart,
    TransitionInput,
    TransitionResult,
    provider_task_queue,
)
from bigfleet import labels as L
from bigfleet.models import ListFilter, Machine, MachineState, Transition, from_wire
from bigfleet.operators import OperatorUpdate
from bigfleet.providers import ProviderReplyError
from bigfleet.simulation.scenario import Scenario
from tests.conftest import eventually, fleet_workers, query_retrying
from workers.routing import RollupBatcher
from workers.worker import (
    SimulatedFleet,
    build_workers,
    ensure_shards,
    run_workers,
    shard_config,
)
from workflows.shard import ShardWorkflow

S = MachineState
T = Transition
GPU = "gpu-8xh100"
REQUIREMENTS = [{"key": L.INSTANCE_TYPE, "operator": "In", "values": [GPU]}]
FAST = dict(transition_poll_seconds=0.5)
# Visibility times come from the server, local ones from this process: allow some clock slack.
_SLACK = timedelta(seconds=1)


def fleet(machines: int, **provider: Any) -> Scenario:
    """One bare-metal rack of `machines` GPU servers, clusters `a` and `b`, a 1 s cycle."""
    return from_wire(
        Scenario,
        {
            "name": "shard-test",
            "cycle_seconds": 1,
            "duration_seconds": 1,
            "shards": 1,
            "providers": [
                {
                    "name": "dc",
                    "kind": "bare-metal",
                    "configure_latency": 2,
                    "drain_latency": 2,
                    "racks": [
                        {"rack": "r1", "zone": "ams-1", "instance_type": GPU, "count": machines}
                    ],
                    **provider,
                }
            ],
            "clusters": [{"name": "a"}, {"name": "b"}],
        },
    )


def rollup(cluster: str, generation: int, count: int, priority: int, penalty: float) -> dict:
    need = {
        "requirements": REQUIREMENTS,
        "priority": priority,
        "count": count,
        "interruption_penalty": penalty,
    }
    return {"cluster": cluster, "generation": generation, "needs": [need]}


def shard(client: Client):
    return client.get_workflow_handle_for(ShardWorkflow.run, "shard-0")


async def status(client: Client) -> dict[str, Any]:
    return await query_retrying(lambda: shard(client).query(ShardWorkflow.status))


async def cluster(client: Client, name: str) -> dict[str, Any]:
    return await query_retrying(lambda: shard(client).query(ShardWorkflow.cluster, name))


def provider_machines(sim: SimulatedFleet) -> dict[str, tuple[MachineState, str | None]]:
    return {m.id: (m.state, m.cluster) for m in sim.providers["dc"].list(ListFilter())}


async def listed(client: Client, query: str) -> list[WorkflowExecution]:
    """Workflows matching a visibility query, oldest first."""
    found = [wf async for wf in client.list_workflows(query)]
    return sorted(found, key=lambda wf: (wf.start_time, wf.id))


async def closed(client: Client, query: str, count: int) -> list[WorkflowExecution]:
    """Wait until `count` workflows match and all have completed (visibility lags a little)."""
    return await eventually(
        lambda: listed(client, query),
        lambda wfs: (
            len(wfs) == count and all(wf.status is WorkflowExecutionStatus.COMPLETED for wf in wfs)
        ),
        timeout=30,
        what=f"{count} completed workflows for {query!r}",
    )


async def closed_for(client: Client, query: str, machines: int) -> list[WorkflowExecution]:
    """Wait until the completed workflows matching `query` carry `machines` machines in all
    (a shard merges a cycle's configures of a need into one workflow)."""
    return await eventually(
        lambda: listed(client, query),
        lambda wfs: (
            sum(len(wf.typed_search_attributes.get(MACHINE_IDS) or []) for wf in wfs) == machines
            and all(wf.status is WorkflowExecutionStatus.COMPLETED for wf in wfs)
        ),
        timeout=30,
        what=f"completed workflows for {machines} machines, {query!r}",
    )


async def transition_input(client: Client, wf: WorkflowExecution) -> TransitionInput:
    history = await client.get_workflow_handle(wf.id, run_id=wf.run_id).fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    (inp,) = await client.data_converter.decode(started.input.payloads, [TransitionInput])
    return inp


async def transition_result(client: Client, wf: WorkflowExecution) -> TransitionResult:
    handle = client.get_workflow_handle(wf.id, run_id=wf.run_id, result_type=TransitionResult)
    return await handle.result()


async def test_preemption_walkthrough(dev_env: WorkflowEnvironment):
    """Seed "What preemption looks like in practice", with 8 machines instead of 64."""
    client = dev_env.client
    async with fleet_workers(client, fleet(8)) as sim:
        await ensure_shards(client, sim.fleet, **FAST)
        # t=0: cluster A's batch pipeline (priority 500000, cheap to interrupt) holds them all.
        await shard(client).signal("rollup", rollup("a", 1, 8, 500_000, 1.0))
        await eventually(
            lambda: status(client),
            lambda st: st["machines"]["CONFIGURED"] == 8,
            what="cluster a served",
        )
        a_served = datetime.now().astimezone()
        # t=7s: cluster B needs the same 8 machines at priority 1000000.
        await shard(client).signal("rollup", rollup("b", 1, 8, 1_000_000, 1000.0))
        machines = await eventually(
            lambda: provider_machines(sim),
            lambda ms: set(ms.values()) == {(S.CONFIGURED, "b")},
            what="every machine configured for cluster b",
        )
        # The workers keep running until every transition workflow has seen its end.
        drains = await closed_for(client, 'BigFleetTransition = "drain"', 8)
        configures = await closed_for(
            client, 'BigFleetTransition = "configure" AND BigFleetCluster = "b"', 8
        )
        # The shard folds finished transitions in at its next cycle.
        st = await eventually(
            lambda: status(client),
            lambda st: st["machines"]["CONFIGURED"] == 8 and st["shortfalls"],
            what="the shard's view caught up",
        )
        provider = sim.providers["dc"]

    assert len(machines) == 8
    # The drains of cluster a's machines (merged into workflows of up to `drain_batch`),
    # 30 s of grace (gap 500000), preempt.
    assert {wf.typed_search_attributes.get(CLUSTER) for wf in drains} == {"a"}
    drained: dict[str, datetime] = {}
    for wf in drains:
        inp = await transition_input(client, wf)
        assert (inp.grace_seconds, inp.reason, inp.force) == (30.0, "preempt", False), inp
        assert inp.cluster == "a"
        result = await transition_result(client, wf)
        assert sorted((m.id, m.state, m.cluster) for m in result.machines) == [
            (mid, S.IDLE, None) for mid in sorted(inp.machine_ids)
        ], result
        assert result.corrective == []
        assert wf.start_time >= a_served - _SLACK
        assert wf.close_time is not None
        drained.update(dict.fromkeys(inp.machine_ids, wf.close_time))
    assert sorted(drained) == sorted(machines)
    assert len(drains) == 1  # the 8 preempted in one cycle, with one grace: one workflow

    # Then each idle machine is configured for cluster b, after its drain finished: the
    # machines that came back idle in one cycle in one workflow (`configure_batch`).
    configured = []
    for wf in configures:
        inp = await transition_input(client, wf)
        assert inp.priority == 1_000_000
        assert wf.start_time >= max(drained[mid] for mid in inp.machine_ids) - _SLACK
        result = await transition_result(client, wf)
        assert sorted((m.id, m.state, m.cluster) for m in result.machines) == [
            (mid, S.CONFIGURED, "b") for mid in sorted(inp.machine_ids)
        ]
        configured += inp.machine_ids
    assert sorted(configured) == sorted(machines)

    assert provider.started[T.DRAIN] == 8
    assert provider.started[T.CONFIGURE] == 16
    assert st["machines"]["CONFIGURED"] == 8
    # Step 8: cluster a's need is now the unserved one (no elastic capacity in this fleet).
    assert [(s["cluster"], s["priority"]) for s in st["shortfalls"]] == [("a", 500_000)]


async def test_invalid_rollup_leaves_the_previous_in_force(dev_env: WorkflowEnvironment):
    client = dev_env.client
    async with fleet_workers(client, fleet(2)) as sim:
        await ensure_shards(client, sim.fleet, **FAST)
        await shard(client).signal("rollup", rollup("a", 1, 2, 500_000, 1.0))
        await eventually(
            lambda: status(client),
            lambda st: st["machines"]["CONFIGURED"] == 2,
            what="cluster a served",
        )
        before = await cluster(client, "a")
        bad = rollup("a", 2, -1, 500_000, 1.0)
        await shard(client).signal("rollup", bad)
        st = await eventually(
            lambda: status(client), lambda st: st["rejections"], what="the rejection"
        )
        cycles = st["cycles"]
        st = await eventually(
            lambda: status(client),
            lambda st: st["cycles"] >= cycles + 3,
            what="three more cycles",
        )
        after = await cluster(client, "a")
        machines = provider_machines(sim)
        provider = sim.providers["dc"]

    (rejection,) = st["rejections"]
    assert "cluster a" in rejection and "count" in rejection, rejection
    assert after["needs"] == before["needs"]
    assert [n["count"] for n in after["needs"]] == [2]
    assert st["needs"] == 1 and st["machines"]["CONFIGURED"] == 2
    assert set(machines.values()) == {(S.CONFIGURED, "a")}
    assert provider.calls["drain"] == 0


async def test_rollups_sent_together_arrive_as_one_signal_each_judged_alone(
    dev_env: WorkflowEnvironment,
):
    """Roll-ups bound for one shard within the linger go out as one `rollups` signal (1 000
    clusters re-sending every 10 s would be 100 signals a second one by one; Temporal buffers at
    most 100 events while a workflow task runs). In the shard each is taken as if sent alone: a
    bad one is rejected by itself, the others are in force."""
    client = dev_env.client
    async with fleet_workers(client, fleet(4)) as sim:
        await ensure_shards(client, sim.fleet, **FAST)
        batcher = RollupBatcher(client, linger=0.5)
        good = [rollup(c, 1, 1, 500_000, 1.0) for c in ("a", "b")]
        bad = [rollup("c", 1, -1, 500_000, 1.0), {"cluster": "d", "generation": "one"}]
        await asyncio.gather(*(batcher.send(0, r) for r in [*good, *bad]))
        await eventually(
            lambda: status(client),
            lambda st: st["clusters"] == ["a", "b"] and len(st["rejections"]) == 2,
            what="a and b in force, c and d rejected",
        )
        # Not a roll-up at all, and too many in one signal: rejected, nothing else lost.
        await shard(client).signal("rollups", [rollup("e", 1, 1, 500_000, 1.0), 7])
        await shard(client).signal("rollups", [rollup("f", 1, 1, 500_000, 1.0)] * 501)
        refused = await eventually(
            lambda: query_retrying(lambda: shard(client).query("rejections")),
            lambda r: r["counts"].get("rollups") == 4,
            what="the non-roll-up and the oversized batch rejected too",
        )
        st = await eventually(  # (e, new to the shard, waits for the coordinator's word)
            lambda: status(client), lambda st: "e" in st["clusters"], what="e taken"
        )
        names = [
            e.workflow_execution_signaled_event_attributes.signal_name
            async for e in shard(client).fetch_history_events()
            if e.HasField("workflow_execution_signaled_event_attributes")
        ]
    assert names.count("rollups") == 3 and "rollup" not in names  # the four: one signal
    assert st["clusters"] == ["a", "b", "e"]
    rejected = " | ".join(r["error"] for r in refused["recent"])
    assert "cluster c" in rejected and "count" in rejected, rejected
    assert "generation" in rejected, rejected
    assert "rollups[1]: a roll-up is an object, got int" in rejected, rejected
    assert "501 roll-ups, at most 500" in rejected, rejected


async def test_roll_ups_that_waited_for_the_run_are_judged_like_any_other(
    dev_env: WorkflowEnvironment,
):
    """Roll-ups that arrived while the last run wrote its state reach the next run in its
    input; a bad one among them is rejected there as on arrival, and the run goes on."""
    client = dev_env.client
    async with fleet_workers(client, fleet(2)) as sim:
        good, bad = rollup("a", 1, 1, 500_000, 1.0), rollup("b", 1, -1, 500_000, 1.0)
        await client.start_workflow(
            ShardWorkflow.run,
            ShardInput(config=shard_config(sim.fleet, 0, **FAST), rollups=[bad, good]),
            id="shard-0",
            task_queue=SHARD_TASK_QUEUE,
        )
        st = await eventually(
            lambda: status(client),
            lambda st: st["clusters"] == ["a"] and st["cycles"] >= 2,
            what="a in force, two cycles decided",
        )
    assert st["rejected_inputs"] == {"rollup": 1}
    assert "cluster b" in " ".join(st["rejections"])


@pytest.mark.parametrize("store", [False, True], ids=["inline", "snapshot-store"])
async def test_continue_as_new_keeps_needs_inventory_and_transitions(
    dev_env: WorkflowEnvironment, store: bool, tmp_path, monkeypatch
):
    """State crosses continue-as-new inline, or — when larger than `snapshot_inline_bytes`
    (here forced to 1 byte) — through the snapshot store in parts, with only a reference in
    the next run's input (the claim check a 500 K-machine shard needs: its state is ~4 MB, over
    Temporal's 2 MB payload limit)."""
    client = dev_env.client
    monkeypatch.setenv("BIGFLEET_SNAPSHOT_DIR", str(tmp_path))
    sizes = (
        dict(snapshot_inline_bytes=1, snapshot_part_bytes=500, snapshot_wave_bytes=1000)
        if store
        else {}
    )
    # Configure takes 6 s; the shard continues as new every 3 cycles (3 s) meanwhile.
    async with fleet_workers(client, fleet(2, configure_latency=6)) as sim:
        await ensure_shards(client, sim.fleet, max_cycles_per_run=3, **FAST, **sizes)
        await shard(client).signal("rollup", rollup("a", 1, 2, 500_000, 1.0))
        st = await eventually(
            lambda: status(client),
            lambda st: st["machines"]["CONFIGURING"] == 2,
            what="configure in flight",
        )
        epoch = st["epoch"]
        needs = (await cluster(client, "a"))["needs"]
        run_in_flight = (await shard(client).describe()).run_id
        st = await eventually(
            lambda: status(client),
            lambda st: st["machines"]["CONFIGURED"] == 2,
            timeout=30,
            what="configure folded in",
        )
        configures = await closed_for(client, 'BigFleetTransition = "configure"', 2)
        run_after = (await shard(client).describe()).run_id
        view = await cluster(client, "a")
        machines = provider_machines(sim)
        provider = sim.providers["dc"]

    assert run_after != run_in_flight
    runs = await listed(client, 'WorkflowId = "shard-0"')
    continued = [wf for wf in runs if wf.status is WorkflowExecutionStatus.CONTINUED_AS_NEW]
    assert len(continued) >= 2, [(wf.run_id, wf.status) for wf in runs]
    assert st["epoch"] == epoch  # continue-as-new is not a restart: no new epoch
    assert st["clusters"] == ["a"] and st["needs"] == 1
    assert view["needs"] == needs
    assert st["machines"]["CONFIGURED"] == 2 and sum(st["machines"].values()) == 2
    assert set(machines.values()) == {(S.CONFIGURED, "a")}
    # The in-flight configures were neither lost nor started again by a later run.
    assert provider.started[T.CONFIGURE] == 2
    assert {wf.typed_search_attributes.get(RESULT_STATE) for wf in configures} == {"CONFIGURED"}
    # The two machines of the one create, configured for its need in one workflow.
    assert len(configures) == 1
    async for event in shard(client).fetch_history_events(page_size=1):
        started = event.workflow_execution_started_event_attributes
        [inp] = await client.data_converter.decode(list(started.input.payloads), [ShardInput])
        break
    if store:
        assert inp.state is None and inp.snapshot is not None and inp.snapshot.parts > 1
        assert inp.snapshot.encoding == "zlib"  # compressed: read back, it is the state
        assert (tmp_path / inp.snapshot.key / "0.json").exists()
        assert len(list((tmp_path / "shard-0").iterdir())) <= 3  # older snapshots deleted
        # Parts are written two a workflow task (`snapshot_wave_bytes`), not all at once.
        old_run = client.get_workflow_handle("shard-0", run_id=continued[0].run_id)
        puts = await scheduled(client, "snapshot_put", SnapshotPart, old_run)
        assert len(puts) >= 2 and max(map(len, puts)) == 2, [len(t) for t in puts]
    else:
        assert inp.state is not None and inp.snapshot is None
        assert not tmp_path.joinpath("shard-0").exists()


async def test_search_attributes_find_every_transition_of_a_machine(
    dev_env: WorkflowEnvironment,
):
    client = dev_env.client
    async with fleet_workers(client, fleet(1)) as sim:
        await ensure_shards(client, sim.fleet, **FAST)
        await shard(client).signal("rollup", rollup("a", 1, 1, 500_000, 1.0))
        await eventually(
            lambda: status(client),
            lambda st: st["machines"]["CONFIGURED"] == 1,
            what="cluster a served",
        )
        await shard(client).signal("rollup", rollup("b", 1, 1, 1_000_000, 1000.0))
        machines = await eventually(
            lambda: provider_machines(sim),
            lambda ms: set(ms.values()) == {(S.CONFIGURED, "b")},
            what="the machine configured for cluster b",
        )
        # The provider shows CONFIGURED before the configure workflow has completed: wait for
        # the four workflows while the workers are still running to finish them.
        (mid,) = machines
        life = await closed(client, f'BigFleetMachineIds = "{mid}"', 4)
    attrs = [wf.typed_search_attributes for wf in life]
    assert [(a.get(TRANSITION), a.get(CLUSTER), a.get(RESULT_STATE)) for a in attrs] == [
        ("create", "a", "IDLE"),
        ("configure", "a", "CONFIGURED"),
        ("drain", "a", "IDLE"),
        ("configure", "b", "CONFIGURED"),
    ]
    for a in attrs:
        assert a.get(MACHINE_IDS) == [mid]
        assert (a.get(SHARD), a.get(PROVIDER)) == ("0", "dc")
    # The same query as `temporal workflow list --query`, narrowed by transition.
    (drain,) = await listed(
        client, f'BigFleetMachineIds = "{mid}" AND BigFleetTransition = "drain"'
    )
    assert drain.id == life[2].id


class CreateDoneDuringReconcile:
    """`provider_list` for the shard's reconcile step that, in a cycle that started creates,
    returns only once those create workflows have finished, so their `transition_done` signal
    reaches the shard while it is still in that cycle (deterministic timing for the test)."""

    def __init__(self, client: Client, acts: ProviderActivities) -> None:
        self.client = client
        self.acts = acts

    @activity.defn(name="provider_list")
    async def list(self, r: ProviderRead) -> MachinePage:
        if r.states == [S.FAILED.value]:
            st = await status(self.client)
            if st["machines"]["CREATING"]:
                await closed(self.client, 'BigFleetTransition = "create"', 1)
        return await self.acts.list(r)


async def test_continue_as_new_keeps_a_configure_queued_by_a_finished_create(
    dev_env: WorkflowEnvironment,
):
    """A create that finishes during the last cycle of a run queues the machine's configure;
    the run then continues as new. The configure must still be started by the next run."""
    client = dev_env.client
    sim = SimulatedFleet(fleet(1))
    acts = ProviderActivities(sim.providers, sim.clocks)
    workers = build_workers(client, sim, ["shards", "transitions"]) + [
        Worker(client, task_queue=provider_task_queue("dc"), activities=[acts.call]),
        Worker(
            client,
            task_queue=provider_task_queue("dc") + "-read",
            activities=[acts.get, acts.share, CreateDoneDuringReconcile(client, acts).list],
        ),
    ]
    stop = asyncio.Event()
    running = asyncio.create_task(run_workers(workers, stop))
    try:
        await ensure_shards(
            client, sim.fleet, max_cycles_per_run=1, reconcile_seconds=0.001, **FAST
        )
        await shard(client).signal("rollup", rollup("a", 1, 1, 500_000, 1.0))
        await closed(client, 'BigFleetTransition = "create"', 1)
        machines = await eventually(
            lambda: provider_machines(sim),
            lambda ms: set(ms.values()) == {(S.CONFIGURED, "a")},
            timeout=10,
            what="the created machine configured for cluster a",
        )
    finally:
        stop.set()
        await running
    assert len(machines) == 1


@pytest.mark.parametrize("runs", [1, 5], ids=["one-run", "a-run-per-page"])
async def test_a_shard_adopts_a_listing_larger_than_one_payload(
    dev_env: WorkflowEnvironment, runs: int
):
    """5 000 machines are ~3 MB of records, over Temporal's 2 MB payload limit: the shard reads
    its provider's listing page by page. Each page costs history, so past
    `adopt_history_bytes` (forced down to one page here) the shard continues as new and adopts
    the rest in the next run — a 100 000-machine fleet would pass Temporal's 50 MB limit."""
    client = dev_env.client
    limit = {} if runs == 1 else {"adopt_history_bytes": 1}
    async with fleet_workers(client, fleet(5000)) as sim:
        await ensure_shards(client, sim.fleet, **FAST, **limit)
        st = await eventually(
            lambda: status(client), lambda st: sum(st["machines"].values()) == 5000, timeout=90
        )
        assert st["machines"]["SPECULATIVE"] == 5000
        runs_ = await listed(client, 'WorkflowId = "shard-0"')
        adopting = [wf for wf in runs_ if wf.status is WorkflowExecutionStatus.CONTINUED_AS_NEW]
        pages = [await listings(client, wf) for wf in runs_]
        if runs == 1:
            assert not adopting and pages[0] >= 5
        else:  # a page a run: 5 pages of 1 000, the last known to be the end
            assert len(adopting) >= 4, [wf.run_id for wf in adopting]
            assert pages[:5] == [1, 1, 1, 1, 1]


async def listings(client: Client, wf: WorkflowExecution) -> int:
    """How many listing pages a run read (`provider_share`; `provider_list` before)."""
    n = 0
    handle = client.get_workflow_handle(wf.id, run_id=wf.run_id)
    async for e in handle.fetch_history_events():
        if e.HasField("activity_task_scheduled_event_attributes"):
            name = e.activity_task_scheduled_event_attributes.activity_type.name
            n += name in ("provider_list", "provider_share")
    return n


async def test_what_arrives_while_a_snapshot_is_written_is_not_lost(
    dev_env: WorkflowEnvironment, tmp_path, monkeypatch
):
    """Writing a snapshot to the store takes activity round trips, during which the shard is
    still open: a roll-up that arrives then travels to the next run; an instruction is told to
    retry (one carried out then would be missing from the state the next run starts from)."""
    writing = asyncio.Event()
    put = SnapshotActivities.put

    @activity.defn(name="snapshot_put")
    async def slow_put(self, part: SnapshotPart) -> None:
        writing.set()
        await asyncio.sleep(1.5)
        await put(self, part)

    monkeypatch.setattr(SnapshotActivities, "put", slow_put)
    monkeypatch.setenv("BIGFLEET_SNAPSHOT_DIR", str(tmp_path))
    client = dev_env.client
    async with fleet_workers(client, fleet(4)) as sim:
        await ensure_shards(
            client,
            sim.fleet,
            max_cycles_per_run=3,
            snapshot_inline_bytes=1,
            snapshot_part_bytes=100_000,
            **FAST,
        )
        await shard(client).signal("rollup", rollup("a", 1, 1, 500_000, 1.0))
        await asyncio.wait_for(writing.wait(), 30)
        await shard(client).signal("rollup", rollup("a", 2, 3, 500_000, 1.0))
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await shard(client).execute_update("adopt", Instruction(term=1, seq=1))
        assert "writing its snapshot; retry" in str(refused.value.cause)
        view = await eventually(
            lambda: cluster(client, "a"), lambda v: v["needs"] and v["needs"][0]["count"] == 3
        )
        assert view["needs"][0]["count"] == 3
        runs = await listed(client, 'WorkflowId = "shard-0"')
        assert any(wf.status is WorkflowExecutionStatus.CONTINUED_AS_NEW for wf in runs)


async def test_a_provider_whose_listing_breaks_does_not_stop_the_shard(
    dev_env: WorkflowEnvironment,
):
    """A provider that sends a malformed listing: each periodic reconcile fails at once, the
    failure names the field and shows in `status`, and the shard goes on deciding with what it
    knows; when the listing is good again, the quota that grew meanwhile is adopted."""
    client = dev_env.client
    quota = {"instance_type": "m6i.xlarge", "zone": "us-east-1a", "capacity_type": "on-demand"}
    raw = {
        "name": "broken-listing",
        "cycle_seconds": 1,
        "duration_seconds": 1,
        "shards": 1,
        "providers": [
            {
                "name": "aws",
                "kind": "cloud",
                "create_latency": [1, 2],
                "configure_latency": 1,
                "quota": [{**quota, "count": 10, "price_per_hour": 1}],
            }
        ],
        "clusters": [{"name": "a"}],
    }
    need = {
        "requirements": [{"key": L.INSTANCE_TYPE, "operator": "In", "values": ["m6i.xlarge"]}],
        "priority": 1000,
        "count": 2,
        "interruption_penalty": 1.0,
    }
    async with fleet_workers(client, raw) as sim:
        aws = sim.providers["aws"]
        await ensure_shards(client, from_wire(Scenario, raw), **FAST, reconcile_seconds=1.0)
        await eventually(lambda: status(client), lambda st: st["machines"]["SPECULATIVE"] == 10)

        def malformed(filter: ListFilter) -> list[Machine]:
            raise ProviderReplyError("aws", [("machines.3.state", "Input should be 'IDLE'")])

        aws.list = malformed  # type: ignore[method-assign]
        aws.set_quota("m6i.xlarge", "us-east-1a", "on-demand", 20)
        await shard(client).signal("rollup", {"cluster": "a", "generation": 1, "needs": [need]})
        # Still deciding: the need is served from the machines it knew.
        st = await eventually(
            lambda: status(client),
            lambda st: st["machines"].get("CONFIGURED") == 2 and st["failures"],
            timeout=60,
            what="cluster a served while the listing fails",
        )
        assert "machines.3.state" in st["failures"][-1]["error"], st["failures"]
        assert "aws" in st["failures"][-1]["error"]
        assert sum(st["machines"].values()) == 10  # the new quota is not seen yet
        assert (await shard(client).describe()).status is WorkflowExecutionStatus.RUNNING

        del aws.list  # the provider's own method again
        st = await eventually(
            lambda: status(client),
            lambda st: sum(st["machines"].values()) == 20,
            timeout=60,
            what="the grown quota adopted once the listing is good",
        )
        assert st["machines"]["CONFIGURED"] == 2


async def scheduled(
    client: Client, activity: str, arg: Any, run: WorkflowHandle | None = None
) -> list[list[Any]]:
    """The `activity` calls a shard run's history schedules (default: the latest run), their
    one argument decoded as `arg`, grouped by the workflow task that scheduled them."""
    tasks: list[list[Any]] = []
    async for event in (run or shard(client)).fetch_history_events():
        if event.HasField("workflow_task_completed_event_attributes"):
            tasks.append([])
        attrs = event.activity_task_scheduled_event_attributes
        if event.HasField("activity_task_scheduled_event_attributes"):
            if attrs.activity_type.name == activity:
                [value] = await client.data_converter.decode(list(attrs.input.payloads), [arg])
                tasks[-1].append(value)
    return [t for t in tasks if t]


async def test_a_decision_over_the_cycle_budget_starts_over_the_next_cycles(
    dev_env: WorkflowEnvironment,
):
    """At most `max_starts_per_cycle` transitions start in a cycle; the rest wait in the
    pipeline (`queued_starts`) and start in the next cycles — none lost, none twice."""
    client = dev_env.client
    async with fleet_workers(client, fleet(12, configure_latency=1)) as sim:
        # (A workflow per configure: merged, the 12 would be one start.)
        await ensure_shards(client, sim.fleet, max_starts_per_cycle=3, configure_batch=1, **FAST)
        await shard(client).signal("rollup", rollup("a", 1, 12, 500_000, 1.0))
        await eventually(
            lambda: status(client),
            lambda st: st["machines"]["CONFIGURED"] == 12 and st["queued_starts"] == 0,
            timeout=60,
            what="12 machines configured, three a cycle",
        )
        provider = sim.providers["dc"]
    starts = [
        batch
        for task in await scheduled(client, "start_transitions", list[TransitionInput])
        for batch in task
    ]
    assert all(len(batch) <= 3 for batch in starts), [len(b) for b in starts]
    # (Bare metal: one claim of the 12 (a batched create is one transition), then a configure
    # each, three a cycle.)
    configures = [t for batch in starts for t in batch if t.transition is T.CONFIGURE]
    machines = [m for t in configures for m in t.machine_ids]
    assert len(machines) == len(set(machines)) == 12
    assert provider.started[T.CONFIGURE] == 12


async def test_at_most_max_in_flight_transitions_run_at_once(dev_env: WorkflowEnvironment):
    """A shard runs at most `max_in_flight` transition workflows at once (each polls its
    machines: thousands started ahead of what the server completes only add load); the others
    wait in the pipeline and start as results come back — all of them, once each."""
    client = dev_env.client
    async with fleet_workers(client, fleet(12, configure_latency=4)) as sim:
        await ensure_shards(client, sim.fleet, max_in_flight=3, configure_batch=1, **FAST)
        await shard(client).signal("rollup", rollup("a", 1, 12, 500_000, 1.0))
        seen = await eventually(
            lambda: status(client),
            lambda st: st["machines"]["CONFIGURED"] == 12,
            timeout=120,
            what="12 machines configured, three transitions at a time",
        )
        spans = [
            (wf.start_time, wf.close_time)
            async for wf in client.list_workflows('WorkflowType = "MachineTransition"')
        ]
        provider = sim.providers["dc"]
    assert seen["in_flight"] == 0 and seen["queued_starts"] == 0
    assert len(spans) == 13  # the claim of all 12 (one batched create), a configure each
    assert all(close is not None for _, close in spans)
    # The shard starts a transition only after an earlier one has told it it ended, so by the
    # server's own clock no more than three ever overlap (a workflow closes a workflow task
    # after telling the shard: its last two seconds are not counted). Unbounded, the 12
    # configures would start in one cycle and run four seconds side by side.
    slack = timedelta(seconds=2)
    overlapping = max(
        sum(1 for start, close in spans if start <= at < close - slack) for at, _ in spans
    )
    assert overlapping <= 3, sorted(spans)
    assert provider.started[T.CONFIGURE] == 12


async def test_transition_results_are_folded_in_at_most_fold_per_cycle_a_cycle(
    dev_env: WorkflowEnvironment,
):
    """Results that come back together (70 000 creates finishing at once, at fleet scale) are
    folded in `fold_per_cycle` machine records a cycle, the rest waiting in order
    (`waiting_results`), so no workflow task folds them all at once; none is dropped."""
    client = dev_env.client
    async with fleet_workers(client, fleet(6)) as sim:
        await ensure_shards(client, sim.fleet, fold_per_cycle=1, **FAST)
        await eventually(lambda: status(client), lambda st: st["machines"]["SPECULATIVE"] == 6)
        machines = sim.providers["dc"].list(ListFilter())
        before = (await status(client))["cycles"]
        # Six results sent together (milliseconds apart, in a 1 s cycle), one machine each:
        # as records, or as a page as transition workflows send them. One more whose page
        # makes no machine is rejected on arrival, naming its page.
        for i, m in enumerate(machines):
            one = TransitionResult(transition=T.CREATE, machines=[m])
            if i % 2:
                one = TransitionResult(transition=T.CREATE, machines=[], page=MachinePage.of([m]))
            await shard(client).signal("transition_done", one)
        broken = {"transition": "create", "machines": [], "page": {"rows": [["x", 5]]}}
        await shard(client).signal("transition_done", broken)
        seen = [await status(client)]
        while seen[-1]["waiting_results"]:
            await asyncio.sleep(0.1)
            seen.append(await status(client))
    waiting = [(st["cycles"], st["waiting_results"]) for st in seen]
    # From the seven sent (the broken one counts until folded), one a cycle at most.
    assert 7 - waiting[0][1] <= waiting[0][0] - before, (before, waiting)
    assert waiting[0][1] >= 1, waiting  # (seen before they were all folded)
    for (c0, w0), (c1, w1) in zip(waiting, waiting[1:], strict=False):
        assert w0 - w1 <= c1 - c0, waiting  # one record a cycle, at most
    assert seen[-1]["machines"]["SPECULATIVE"] == 6
    assert seen[-1]["rejected_inputs"] == {"transition_done": 1}


async def test_a_large_cycle_goes_out_in_bounded_workflow_tasks(dev_env: WorkflowEnvironment):
    """1 000 drains decided in one cycle (cluster a gives back all its machines): started in
    waves of at most four `start_transitions` calls a workflow task, the operator told in
    notices of at most 500 machines — a task's commands stay far below gRPC's 4 MB, whatever
    the decision."""
    client = dev_env.client
    async with fleet_workers(client, fleet(1000, configure_latency=0.5, drain_latency=60)) as sim:
        # (A drain workflow per machine: merged, the 1 000 drains would be 32 starts. The
        # configures before them are merged, as by default: 32 machines a workflow.)
        await ensure_shards(client, sim.fleet, drain_batch=1, **FAST)
        await shard(client).signal("rollup", rollup("a", 1, 1000, 500_000, 1.0))
        await eventually(
            lambda: status(client),
            lambda st: st["machines"]["CONFIGURED"] == 1000,
            timeout=400,
            what="1 000 machines configured for cluster a",
        )
        await shard(client).signal("rollup", rollup("a", 2, 0, 500_000, 1.0))

        def drains_by_task(tasks: list[list[list[TransitionInput]]]) -> list[list[Any]]:
            return [[i for batch in t for i in batch if i.transition is T.DRAIN] for t in tasks]

        tasks = await eventually(
            lambda: scheduled(client, "start_transitions", list[TransitionInput]),
            lambda tasks: sum(map(len, drains_by_task(tasks))) == 1000,
            timeout=200,
            what="1 000 drains started",
        )
        # (A wave's notices in one `notify_operators` call since they were batched.)
        notices = [
            [n for call in task for n in call]
            for task in await scheduled(client, "notify_operators", list[OperatorUpdate])
        ]
    drains = drains_by_task(tasks)
    waves = [d for d in drains if d]
    assert len(waves) >= 2, [len(d) for d in drains]  # (800 a task at most)
    assert max(len(t) for t in tasks) <= 4, [len(t) for t in tasks]
    drained = [m for d in waves for inp in d for m in inp.machine_ids]
    assert len(drained) == len(set(drained)) == 1000
    reclaims = [n for t in notices for n in t if n.reclaims]
    assert all(len(n.reclaims) <= 500 for n in reclaims)
    assert sorted(r.machine_id for n in reclaims for r in n.reclaims) == sorted(drained)
