"""Hostile input to every signal and update of every workflow type, on a real dev server (issue
9): what anyone with access to the namespace can send with the `temporal` CLI or a client. No
argument, two, the wrong JSON types, 1.5 MB strings, nesting 5 000 deep, NaN and Infinity,
bytes that are not JSON, payloads that are not JSON at all, unknown signal names, unknown
shards, stale and future terms, spoofed senders, plus seeded random JSON. Afterwards every
workflow still runs with no failing workflow task, its last good state is unchanged, and every
rejection is visible: signals in the workflow's `rejections` query, updates as errors to the
sender.

On the code before issue 9 the first no-argument `rollup` wedged the shard (every workflow task
failed), a no-argument `escalate_drain` wedged the drain, a spoofed `shard_report` added shard 7
to the coordinator and 1.5 MB cluster names were stored."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.common import RawValue
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from activities.wire import Instruction
from bigfleet.models import Transition
from tests.conftest import eventually, fleet_workers
from tests.temporal.test_temporal_coordinator import gpu_fleet, on_shard, start, start_coordinator
from tests.temporal.test_temporal_transitions import ROLES as TRANSITION_ROLES
from tests.temporal.test_temporal_transitions import configure_directly, machine_ids, transition
from tests.temporal.test_temporal_transitions import fleet as transition_fleet
from tests.temporal.test_temporal_transitions import start as start_transition

HUGE = "x" * 1_500_000  # under Temporal's 2 MB payload limit, so it reaches the handler


def raw(data: bytes, encoding: bytes = b"json/plain") -> RawValue:
    return RawValue(Payload(metadata={"encoding": encoding}, data=data))


def random_json(rng: random.Random, depth: int = 0) -> Any:
    """Seeded arbitrary JSON: what a confused or hostile sender might produce."""
    kind = rng.randrange(8 if depth < 4 else 5)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice([0, -1, 2**31, -(2**63), 10**30, rng.randrange(-1000, 1000)])
    if kind == 3:
        return rng.choice([0.5, -1e308, 1e-320, rng.uniform(-1e6, 1e6)])
    if kind == 4:
        return rng.choice(["", "0", "shard-7", "é" * 300, "\x00\n", rng.randbytes(8).hex()])
    if kind == 5:
        return [random_json(rng, depth + 1) for _ in range(rng.randrange(4))]
    keys = ["cluster", "term", "seq", "shard", "at", "machines", "needs", "grace_seconds", "x"]
    return {rng.choice(keys): random_json(rng, depth + 1) for _ in range(rng.randrange(5))}


def hostile(seed: int, randoms: int = 6) -> Iterator[tuple[str, list[Any]]]:
    """(label, arguments) to send: the same catalogue to every handler."""
    yield "no argument", []
    yield "two arguments", [{}, {}]
    yield "null", [None]
    for value in (5, "5", True, [], {}, "x", -5, 1e308):
        yield f"wrong type {json.dumps(value)}", [value]
    yield "1.5 MB string", [HUGE]
    yield "1.5 MB key", [{HUGE: 1}]
    yield "nested 5000 deep", [raw(b"[" * 5000 + b"]" * 5000)]
    yield "NaN", [raw(b"NaN")]
    yield "-Infinity", [raw(b"-Infinity")]
    yield "NaN inside", [raw(b'{"grace_seconds": NaN, "term": Infinity}')]
    yield "not JSON", [raw(b"{not json")]
    yield "binary payload", [raw(bytes(range(256)), b"binary/plain")]
    yield "unknown encoding", [raw(b"abc", b"application/x-evil")]
    rng = random.Random(seed)
    for i in range(randoms):
        yield f"random JSON #{i}", [random_json(rng)]


async def healthy(client: Client, wid: str) -> None:
    """Running, and no workflow task failing (Temporal retries a failing one forever)."""
    desc = await client.get_workflow_handle(wid).describe()
    assert desc.status is not None and desc.status.name == "RUNNING", (wid, desc.status)
    attempt = desc.raw_description.pending_workflow_task.attempt
    assert attempt <= 1, f"{wid}: workflow task failing, attempt {attempt}"


async def send_signals(
    handle: WorkflowHandle[Any, Any], names: list[str], seed: int
) -> int:
    sent = 0
    for name in names:
        for _label, args in hostile(seed):
            if LEGITIMATE.get(name, lambda _: False)(args):
                continue
            await handle.signal(name, args=args)
            sent += 1
    return sent


def a_cluster_name(args: list[Any]) -> bool:
    """What `assign_cluster` rightly accepts: one name of 1 to 253 characters ("5" is one)."""
    return len(args) == 1 and isinstance(args[0], str) and 0 < len(args[0].strip()) <= 253


def a_grace(args: list[Any]) -> bool:
    """What `escalate_drain` rightly accepts: one number of seconds, 0 or more."""
    return (
        len(args) == 1
        and isinstance(args[0], (int, float))
        and not isinstance(args[0], bool)
        and 0 <= args[0] <= 7 * 24 * 3600
    )


def a_build_move(args: list[Any]) -> bool:
    """What `move_to_build` rightly accepts: one valid move ({}: stay on the default build)."""
    from activities.wire import BuildMove

    try:
        return len(args) == 1 and BuildMove.model_validate(args[0]) is not None
    except ValueError:
        return False


# Entries of the catalogue a handler rightly accepts: not sent to it.
LEGITIMATE = {
    "move_to_build": a_build_move,
    "assign_cluster": a_cluster_name,
    "add_shard": lambda args: not args,
    "escalate_drain": a_grace,
}


async def refused_updates(
    handle: WorkflowHandle[Any, Any], names: list[str], seed: int
) -> dict[str, list[str]]:
    """Each hostile update must be refused (an error to the sender); returns the messages."""
    messages: dict[str, list[str]] = {}
    for name in names:
        for label, args in hostile(seed):
            if LEGITIMATE.get(name, lambda _: False)(args):
                continue
            try:
                outcome = await handle.execute_update(name, args=args)
            except (WorkflowUpdateFailedError, RPCError) as err:
                cause = getattr(err, "cause", None) or err
                messages.setdefault(name, []).append(str(cause))
                continue
            raise AssertionError(f"update {name} accepted {label}: {outcome!r}")
    return messages


async def current_details(handle: WorkflowHandle[Any, Any]) -> str:
    """What the Temporal UI shows as the workflow's current details."""
    meta = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    return meta.current_details


