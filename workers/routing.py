"""Roll-ups on their way to shards: which shard a cluster's roll-ups go to (the coordinator's
assignment, `assign_cluster`, starting the coordinator if need be), the per-shard batching of
`rollups` signals (`RollupBatcher`) and the router the gateway and roll-up senders with
namespace access use (`ShardRouter`).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from activities.wire import SHARD_TASK_QUEUE, CoordinatorInput, shard_workflow_id
from bigfleet.cluster_questions import ClusterAsk, wants_of
from bigfleet.inputs import SIGNAL_BYTES, json_size
from bigfleet.models import ClusterCapacityNeeds, from_wire
from workflows.coordinator import CoordinatorWorkflow
from workflows.sagas import COORDINATOR_ID

log = logging.getLogger("bigfleet.worker")  # (the name its lines had before this module)


def coordinator_start(shards: int, plan_seconds: float | None = None) -> dict[str, Any]:
    """How the coordinator is started if it is not running: by `bigfleet worker`/`dev`, or by
    the first roll-up sender of a new fleet (update-with-start)."""
    inp = CoordinatorInput(shards=shards)
    if plan_seconds is not None:
        inp = CoordinatorInput(shards=shards, plan_seconds=plan_seconds)
    return dict(
        workflow=CoordinatorWorkflow.run,
        arg=inp,
        id=COORDINATOR_ID,
        task_queue=SHARD_TASK_QUEUE,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        static_summary=f"BigFleet coordinator of {shards} shard(s)",
    )


async def assign_cluster(
    client: Client, cluster: str, shards: int, rollup: dict[str, Any] | None = None
) -> int:
    """The shard a cluster's roll-ups go to: the coordinator's answer (on first contact, where
    the owned machines its `rollup`'s needs fit are, else its home; permanent after), starting
    the coordinator if need be. Ask once, then signal the shard directly; ask again only if
    the shard is gone (a split or merge moved the cluster)."""
    arg: Any = cluster  # (a bare name, or a ClusterAsk: the update decodes either)
    try:
        needs = from_wire(ClusterCapacityNeeds, rollup).needs if rollup is not None else []
        arg = ClusterAsk(cluster=cluster, wants=wants_of(needs)) if needs else cluster
    except ValueError:
        pass  # (the shard refuses the roll-up itself, naming the field)
    return await client.execute_update_with_start_workflow(
        CoordinatorWorkflow.assign_cluster,
        arg,
        start_workflow_operation=WithStartWorkflowOperation(**coordinator_start(shards)),
    )


ASSIGN_CONCURRENCY = 6  # `assign_cluster` updates a router has in flight at once, at most

# Roll-ups bound for one shard are sent together: the first waits this long for others.
ROLLUP_LINGER_SECONDS = 0.5
SEND_BATCH = 200  # roll-ups a `rollups` signal carries at most (the shard takes up to 500)
SEND_BATCH_BYTES = 400_000  # and bytes of JSON (a roll-up is ~2 KB; the shard takes 450 KB)


class RollupBatcher:
    """Roll-ups to shards, batched: what arrives for a shard within ROLLUP_LINGER_SECONDS (or
    until SEND_BATCH) goes out as one `rollups` signal, and each sender learns when its
    roll-up's signal was delivered (or the error). Temporal buffers at most 100 events while a
    shard's workflow task runs and restarts the task past that: 1 000 clusters re-sending every
    10 s are 100 signals a second one by one, two or three batched. A roll-up too large to
    share a signal goes alone as `rollup` (the shard judges it alone)."""

    def __init__(self, client: Any, linger: float = ROLLUP_LINGER_SECONDS) -> None:
        self.client = client
        self.linger = linger
        self._waiting: dict[int, list[tuple[dict[str, Any], asyncio.Future[None]]]] = {}
        self._bytes: dict[int, int] = {}
        self._timers: dict[int, asyncio.Task[None]] = {}
        self._sends: set[asyncio.Task[None]] = set()  # deliveries in flight (kept referenced)

    async def send(self, shard: int, rollup: dict[str, Any]) -> None:
        size = json_size(rollup)
        if size > SIGNAL_BYTES:
            await self.client.get_workflow_handle(shard_workflow_id(shard)).signal("rollup", rollup)
            return
        if self._bytes.get(shard, 0) + size > SEND_BATCH_BYTES:
            self._flush(shard)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiting = self._waiting.setdefault(shard, [])
        waiting.append((rollup, done))
        self._bytes[shard] = self._bytes.get(shard, 0) + size
        if len(waiting) >= SEND_BATCH:
            self._flush(shard)
        elif shard not in self._timers:
            self._timers[shard] = asyncio.create_task(self._flush_later(shard))
        await done

    async def _flush_later(self, shard: int) -> None:
        await asyncio.sleep(self.linger)
        self._timers.pop(shard, None)
        self._flush(shard)

    def _flush(self, shard: int) -> None:
        batch = self._waiting.pop(shard, [])
        self._bytes.pop(shard, None)
        timer = self._timers.pop(shard, None)
        if timer is not None and timer is not asyncio.current_task():
            timer.cancel()
        if batch:
            self._sends.add(asyncio.create_task(self._deliver(shard, batch)))

    async def _deliver(
        self, shard: int, batch: list[tuple[dict[str, Any], asyncio.Future[None]]]
    ) -> None:
        try:
            handle = self.client.get_workflow_handle(shard_workflow_id(shard))
            await handle.signal("rollups", [rollup for rollup, _ in batch])
        except Exception as err:
            for _, done in batch:
                if not done.done():
                    done.set_exception(err)
        else:
            for _, done in batch:
                if not done.done():
                    done.set_result(None)
        finally:
            self._sends.discard(asyncio.current_task())  # type: ignore[arg-type]


GENERATION_QUERY_SECONDS = 5.0  # how long the gateway waits for a shard to name a generation


class ShardRouter:
    """Signals roll-ups to their shards (the gateway's delivery, and `bigfleet dev`-style
    operators with namespace access), batched per shard (RollupBatcher): the coordinator is
    asked once per cluster (`assign_cluster`, update-with-start), and again if the shard it
    named is gone. `generation` asks a cluster's shard which generation it holds."""

    def __init__(self, client: Any, shards: int) -> None:
        self.client = client
        self.shards = shards
        self.assigned: dict[str, int] = {}
        self.batcher = RollupBatcher(client)
        # Temporal takes at most 10 updates in flight per workflow (and shards ask the
        # coordinator too): a gateway (re)started before 1 000 clusters asks a few at a time.
        self.asking = asyncio.Semaphore(ASSIGN_CONCURRENCY)

    async def _assign(self, cluster: str, rollup: dict[str, Any] | None = None) -> int:
        async with self.asking:
            shard = self.assigned.get(cluster)  # (another sender may have asked meanwhile)
            if shard is None:
                shard = self.assigned[cluster] = await assign_cluster(
                    self.client, cluster, self.shards, rollup
                )
            return shard

    async def __call__(self, cluster: str, rollup: dict[str, Any]) -> tuple[int, str]:
        for attempt in range(2):
            shard = self.assigned.get(cluster)
            if shard is None:
                shard = await self._assign(cluster, rollup)
            wid = shard_workflow_id(shard)
            try:
                await self.batcher.send(shard, rollup)
                return shard, wid
            except RPCError as err:
                self.assigned.pop(cluster, None)  # split, merged or retired: ask again
                if err.status != RPCStatusCode.NOT_FOUND or attempt:
                    raise
        raise AssertionError("unreachable")

    async def generation(self, cluster: str) -> int | None:
        """The generation of `cluster`'s roll-ups its shard holds (-1: none yet), from the
        shard's `cluster` query; None if the shard cannot say now (reading back its state,
        gone, slow, or running code whose answer has no generation): the gateway then judges
        by what it knows already. Never raises: delivery says what is wrong, if anything."""
        try:
            shard = self.assigned.get(cluster)
            if shard is None:
                shard = await self._assign(cluster)
            view = await self.client.get_workflow_handle(shard_workflow_id(shard)).query(
                "cluster", cluster, rpc_timeout=timedelta(seconds=GENERATION_QUERY_SECONDS)
            )
        except Exception as err:
            log.info("asking the shard of %s for its generation: %s", cluster, err)
            return None
        generation = view.get("generation") if isinstance(view, dict) else None
        if isinstance(generation, int) and not isinstance(generation, bool):
            return generation
        return None
