"""Shard membership from sagas (design §16): a split starts a shard workflow, a failed one stops
it again; a decommission asks every shard which of its machines match."""

from __future__ import annotations

from pydantic import Field
from temporalio import activity
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from activities.wire import (
    COORDINATOR_ID,
    ELSEWHERE_MAX,
    SHARD_TASK_QUEUE,
    MachinePage,
    Model,
    ShardConfig,
    ShardInput,
    shard_task_timeout,
    shard_workflow_id,
)
from bigfleet.assignment import machine_shard
from bigfleet.decommission import Matching
from bigfleet.models import Machine, MachineState


class MembershipActivities:
    def __init__(self, client: Client) -> None:
        self.client = client

    def all(self) -> list:
        return [
            self.start_split_shard,
            self.stop_split_shard,
            self.status,
            self.matching,
            self.owned_elsewhere,
        ]

    @activity.defn(name="start_split_shard")
    async def start_split_shard(self, donor_and_new: list[int]) -> str:
        """Start shard `new` configured like `donor` (leaving alone the clusters it leaves alone
        now), empty, waiting for the split's parts."""
        donor, new = donor_and_new
        like = self.client.get_workflow_handle(shard_workflow_id(donor))
        cfg: ShardConfig = await like.query("config", result_type=ShardConfig)
        # The clusters it leaves alone as they are now (changed at run time since the donor
        # started, bigfleet/cluster_modes.py), not as its config began.
        unmanaged = await like.query("unmanaged_clusters", result_type=list[str])
        shadow = (await like.query("shadow_clusters"))["names"]  # (among those: in shadow)
        cfg = cfg.model_copy(
            update={
                "shard": new,
                "unmanaged": [c for c in unmanaged if c not in shadow],
                "shadow_clusters": shadow,
            }
        )
        handle = await self.client.start_workflow(
            "Shard",
            ShardInput(config=cfg, joining=True),
            id=shard_workflow_id(new),
            task_queue=SHARD_TASK_QUEUE,
            task_timeout=shard_task_timeout(cfg),
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            static_summary=f"BigFleet shard {new} (split from shard {donor})",
        )
        return handle.id

    @activity.defn(name="stop_split_shard")
    async def stop_split_shard(self, shard: int) -> None:
        """A split that moved nothing: the new shard owns nothing and goes away."""
        try:
            await self.client.get_workflow_handle(shard_workflow_id(shard)).terminate(
                "split failed before anything moved"
            )
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:  # never started, or already gone
                raise

    @activity.defn(name="shard_status")
    async def status(self, shard: int) -> dict:
        return await self.client.get_workflow_handle(shard_workflow_id(shard)).query("status")

    @activity.defn(name="shard_matching")
    async def matching(self, shard: int, where: dict[str, str], limit: int) -> Matching:
        """A shard's machines a decommission could take (`where`: provider, zone, …)."""
        return await self.client.get_workflow_handle(shard_workflow_id(shard)).query(
            "matching", args=[where, limit], result_type=Matching
        )

    @activity.defn(name="owned_elsewhere")
    async def owned_elsewhere(self, shard: int) -> list[str]:
        """Which machines shard `shard` holds that another running shard holds too (a shard
        restarted from an older state, or afresh, must not keep machines that moved away
        since). Its ids are read from it by queries, a page at a time: only the answer enters
        its history, not its 500 000 ids."""
        handle = self.client.get_workflow_handle(shard_workflow_id(shard))
        found: list[str] = []
        start = 0
        while start >= 0:
            page, start = await handle.query(
                "owned_ids", args=[start, ID_PAGE], result_type=tuple[list[str], int]
            )
            if page:
                found += await owned_elsewhere(self.client, shard, page)
            activity.heartbeat(start)
        return found[:ELSEWHERE_MAX]


ID_PAGE = 20_000  # machine ids a query asks or answers (~1 MB)


async def in_sagas(client: Client, machine_ids: list[str]) -> set[str]:
    """Which of `machine_ids` a transfer saga has in hand (the coordinator's answer; none if
    this namespace runs no coordinator). A coordinator that cannot answer fails the caller:
    adopting a machine a saga is about to deliver would make it two shards'."""
    if not machine_ids:
        return set()
    try:
        found = await client.get_workflow_handle(COORDINATOR_ID).query(
            "saga_machines", machine_ids, result_type=list[str]
        )
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return set()
        raise
    return set(found)


async def nobodys(client: Client, shard: int, machine_ids: list[str]) -> set[str]:
    """Which of `machine_ids` no shard owns: shard `shard` does not hold them (its
    `machine_states` says GONE), no other running shard does, and no transfer saga carries them
    (a saga's machine is nobody's between its release and its adopt, and must not be taken)."""
    if not machine_ids:
        return set()
    states = await client.get_workflow_handle(shard_workflow_id(shard)).query(
        "machine_states", machine_ids, result_type=dict[str, str]
    )
    unknown = [mid for mid in machine_ids if states.get(mid) == "GONE"]
    if not unknown:
        return set()
    elsewhere = set(await owned_elsewhere(client, shard, unknown))
    free = [mid for mid in unknown if mid not in elsewhere]
    return set(free) - await in_sagas(client, free)


async def owned_elsewhere(client: Client, shard: int, machine_ids: list[str]) -> list[str]:
    """Which of `machine_ids` a running shard other than `shard` holds, or took out of the
    fleet."""
    mine = shard_workflow_id(shard)
    query = 'WorkflowType = "Shard" AND ExecutionStatus = "Running"'
    found: set[str] = set()
    async for wf in client.list_workflows(query):
        if wf.id == mine:
            continue
        states = await client.get_workflow_handle(wf.id).query(
            "machine_states", machine_ids, result_type=dict[str, str]
        )
        found.update(mid for mid, state in states.items() if state != "GONE")
    return sorted(found)


# ---- after a revival: machines no shard owns that are the revived shard's ---------------------


class UnownedRead(Model):
    """`provider_unowned`: which machines of `provider`, from id `after` on, no shard owns and
    shard `shard` takes back after a revival (`claimable`)."""

    provider: str
    now: float
    shard: int
    shards: int
    # The shards whose machines by the assignment rule this shard takes (its own, and those of
    # shards merged into it), and the clusters whose needs it holds.
    shares: list[int]
    clusters: list[str] = Field(default_factory=list)
    after: str = ""


class UnownedPage(Model):
    """At most LIST_PAGE machines to take back, and the id the next call goes on after ("":
    the listing is through)."""

    page: MachinePage = Field(default_factory=MachinePage)
    after: str = ""


class ShareRead(Model):
    """`provider_share`: the machines of `provider`, from id `after` on, that are shard
    `shard`'s by the assignment rule (of `shards`; `by_cluster`: a machine bound to a cluster
    goes to the cluster's home), in the listing taken at `now`."""

    provider: str
    now: float
    shard: int = Field(ge=0)
    shards: int = Field(ge=1)
    after: str = ""
    by_cluster: bool = False


def claimable(m: Machine, clusters: set[str], shares: set[int], shards: int) -> bool:
    """Whether a machine no shard owns is this shard's to take back: configured (configuring,
    draining) for one of its clusters; or without a cluster, not speculative, and its by the
    assignment rule (or a merged-away shard's it inherited). A cluster is one shard's and the
    rule gives a machine one shard, so two shards never both claim one. Speculative slots are
    new capacity: the periodic look's (two looks in a row), not this."""
    if m.cluster:
        return m.cluster in clusters
    return m.state is not MachineState.SPECULATIVE and machine_shard(m, shards) in shares