async def rejections(handle: WorkflowHandle[Any, Any]) -> dict[str, Any]:
    return await handle.query("rejections")


async def test_shard_and_coordinator_survive_hostile_signals_and_updates(
    dev_env: WorkflowEnvironment,
):
    client = dev_env.client
    cluster = on_shard("c", 0)
    raw_fleet = gpu_fleet(2, {on_shard("rack", 0): 8}, [cluster])
    async with fleet_workers(client, raw_fleet):
        await start_coordinator(client)
        await start(client, raw_fleet)
        shard0 = client.get_workflow_handle("shard-0")
        coordinator = client.get_workflow_handle("coordinator")
        assert await coordinator.execute_update("assign_cluster", cluster) == 0
        need = {"requirements": [], "priority": 1000, "count": 2}
        await shard0.signal("rollup", {"cluster": cluster, "generation": 1, "needs": [need]})
        await eventually(
            lambda: shard0.query("status"),
            lambda s: s["machines"]["CONFIGURED"] == 2,
            timeout=60,
            what="the good roll-up served",
        )
        await eventually(
            lambda: coordinator.query("status"),
            lambda s: not s["missing_shards"] and cluster in s["clusters"],
            timeout=60,
            what="both shards reporting",
        )
        before_shard = await shard0.query("status")
        before_coord = await coordinator.query("status")

        # Every signal with the whole catalogue, and unknown names.
        sent = await send_signals(
            shard0,
            ["rollup", "transition_done", "revived", "pool_summary", "no_such_signal"],
            seed=1,
        )
        sent += await send_signals(
            coordinator, ["shard_report", "saga_done", "membership_done", "x" * 200], seed=2
        )
        # Shaped right, but lying: a roll-up whose cluster name is 1.5 MB, a report for a
        # shard that does not exist and one from the future, a revival of a run never reset,
        # results and sagas nobody started.
        await shard0.signal("rollup", {"cluster": HUGE, "generation": 1, "needs": [need]})
        await shard0.signal("revived", {"run_id": (await shard0.describe()).run_id})
        await coordinator.signal("shard_report", {"shard": 7, "at": 0.0})
        await coordinator.signal("shard_report", {"shard": 1, "at": 9e15})
        await coordinator.signal("saga_done", "saga-idle-1-1")
        await coordinator.signal(
            "membership_done",
            {"kind": "split", "donor": 0, "into": 1, "clusters": [cluster]},
        )
        # Summaries of free machines elsewhere: from a term before the shard's, from the
        # future, and with more entries than a summary has.
        entry = {"labels": {"node.kubernetes.io/instance-type": "gpu-8xh100"}, "count": 9}
        # (The term before the shard's: -1, refused as such, while it has seen none.)
        term_seen, at = before_shard["coordinator_term"], time.time()
        for summary in (
            {"term": term_seen - 1, "at": at, "free": [entry]},
            {"term": term_seen, "at": 9e15, "free": [entry]},
            {"term": term_seen, "at": at, "free": [entry] * 65},
        ):
            await shard0.signal("pool_summary", summary)
        sent += 9

        # Every update with the whole catalogue, then well-formed but unauthorised ones.
        shard_updates = [
            "adopt", "release", "drain_for_transfer", "cancel_transfer", "split_out",
            "hand_out", "take_in", "retire", "decommission", "disown", "observe_records",
            "reset_generation", "cluster_mode", "move_to_build",
        ]
        refused = await refused_updates(shard0, shard_updates, seed=3)
        refused |= await refused_updates(
            coordinator,
            [
                "assign_cluster", "split_shard", "merge_shards", "add_shard", "decommission",
                "repair", "cluster_owners", "cluster_mode",
            ],
            seed=4,
        )
        term = before_shard["coordinator_term"]
        future = Instruction(term=10**15, seq=1)  # a term beyond any clock: never issued
        stale = Instruction(term=1, seq=1, machine_ids=["dc-x"])
        # (A cluster's mode from a term never issued: the cluster stays managed.)
        mode = Instruction(term=10**15, seq=1, cluster=cluster, mode="unmanaged")
        for update, ins in (
            ("adopt", future), ("release", stale), ("retire", future), ("cluster_mode", mode)
        ):
            try:
                await shard0.execute_update(update, ins)
                raise AssertionError(f"{update} accepted {ins}")
            except WorkflowUpdateFailedError as err:
                # (A shard that has seen no term yet refuses the machine it does not own.)
                assert "term" in str(err.cause) or "not owned" in str(err.cause), err.cause
        try:  # a shard that is not a member asks to be given a cluster
            await coordinator.execute_update("cluster_owners", {"shard": 7, "clusters": ["x"]})
            raise AssertionError("cluster_owners accepted shard 7")
        except WorkflowUpdateFailedError as err:
            assert "shard: 7 is not a member" in str(err.cause), err.cause
        for name in ("", HUGE):
            try:
                await coordinator.execute_update("assign_cluster", name)
                raise AssertionError(f"assign_cluster accepted a name of {len(name)}")
            except WorkflowUpdateFailedError as err:
                assert "cluster" in str(err.cause), err.cause

        # Alive, deciding, unchanged.
        for wid in ("shard-0", "shard-1", "coordinator"):
            await healthy(client, wid)
        cycles = before_shard["cycles"]
        after_shard = await eventually(
            lambda: shard0.query("status"), lambda s: s["cycles"] > cycles + 2, what="cycles"
        )
        after_coord = await coordinator.query("status")
        for wid in ("shard-0", "shard-1", "coordinator"):
            await healthy(client, wid)

    assert after_shard["machines"] == before_shard["machines"]
    assert after_shard["clusters"] == before_shard["clusters"] == [cluster]
    assert after_shard["epoch"] == before_shard["epoch"]  # no spoofed revival took
    assert after_shard["coordinator_term"] == term  # no future term fenced the coordinator out
    assert after_shard["free_elsewhere"] == 0  # (shard 1 holds nothing: no lying summary took)
    assert after_shard["rejected_inputs"]["pool_summary"] == len(list(hostile(1))) + 3
    assert after_coord["shards"] == before_coord["shards"] == [0, 1]  # no shard 7
    assert after_coord["clusters"] == before_coord["clusters"]
    assert after_coord["term"] == before_coord["term"]
    # Every refusal is visible, and small: nothing the senders chose was stored whole.
    seen_shard = after_shard.get("rejected_inputs")
    assert seen_shard and sum(seen_shard.values()) >= 4 * len(list(hostile(1))), seen_shard
    assert len(json.dumps(after_shard)) < 50_000
    assert len(json.dumps(after_coord)) < 50_000
    assert sum(after_coord["rejected_inputs"].values()) >= 4 * len(list(hostile(2))) + 4
    assert all(
        len(msgs) == len(list(hostile(0)))
        for name, msgs in refused.items()
        if name not in LEGITIMATE
    ), refused
    assert sent > 100
    # Refusals name what was wrong.
    assert any("expected one argument" in m for m in refused["adopt"])
    assert any("bytes" in m or "at most" in m for m in refused["assign_cluster"])


