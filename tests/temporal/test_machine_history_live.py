"""`bigfleet machine history` on a running fleet (issue 34): a preemption drains a cluster's
machines in one batch workflow, named as a batch; the history of one of them shows the drain's
grace, reason, batch size and summary, and its escalation. And the id scheme itself."""

from __future__ import annotations

import asyncio
import json
import re

from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.testing import WorkflowEnvironment

from activities.starter import start_transition
from activities.wire import (
    MACHINE_IDS,
    TRANSITION,
    TransitionInput,
    transition_workflow_id,
)
from bigfleet.models import FencingToken, MachineState, Transition
from tests.conftest import eventually, fleet_workers
from tests.temporal.test_temporal_shard import (
    FAST,
    closed_for,
    fleet,
    listed,
    provider_machines,
    rollup,
    shard,
    status,
)
from workers import cli
from workers.worker import ensure_shards

T = Transition


async def run(argv: list[str]) -> int:
    return await asyncio.to_thread(cli.main, argv)


def drain(machines: list[str], cluster: str = "web", batch_name: bool = True) -> TransitionInput:
    return TransitionInput(
        shard=0,
        transition=T.DRAIN,
        machine_ids=machines,
        provider="dc",
        capacity_type="on-demand",
        token=FencingToken(shard_id=0, shard_epoch=1700000000000, seq=42),
        cluster=cluster,
        grace_seconds=30.0,
        reason="preempt",
        batch_name=batch_name,
    )


def test_a_batch_is_named_as_a_batch_and_one_machine_as_before():
    assert transition_workflow_id(drain(["m-1"])) == "machine-m-1-drain-1700000000000-42"
    assert (
        transition_workflow_id(drain(["m-1", "m-2", "m-3"]))
        == "batch-drain-web-m-1-x3-1700000000000-42"
    )
    # Decided before batches were named (a start retried across the upgrade): as it was.
    assert (
        transition_workflow_id(drain(["m-1", "m-2"], batch_name=False))
        == "machine-m-1-drain-1700000000000-42"
    )
    # A delete has no cluster: its provider. Same input, same id (a retried start).
    delete = drain(["m-1", "m-2"]).model_copy(update={"transition": T.DELETE, "cluster": None})
    assert transition_workflow_id(delete) == "batch-delete-dc-m-1-x2-1700000000000-42"
    assert transition_workflow_id(delete) == transition_workflow_id(delete.model_copy())


def test_a_batch_id_stays_within_temporals_limit():
    long = drain(["é" * 253, "m-2"], cluster="c" * 253)
    wid = transition_workflow_id(long)
    assert len(wid.encode()) <= 1000
    assert wid.startswith("batch-drain-" + "c" * 100 + "-é")
    assert wid.endswith("-x2-1700000000000-42")
    huge = drain(["é" * 600, "m-2"])  # (longer than any machine id the shard takes)
    assert len(transition_workflow_id(huge).encode()) <= 1000
    assert transition_workflow_id(huge).endswith("-x2-1700000000000-42")


