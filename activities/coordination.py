"""What shards and the coordinator ask each other that workflow code cannot (a workflow can
neither query nor update another): whose a cluster is, for a shard that got roll-ups of a
cluster it does not serve yet, and which providers the fleet's shards have, for the
coordinator's decommission check."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from activities.wire import (
    COORDINATOR_ID,
    MACHINE_IDS,
    TRANSITION,
    EscalateDrains,
    ShardConfig,
    shard_workflow_id,
)
from bigfleet.coordinator import ClusterOwners, ClusterQuestion
from bigfleet.inputs import clip

# The coordinator's answer is a short update; one that does not come in this long (a
# coordinator still learning the shards' clusters, or wedged) fails the look, and the shard
# asks again later: it never waits on the coordinator for long (static stability).
ASK_RPC_TIMEOUT = timedelta(seconds=5)


class CoordinationActivities:
    """`known_cluster`: whether the deployment knows a cluster (has an operator endpoint for
    it, as the gateway checks); None (a simulated fleet file, tests) knows every name."""

    def __init__(
        self, client: Client, known_cluster: Callable[[str], bool] | None = None
    ) -> None:
        self.client = client
        self.known_cluster = known_cluster

    def all(self) -> list[Any]:
        return [self.cluster_owners, self.shard_providers, self.escalate_drains]

    @activity.defn(name="escalate_drains")
    async def escalate_drains(self, ask: EscalateDrains) -> int:
        """Signal `escalate_drain` to each running drain workflow of the machines (found by
        their search attributes, 50 machines a query); how many workflows were signalled. A
        drain that ended meanwhile is not found: nothing to do."""
        signalled: set[str] = set()
        for i in range(0, len(ask.machine_ids), 50):
            ids = ", ".join(json.dumps(m) for m in ask.machine_ids[i : i + 50])
            query = (
                f'{MACHINE_IDS.name} IN ({ids}) AND {TRANSITION.name} = "drain" '
                'AND ExecutionStatus = "Running"'
            )
            async for wf in self.client.list_workflows(query):
                if wf.id in signalled:
                    continue
                await self.client.get_workflow_handle(wf.id, run_id=wf.run_id).signal(
                    "escalate_drain", ask.grace_seconds
                )
                signalled.add(wf.id)
        return len(signalled)

    @activity.defn(name="cluster_owners")
    async def cluster_owners(self, question: ClusterQuestion) -> ClusterOwners:
        """Whose each cluster of `question` is: refused at once if the deployment has no
        operator endpoint for it, else the running coordinator's answer (`cluster_owners`
        update: a cluster nobody has asked about is assigned then, as `assign_cluster`
        would). No coordinator running: `running` False, nobody asked."""
        refused: dict[str, str] = {}
        ask: list[str] = []
        for cluster in question.clusters:
            if self.known_cluster is not None and not self._knows(cluster):
                refused[cluster] = (
                    f"the deployment config has no operator endpoint for cluster "
                    f"{clip(cluster, 80)!r}"
                )
            else:
                ask.append(cluster)
        if not ask:
            return ClusterOwners(running=False, refused=refused)
        handle = self.client.get_workflow_handle(COORDINATOR_ID)
        try:
            desc = await handle.describe(rpc_timeout=ASK_RPC_TIMEOUT)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return ClusterOwners(running=False, refused=refused)
            raise
        if desc.status != WorkflowExecutionStatus.RUNNING:
            return ClusterOwners(running=False, refused=refused)
        owners = await handle.execute_update(
            "cluster_owners",
            ClusterQuestion(shard=question.shard, clusters=ask),
            result_type=dict[str, int],
            rpc_timeout=ASK_RPC_TIMEOUT,
        )
        return ClusterOwners(running=True, owners=owners, refused=refused)

    def _knows(self, cluster: str) -> bool:
        assert self.known_cluster is not None
        try:
            return bool(self.known_cluster(cluster))
        except Exception:  # a broken config answers no, not a failed look
            return False

    @activity.defn(name="shard_providers")
    async def shard_providers(self, shard: int) -> dict[str, Any]:
        """The providers shard `shard` runs with (its `config`); `running` False if its
        workflow is not running."""
        handle = self.client.get_workflow_handle(shard_workflow_id(shard))
        try:
            cfg: ShardConfig = await handle.query("config", result_type=ShardConfig)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return {"running": False, "providers": []}
            raise
        return {"running": True, "providers": list(cfg.providers)}