async def test_a_drain_survives_hostile_escalations(dev_env: WorkflowEnvironment):
    client = dev_env.client
    async with fleet_workers(client, transition_fleet(drain_latency=3000), TRANSITION_ROLES) as sim:
        (mid,) = machine_ids(sim, 1)
        configure_directly(sim, [mid])
        handle = await start_transition(
            client,
            transition(Transition.DRAIN, [mid], cluster="a", grace_seconds=3600, poll_seconds=1),
        )
        sent = await send_signals(handle, ["escalate_drain", "cancel_everything"], seed=5)
        # Shaped like a number, but not a grace: a boolean, a string, a negative, NaN.
        for value in (True, "5", -5, raw(b"NaN"), raw(b"1e999")):
            await handle.signal("escalate_drain", value)
            sent += 1
        await eventually(
            lambda: rejections(handle), lambda r: r["total"] >= sent, what="every rejection"
        )
        await healthy(client, handle.id)
        # Still the hour-long drain it was: nothing above escalated it.
        assert sim.providers["dc"].get(mid).state.value == "DRAINING"
        seen = await rejections(handle)
        assert seen["counts"]["escalate_drain"] == sent - len(list(hostile(5))), seen
        assert seen["counts"]["(unknown)"] == len(list(hostile(5))), seen
        assert all(len(r["error"]) < 1000 for r in seen["recent"])
        # A good escalation still works after all that, and the UI shows the grace in force
        # (the static summary keeps the one the drain started with).
        await handle.signal("escalate_drain", 1000)
        details = await eventually(
            lambda: current_details(handle), lambda d: "1000" in d, what="details"
        )
        assert "grace now 1000 s" in details and "was 3600 s" in details
        await handle.signal("escalate_drain", 0)
        result = await handle.result()
    assert [m.state.value for m in result.machines] == ["IDLE"]