async def test_machine_history_shows_a_batched_preemption_drain(
    dev_env: WorkflowEnvironment, capsys
):
    client = dev_env.client
    address = client.service_client.config.target_host
    # Drains take their whole grace (30 s for a priority gap of 500 000) unless escalated.
    async with fleet_workers(client, fleet(4, drain_latency=600)) as sim:
        await ensure_shards(client, sim.fleet, **FAST)
        await shard(client).signal("rollup", rollup("a", 1, 4, 500_000, 1.0))
        await eventually(
            lambda: status(client),
            lambda st: st["machines"]["CONFIGURED"] == 4,
            what="cluster a served",
        )
        # Cluster b needs the same 4 machines at a higher priority: a's are preempted.
        await shard(client).signal("rollup", rollup("b", 1, 4, 1_000_000, 1000.0))
        (running,) = await eventually(
            lambda: listed(client, 'BigFleetTransition = "drain" AND ExecutionStatus = "Running"'),
            lambda wfs: len(wfs) == 1,
            what="the running drain of a's machines",
        )
        batch = running.typed_search_attributes.get(MACHINE_IDS) or []
        assert len(batch) == 4  # one cycle, one cluster, one grace: one workflow
        mid = batch[-1]  # (not the machine the workflow would have been named after before)
        capsys.readouterr()
        assert await run(["drain", "escalate", mid, "--grace", "0", "--address", address]) == 0
        out = capsys.readouterr().out
        assert f"escalated {running.id}: forced" in out
        assert "drains 4 machines" in out
        await eventually(
            lambda: provider_machines(sim),
            lambda ms: set(ms.values()) == {(MachineState.CONFIGURED, "b")},
            timeout=60,
            what="every machine configured for cluster b",
        )
        await closed_for(client, 'BigFleetTransition = "drain"', 4)

    assert await run(["machine", "history", mid, "--json", "--address", address]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["transition"] for r in rows] == ["create", "configure", "drain", "configure"]
    (d,) = [r for r in rows if r["transition"] == "drain"]
    assert (d["cluster"], d["state"], d["status"]) == ("a", "IDLE", "COMPLETED")
    assert (d["grace_seconds"], d["force"], d["reason"]) == (30.0, False, "preempt")
    assert d["escalated_grace_seconds"] == 0
    assert d["machines"] == 4
    assert d["summary"] == "drain 4 machines for a on dc, grace 30 s (preempt)"
    assert d["close_time"] is not None and d["close_time"] >= d["start_time"]
    named = re.fullmatch(r"batch-drain-a-(.+)-x4-(\d+)-(\d+)", d["workflow_id"])
    assert named is not None and named[1] in batch, d["workflow_id"]
    assert d["workflow_id"] == running.id
    # The others: no grace; a configure's reason is none; each names its cluster.
    assert [(r["cluster"], r["grace_seconds"], r["reason"]) for r in rows if r is not d] == [
        ("a", None, None),
        ("a", None, None),
        ("b", None, None),
    ]
    assert all(r["summary"] and r["machines"] >= 1 for r in rows)

    # The same as text, as a user reads it.
    assert await run(["machine", "history", mid, "--address", address]) == 0
    text = capsys.readouterr().out
    print(text)
    (line,) = [ln for ln in text.splitlines() if " drain " in ln and " IDLE " in ln]
    assert "30 s → 0 s" in line and " preempt " in line and line.rstrip().endswith(" 4")
    assert "      drain 4 machines for a on dc, grace 30 s (preempt)" in text
    assert f"      workflow {running.id}" in text


async def test_machine_history_reads_a_transition_started_without_a_memo(
    dev_env: WorkflowEnvironment, capsys
):
    """Transitions started before they carried a memo: grace, reason and summary come from
    the workflow's start event (on a queue no worker serves: it just stays running)."""
    client = dev_env.client
    address = client.service_client.config.target_host
    t = drain(["old-1", "old-2"], batch_name=False)
    await client.start_workflow(
        "MachineTransition",
        t,
        id=transition_workflow_id(t),
        task_queue="nobody-serves-this",
        search_attributes=TypedSearchAttributes(
            [
                SearchAttributePair(MACHINE_IDS, t.machine_ids),
                SearchAttributePair(TRANSITION, "drain"),
            ]
        ),
        static_summary="drain 2 machines for web on dc, grace 30 s (preempt)",
    )
    # And one started as the starter does today, for contrast: a one-machine delete.
    delete = drain(["old-2"]).model_copy(
        update={"transition": T.DELETE, "cluster": None, "reason": "failed"}
    )
    await start_transition(
        client, delete.model_copy(update={"token": FencingToken(shard_id=0, shard_epoch=1, seq=1)})
    )
    rows = await eventually(
        lambda: _history(address, capsys),
        lambda rows: len(rows) == 2,
        what="both workflows listed",
    )
    old, new = sorted(rows, key=lambda r: r["transition"], reverse=True)
    assert old["workflow_id"] == "machine-old-1-drain-1700000000000-42"
    assert (old["grace_seconds"], old["reason"], old["machines"]) == (30.0, "preempt", 2)
    assert old["summary"] == "drain 2 machines for web on dc, grace 30 s (preempt)"
    assert old["state"] == "(running)"
    assert new["workflow_id"] == "machine-old-2-delete-1-1"
    assert (new["grace_seconds"], new["reason"], new["machines"]) == (None, "failed", 1)
    assert new["summary"] == "delete old-2 on dc (failed)"


async def _history(address: str, capsys) -> list[dict]:
    capsys.readouterr()
    assert await run(["machine", "history", "old-2", "--json", "--address", address]) == 0
    return json.loads(capsys.readouterr().out)
